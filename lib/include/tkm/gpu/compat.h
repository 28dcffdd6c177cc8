/*
 * gpu/compat.h - can this GPU use this Triton cache? One verdict per GPU,
 * with a reason a person understands.
 *
 * A cache entry is a hit only if Triton on the GPU computes the same key, so a
 * GPU is compatible with a cache when some summary target has:
 *   1. the GPU's backend ("cuda" / "hip");
 *   2. exactly the GPU's arch as Triton keys it: CUDA compute capability
 *      major*10+minor ("90" for 9.0; an sm_NNa build is for that CC only),
 *      HIP gfx name ("gfx942");
 *   3. the GPU's warp size (32 CUDA; 64 CDNA);
 *   4. for CUDA, a PTX ISA (the highest `.version` among its .ptx files) that
 *      the driver's CUDA version supports (PTX ISA 8.7 needs CUDA 12.8+).
 * A GPU whose driver is not loaded, or whose arch or driver CUDA version is
 * unknown when needed, is incompatible: tkm fails closed.
 * See docs/compatibility.md.
 */
#ifndef TKM_GPU_COMPAT_H
#define TKM_GPU_COMPAT_H

#include <jansson.h>

#include <tkm/gpu/probe.h>
#include <tkm/triton/cache.h>

struct tkm_compat_verdict {
    int gpu_index;
    int compatible;   /* 1 or 0 */
    int target_index; /* the matching summary target, -1 when none */
    char reason[768]; /* one sentence, e.g. "arch mismatch: cache built for sm80, GPU 1 is sm90" */
};

/* The minimum CUDA version for a PTX ISA version, from NVIDIA's PTX ISA
 * release notes. Returns 0, or -ENOENT for a version not in the table. */
int tkm_compat_ptx_min_cuda(struct tkm_ptx_version ptx, int *cuda_major, int *cuda_minor);

/* Judges one GPU against a summary. Never fails. */
void tkm_compat_check(const struct tkm_triton_summary *s, const struct tkm_gpu *g,
                      struct tkm_compat_verdict *v);

/* {"gpu":{...tkm_gpu_to_json...},"compatible":true,"reason":"...",
 *  "matchedTarget":{"backend","arch","warp_size"}|null} (new reference, NULL on ENOMEM). */
json_t *tkm_compat_verdict_json(const struct tkm_triton_summary *s, const struct tkm_gpu *g,
                                const struct tkm_compat_verdict *v);

#endif
