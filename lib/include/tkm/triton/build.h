/*
 * triton/build.h - pack a Triton cache directory into an OCI image (MCV "compat").
 *
 * The image (docs/images.md):
 *   - ONE layer, application/vnd.oci.image.layer.v1.tar+gzip, holding
 *       io.triton.cache/<DIR>/<files>          the cache tree verbatim
 *                                              (tmp.pid_* dirs skipped)
 *       io.triton.manifest/manifest.json       {"triton":[{hash, num_stages,
 *         num_warps, debug, backend, arch, warp_size[, ptx_version]}]}
 *   - a config (application/vnd.oci.image.config.v1+json), linux/amd64, with
 *     Labels cache.triton.image/entry-count, cache.triton.image/summary,
 *     cache.triton.image/cache-size-bytes, org.opencontainers.image.title,
 *     and rootfs.diff_ids = [sha256 of the uncompressed tar];
 *   - an OCI manifest annotated cache.triton.image/variant=compat.
 * The tar is deterministic (entries sorted bytewise, mtime 0, uid/gid 0, no
 * user names, modes 0755 for directories and executables, else 0644; gzip
 * header without name or time), so the same cache always gives the same
 * digests. Symlinks and special files in the cache are refused (Triton never
 * writes them), naming the path.
 *
 * The result is written into an OCI image layout (layout.h) under a tag.
 */
#ifndef TKM_TRITON_BUILD_H
#define TKM_TRITON_BUILD_H

#include <stdint.h>

#include <tkm/err.h>
#include <tkm/oci/manifest.h>

struct tkm_triton_build_opts {
    const char *title;   /* org.opencontainers.image.title; default "triton-kernel-cache" */
    const char *created; /* RFC 3339 time for the config; default "1970-01-01T00:00:00Z" */
    int gzip_level;      /* 1..9; default 6 */
};

struct tkm_triton_build_result {
    struct tkm_oci_desc manifest, config, layer;
    char diff_id[TKM_OCI_DIGEST_LEN + 1];
    uint64_t entries;     /* kernel entries (entry-count label) */
    uint64_t cache_bytes; /* cache-size-bytes label */
    uint64_t tar_bytes;   /* uncompressed layer size */
    uint64_t files;       /* regular files packed */
};

/* Packs cache_dir into the layout at layout_dir (created if needed) under
 * tag. opts may be NULL. res (optional) gets the descriptors. */
int tkm_triton_build_cache_image(const char *cache_dir, const char *layout_dir, const char *tag,
                                 const struct tkm_triton_build_opts *opts,
                                 struct tkm_triton_build_result *res, struct tkm_err *err);

#endif
