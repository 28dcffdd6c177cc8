/*
 * triton/extract.h - a Triton cache image, from an OCI layout to a cache
 * directory: extract its one layer's io.triton.cache/ (lib/archive) into a
 * staging directory, rewrite the group files for where pods see the cache
 * (tkm_parts_groups_rewrite_to), flush and rename into place. Moved here from
 * lib/oci, which knows nothing of Triton.
 *
 * Strings are borrowed for the call; res is caller-owned.
 */
#ifndef TKM_TRITON_EXTRACT_H
#define TKM_TRITON_EXTRACT_H

#include <stdint.h>

#include <tkm/err.h>
#include <tkm/oci/manifest.h>

/* The legacy (MCV) cache layer media types, gzip'ed tars like an OCI layer. */
#define TKM_TRITON_MT_LEGACY_LAYER "application/cache.triton.content.layer.v1+triton"
#define TKM_VLLM_MT_LEGACY_LAYER   "application/cache.vllm.content.layer.v1+vllm"

struct tkm_triton_extract_result {
    char layer[TKM_OCI_DIGEST_LEN + 1]; /* the layer extracted */
    uint64_t files, dirs, file_bytes;   /* written under dest */
    uint64_t label_bytes;               /* the cache-size-bytes labels (all parts), 0 if absent */
    uint64_t groups, children;          /* group files rewritten, child paths written */
    uint64_t missing_children;          /* group children absent from the cache */
    int parts;                          /* TKM_PART_* bits the config announces (parts.h) */
};

/* Extracts the Triton cache of the image tagged tag (NULL: the only one) in
 * layout_dir into dest (must not exist): io.triton.cache/ becomes dest/, the
 * layer's digest and diff_id are checked while extracting (lib/archive:
 * links, devices, '..', absolute names rejected) into a staging directory
 * beside dest, every __grp__*.json there is rewritten to point at
 * mount_path (NULL: dest's absolute path), where pods will see the cache,
 * the tree is flushed with one syncfs() and renamed to dest. A failure or a
 * crash leaves no dest, never a partial one.
 * The image must have one tar layer (gzip, zstd or plain).
 * A multi-part image (its config has Inductor or vLLM labels, triton/parts.h)
 * is laid out as dest/triton, dest/inductor, dest/vllm instead, and the group
 * files of every part are rewritten (tkm_parts_groups_rewrite_to).
 *
 * base (borrowed, may be NULL for the defaults) gives the limits, cancel flag
 * and progress callback; its other fields are ignored: once *base->cancel is
 * non-zero the extraction stops with -ECANCELED and the staging directory is
 * removed. The staging directory is a tkm_staging_create() one; stale ones of
 * dead processes beside dest are purged first. The layer blob must have its
 * descriptor's exact size and the config exactly one rootfs.diff_id. */
struct tkm_archive_opts;
int tkm_triton_extract_layout_with(const char *layout_dir, const char *tag, const char *dest,
                                   const char *mount_path, const struct tkm_archive_opts *base,
                                   struct tkm_triton_extract_result *res, struct tkm_err *err);

#endif
