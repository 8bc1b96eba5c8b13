/* status.h - error values with messages: library calls return a bn_status and keep a
 * one-line message that the CLI prints. Nothing in the library exits or asserts on input. */
#ifndef BN_STATUS_H
#define BN_STATUS_H

#ifdef __cplusplus
extern "C" {
#endif

typedef enum bn_status {
    BN_OK = 0,
    BN_ERR_USAGE,    /* bad model file, flag or option: the user's description is wrong */
    BN_ERR_DATA,     /* unreadable or malformed data file, checkpoint or image */
    BN_ERR_IO,       /* the operating system refused a read or write */
    BN_ERR_NOMEM,    /* host allocation failed */
    BN_ERR_DEVICE,   /* CUDA, cuBLAS, cuDNN or cuRAND reported an error, or no device */
    BN_ERR_NUMERIC,  /* a NaN or infinity where a number was expected */
    BN_ERR_INTERNAL, /* a broken invariant inside blobnet */
    BN_ERR_INTERRUPTED /* not a fault: stopped on request (SIGINT, SIGTERM) after saving */
} bn_status;

/* Records a printf-style message for this thread and returns code (so `return bn_error(...)`). */
bn_status bn_error(bn_status code, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/* The message of the last error on this thread ("" when none); owned by the library. */
const char *bn_last_error(void);

/* The code passed to the last bn_error on this thread. */
bn_status bn_last_status(void);

/* Clears the message (tests use it to see that a call set a fresh one). */
void bn_clear_error(void);

/* A short fixed name for a status code, e.g. "usage". */
const char *bn_status_name(bn_status s);

/* Propagates a non-OK status to the caller. */
#define BN_TRY(expr)                            \
    do {                                        \
        bn_status bn_try_s_ = (expr);           \
        if (bn_try_s_ != BN_OK) return bn_try_s_; \
    } while (0)

#ifdef __cplusplus
}
#endif
#endif
