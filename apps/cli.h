/*
 * apps/cli.h: the command-line pieces zerotask's programs share: --help detection, option
 * values, integer options, and errors as exactly one line in the house format
 * ("<prefix>: error: <message>", STYLE.md 5) with the documented exit codes.
 *
 * Layer: apps/ (compiled into each program; not part of libzerotask). Messages go through
 * io/'s last-error buffer, so a program can print the same line whichever layer detected it.
 */
#ifndef ZT_APPS_CLI_H
#define ZT_APPS_CLI_H

#include <stdint.h> /* int64_t */

#define CLI_EXIT_OK 0
#define CLI_EXIT_FAILURE 1 /* anything but a bad command line: a missing file, a full disk, ... */
#define CLI_EXIT_USAGE 2   /* a bad command line (or config, for zt-train) */

/* How a program reports its errors. */
struct cli_program {
    const char *name;         /* "zt-train": the hint "(see zt-train --help)" */
    const char *error_prefix; /* each error line starts "<error_prefix>: error: " */
    int print_errors;         /* 0 on MPI ranks other than 0: a bad command line is the same on
                                 every rank, so rank 0 alone reports it */
};

/* Whether arg asks for the program's help text: "--help" or "-h". */
int cli_is_help(const char *arg);

/* A bad command line: records the message as the last error (ZT_ERR_USAGE) and prints
 * "<prefix>: error: <message> (see <name> --help)". Returns CLI_EXIT_USAGE. */
int cli_usage_error(const struct cli_program *p, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Any other failure, already recorded by zt_error_set: prints "<prefix>: error: <it>" and
 * returns exit_code. */
int cli_fail(const struct cli_program *p, int exit_code);

/* The value of option argv[*i] (the next argument, which must be there and not be empty) into
 * *value, *i moved past it. Returns 0, or CLI_EXIT_USAGE after reporting "option <opt> needs a
 * value". */
int cli_string_option(const struct cli_program *p, int argc, char **argv, int *i,
                      const char **value);

/* The same for an integer option: the whole value in base 10, at least min. Returns 0, or
 * CLI_EXIT_USAGE after reporting "option <opt> needs a value" or "<opt> <value>: expected an
 * integer >= <min>". */
int cli_int_option(const struct cli_program *p, int argc, char **argv, int *i, int64_t min,
                   int64_t *value);

#endif /* ZT_APPS_CLI_H */
