/*
 * triton/cache.h - the on-disk Triton kernel cache: scan, summary, group rewrite.
 *
 * A Triton cache root (TRITON_CACHE_DIR, or io.triton.cache/ inside an image
 * layer) holds one directory per compiled kernel, named by the base32 (3.2+),
 * urlsafe base64, sha256 hex or md5 hex of the cache key. A kernel directory
 * holds `<name>.json` (the metadata: hash, target, options, env vars,
 * triton_version, compile outputs), `__grp__<name>.json` (the group: which
 * files belong to the entry) and the stage files (.source .ttir .ttgir .llir
 * .ptx .cubin, or .amdgcn .hsaco on ROCm). Launcher/utils .so files sit in
 * directories of their own. Leftover `tmp.pid_*` directories are ignored
 * everywhere: they are never counted, sized, packed or rewritten.
 *
 * Metadata parsing is tolerant across Triton 3.0 .. 3.6: `hash` and
 * `target.{backend,arch,warp_size}` are required (arch an int for CUDA, a
 * string for HIP); everything else is optional and the whole object is kept
 * in `meta` so unknown fields survive. Triton < 3.0 (no `target`) is rejected
 * with a message saying so.
 *
 * Group files are read in both forms: {"child_paths": {name: "/abs/path"}}
 * (FileCacheManager 3.x) and {"child_paths": [names relative to the dir]}
 * (RemoteCacheManager, Triton 2.x). tkm_triton_groups_rewrite_to() writes the
 * dict form (iterating it yields the names, which 2.x also accepts).
 *
 * Ownership: every struct here is caller-owned (usually on the stack) and
 * filled by the functions; call the matching _release() to free its contents.
 * All const char * parameters are borrowed for the duration of the call.
 * Errors: 0 or a negative errno-style code, with err (optional) naming the
 * file and field.
 */
#ifndef TKM_TRITON_CACHE_H
#define TKM_TRITON_CACHE_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include <tkm/err.h>

/* Limits that keep a hostile cache from exhausting memory. */
#define TKM_TRITON_MAX_META_BYTES (4u << 20) /* one <name>.json or __grp__ file */
#define TKM_TRITON_MAX_KERNELS    100000
#define TKM_TRITON_BACKEND_MAX    16
#define TKM_TRITON_ARCH_MAX       32

/* The one kernel-name grammar: the names tkm-csi reads from a pod's scratch
 * (the kernel JSON's "name"), the agent takes from a Release and the node and
 * cache statuses carry in topKernels are [A-Za-z0-9_.-]{1,TKM_KERNEL_NAME_MAX}
 * (the CRDs' pattern). Anything else is dropped (counted as truncated) or
 * refused, so a name is safe in a label, a log line and a terminal. */
#define TKM_KERNEL_NAME_MAX 128
/* 1 when the len bytes at s are a kernel name (a NUL among them is not); 0
 * otherwise, also for s NULL. Pure. */
int tkm_kernel_name_ok(const char *s, size_t len);

/* Where a kernel was compiled for: exactly what Triton puts in its cache key. */
struct tkm_triton_target {
    char backend[TKM_TRITON_BACKEND_MAX]; /* "cuda" or "hip" (others kept verbatim) */
    char arch[TKM_TRITON_ARCH_MAX];       /* always a string: "90", "80", "gfx90a" */
    int warp_size;                        /* 32 or 64 */
};

/* Reads {"backend", "arch", "warp_size"} of the JSON object t into out: arch
 * an integer (CUDA, e.g. 90) or a string ("gfx90a"; "sm_90" and "sm90" become
 * "90"); *arch_is_int (may be NULL) is set to 1 for an integer. -EINVAL with
 * err naming what ("<file>: target") otherwise. */
int tkm_triton_target_parse(json_t *t, struct tkm_triton_target *out, int *arch_is_int,
                            const char *what, struct tkm_err *err);

/* A PTX ISA version from a `.version X.Y` line; major < 0 means unknown. */
struct tkm_ptx_version {
    int major;
    int minor;
};

