/*
 * image.h - whole-image transfers between a registry and an OCI layout.
 *
 * Pull: resolve the reference (HEAD for the digest, then GET by that digest
 * and hash what arrives), follow an index to the linux/<host arch> manifest
 * (attestations skipped; a single manifest is taken as is), fetch and verify
 * the config and every layer into the layout (blobs already present are
 * verified instead of fetched), then tag the manifest in index.json.
 *
 * Push: read the tagged manifest from a layout, verify each blob, upload
 * config and layers (skipping those the registry has), then PUT the manifest
 * under the reference's tag (or its digest).
 *
 * Both are synchronous (registry.h). Strings are borrowed.
 */
#ifndef TKM_OCI_IMAGE_H
#define TKM_OCI_IMAGE_H

#include <tkm/err.h>
#include <tkm/oci/manifest.h>
#include <tkm/oci/ref.h>
#include <tkm/oci/registry.h>

struct tkm_oci_pull_result {
    char index_digest[TKM_OCI_DIGEST_LEN + 1]; /* "" unless the reference named an index */
    struct tkm_oci_desc manifest;              /* the image manifest pulled */
    struct tkm_oci_manifest parsed;            /* owned: release with _pull_result_release */
    struct tkm_oci_config config;              /* owned */
    uint64_t bytes_fetched;                    /* layer bytes downloaded (not reused) */
};

/* Pulls ref into layout_dir (created if needed) under tag (NULL: the
 * reference's tag, else "latest"). layers = 0 fetches manifest and config
 * only (inspection). */
int tkm_oci_pull(const struct tkm_oci_ref *ref, const struct tkm_oci_registry_opts *ro,
                 const char *layout_dir, const char *tag, int layers,
                 struct tkm_oci_pull_result *res, struct tkm_err *err);
void tkm_oci_pull_result_release(struct tkm_oci_pull_result *res);

/* Like tkm_oci_pull without a layout: resolves ref and fetches and verifies
 * its manifest and config only (labels, layer descriptors, digest pinning). */
int tkm_oci_inspect(const struct tkm_oci_ref *ref, const struct tkm_oci_registry_opts *ro,
                    struct tkm_oci_pull_result *res, struct tkm_err *err);

/* Pushes the manifest tagged tag (NULL: the only one) in layout_dir to ref.
 * digest (optional) gets the manifest digest; *uploaded (optional) the
 * number of blobs actually uploaded. */
int tkm_oci_push(const char *layout_dir, const char *tag, const struct tkm_oci_ref *ref,
                 const struct tkm_oci_registry_opts *ro, char digest[TKM_OCI_DIGEST_LEN + 1],
                 int *uploaded, struct tkm_err *err);

/* Reads and verifies the manifest and config tagged tag in a layout. */
int tkm_oci_layout_load(const char *layout_dir, const char *tag, struct tkm_oci_pull_result *res,
                        struct tkm_err *err);

struct tkm_oci_extract_result {
    char layer[TKM_OCI_DIGEST_LEN + 1]; /* the layer extracted */
    uint64_t files, dirs, file_bytes;   /* written under dest */
    uint64_t label_bytes;               /* cache.triton.image/cache-size-bytes, 0 if absent */
    uint64_t groups, children;          /* group files rewritten, child paths written */
    uint64_t missing_children;          /* group children absent from the cache */
};

/* Extracts the Triton cache of the image tagged tag (NULL: the only one) in
 * layout_dir into dest (must not exist): io.triton.cache/ becomes dest/, the
 * layer's digest and diff_id are checked while extracting (lib/archive:
 * links, devices, '..', absolute names rejected) into a staging directory
 * beside dest, every __grp__*.json there is rewritten to point at
 * mount_path (NULL: dest's absolute path), where pods will see the cache,
 * the tree is flushed with one syncfs() and renamed to dest. A failure or a
 * crash leaves no dest, never a partial one.
 * The image must have one tar layer (gzip, zstd or plain). */
int tkm_oci_extract_layout(const char *layout_dir, const char *tag, const char *dest,
                           const char *mount_path, struct tkm_oci_extract_result *res,
                           struct tkm_err *err);

/* The same with the limits, cancel flag and progress callback of base
 * (borrowed, may be NULL for the defaults; its other fields are ignored):
 * once *base->cancel is non-zero the extraction stops with -ECANCELED and the
 * staging directory is removed. The staging directory is a
 * tkm_staging_create() one; stale ones of dead processes beside dest are
 * purged first. The layer blob must have its descriptor's exact size and the
 * config exactly one rootfs.diff_id. */
struct tkm_archive_opts;
int tkm_oci_extract_layout_with(const char *layout_dir, const char *tag, const char *dest,
                                const char *mount_path, const struct tkm_archive_opts *base,
                                struct tkm_oci_extract_result *res, struct tkm_err *err);

#endif
