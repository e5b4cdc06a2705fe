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

#include <stdint.h>    /* int64_t */
#include "zt_status.h" /* enum zt_status */

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

/* Outputs, checked before a program does any work (a bad one fails in seconds, not after
 * hours), with stat and access only: nothing is created. Each returns ZT_OK or ZT_ERR_IO (the
 * file system, as for a missing input: exit 1) with a one-line message naming flag and path. */
/* A file the program will write at path, through a temporary file beside it (in_place 0) or by
 * opening path itself for writing (in_place 1): path is not a directory, its directory exists
 * and is writable, and with in_place an existing file is writable. */
enum zt_status cli_check_output_file(const char *flag, const char *path, int in_place);
/* A directory the program will create where missing (like mkdir -p) and write in: path is a
 * writable directory, or its nearest existing ancestor is. */
enum zt_status cli_check_output_dir(const char *flag, const char *path);
/* Whether paths a and b name one file: the same device and inode where both exist, else the
 * same path once their directories are resolved (symbolic links, "..", "."). */
int cli_same_file(const char *a, const char *b);

/* Peak resident set of this process in KiB (VmHWM of /proc/self/status), -1 when unknown. */
long long cli_peak_rss_kib(void);
/* Bytes of host memory available to a new process (MemAvailable of /proc/meminfo, else the
 * physical memory). */
int64_t cli_mem_available(void);

/* Run gnuplot on the script gp (it writes the pictures the script names); a missing gnuplot or
 * a gnuplot error is ZT_ERR_IO naming it. */
enum zt_status cli_run_gnuplot(const char *gp);

#endif /* ZT_APPS_CLI_H */
