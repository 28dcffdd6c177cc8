/*
 * ctl_args.h - one argument parser for every tkmctl command.
 *
 * A command lists its flags in a table and its positional arguments in an
 * array; ctl_args_parse() walks argv once:
 *
 *     const char *out = NULL, *tag = NULL, *pos[1] = {0};
 *     int quiet = 0;
 *     const struct ctl_arg args[] = {
 *         {"--output", &out, NULL}, {"--tag", &tag, NULL}, {"--quiet", NULL, &quiet}, {0}};
 *     struct ctl_args_spec s = {"extract", args, pos, 1, usage, &oci_flags};
 *     int st = ctl_args_parse(&s, argc, argv);
 *     if (st >= 0)
 *         return st; // help shown (0) or usage error printed (2)
 *
 * A flag takes a value (`str` set: "--tag v" or "--tag=v") or is a switch
 * (`set` set to 1). -h/--help prints the command's usage to stdout. With
 * `oci` set, the shared registry flags of ctl_oci.h are accepted too. Errors
 * ("unknown flag", "missing value", "unexpected argument") name the command
 * and the argument. Values are borrowed from argv.
 */
#ifndef CTL_ARGS_H
#define CTL_ARGS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

struct ctl_oci_flags;

struct ctl_arg {
    const char *name; /* "--output"; the table ends with {0} */
    const char **str; /* a flag with a value: where it goes */
    int *set;         /* a switch: set to 1 when given */
};

struct ctl_args_spec {
    const char *cmd;            /* for messages: "tkmctl <cmd>: ..." */
    const struct ctl_arg *args; /* may be NULL */
    const char **pos;           /* positional arguments, filled in order (NULL when absent) */
    size_t npos;
    void (*usage)(FILE *);
    struct ctl_oci_flags *oci; /* optional: accept the registry flags too */
};

/* Returns -1 when the caller should go on, 0 after printing help (exit 0),
 * 2 after printing a usage error (exit 2). */
int ctl_args_parse(const struct ctl_args_spec *s, int argc, char **argv);

/* Parses a byte count: plain bytes ("1048576") or a number with a suffix,
 * K/M/G/T (powers of 1000) or Ki/Mi/Gi/Ti (powers of 1024), optionally
 * followed by "B" ("10M", "512MiB", "4Gi"). Zero is refused. Returns 0, or
 * -EINVAL (not a size) / -ERANGE (over 2^63). *out is written on success. */
int ctl_parse_size(const char *s, uint64_t *out);

/* ctl_parse_size for a flag: prints "tkmctl <cmd>: <flag> 'v': ..." and
 * returns 2 (the usage-error exit status) on a bad value, else 0. A NULL v
 * leaves *out alone. */
int ctl_size_flag(const char *cmd, const char *flag, const char *v, uint64_t *out);

#endif
