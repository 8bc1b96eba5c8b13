#include "plugin.h"

#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "blobnet.h"

#define MAX_PLUGINS 64

/* Handles of the plugins loaded so far. They are never closed: the registry points into them. */
static void *loaded[MAX_PLUGINS];
static int loaded_count;

static int already_loaded(const void *handle)
{
    for (int i = 0; i < loaded_count; i++)
        if (loaded[i] == handle) return 1;
    return 0;
}

/* dlerror's text, or a placeholder when it has none. */
static const char *dl_reason(void)
{
    const char *e = dlerror();
    return e ? e : "unknown reason";
}

bn_status bn_plugin_load(const char *path)
{
    if (!path || !path[0]) return bn_error(BN_ERR_USAGE, "plugin: empty file name");
    if (loaded_count == MAX_PLUGINS)
        return bn_error(BN_ERR_USAGE, "plugin %s: at most %d plugins can be loaded", path, MAX_PLUGINS);
    /* Without a slash dlopen searches the library path, not the current directory. */
    char local[4096];
    const char *name = path;
    if (!strchr(path, '/')) {
        if ((size_t)snprintf(local, sizeof local, "./%s", path) >= sizeof local)
            return bn_error(BN_ERR_USAGE, "plugin %.64s...: file name too long", path);
        name = local;
    }
    void *handle = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (!handle) return bn_error(BN_ERR_USAGE, "plugin %s: cannot load: %s", path, dl_reason());
    if (already_loaded(handle)) {
        dlclose(handle); /* drops the reference this dlopen added */
        return BN_OK;
    }
    dlerror();
    bn_status (*entry)(void) = (bn_status (*)(void))dlsym(handle, BN_PLUGIN_ENTRY);
    if (!entry) {
        bn_status s = bn_error(BN_ERR_USAGE, "plugin %s: no entry point '%s' (%s); a plugin defines "
                               "bn_status %s(void)", path, BN_PLUGIN_ENTRY, dl_reason(), BN_PLUGIN_ENTRY);
        dlclose(handle);
        return s;
    }
    /* Registered types stay even when a later one fails, so the handle stays open either way. */
    loaded[loaded_count++] = handle;
    bn_clear_error();
    bn_status s = entry();
    if (s != BN_OK) {
        char why[512];
        snprintf(why, sizeof why, "%s", bn_last_error()[0] ? bn_last_error() : bn_status_name(s));
        return bn_error(s, "plugin %s: %s", path, why);
    }
    return BN_OK;
}
