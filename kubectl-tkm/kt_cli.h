/*
 * kt_cli.h - kubectl-tkm's command line (kt_cli.c) and commands. Values in
 * struct kt_cli are borrowed from argv.
 */
#ifndef KT_CLI_H
#define KT_CLI_H

#include <stdint.h>
#include <stdio.h>

#include "kt.h"

struct kt_cli {
    const char *cmd; /* "status", "why", "check", "schedule", "version" */
    const char *arg; /* CACHE or IMAGE, or NULL */
    const char *kubeconfig, *context, *ns, *node, *kind;
    const char *output; /* "", "wide", "json", "yaml" */
    enum kt_by by;
    long width;          /* -1: not given */
    uint64_t timeout_ms; /* --request-timeout; default 30 s */
    int all_ns, no_color;
};

/* Parses argv. Returns -1 to go on, else the exit status (0 after --help,
 * 2 after a usage error, printed). */
int kt_cli_parse(struct kt_cli *a, int argc, char **argv);
/* The help of cmd (NULL: the overview) to f. */
void kt_cli_usage(const char *cmd, FILE *f);
void kt_cli_render_opts(const struct kt_cli *a, struct kt_render_opts *o);
/* Print and free doc (taken) as -o json|yaml; print b. Exit status. */
int kt_cli_print_doc(const struct kt_cli *a, json_t *doc);
int kt_cli_print_buf(struct tkm_buf *b);

/* The commands; each returns the exit status. */
int kt_cli_status(const struct kt_cli *a);
int kt_cli_why(const struct kt_cli *a);
int kt_cli_check(const struct kt_cli *a);
int kt_cli_schedule(const struct kt_cli *a);

#endif
