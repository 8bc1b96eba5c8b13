/* file_testing.h - helpers shared by the tests of the files a run reads and writes (checkpoints,
 * metrics logs, interrupted and resumed runs): paths in the test directory, small text files
 * read and written whole, and one small MNIST-shaped data set for runs of the CLI. */
#ifndef BN_FILE_TESTING_H
#define BN_FILE_TESTING_H

#include <stddef.h>
#include <sys/types.h>

/* "<test directory>/NAME" into buf (cap bytes), NAME written by the printf format and its
 * arguments; returns buf. */
const char *ft_path(char *buf, size_t cap, const char *format, ...) __attribute__((format(printf, 3, 4)));

/* Reads path whole into buf (at most cap - 1 bytes, then a NUL); 0, or -1 when it cannot. */
int ft_read_text(const char *path, char *buf, size_t cap);

/* Calls visit(path, name, user) for every regular file under dir and its subfolders (links not
 * followed, names starting with '.' left out), path being dir/.../name. */
void ft_each_file(const char *dir, void (*visit)(const char *path, const char *name, void *user), void *user);

/* Writes text to path, replacing it; 0, or -1 when it cannot. */
int ft_write_text(const char *path, const char *text);

/* Writes n bytes to path (created or emptied); 0 on success. */
int ft_write_bytes(const char *path, const void *bytes, size_t n);

/* The directory of a synthetic MNIST-shaped set of 1000 training and 200 test images, made on
 * the first call (bn_test_synthetic_mnist), or NULL when it cannot be written: for runs about
 * files and signals, not accuracy, with a test set small enough to evaluate quickly. */
const char *ft_small_mnist(void);

/* Starts `env ENV blobnet train ARGS --data DATA` in the background, stdout and stderr in log;
 * the pid is blobnet's own (the shell execs it), so signals reach it directly. The caller waits
 * for it. */
pid_t ft_start_train(const char *env, const char *args, const char *data, const char *log);

/* Whether path holds a checkpoint of the model file `model` that a resume accepts; prints why
 * not to stderr. */
int ft_checkpoint_loads(const char *model, const char *path);

#endif
