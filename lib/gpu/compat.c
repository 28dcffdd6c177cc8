/*
 * gpu/compat.c - per-GPU compatibility of a Triton cache summary.
 */
#include <tkm/gpu/compat.h>

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tkm/util.h>

/* PTX ISA version -> first CUDA release that supports it.
 * Source: NVIDIA, "Parallel Thread Execution ISA", section "Release Notes"
 * (docs.nvidia.com/cuda/parallel-thread-execution/#release-notes): PTX ISA
 * 9.0 = CUDA 13.0, 8.8 = 12.9, 8.7 = 12.8, 8.6 = 12.7, 8.5 = 12.5, 8.4 = 12.4,
 * 8.3 = 12.3, 8.2 = 12.2, 8.1 = 12.1, 8.0 = 12.0, 7.8 = 11.8 ... 7.0 = 11.0,
 * 6.5 = 10.2, 6.4 = 10.1, 6.3 = 10.0. (CUDA 12.6 kept PTX ISA 8.5.) */
static const struct {
    int ptx_major, ptx_minor, cuda_major, cuda_minor;
} ptx_cuda[] = {
    {6, 3, 10, 0}, {6, 4, 10, 1}, {6, 5, 10, 2}, {7, 0, 11, 0}, {7, 1, 11, 1}, {7, 2, 11, 2},
    {7, 3, 11, 3}, {7, 4, 11, 4}, {7, 5, 11, 5}, {7, 6, 11, 6}, {7, 7, 11, 7}, {7, 8, 11, 8},
    {8, 0, 12, 0}, {8, 1, 12, 1}, {8, 2, 12, 2}, {8, 3, 12, 3}, {8, 4, 12, 4}, {8, 5, 12, 5},
    {8, 6, 12, 7}, {8, 7, 12, 8}, {8, 8, 12, 9}, {9, 0, 13, 0},
};

int tkm_compat_ptx_min_cuda(struct tkm_ptx_version ptx, int *cuda_major, int *cuda_minor)
{
    for (size_t i = 0; i < TKM_ARRAY_SIZE(ptx_cuda); i++) {
        if (ptx_cuda[i].ptx_major == ptx.major && ptx_cuda[i].ptx_minor == ptx.minor) {
            *cuda_major = ptx_cuda[i].cuda_major;
            *cuda_minor = ptx_cuda[i].cuda_minor;
            return 0;
        }
    }
    return -ENOENT;
}

/* "sm90" for a CUDA arch, the gfx name as is. */
static void arch_label(const char *backend, const char *arch, char *out, size_t size)
{
    if (!strcmp(backend, "cuda") && isdigit((unsigned char)arch[0]))
        snprintf(out, size, "sm%s", arch);
    else
        snprintf(out, size, "%s", arch[0] ? arch : "unknown");
}

/* CUDA arch equality: "90" == "90"; "90a" is built for CC 9.0 only. */
static int arch_equal(const char *backend, const char *target_arch, const char *gpu_arch)
{
    if (strcmp(backend, "cuda") != 0)
        return strcmp(target_arch, gpu_arch) == 0;
    size_t n = strspn(target_arch, "0123456789");
    if (n == 0 || strlen(gpu_arch) != n || strncmp(target_arch, gpu_arch, n) != 0)
        return 0;
    return target_arch[n] == '\0' || strcmp(target_arch + n, "a") == 0 ||
           strcmp(target_arch + n, "f") == 0;
}

/* Checks PTX of a matching CUDA target; returns 1 ok, 0 not (reason written). */
static int ptx_ok(const struct tkm_triton_summary_target *t, const struct tkm_gpu *g, char *why,
                  size_t size)
{
    char pv[16];
    int maj, min;
    if (strcmp(t->target.backend, "cuda") != 0 || t->ptx_max.major < 0) {
        snprintf(why, size, "no PTX to check");
        return 1;
    }
    tkm_ptx_version_str(t->ptx_max, pv, sizeof pv);
    if (tkm_compat_ptx_min_cuda(t->ptx_max, &maj, &min) != 0) {
        snprintf(why, size,
                 "PTX ISA %s is newer than tkm knows (its table ends at PTX ISA 9.0 = CUDA "
                 "13.0), so no driver can be shown to support it",
                 pv);
        return 0;
    }
    if (g->cuda_driver_version <= 0) {
        snprintf(why, size,
                 "PTX ISA %s needs CUDA %d.%d+, and the driver's CUDA version is unknown", pv, maj,
                 min);
        return 0;
    }
    int need = maj * 1000 + min * 10;
    snprintf(why, size, "PTX ISA %s needs CUDA %d.%d+, driver supports %d.%d", pv, maj, min,
             g->cuda_driver_version / 1000, (g->cuda_driver_version % 1000) / 10);
    return g->cuda_driver_version >= need;
}

