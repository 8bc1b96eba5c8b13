/* code_anchor.cuh - BN_CODE_ANCHOR(module, kernel): names one kernel of this .cu file, by which
 * bn_device_code_load_begin (code_load.cu) loads the file's module. Under the driver's lazy
 * loading (CUDA's default) a module's code is loaded when the first of its kernels is launched
 * or asked about, in time that grows with the kernels the module holds (about 40 us each for
 * softmax_ce.cu's on an H200). `module` is the file's name as code_load.cu's table lists it. */
#ifndef BN_CODE_ANCHOR_CUH
#define BN_CODE_ANCHOR_CUH

#define BN_CODE_ANCHOR(module, ...) \
    extern "C" const void *bn_code_anchor_##module(void) { return (const void *)(__VA_ARGS__); }

#endif
