/*
 * ctl_oci.h - what the image commands (build, push, pull, extract) share:
 * registry flags, the progress line, JSON output.
 */
#ifndef CTL_OCI_H
#define CTL_OCI_H

#include <stdint.h>
#include <stdio.h>

#include <tkm/oci/registry.h>

#define CTL_OCI_INSECURE_MAX 16

struct ctl_progress {
    const char *label; /* borrowed */
    int tty;           /* stderr is a terminal: draw the line */
    uint64_t start_ms, last_ms, last_done;
    int drawn;
};

struct ctl_oci_flags {
    const char *insecure[CTL_OCI_INSECURE_MAX + 1]; /* borrowed from argv, NULL-terminated */
    size_t n_insecure;
    const char *auth_file;
    const char *ca_file;
    const char *mirrors_dir, *registries_conf; /* pulls only (ctl_limits.h) */
    int anonymous;
    int json; /* -o json */
    struct ctl_progress progress;
};

/* The help text for the registry flags. */
extern const char ctl_oci_flags_help[];

void ctl_oci_flags_init(struct ctl_oci_flags *f, const char *label);
/* Consumes argv[*i] (and its value) if it is a shared flag: returns 1, or 0
 * when it is not one, or -1 after printing a usage error. */
int ctl_oci_flag(struct ctl_oci_flags *f, int argc, char **argv, int *i, const char *cmd);
/* Registry options from the flags (borrowing f). */
void ctl_oci_registry_opts(struct ctl_oci_flags *f, struct tkm_oci_registry_opts *o);
/* A tkm_oci_progress_cb drawing "label  12.0 MiB / 200.0 MiB  45.1 MiB/s" on a
 * terminal stderr (ud: struct ctl_progress). */
void ctl_progress_cb(void *ud, uint64_t done, uint64_t total);
/* Ends the progress line (newline) if one was drawn. */
void ctl_progress_end(struct ctl_progress *p);
/* Bytes as "12.3 MiB" into out. */
const char *ctl_human_bytes(uint64_t n, char *out, size_t len);

#endif