/* Lists the cache's targets of one backend (or all when backend is NULL). */
static void list_targets(const struct tkm_triton_summary *s, const char *backend, int warp,
                         char *out, size_t size)
{
    size_t off = 0;
    out[0] = '\0';
    for (size_t i = 0; i < s->n_targets && off < size; i++) {
        const struct tkm_triton_target *t = &s->targets[i].target;
        char a[40];
        if (backend && strcmp(t->backend, backend) != 0)
            continue;
        if (backend)
            arch_label(t->backend, t->arch, a, sizeof a);
        if (warp)
            snprintf(a, sizeof a, "%d", t->warp_size);
        int r = snprintf(out + off, size - off, "%s%s", off ? ", " : "", backend ? a : t->backend);
        if (r > 0)
            off += (size_t)r;
    }
}

void tkm_compat_check(const struct tkm_triton_summary *s, const struct tkm_gpu *g,
                      struct tkm_compat_verdict *v)
{
    char ga[40], list[256], why[256] = "";
    int same_backend = 0, arch_match = 0;
    memset(v, 0, sizeof *v);
    v->gpu_index = g->index;
    v->target_index = -1;
    if (!g->usable || !g->arch[0]) {
        snprintf(v->reason, sizeof v->reason, "GPU %d (%s) cannot be used: %s", g->index,
                 g->name[0] ? g->name : g->pci_bus_id,
                 g->reason[0] ? g->reason : "its architecture is unknown");
        return;
    }
    arch_label(g->backend, g->arch, ga, sizeof ga);
    for (size_t i = 0; i < s->n_targets; i++) {
        const struct tkm_triton_summary_target *t = &s->targets[i];
        if (strcmp(t->target.backend, g->backend) != 0)
            continue;
        same_backend = 1;
        if (!arch_equal(g->backend, t->target.arch, g->arch))
            continue;
        arch_match = 1;
        if (t->target.warp_size != g->warp_size)
            continue;
        if (!ptx_ok(t, g, why, sizeof why))
            continue;
        if (t->binary_mismatch) {
            snprintf(v->reason, sizeof v->reason,
                     "corrupt cache: %zu of the %zu kernels for %s %s carry a GPU binary (cubin/"
                     "hsaco ELF header) built for another arch; Triton would load it on GPU %d "
                     "(%s) and fail",
                     t->binary_mismatch, t->kernels, g->backend, ga, g->index, g->name);
            return;
        }
        v->compatible = 1;
        v->target_index = (int)i;
        snprintf(v->reason, sizeof v->reason,
                 "compatible: cache target %s %s warp %d matches GPU %d (%s)%s%s", g->backend, ga,
                 g->warp_size, g->index, g->name, strcmp(why, "no PTX to check") ? "; " : "",
                 strcmp(why, "no PTX to check") ? why : "");
        return;
    }
    if (!same_backend) {
        list_targets(s, NULL, 0, list, sizeof list);
        snprintf(v->reason, sizeof v->reason,
                 "backend mismatch: cache built for %s, GPU %d (%s) is %s", list[0] ? list : "none",
                 g->index, g->name, g->backend);
    } else if (!arch_match) {
        list_targets(s, g->backend, 0, list, sizeof list);
        snprintf(v->reason, sizeof v->reason,
                 "arch mismatch: cache built for %s, GPU %d (%s) is %s", list, g->index, g->name,
                 ga);
    } else if (why[0]) {
        snprintf(v->reason, sizeof v->reason, "PTX too new for the driver on GPU %d (%s): %s",
                 g->index, g->name, why);
    } else {
        list_targets(s, g->backend, 1, list, sizeof list);
        snprintf(v->reason, sizeof v->reason,
                 "warp size mismatch: cache built for warp %s, GPU %d (%s) runs warp %d", list,
                 g->index, g->name, g->warp_size);
    }
}

json_t *tkm_compat_verdict_json(const struct tkm_triton_summary *s, const struct tkm_gpu *g,
                                const struct tkm_compat_verdict *v)
{
    json_t *mt = json_null();
    if (v->target_index >= 0 && (size_t)v->target_index < s->n_targets) {
        const struct tkm_triton_target *t = &s->targets[v->target_index].target;
        mt = json_pack("{s:s,s:s,s:i}", "backend", t->backend, "arch", t->arch, "warp_size",
                       t->warp_size);
    }
    /* "o" steals both references: json_pack releases them when it fails */
    return json_pack("{s:o,s:b,s:s,s:o}", "gpu", tkm_gpu_to_json(g), "compatible", v->compatible,
                     "reason", v->reason, "matchedTarget", mt);
}
