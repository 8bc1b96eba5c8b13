/* nvtx_record.c - an NVTX injection library for tests: loaded through
 * NVTX_INJECTION64_PATH, it writes every range push and pop of the process to the file
 * named by $BN_NVTX_LOG, one per line: "push <domain> <name>" or "pop <domain>". */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <nvtx3/nvToolsExt.h>

static FILE *out;

/* A domain handle is the domain's name, copied. */
static nvtxDomainHandle_t domain_create(const char *name)
{
    return (nvtxDomainHandle_t)strdup(name);
}

static const char *domain_name(nvtxDomainHandle_t d)
{
    return d ? (const char *)d : "(default)";
}

static int range_push(nvtxDomainHandle_t d, const nvtxEventAttributes_t *a)
{
    const char *msg = a && a->messageType == NVTX_MESSAGE_TYPE_ASCII ? a->message.ascii : "?";
    if (out) fprintf(out, "push %s %s\n", domain_name(d), msg);
    return 0;
}

static int range_pop(nvtxDomainHandle_t d)
{
    if (out) fprintf(out, "pop %s\n", domain_name(d));
    return 0;
}

int InitializeInjectionNvtx2(NvtxGetExportTableFunc_t get_table);
int InitializeInjectionNvtx2(NvtxGetExportTableFunc_t get_table)
{
    const char *path = getenv("BN_NVTX_LOG");
    if (!path || !(out = fopen(path, "w"))) return 0;
    setvbuf(out, NULL, _IOLBF, 0);
    const NvtxExportTableCallbacks *cb = (const NvtxExportTableCallbacks *)get_table(NVTX_ETID_CALLBACKS);
    NvtxFunctionTable table;
    unsigned int size;
    if (!cb || !cb->GetModuleFunctionTable(NVTX_CB_MODULE_CORE2, &table, &size)) return 0;
    *table[NVTX_CBID_CORE2_DomainCreateA] = (NvtxFunctionPointer)domain_create;
    *table[NVTX_CBID_CORE2_DomainRangePushEx] = (NvtxFunctionPointer)range_push;
    *table[NVTX_CBID_CORE2_DomainRangePop] = (NvtxFunctionPointer)range_pop;
    return 1;
}