/* One kernel entry: a <name>.json with a "hash". All strings owned. */
struct tkm_triton_kernel {
    char *dir;            /* kernel dir name, relative to the cache root */
    char *json_name;      /* metadata file name inside dir, e.g. "add_kernel.json" */
    char *hash;           /* metadata "hash" (sha256 hex of the cache key) */
    char *name;           /* metadata "name", or NULL */
    char *triton_version; /* metadata "triton_version", or NULL (older builds) */
    struct tkm_triton_target target;
    int arch_is_int;      /* 1 when target.arch was a JSON integer (CUDA) */
    int num_warps;        /* -1 when absent */
    int num_stages;       /* -1 when absent */
    int num_ctas;         /* -1 when absent */
    int meta_ptx_version; /* metadata "ptx_version" (an option, usually null): -1 */
    json_t *env;          /* object: the cache-invalidating env vars set (UPPER_CASE keys) */
    json_t *meta;         /* the whole metadata object, unknown fields included */
    /* From the stage files, when present: */
    struct tkm_ptx_version ptx;            /* `.version` of <name>.ptx; major -1 if no .ptx */
    char ptx_target[TKM_TRITON_ARCH_MAX];  /* `.target` of the .ptx, e.g. "sm_90a"; "" */
    char binary_arch[TKM_TRITON_ARCH_MAX]; /* from cubin/hsaco e_flags: "90", "gfx90a"; "" */
    char *group_name;                      /* "__grp__<name>.json" if present in dir, else NULL */
    uint64_t size_bytes;                   /* regular files in dir (tmp.pid_* excluded) */
};

/* One de-duplicated target (backend, arch, warp_size) with what its kernels need. */
struct tkm_triton_summary_target {
    struct tkm_triton_target target;
    size_t kernels;                 /* entries with this target */
    struct tkm_ptx_version ptx_max; /* highest PTX ISA among them; major -1 if none */
    int arch_specific;              /* 1 if some .ptx targets sm_NNa (runs on that exact CC only) */
    size_t binary_mismatch; /* kernels whose cubin/hsaco ELF arch differs from target.arch */
};

struct tkm_triton_summary {
    struct tkm_triton_summary_target *targets; /* owned array, sorted by backend, arch, warp */
    size_t n_targets;
    char **triton_versions; /* owned, sorted, de-duplicated */
    size_t n_triton_versions;
    struct tkm_ptx_version *ptx_versions; /* owned, sorted ascending, de-duplicated */
    size_t n_ptx_versions;
};

struct tkm_triton_cache {
    char *root;                        /* owned copy of the scanned path */
    struct tkm_triton_kernel *kernels; /* owned, sorted by dir then json_name */
    size_t n_kernels;                  /* == entry-count label: kernel JSONs with a "hash" */
    size_t n_dirs;                     /* directories under root (tmp.pid_* excluded) */
    uint64_t size_bytes;               /* == cache-size-bytes label: sum of regular file sizes */
    struct tkm_triton_summary summary;
};

/* Scans root (a cache directory). Symlinks and special files are neither
 * followed nor counted. On failure c is left empty (release is still safe). */
int tkm_triton_cache_scan(struct tkm_triton_cache *c, const char *root, struct tkm_err *err);
void tkm_triton_cache_release(struct tkm_triton_cache *c);

/* Builds the summary of n kernels (de-duplicated targets, versions). */
int tkm_triton_summary_build(struct tkm_triton_summary *s, const struct tkm_triton_kernel *k,
                             size_t n, struct tkm_err *err);
/* The image label value cache.triton.image/summary, compact JSON:
 *   {"targets":[{"backend":"cuda","arch":"90","warp_size":32}],
 *    "triton_versions":["3.6.0"],"ptx_versions":["8.7"]}
 * "targets" is what upstream MCV reads (arch always a string); the other keys
 * are tkm additions that Go decoders ignore. *out is owned: free() it. */
