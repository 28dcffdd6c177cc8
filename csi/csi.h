/*
 * csi.h - tkm-csi, the CSI node driver csi.tkm.io: its configuration, the
 * driver object main() runs, and the pure helpers the driver is built from
 * (checked by tests/unit/test_csi.c). Shared by the csi/ sources, tkm-csi's main and
 * the unit test; nothing outside csi/ and its test includes it.
 *
 * The volume's layout on the node (docs/csi.md):
 *   <state>/<namespace>/<pod>/<volume-id>/groups/   lower: the rewritten group files
 *   <state>/<namespace>/<pod>/<volume-id>/upper/    upper: the pod's scratch (or its copy)
 *   <state>/<namespace>/<pod>/<volume-id>/work/     overlayfs work dir (same filesystem)
 * and the target is an overlay "tkm-csi:<volume-id>" of groups over the store
 * dirs the agent answered (several: one per variant of a multi-variant image).
 * An Empty volume (the agent's empty = true) is the same overlay with an empty
 * groups layer and no store: upper/ holds one empty dir per part, if any.
 *
 * Threading: csi_driver_* run on the loop's thread; the helpers below are pure
 * or touch only the paths given and are safe on the thread pool.
 * Ownership: every const char * parameter is borrowed for the call unless
 * said otherwise; results written to a struct tkm_buf are owned by the caller.
 * Errors: 0 or a negative errno-style code, err (optional) says why in a
 * sentence that names the path or attribute.
 */
#ifndef TKM_CSI_H
#define TKM_CSI_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include <tkm/buf.h>
#include <tkm/err.h>
#include <tkm/triton/cache.h>

#define CSI_DRIVER_NAME      "csi.tkm.io"
#define CSI_MOUNT_SOURCE     "tkm-csi:" /* + volume id: how our mounts are recognised */
#define CSI_VOLUME_ID_MAX    128
#define CSI_MAX_TARGET_ROOTS 8
/* The most store dirs one volume mounts (the agent answers one per variant its
 * GPUs use); more is refused with a sentence. */
#define CSI_MAX_STORES 16
/* --agent-socket's default: tkm-agent's --socket default (AGENT_DEFAULT_SOCKET) and what
 * manifests/base/daemonset-node.yaml passes (checked by unit.csi.agent_socket_default_*). */
#define CSI_DEFAULT_AGENT_SOCKET "/var/run/tkm/agent/agent.sock"

/* How the pod sees the cache (the readOnly attribute). */
enum csi_mode {
    CSI_MODE_OVERLAY = 0, /* default: groups + store, per-pod scratch upper */
    CSI_MODE_STRICT,      /* readOnly "true": read-only overlay, no upper */
    CSI_MODE_COPY,        /* readOnly "false": a private writable copy */
};

/* Settings; every pointer is borrowed for the life of the driver. */
struct csi_config {
    const char *endpoint;         /* CSI socket path (absolute) */
    const char *agent_socket;     /* tkm-agent's socket */
    const char *node_id;          /* NodeGetInfo's node_id */
    const char *state_dir;        /* per-pod dirs: <state>/<ns>/<pod>/<vol>/ */
    const char *registration_dir; /* kubelet's plugins_registry dir, or NULL: none */
    const char *target_roots[CSI_MAX_TARGET_ROOTS]; /* targets must lie below one */
    size_t n_target_roots;
    uint64_t agent_timeout_ms; /* Materialize/Release deadline */
    uint64_t retry_release_ms; /* how often pending releases are retried */
    int64_t max_volumes;       /* NodeGetInfo max_volumes_per_node (0: no limit) */
    unsigned socket_max_conns; /* each socket's connection cap (0: lib/grpc's) */
    uint64_t socket_idle_ms;   /* ... and idle timeout (0: lib/grpc's) */
    int count_scratch;         /* count the scratch layer at unpublish (--count-scratch) */
};

/* ---- the driver (csi/driver.c) --------------------------------------------- */

struct csi_driver;

