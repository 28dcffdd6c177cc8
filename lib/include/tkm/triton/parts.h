/*
 * triton/parts.h - the torch.compile parts of a cache image, beside Triton's
 * own cache: Inductor's cache (TORCHINDUCTOR_CACHE_DIR: FX graph cache,
 * AOTAutograd cache, generated code, autotune results and its own triton/
 * subdir) and a vLLM cache root (VLLM_CACHE_ROOT, upstream MCV's io.vllm.cache/).
 * docs/images.md has the format, docs/inductor.md what the caches hold.
 *
 * In the image's one layer each part sits under its own prefix with a
 * manifest; extracted (tkmctl extract, the agent's store) a multi-part image
 * becomes <root>/triton, <root>/inductor, <root>/vllm (a Triton-only image
 * keeps the Triton cache at <root>, as before).
 *
 * Ownership: structs are caller-owned, filled by the functions and freed with
 * their _release(); const char * parameters are borrowed for the call; char **
 * results are owned by the caller (free()).
 */
#ifndef TKM_TRITON_PARTS_H
#define TKM_TRITON_PARTS_H

#include <stdint.h>

#include <tkm/err.h>
#include <tkm/gpu/probe.h>
#include <tkm/oci/manifest.h>
#include <tkm/triton/cache.h>

/* Layer prefixes and manifests (the Triton ones are MCV's, the vLLM ones too). */
#define TKM_PART_TRITON_PREFIX     "io.triton.cache"
#define TKM_PART_TRITON_MANIFEST   "io.triton.manifest"
#define TKM_PART_INDUCTOR_PREFIX   "io.inductor.cache"
#define TKM_PART_INDUCTOR_MANIFEST "io.inductor.manifest"
#define TKM_PART_VLLM_PREFIX       "io.vllm.cache"
#define TKM_PART_VLLM_MANIFEST     "io.vllm.manifest"
/* Where each part lands when a multi-part image is extracted. */
#define TKM_PART_TRITON_DIR   "triton"
#define TKM_PART_INDUCTOR_DIR "inductor"
#define TKM_PART_VLLM_DIR     "vllm"

/* Config labels (strings, like MCV's). */
#define TKM_INDUCTOR_LABEL_SUMMARY     "cache.inductor.image/summary"
#define TKM_INDUCTOR_LABEL_ENTRY_COUNT "cache.inductor.image/entry-count"
#define TKM_INDUCTOR_LABEL_SIZE        "cache.inductor.image/cache-size-bytes"
#define TKM_VLLM_LABEL_ENTRY_COUNT     "cache.vllm.image/entry-count"
#define TKM_VLLM_LABEL_SUMMARY         "cache.vllm.image/summary"
#define TKM_VLLM_LABEL_SIZE            "cache.vllm.image/cache-size-bytes"
#define TKM_VLLM_LABEL_FORMAT          "cache.vllm.image/format"
#define TKM_KSERVE_LABEL_CACHE_HASH    "io.kserve.km/cache-hash"
#define TKM_KSERVE_LABEL_MOUNT_SUBPATH "io.kserve.km/cache-mount-subpath"
#define TKM_KSERVE_LABEL_ROOT_ENV      "io.kserve.km/cache-root-env"
#define TKM_KSERVE_LABEL_CACHE_TYPE    "io.kserve.km/cache-type"
#define TKM_KSERVE_LABEL_FRAMEWORK     "io.kserve.km/framework"

/* What Inductor's cache keys depend on, and where tkm learnt each value:
 * "cache" (read from the cache's own files), "flag" (tkmctl build's flags),
 * "" (unknown). */
struct tkm_inductor_facts {
    char torch_version[64];  /* "2.11.0+cu130": fxgraph entries' "# torch version:" */
    char cuda_version[32];   /* "13.0": "# torch cuda version:" (ROCm: "# torch hip version:") */
    char triton_version[32]; /* "3.6.0": triton/ kernels, else AOTAutograd's system_info */
    char backend[16];        /* "cuda"/"hip": generated code's DeviceProperties(type=) */
    char arch[32];           /* "90": DeviceProperties(cc=), else triton/ kernels' target */
    int warp_size;           /* DeviceProperties(warp_size=); 0 unknown */
    char torch_from[8], cuda_from[8], triton_from[8], arch_from[8];
};

struct tkm_inductor_info {
    uint64_t fxgraph;        /* FX graph cache entries (fxgraph/<xx>/<key>/<entry>) */
    uint64_t aotautograd;    /* AOTAutograd cache entries (aotautograd/<key>/<entry>) */
    uint64_t code_files;     /* generated modules (<xx>/NAME.py) */
    uint64_t best_configs;   /* autotune results (<xx>/NAME.best_config) */
    uint64_t triton_kernels; /* kernel entries under triton/<device>/ */
    uint64_t files;          /* regular files (tmp.pid_* and *.lock excluded) */
    uint64_t size_bytes;     /* their sizes: the cache-size-bytes label */
    struct tkm_inductor_facts facts;
};

