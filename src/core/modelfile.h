/* modelfile.h - the INI-style model-file reader: `[section]` headers, `key = value` lines,
 * `#` or `;` comments. It only splits the text into sections; what the keys mean is up to
 * the network ([input], [train]) and to each layer type. */
#ifndef BN_MODELFILE_H
#define BN_MODELFILE_H

#include <stddef.h>

#include "options.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct bn_modelfile {
    bn_options *sections;
    int count;
} bn_modelfile;

/* Splits text into sections; `name` is the file name used in messages (kept by pointer:
 * it must outlive the result). Malformed lines are usage errors naming name:line. */
bn_status bn_modelfile_parse(const char *text, const char *name, bn_modelfile *out);

/* Reads a whole file into a NUL-terminated buffer the caller frees; refuses files with NUL
 * bytes or over max_bytes. */
bn_status bn_read_text_file(const char *path, size_t max_bytes, char **out);

void bn_modelfile_free(bn_modelfile *m);

#ifdef __cplusplus
}
#endif
#endif