/* Recovers state (csi_recover), starts the CSI server on cfg->endpoint and,
 * when cfg->registration_dir is set, the plugin-registration server on
 * <registration_dir>/csi.tkm.io-reg.sock. loop and cfg are borrowed and must
 * outlive the driver. *out is owned: end it with csi_driver_close(). */
int csi_driver_new(uv_loop_t *loop, const struct csi_config *cfg, struct csi_driver **out,
                   struct tkm_err *err);
/* Closes the servers and the agent client (operations in flight finish their
 * filesystem work first); closed_cb runs from the loop when everything is
 * closed and freed. NULL: no-op. */
void csi_driver_close(struct csi_driver *d, void (*closed_cb)(void *data), void *data);

/* `tkm-csi probe [--endpoint PATH] [--timeout SEC]` (csi/probe.c): exit status 0 when
 * the driver answers GetPluginInfo as csi.tkm.io on its CSI socket, else 1 (2: usage).
 * argv[0] is "probe"; argv is borrowed. */
int csi_probe_main(int argc, char **argv);

/* ---- pure checks (csi/paths.c) ---------------------------------------------- */

/* Volume ids become a directory name and a mount source: 1..128 of
 * [A-Za-z0-9._-], not "." or "..". */
int csi_check_volume_id(const char *id, struct tkm_err *err);
/* A Kubernetes name, by tkm_dns1123_label() when max is 63 or less (a
 * namespace), else by tkm_dns1123_subdomain() (a pod or cache name), at most
 * max characters: what names the state directories and the cache. what is
 * "namespace", "pod name", ... for the message. */
int csi_check_k8s_name(const char *name, size_t max, const char *what, struct tkm_err *err);
/* An absolute, canonical path (no "", ".", ".." component, no "//", no
 * trailing '/', no control characters), shorter than PATH_MAX. */
int csi_check_abs_path(const char *path, const char *what, struct tkm_err *err);
/* A path that may go into overlay mount options: csi_check_abs_path() and
 * none of ',' ':' '\\' '=' (the option and lowerdir separators; rejected,
 * never escaped, so the kernel's parsing cannot be fooled). */
int csi_check_option_path(const char *path, const char *what, struct tkm_err *err);
/* The root (one of roots) below which target lies, or NULL (target must be
 * strictly below it). */
const char *csi_target_root(const char *target, const char *const *roots, size_t n);

/* The overlay options for a volume dir and its n store dirs (the first is
 * the top layer) into out (reset):
 * "lowerdir=<vol>/groups:<store1>:<store2>...,upperdir=<vol>/upper,workdir=<vol>/work"
 * (OVERLAY), "lowerdir=<vol>/groups:<store1>:..." (STRICT), or
 * "lowerdir=<vol>/groups,upperdir=<vol>/upper,workdir=<vol>/work" (COPY, and
 * an Empty volume: stores unused, n may be 0). OVERLAY and STRICT need 1 to
 * CSI_MAX_STORES stores. Each path is checked with csi_check_option_path();
 * -E2BIG when the options exceed a page (mount(2)'s limit). */
int csi_overlay_opts(struct tkm_buf *out, enum csi_mode mode, const char *vol_dir,
                     const char *const *stores, size_t n, struct tkm_err *err);

/* What the agent's MaterializeResponse says to mount, after checking
 * (csi_answer_check); the pointers are borrowed from the response. */
struct csi_answer {
    const char *stores[CSI_MAX_STORES]; /* the store dirs, top layer first */
    size_t n_stores;                    /* 0 exactly when empty */
    int empty;                          /* an Empty volume: no store, a writable empty dir */
    unsigned parts; /* the subdirs an Empty volume gets: TKM_PART_* bits (<tkm/triton/parts.h>);
                     * 0 when the cache is at the root (parts [] or ["triton"]) */
};
/* Checks the agent's answer: not empty: store_paths (or, from an agent that
 * sends none, store_path alone) of 1..CSI_MAX_STORES paths, each an option
 * path (csi_check_option_path), none twice, store_paths[0] == store_path when
 * store_path is set; empty: no store path at all. parts: each of "triton",
 * "inductor", "vllm" at most once. -EPROTO with the reason (the agent's
 * strings escaped); never an Empty volume unless empty is set. */