/* Scans an Inductor cache directory. -ENOENT (with err) when it holds no
 * FX graph, AOTAutograd or generated-code entry (not a TORCHINDUCTOR_CACHE_DIR).
 * Symlinks and special files are refused, naming the path. */
int tkm_inductor_scan(struct tkm_inductor_info *in, const char *dir, struct tkm_err *err);

/* Fills what the cache did not say from flags (any may be NULL or ""); a flag
 * that contradicts the cache is an error (-EINVAL, naming both values). */
int tkm_inductor_facts_apply_flags(struct tkm_inductor_facts *f, const char *torch_version,
                                   const char *cuda_version, const char *triton_version,
                                   const char *arch, struct tkm_err *err);

/* The cache.inductor.image/summary label, compact JSON:
 * {"torch_version":"2.11.0+cu130","cuda_version":"13.0","triton_version":"3.6.0",
 *  "targets":[{"backend":"cuda","arch":"90","warp_size":32}],
 *  "sources":{"torch_version":"cache",...},"fxgraph":N,"aotautograd":N,"triton_kernels":N}
 * *out owned (free()). */
int tkm_inductor_summary_label(const struct tkm_inductor_info *in, char **out, struct tkm_err *err);
/* Parses the label back into in (counts and facts). -EINVAL naming the field. */
int tkm_inductor_summary_parse(struct tkm_inductor_info *in, const char *label,
                               struct tkm_err *err);

/* Judges one GPU against the Inductor part's facts, with the same rules as
 * Triton's part (backend, arch, warp size) plus what Inductor adds: a torch
 * build for CUDA needs a driver that runs that CUDA version (CUDA 13.0 needs a
 * 13.x driver), and every fact must be known (fail closed). reason gets one
 * sentence. Returns 1 compatible, 0 not. Never fails. */
int tkm_inductor_compat_check(const struct tkm_inductor_facts *f, const struct tkm_gpu *g,
                              char *reason, size_t reason_size);

/* Adds the Inductor part's judgement to a Triton verdict v (tkm_compat_check's, on
 * the same GPU): a compatible v becomes incompatible with the reason "Inductor
 * part: ...", or gets "; Inductor part compatible: ..." appended. The agent
 * and tkmctl check both judge an image so. */
struct tkm_compat_verdict;
void tkm_inductor_compat_combine(const struct tkm_inductor_facts *f, const struct tkm_gpu *g,
                                 struct tkm_compat_verdict *v);

/* A vLLM cache root: torch_compile_cache/<hash>/rank_<r>_<dp>/{triton_cache,
 * inductor_cache, ...} as MCV packs it. */
struct tkm_vllm_info {
    uint64_t entries;    /* hash dirs under torch_compile_cache/: the entry-count label */
    uint64_t files;      /* regular files */
    uint64_t size_bytes; /* their sizes: the cache-size-bytes label */
    uint64_t triton_kernels;
    char hashes[512]; /* the hash dir names, comma-separated (io.kserve.km/cache-hash) */
    char format[16];  /* "triton" (triton_cache dirs), "binary" (artifacts), "unpacked" */
    char *summary;    /* owned: {"targets":[...]} of its Triton kernels (MCV's form) */
};
int tkm_vllm_scan(struct tkm_vllm_info *v, const char *dir, struct tkm_err *err);
void tkm_vllm_info_release(struct tkm_vllm_info *v);

/* The parts an image config announces: bit 1 Triton, 2 Inductor, 4 vLLM. */
#define TKM_PART_TRITON   1
#define TKM_PART_INDUCTOR 2
#define TKM_PART_VLLM     4
int tkm_parts_from_config(const struct tkm_oci_config *config);

/* The archive options' rename pairs that lay a multi-part layer out as
 * triton/, inductor/, vllm/ (NULL-terminated, static storage). */
const char *const *tkm_parts_rename_pairs(void);

/* 1 when dir is a multi-part root (holds triton/, inductor/ or vllm/), else 0. */
int tkm_parts_is_root(const char *dir);

/*
 * Group files of every part, rewritten for where pods see the root:
 *   a Triton-only root: tkm_triton_groups_rewrite_to(root, out, new_root);
 *   a multi-part root: root/triton (new_root/triton), every root/inductor/triton/<dev>
 *   (new_root/inductor/triton/<dev>) and every .../triton_cache dir under
 *   root/vllm (the same relative path under new_root/vllm).
 * out_dir mirrors root (created as needed); out_dir == root rewrites in place.
 * stats sums over all parts.
 */
int tkm_parts_groups_rewrite_to(const char *root, const char *out_dir, const char *new_root,
                                struct tkm_triton_rewrite_stats *stats, struct tkm_err *err);

#endif
