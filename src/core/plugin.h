/* plugin.h - loads layer plugins: shared libraries that register layer types at run time
 * through their one entry point, blobnet_plugin_register (blobnet.h). */
#ifndef BN_PLUGIN_H
#define BN_PLUGIN_H

#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Opens the shared library at path (RTLD_NOW | RTLD_LOCAL) and calls its entry point, which
 * registers its layer types. The library stays loaded for the life of the process; loading
 * the same file again does nothing. A file that cannot be opened, a missing entry point or a
 * failed registration is a usage error whose one-line message names the file. */
bn_status bn_plugin_load(const char *path);

#ifdef __cplusplus
}
#endif
#endif