int csi_answer_check(struct csi_answer *a, const char *store_path, char *const *store_paths,
                     size_t n_store_paths, int empty, char *const *parts, size_t n_parts,
                     struct tkm_err *err);

/* The volume's attributes after checking (pointers borrowed from the request). */
struct csi_attrs {
    const char *cache_name;  /* cacheName, or NULL */
    const char *cache_image; /* cacheImage, or NULL */
    const char *mount_path;  /* mountPath, or NULL */
    const char *pod_namespace, *pod_name, *pod_uid;
    enum csi_mode mode;
};
/* Checks the n key/value pairs of a volume context: exactly one of cacheName
 * and cacheImage; readOnly "true" or "false"; mountPath absolute and
 * canonical; the pod info keys present (csi.storage.k8s.io/pod.namespace,
 * pod.name, pod.uid) and ephemeral "true"; any other key is an error (a
 * typo must not be ignored). readonly is the request's readonly flag (the
 * pod's volume readOnly: makes the default mode STRICT; with readOnly
 * "false" it is a contradiction). -EINVAL with the reason. */
int csi_attrs_parse(struct csi_attrs *a, const char *const *keys, const char *const *values,
                    size_t n, int readonly, struct tkm_err *err);

/* One mount of /proc/self/mountinfo. */
struct csi_mount {
    char *mount_point; /* unescaped; owned */
    char *fstype;      /* owned */
    char *source;      /* unescaped; owned */
};
/* Finds the topmost mount at mount_point in mountinfo text (the last line
 * with that mount point). Returns 1 and fills m (release with
 * csi_mount_release), 0 when nothing is mounted there, or a negative code. */
int csi_mountinfo_find(const char *text, const char *mount_point, struct csi_mount *m);
/* 1 when any mount in text has source src (our volume is still in use). */
int csi_mountinfo_has_source(const char *text, const char *src);
void csi_mount_release(struct csi_mount *m);
/* Reads /proc/self/mountinfo into out (reset). */
int csi_mountinfo_read(struct tkm_buf *out, struct tkm_err *err);

/* ---- filesystem work (csi/fsops.c; BLOCKING: thread pool or startup) -------- */

/* Opens target (below root, both checked paths) component by component with
 * O_PATH|O_NOFOLLOW|O_DIRECTORY, so no symlink is ever followed; the last
 * component is created 0750 when create is set and it is missing. *fd is
 * owned (close it). -ELOOP/-ENOTDIR name the component that is a symlink or
 * not a directory. */
int csi_open_target(const char *root, const char *target, int create, int *fd, struct tkm_err *err);
/* Removes path and everything below it without following symlinks
 * (-ENOENT is success). */
int csi_remove_tree(const char *path, struct tkm_err *err);
/* Copies the tree src (directories, regular files; symlinks and special
 * files are skipped) to dst (created, or merged into: what dst already holds
 * is kept, so several sources copied in turn give their union with the first
 * winning, as in an overlay's lowerdir order). *bytes (optional) gets the
 * bytes written. */
int csi_copy_tree(const char *src, const char *dst, uint64_t *bytes, struct tkm_err *err);
/* Removes stale volume dirs under state_dir: every <ns>/<pod>/<vol> whose
 * mount source tkm-csi:<vol> is not in mountinfo is removed, and a pending
 * release marker <state>/.release/<vol> is written so the agent drops its
 * reference; empty <ns>/<pod> dirs go too. *removed (optional) counts them. */
int csi_recover(const char *state_dir, size_t *removed, struct tkm_err *err);

/* ---- what a pod compiled (csi/scratch.c; BLOCKING: thread pool) ----------- */

