#include "nvtx.h"

#if defined(BN_NVTX) && !defined(BN_NO_NVTX)
#include <nvtx3/nvToolsExt.h>

static nvtxDomainHandle_t domain(void)
{
    static nvtxDomainHandle_t d;
    if (!d) d = nvtxDomainCreateA("blobnet");
    return d;
}

static const unsigned int colours[] = {
    [BN_NVTX_LAYER_COMPUTE] = 0xff3b7dd8, [BN_NVTX_LAYER_POOL] = 0xff2fa84f,
    [BN_NVTX_LAYER_ACTIVATION] = 0xfff2b134, [BN_NVTX_LAYER_LOSS] = 0xffd83b3b,
    [BN_NVTX_LAYER_OTHER] = 0xff8a8a8a, [BN_NVTX_OPTIMIZER] = 0xff9b59b6,
    [BN_NVTX_STEP] = 0xff1abc9c, [BN_NVTX_TRANSFER] = 0xffe67e22,
    [BN_NVTX_COMM] = 0xff34495e,
};

void bn_nvtx_push(const char *name, bn_nvtx_kind kind)
{
    nvtxEventAttributes_t a = {0};
    a.version = NVTX_VERSION;
    a.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
    a.colorType = NVTX_COLOR_ARGB;
    a.color = colours[kind];
    a.messageType = NVTX_MESSAGE_TYPE_ASCII;
    a.message.ascii = name;
    nvtxDomainRangePushEx(domain(), &a);
}

void bn_nvtx_pop(void)
{
    nvtxDomainRangePop(domain());
}

#else

void bn_nvtx_push(const char *name, bn_nvtx_kind kind)
{
    (void)name;
    (void)kind;
}

void bn_nvtx_pop(void) {}

#endif
