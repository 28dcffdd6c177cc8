/*
 * triton/build.h - pack a Triton cache directory into an OCI image (MCV "compat").
 *
 * The image (docs/images.md):
 *   - ONE layer, application/vnd.oci.image.layer.v1.tar+gzip, holding
 *       io.triton.cache/<DIR>/<files>          the cache tree verbatim
 *                                              (tmp.pid_* dirs skipped)
 *       io.triton.manifest/manifest.json       {"triton":[{hash, num_stages,
 *         num_warps, debug, backend, arch, warp_size[, ptx_version]}]}
 *   - a config (application/vnd.oci.image.config.v1+json), os/architecture
 *     the producing machine's (tkm_oci_host_arch(); opts->architecture
 *     overrides: the cache's launcher .so files are that CPU's code), with
 *     Labels cache.triton.image/entry-count, cache.triton.image/summary,
 *     cache.triton.image/cache-size-bytes, org.opencontainers.image.title,
 *     and rootfs.diff_ids = [sha256 of the uncompressed tar];
 *   - an OCI manifest annotated cache.triton.image/variant=compat (with
 *     opts->variant also the variant annotations, triton/variants.h).
 * The tar is deterministic (entries sorted bytewise, mtime 0, uid/gid 0, no
 * user names, modes 0755 for directories and executables, else 0644; gzip
 * header without name or time), so the same cache always gives the same
 * digests. Symlinks and special files in the cache are refused (Triton never
 * writes them), naming the path.
 *
 * With opts->inductor_dir / vllm_dir the layer also holds io.inductor.cache/ +
 * io.inductor.manifest/ and io.vllm.cache/ + io.vllm.manifest/ (see the opts).
 *
 * The result is written into an OCI image layout (layout.h) under a tag.
 */
#ifndef TKM_TRITON_BUILD_H
#define TKM_TRITON_BUILD_H

#include <stdint.h>

#include <tkm/err.h>
#include <tkm/oci/manifest.h>
#include <tkm/triton/variants.h>

struct tkm_triton_build_opts {
    const char *title;   /* org.opencontainers.image.title; default "triton-kernel-cache" */
    const char *created; /* RFC 3339 time for the config; default "1970-01-01T00:00:00Z" */
    int gzip_level;      /* 1..9; default 6 */
    /* The torch.compile parts (triton/parts.h, docs/images.md), all optional:
     * inductor_dir (TORCHINDUCTOR_CACHE_DIR) is packed as io.inductor.cache/
     * with io.inductor.manifest/manifest.json and the cache.inductor.image/
     * labels; vllm_dir (VLLM_CACHE_ROOT) as io.vllm.cache/ with
     * io.vllm.manifest/manifest.json, MCV's cache.vllm.image/ labels and the
     * KServe hints io.kserve.km/ labels. */
    const char *inductor_dir;
    const char *vllm_dir;
    /* What the Inductor cache does not record itself (a flag that contradicts
     * the cache is an error): "2.11.0+cu130", "13.0", "3.6.0", "90". */
    const char *torch_version, *cuda_version, *triton_version, *arch;
    /* io.kserve.km/cache-root-env; default "VLLM_CACHE_ROOT=<vllm_dir, absolute>". */
    const char *vllm_root_env;
    /* The config's platform: os (default "linux") and architecture in OCI
     * spelling (default tkm_oci_host_arch()), [a-z0-9_]{1,31}. */
    const char *os, *architecture;
    /* 1: the image is built as a cache variant (docs/images.md "Variants"):
     * the cache must hold exactly one Triton target (else -EINVAL with a
     * sentence), the manifest carries the cache.triton.image/ variant
     * annotations, and res->variant describes it for an index entry. */
    int variant;
    /* 1: write the blobs only, no index.json entry (tag is ignored): the
     * caller names the manifest from an image index of its own. */
    int untagged;
};

struct tkm_triton_build_result {
    struct tkm_oci_desc manifest, config, layer;
    char diff_id[TKM_OCI_DIGEST_LEN + 1];
    uint64_t entries;                          /* kernel entries (entry-count label) */
    uint64_t cache_bytes;                      /* cache-size-bytes label */
    uint64_t tar_bytes;                        /* uncompressed layer size */
    uint64_t files;                            /* regular files packed */
    uint64_t inductor_entries, inductor_bytes; /* FX graph + AOTAutograd entries; bytes */
    uint64_t vllm_entries, vllm_bytes;         /* hash dirs; bytes */
    struct tkm_variant variant; /* the image as a variant (opts->variant; else zeroed) */
};

/* Packs cache_dir into the layout at layout_dir (created if needed) under
 * tag. opts may be NULL. res (optional) gets the descriptors. */
int tkm_triton_build_cache_image(const char *cache_dir, const char *layout_dir, const char *tag,
                                 const struct tkm_triton_build_opts *opts,
                                 struct tkm_triton_build_result *res, struct tkm_err *err);

#endif
