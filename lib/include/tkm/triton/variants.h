/*
 * triton/variants.h - cache variants: one OCI image index whose image
 * manifests are cache images built for different targets (docs/images.md,
 * "Variants").
 *
 * A variant index is an OCI image index in which at least one manifests[]
 * entry carries the annotation cache.triton.image/backend; entries without
 * it (attestations, unknown/unknown, other artifacts) are ignored. Each
 * variant entry is an image manifest with a platform (os, architecture: the
 * CPU the cache's host code was built for) and the annotations below. Its
 * target identity is (os, architecture, backend, arch, warp size): two
 * entries with one identity, more than TKM_VARIANTS_MAX variants, a missing
 * platform or an annotation outside its grammar refuse the whole index,
 * naming the entry and the key; an annotation's value is never echoed raw
 * (at most 24 bytes of it, through tkm_escape: control characters as \n,
 * \xNN).
 *
 * A single image (ours or MCV's), or an index without these annotations, is
 * a set of one variant (from_index 0), built from its config and summary.
 *
 * Ownership: struct tkm_variant_set is caller-owned (embed it), filled by
 * tkm_variants_parse / tkm_variants_from_image and emptied by
 * tkm_variant_set_release (safe on a zeroed or released set). It may be
 * moved (copy the struct, zero the original). Every other pointer parameter
 * is borrowed for the call. Strings in struct tkm_variant are fixed arrays.
 */
#ifndef TKM_TRITON_VARIANTS_H
#define TKM_TRITON_VARIANTS_H

#include <stddef.h>
#include <stdint.h>

#include <tkm/err.h>
#include <tkm/gpu/probe.h>
#include <tkm/oci/manifest.h>
#include <tkm/oci/ref.h>
#include <tkm/triton/cache.h>
#include <tkm/triton/image.h>

#define TKM_VARIANT_ANN_BACKEND "cache.triton.image/backend"
#define TKM_VARIANT_ANN_ARCH    "cache.triton.image/arch"
#define TKM_VARIANT_ANN_WARP    "cache.triton.image/warp-size"
#define TKM_VARIANT_ANN_TRITON  "cache.triton.image/triton-version"
#define TKM_VARIANT_ANN_PARTS   "cache.triton.image/parts"
#define TKM_VARIANTS_MAX        64

struct tkm_variant {
    char digest[TKM_OCI_DIGEST_LEN + 1]; /* the variant's image manifest */
    uint64_t size;
    char media_type[128];
    char os[32], architecture[32];
    char backend[16], arch[32];
    int warp_size;
    char triton_version[64]; /* "" unknown */
    char parts[64];          /* "triton", "inductor,triton", ... */
    /* Added members: */
    size_t entry;     /* its position in the index's manifests[] (0 for a set of one) */
    size_t n_targets; /* a variant: 1; a set of one: its summary's targets (facts: the first) */
};

struct tkm_variant_set {
    int from_index; /* 1: a variant index; 0: one image taken as a set of one */
    char digest[TKM_OCI_DIGEST_LEN + 1]; /* the index's (from_index) or the image manifest's */
    struct tkm_variant *v;               /* owned */
    size_t n;
};

/* 1 when raw (an index's verified bytes) has an entry with TKM_VARIANT_ANN_BACKEND. */
int tkm_variants_is_index(const void *raw, size_t n);

/* Parses and validates a variant index (raw borrowed). digest (optional) is
 * the pinned digest raw was fetched by: it must be raw's sha256. what names
 * the source in errors. 0, -EPROTO (err says why), -ENOMEM. */
int tkm_variants_parse(const void *raw, size_t n, const char *digest, const char *what,
                       struct tkm_variant_set *out, struct tkm_err *err);

/* A set of one from a single image (manifest digest/size/media type, its
 * config, its Triton summary; parts "triton" etc., NULL: from the config's
 * labels). s may be NULL (no target facts). 0, -EINVAL, -ENOMEM. */
int tkm_variants_from_image(const char *digest, uint64_t size, const char *media_type,
                            const struct tkm_oci_config *cfg, const struct tkm_triton_summary *s,
                            const char *parts, struct tkm_variant_set *out, struct tkm_err *err);

void tkm_variant_set_release(struct tkm_variant_set *s);