int tkm_triton_summary_label(const struct tkm_triton_summary *s, char **out, struct tkm_err *err);
/* Parses such a label back (only "targets" is required; ptx_versions, when
 * present, sets every cuda target's ptx_max to the highest listed). */
int tkm_triton_summary_parse(struct tkm_triton_summary *s, const char *label, struct tkm_err *err);
void tkm_triton_summary_release(struct tkm_triton_summary *s);

/* Parses one metadata JSON (text, len bytes) into k. what names the input
 * in error messages (a path). Returns -ENOENT (no error text) when the JSON
 * is valid but has no "hash" (not a kernel entry, e.g. autotune results). */
int tkm_triton_meta_parse(struct tkm_triton_kernel *k, const char *text, size_t len,
                          const char *what, struct tkm_err *err);
void tkm_triton_kernel_release(struct tkm_triton_kernel *k);

/* A parsed group file: the child file names, and the paths as written
 * (absolute for the dict form, NULL for the list form). */
struct tkm_triton_group {
    char **names; /* owned */
    char **paths; /* owned; paths[i] NULL in the list form */
    size_t n;
    int is_list;
};
/* Rejects child names that are not plain file names ("", ".", "..", "/"). */
int tkm_triton_group_parse(struct tkm_triton_group *g, const char *text, size_t len,
                           const char *what, struct tkm_err *err);
void tkm_triton_group_release(struct tkm_triton_group *g);

struct tkm_triton_rewrite_stats {
    size_t groups;           /* group files rewritten */
    size_t children;         /* child paths written */
    size_t missing_children; /* children whose file is absent under cache_dir */
};
/* Rewrites every __grp__*.json under cache_dir so each child path becomes
 * new_root/<kernel dir>/<name>: use it after extracting a cache to cache_dir
 * when pods see it at new_root (new_root may equal cache_dir). The rewritten
 * groups go to out_dir/<kernel dir>/__grp__*.json: out_dir == cache_dir
 * rewrites in place; another out_dir (created if needed, may exist) becomes
 * a tree that mirrors the cache and holds only the rewritten group files
 * (the CSI driver's thin per-pod layer over a shared read-only cache),
 * leaving cache_dir untouched; kernel dirs without group files are not
 * created. Each file is written to a temporary file in its directory and
 * renamed into place (mode kept), so a reader sees the old or the new file;
 * nothing is fsync'ed: the caller flushes the tree (tkmctl extract: one
 * syncfs) or rebuilds it (a per-pod layer). new_root must be absolute. stats is optional;
 * missing_children is counted against cache_dir. */
int tkm_triton_groups_rewrite_to(const char *cache_dir, const char *out_dir, const char *new_root,
                                 struct tkm_triton_rewrite_stats *stats, struct tkm_err *err);

/* Reads `.version X.Y` and `.target sm_NN[a]` from the PTX header (the first
 * 64 KiB of text). target gets "" when absent. Returns -EINVAL without a
 * .version line. */
int tkm_ptx_header_parse(const char *text, size_t len, struct tkm_ptx_version *v, char *target,
                         size_t target_size);
/* From the ELF header of a cubin (EM_CUDA: SM in e_flags, ABI 7 low byte,
 * ABI 8 bits 8..15) or hsaco (EM_AMDGPU: e_flags & 0xff -> gfx name): writes
 * "90" or "gfx90a" to arch and "cuda"/"hip" to backend (each at least 16
 * bytes). -EINVAL if not such an ELF, -ENOTSUP for an unknown machine value. */
int tkm_elf_gpu_arch(const unsigned char *data, size_t len, char *backend, char *arch, size_t size);

/* 1 if name is a Triton temporary directory (tmp.pid_*), else 0. */
int tkm_triton_is_tmp_name(const char *name);
/* "8.7" style text of v into out (at least 16 bytes); "-" when unknown. */
const char *tkm_ptx_version_str(struct tkm_ptx_version v, char *out, size_t size);
/* Compares two PTX versions: <0, 0, >0. */
int tkm_ptx_version_cmp(struct tkm_ptx_version a, struct tkm_ptx_version b);

#endif
