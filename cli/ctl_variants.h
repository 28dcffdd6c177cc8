/*
 * ctl_variants.h - what the image commands (inspect, check, extract) do with
 * a cache variant index (triton/variants.h, docs/images.md "Variants"):
 * read it from a layout's tag or a registry reference, list it, and choose
 * the variant for this machine (tkm_variant_pick for its GPUs, or --target).
 *
 * Ownership: struct ctl_variants is the caller's, filled by
 * ctl_variants_load and emptied by ctl_variants_release; strings passed in
 * are borrowed for the call.
 */
#ifndef CTL_VARIANTS_H
#define CTL_VARIANTS_H

#include <jansson.h>
#include <stddef.h>

#include <tkm/err.h>
#include <tkm/gpu/probe.h>
#include <tkm/oci/ref.h>
#include <tkm/triton/variants.h>

#include "ctl_oci.h"

struct ctl_variants {
    struct tkm_variant_set set; /* n == 0: the source is not a variant index */
    const char *layout;         /* the layout (borrowed), or NULL for a reference */
    struct tkm_oci_ref ref;     /* the reference (layout NULL) */
    char what[700];             /* "layout DIR:TAG" or the canonical reference */
};

/* Reads what layout (with tag) or ref names: a variant index fills cv->set
 * (pinned: the layout's descriptor digest, or the reference's digest when
 * it has one, else the hash of the bytes); anything else leaves it empty
 * (0: the caller goes on as with an image). A variant index that does not
 * validate: -EPROTO with err. */
int ctl_variants_load(struct ctl_variants *cv, const char *layout, const char *tag, const char *ref,
                      struct ctl_oci_flags *f, struct tkm_err *err);
void ctl_variants_release(struct ctl_variants *cv);

/* The variant for this machine: --target BACKEND/ARCH[/WARP] (target, may be
 * NULL) among the variants for this host's platform (an exact arch first,
 * then for cuda "<arch>a"), else the first GPU of l that tkm_variant_pick
 * finds one for. -ENOENT with err listing the variants when none fits;
 * -EINVAL for a target that does not parse. gpu (optional) gets the index
 * of the GPU that picked (-1 for --target). */
int ctl_variants_choose(const struct ctl_variants *cv, const char *target,
                        const struct tkm_gpu_list *l, size_t *idx, int *gpu, struct tkm_err *err);

/* Where variant idx is read from: a layout tag (its digest: tkm_oci_layout_find
 * takes one) or a reference pinned by its digest, into out. */
void ctl_variants_source(const struct ctl_variants *cv, size_t idx, char *out, size_t n);

/* {"digest","platform","backend","arch","warpSize","tritonVersion"?,"parts":[..]} */
json_t *ctl_variant_json(const struct tkm_variant *v);
/* One text line per variant: "  linux/amd64 cuda sm90 warp 32  triton 3.6.0  parts triton  DIGEST".
 */
void ctl_variants_print(const struct tkm_variant_set *s);

#endif