#define CSI_SCRATCH_NAMES_MAX   32 /* kernel names kept per volume (the proto's cap) */
#define CSI_SCRATCH_NAME_MAX    TKM_KERNEL_NAME_MAX /* tkm_kernel_name_ok() */
#define CSI_SCRATCH_ENTRIES_MAX 200000              /* entries walked, then truncated */
#define CSI_SCRATCH_DEPTH_MAX   16    /* dirs below the upper dir walked, then truncated */
#define CSI_SCRATCH_JSON_MAX    65536 /* a kernel JSON larger than this is not read */
/* The volume dir's xattr with what the count needs (trusted.*: root's alone, like
 * overlayfs's own; the volume dir holds no file the pod did not cause). */
#define CSI_SCRATCH_XATTR "trusted.tkm.scratch"

/* What a pod added to its scratch layer (agent.proto's ScratchCount). */
struct csi_scratch {
    uint32_t triton_kernels;       /* new <hash>/ dirs holding a kernel JSON */
    uint32_t inductor_fxgraph;     /* new inductor fxgraph/<xx>/<key>/ dirs */
    uint32_t inductor_aotautograd; /* new inductor aotautograd/<key>/ dirs */
    uint32_t vllm_entries;         /* new vllm torch_compile_cache/<hash>/ dirs */
    uint64_t files, bytes;         /* regular files the pod wrote, their bytes */
    char names[CSI_SCRATCH_NAMES_MAX][CSI_SCRATCH_NAME_MAX + 1]; /* distinct, validated */
    size_t n_names;
    int truncated;    /* a name left out, or the walk stopped at a cap */
    uint64_t entries; /* entries looked at (not sent) */
};

/* The walk's caps (tests lower them); NULL: CSI_SCRATCH_ENTRIES_MAX, _DEPTH_MAX. */
struct csi_scratch_caps {
    uint64_t max_entries;
    unsigned max_depth;
};

/* Counts upper (a volume's scratch: the overlay's upper dir, or a private copy)
 * into s (zeroed first) in one walk that never follows a symlink (openat and
 * fstatat relative to open dirs) nor crosses into another filesystem.
 * lowers[0..n) are the dirs below it (groups, stores; NULL ones are skipped,
 * one that cannot be opened is an error): an entry whose path is in one of them is not new (an
 * opaque dir or a copied-up one is never a new kernel); whiteouts (0/0 char devices) and other
 * special files are skipped. root: the Triton cache is at upper itself (else triton/, inductor/,
 * vllm/). all_files: every regular file counts in files/bytes (an overlay's upper holds only what
 * the pod wrote), else only those not in a lower (a private copy). Kernel JSONs are read up to
 * CSI_SCRATCH_JSON_MAX bytes and parsed; their "name" kept when tkm_kernel_name_ok(). 0, or
 * a negative code with err. */
int csi_scratch_walk(struct csi_scratch *s, const char *upper, const char *const *lowers, size_t n,
                     int root, int all_files, const struct csi_scratch_caps *caps,
                     struct tkm_err *err);
/* Sets CSI_SCRATCH_XATTR on vol_dir at publish: the mode ("overlay", "copy",
 * "empty"), the layout (root) and the store dirs, so a restarted tkm-csi can
 * count at unpublish (-EEXIST when set already). */
int csi_scratch_state_write(const char *vol_dir, const char *mode, int root,
                            const char *const *stores, size_t n, struct tkm_err *err);
/* Counts the volume at vol_dir from its CSI_SCRATCH_XATTR: 1 counted into s,
 * 0 nothing to count (no such xattr: a strict volume, or one published by a
 * tkm-csi without the count), or a negative code with err. */
int csi_scratch_volume(const char *vol_dir, struct csi_scratch *s, struct tkm_err *err);
/* A one-line summary of s into out (reset), names escaped: "triton 2 kernels
 * (add_kernel, mm), inductor 0 fxgraph 0 aotautograd, vllm 0, 9 files 1234 bytes". */
int csi_scratch_summary(const struct csi_scratch *s, struct tkm_buf *out);

#endif