/* Picks the variant for GPU g on a host of host_arch (OCI spelling,
 * tkm_oci_host_arch(); NULL: this host's): platform must match (os linux);
 * then exact (backend, arch, warp) first, then for cuda arch "<gpu arch>a".
 * A set of one (from_index 0) always yields entry 0 when the platform
 * matches (or its config did not say one): the compat judge then decides
 * arch etc. as today. 0 with *idx; -ENOENT with *reason "NoVariant" (no
 * variant for the GPU's target, or the GPU's target is unknown) or
 * "HostArchMismatch" (variants for the target exist, none for this
 * platform) (static CamelCase) and msg (a sentence naming the GPU and the
 * variants there are). reason and msg may be NULL. */
int tkm_variant_pick(const struct tkm_variant_set *s, const struct tkm_gpu *g,
                     const char *host_arch, size_t *idx, const char **reason, char *msg,
                     size_t msg_n);

/* "linux/amd64 cuda sm90 warp 32" ("hip gfx942 warp 64"; a set of one with
 * several targets: "... (+N targets)"; unknown platform: "?/?"). */
void tkm_variant_describe(const struct tkm_variant *v, char *out, size_t n);

/* Does an inspected variant image agree with what the index said of it?
 * cfg (its config: os/architecture, the parts its labels announce) and s
 * (its Triton summary: exactly the one target of the annotations; the
 * Triton version, when annotated, among its versions). 0, or -EPROTO with
 * msg (reason VariantMismatch) naming what differs. */
int tkm_variant_check_image(const struct tkm_variant *v, const struct tkm_oci_config *cfg,
                            const struct tkm_triton_summary *s, char *msg, size_t msg_n);

/* The parts bit mask (TKM_PART_*, triton/parts.h) as the parts annotation
 * writes it: "inductor,triton,vllm" order, "" for 0. */
void tkm_variant_parts_str(int mask, char *out, size_t n);

/* The target identity of two variants is equal (os, architecture, backend,
 * arch, warp size). */
int tkm_variant_same_target(const struct tkm_variant *a, const struct tkm_variant *b);

/* Sets v's variant annotations (backend, arch, warp-size, parts, and
 * triton-version when known and in its grammar) on the JSON object ann
 * (a json_t *: an index entry's or a manifest's "annotations"). 0, -EINVAL
 * (ann not an object), -ENOMEM. */
int tkm_variant_annotate(const struct tkm_variant *v, json_t *ann);

/* A variant index with v added: raw (n bytes, borrowed) is the index there
 * is, NULL for none (a new index). Entries that are not variants are kept
 * as they are, a variant with v's target identity is replaced (its digest
 * into replaced, optional; "" when none), v is appended with its platform
 * and annotations. raw must be an image index, and a valid variant index
 * when it has variants; the result is checked as one (at most
 * TKM_VARIANTS_MAX). *out (owned: free) gets the compact JSON, *out_n its
 * length. 0, -EPROTO (err says why), -ENOMEM. */
int tkm_variants_index_put(const void *raw, size_t n, const struct tkm_variant *v, char **out,
                           size_t *out_n, char replaced[TKM_OCI_DIGEST_LEN + 1],
                           struct tkm_err *err);

/*
 * Inspect as an image job on a registry session (oci/session.h), knowing
 * variant indexes: lib/oci's inspect by the reference (pinned by hashing the
 * bytes), which stops at a variant index instead of following it to the
 * host's platform. detail (borrowed for the callback) is a struct
 * tkm_variant_inspect:
 *   - a variant index: set parsed from its verified bytes (from_index 1),
 *     image NULL; res->digest is the index's and res->image.parsed the
 *     index (no config fetched). A malformed variant index: -EPROTO.
 *   - an image (or an index without variant annotations, followed to
 *     linux/<host arch> as before): everything tkm_triton_job_inspect gives
 *     (res->digest the image manifest's, res->image), image the struct
 *     tkm_triton_image (movable), set the set of one built from it.
 * Both image and set may be moved out (copy, then zero the original).
 */
struct tkm_variant_inspect {
    struct tkm_triton_image *image; /* NULL for a variant index */
    struct tkm_variant_set set;
};
struct tkm_oci_session;
struct tkm_oci_job;
struct tkm_oci_job_result;
int tkm_variants_job_inspect(struct tkm_oci_session *s, const struct tkm_oci_ref *ref,
                             void (*cb)(struct tkm_oci_job *job, int rc,
                                        struct tkm_oci_job_result *res, const struct tkm_err *err,
                                        void *data),
                             void *data, struct tkm_oci_job **out, struct tkm_err *err);

#endif
