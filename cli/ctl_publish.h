/*
 * ctl_publish.h - what tkmctl build and tkmctl capture share: cache
 * directories -> an image in an OCI layout (a private temporary one without
 * --output), optionally added to a variant index (--add-variant), pushed,
 * and the result printed (text or -o json).
 *
 * Ownership: struct ctl_publish is the caller's; every string in it is
 * borrowed for the call.
 */
#ifndef CTL_PUBLISH_H
#define CTL_PUBLISH_H

#include <jansson.h>
#include <stdatomic.h>

#include <tkm/oci/ref.h>
#include <tkm/triton/build.h>

#include "ctl_oci.h"

/* What --add-variant did: the index it wrote (layout and/or registry). */
struct ctl_added {
    char layout_index[TKM_OCI_DIGEST_LEN + 1], pushed_index[TKM_OCI_DIGEST_LEN + 1];
    char replaced[TKM_OCI_DIGEST_LEN + 1];
};

struct ctl_publish {
    const char *cmd;                 /* "build", "capture": messages say "tkmctl <cmd>: " */
    const char *cache;               /* the Triton cache directory; NULL: no Triton part */
    struct tkm_triton_build_opts bo; /* the build's options (bo.variant set from add_variant) */
    const char *output, *tag, *push; /* --output DIR, --tag, --push REF (one at least) */
    const char *tmpdir;              /* where the private layout goes without output; NULL: /tmp */
    int add_variant;                 /* --add-variant */
    struct ctl_oci_flags *f;         /* registry flags, -o json */
    const atomic_int *cancel;        /* optional: a signal caught; checked between the steps */
    json_t *json_extra;              /* optional, borrowed: more keys for the -o json result */
    /* filled by ctl_publish_check / ctl_publish_run: */
    struct tkm_oci_ref ref; /* push parsed */
    struct tkm_triton_build_result res;
    struct ctl_added added;
    char digest[TKM_OCI_DIGEST_LEN + 1]; /* what was pushed: the image, or the variant index */
    char pushed[800];                    /* "REF@DIGEST" when pushed */
};

/* Checks the flags (push parsed, --add-variant with a tag) and fills the
 * defaults (tag). Prints the error and returns 2 (usage), else 0. */
int ctl_publish_check(struct ctl_publish *p);
/* Builds into output (or a private layout, removed after), adds to the
 * index, pushes. Returns 0, 1 after printing why, or -ECANCELED when
 * p->cancel was set between the steps (nothing printed). */
int ctl_publish_run(struct ctl_publish *p);
/* Prints what ctl_publish_run did (text or JSON); layout: the layout's name
 * to print (NULL: p->output). */
void ctl_publish_print(const struct ctl_publish *p, const char *layout);
/* ctl_publish_run, then ctl_publish_print on success. */
int ctl_publish(struct ctl_publish *p);
/* "OS/ARCH" into os and arch (each at least 32 bytes): 0, or -1. */
int ctl_parse_platform(const char *p, char *os, char *arch);

#endif
