/*
 * triton/image.h - the Triton facts an image carries in its config labels
 * (cache.triton.image/summary, entry-count, cache-size-bytes), read from an
 * OCI image-layout directory or a registry, without pulling the layer.
 *
 * An upstream MCV vLLM-only image (no cache.triton.image labels) is read through its
 * cache.vllm.image/summary, entry-count and cache-size-bytes labels (same forms).
 *
 * Ownership: struct tkm_triton_image is caller-owned; release it with
 * tkm_triton_image_release(). Label pointers are borrowed from it.
 */
#ifndef TKM_TRITON_IMAGE_H
#define TKM_TRITON_IMAGE_H

#include <tkm/err.h>
#include <tkm/oci/manifest.h>
#include <tkm/oci/registry.h>
#include <tkm/triton/cache.h>

#define TKM_TRITON_LABEL_SUMMARY     "cache.triton.image/summary"
#define TKM_TRITON_LABEL_ENTRY_COUNT "cache.triton.image/entry-count"
#define TKM_TRITON_LABEL_SIZE        "cache.triton.image/cache-size-bytes"

struct tkm_triton_image {
    char what[600]; /* "layout DIR[:TAG]" or the canonical ref */
    char manifest_digest[TKM_OCI_DIGEST_LEN + 1];
    struct tkm_oci_config config;      /* owned */
    const char *summary_label;         /* borrowed from config; never NULL on success */
    const char *entry_count;           /* borrowed, or NULL */
    const char *size_bytes;            /* borrowed, or NULL */
    struct tkm_triton_summary summary; /* parsed summary_label */
};

/* tag NULL: the layout's only manifest. */
int tkm_triton_image_load_layout(struct tkm_triton_image *im, const char *dir, const char *tag,
                                 struct tkm_err *err);
/* ref like "quay.io/org/cache:tag"; opts may be NULL. Reached through
 * lib/oci's one resolver (tkm_oci_inspect: the manifest digest pinned by
 * hashing the bytes, an index followed by digest), like pull. */
int tkm_triton_image_load_ref(struct tkm_triton_image *im, const char *ref,
                              const struct tkm_oci_registry_opts *opts, struct tkm_err *err);
void tkm_triton_image_release(struct tkm_triton_image *im);

/*
 * Inspect as an image job on a registry session (oci/session.h: one handle,
 * tkm_oci_job_cancel, the tkm_oci_job_cb callback): lib/oci's inspect (the
 * one resolver), then the Triton labels. On success res->digest and
 * res->image as for tkm_oci_job_inspect (res->image.config moved into the
 * detail), and res->detail is a struct tkm_triton_image (borrowed for the
 * callback): summary, entry count, size. -ENOENT when the image has no
 * summary label (not a Triton cache image).
 */
struct tkm_oci_session;
struct tkm_oci_job;
struct tkm_oci_job_result;
int tkm_triton_job_inspect(struct tkm_oci_session *s, const struct tkm_oci_ref *ref,
                           void (*cb)(struct tkm_oci_job *job, int rc,
                                      struct tkm_oci_job_result *res, const struct tkm_err *err,
                                      void *data),
                           void *data, struct tkm_oci_job **out, struct tkm_err *err);

#endif
