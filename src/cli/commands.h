/* commands.h - the blobnet subcommands; each returns the process exit code
 * (0 success, 1 run-time failure, 2 usage error). */
#ifndef BN_COMMANDS_H
#define BN_COMMANDS_H

#include "core/status.h"

typedef struct bn_command {
    const char *name;
    const char *summary;
    const char *usage;           /* the full help text */
    int (*run)(int argc, char **argv);
} bn_command;

int bn_cmd_train(int argc, char **argv);
int bn_cmd_test(int argc, char **argv);
int bn_cmd_predict(int argc, char **argv);
int bn_cmd_summary(int argc, char **argv);
int bn_cmd_check_layer(int argc, char **argv);
int bn_cmd_time(int argc, char **argv);
int bn_cmd_data(int argc, char **argv);
int bn_cmd_conv_families(int argc, char **argv);

extern const bn_command bn_commands[];

/* Prints "blobnet: error: <message>" and returns the exit code for status s. */
int bn_fail(bn_status s);

/* Prints the usage error and a hint to `blobnet CMD --help`; returns 2. */
int bn_usage_error(const char *cmd, const char *message);

/* Prints the named command's help to stdout. */
void bn_print_command_help(const char *cmd);

#endif
