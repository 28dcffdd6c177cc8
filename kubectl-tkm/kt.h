/*
 * kt.h - kubectl-tkm's model and rendering (library tkmkt, kubectl-tkm/):
 * what the apiserver returned (struct kt_world), the cache x node matrix
 * built from it (struct kt_matrix), and its text / JSON / YAML renderings.
 * Nothing here does I/O: main.c fetches, these functions are pure, so the
 * unit tests (tests/unit/test_kubectl_tkm.c) drive them with decoded objects.
 *
 * Ownership:
 *   - struct kt_world owns its decoded caches and node statuses
 *     (kt_world_release()); kt_world_add_*_take() take the decoded struct
 *     (zeroed on return, in every case).
 *   - struct kt_matrix borrows the world it was built from (valid while the
 *     world lives and is not changed); kt_matrix_release() frees its arrays.
 *   - Renderers append to a caller-owned struct tkm_buf; JSON results are
 *     new references (json_decref()).
 *   - Strings from the apiserver are borrowed; the text renderers replace
 *     control characters with '?' so an object cannot drive the terminal.
 */
#ifndef KT_H
#define KT_H

#include <stddef.h>
#include <jansson.h>

#include <tkm/api/v1alpha1.h>
#include <tkm/buf.h>
#include <tkm/err.h>
#include <tkm/gpu/compat.h>
#include <tkm/gpu/probe.h>
#include <tkm/triton/cache.h>

/* The state of one cache on one node, from the node's status entry. */
enum kt_state {
    KT_ABSENT = 0,   /* the node reports nothing for the cache */
    KT_PENDING,      /* reported at another digest than the pinned one, or not judged yet */
    KT_READY,        /* verified (or verification disabled / audit) and compatible */
    KT_EXTRACTED,    /* ready and extracted into the node's store */
    KT_IN_USE,       /* extracted and mounted by >= 1 pod (pods counted) */
    KT_INCOMPATIBLE, /* no GPU of the node can use it */
    KT_UNVERIFIED,   /* the signature did not verify (or not verified yet) */
    KT_FAILED,       /* the agent reports an error (pull, extraction, policy, ...) */
    KT_STATE_COUNT
};

/* "-", "pending", "ready", "extracted", "in use", "incompatible", "unverified", "failed". */
const char *kt_state_text(enum kt_state s);
/* The JSON/YAML spelling: "absent", "pending", "ready", "extracted", "inUse", ... */
const char *kt_state_json(enum kt_state s);
/* The ANSI SGR colour of a state ("32" green, ...), or NULL for none. */
const char *kt_state_color(enum kt_state s);

/* Judges one status entry (NULL: absent) for a cache pinned at pinned
 * (NULL: not pinned yet). verification_disabled: the cache's policy is
 * Disabled (verified: false is then expected). reason (n > 0) gets a
 * sentence for states other than ready/extracted/in use ("" otherwise). */
enum kt_state kt_state_of(const struct tkm_api_node_cache *e, const char *pinned,
                          int verification_disabled, char *reason, size_t n);

/* ---- what was read ------------------------------------------------------------ */

struct kt_world {
    struct tkm_api_cache *caches; /* owned */
    size_t n_caches, cap_caches;
    struct tkm_api_nodestatus *statuses; /* owned */
    size_t n_statuses, cap_statuses;
};

void kt_world_init(struct kt_world *w);
void kt_world_release(struct kt_world *w);
/* Take a decoded object (*c / *s zeroed on return). 0 or -ENOMEM (then the
 * object is released). */
int kt_world_add_cache_take(struct kt_world *w, struct tkm_api_cache *c);
int kt_world_add_status_take(struct kt_world *w, struct tkm_api_nodestatus *s);

/* ---- the matrix --------------------------------------------------------------- */

struct kt_node {
    const char *name;                       /* borrowed from the world */
    char gpu_type[96];                      /* "nvidia-h200", "nvidia-h200+amd-mi300x", "none" */
    char gpu_label[96];                     /* the short form for headers: "H200", "NO GPU" */
    int gpu_count;                          /* GPUs the node reports */
    const struct tkm_api_nodestatus *facts; /* the object its gpus[] came from, or NULL */
};

struct kt_cell {
    enum kt_state state;
    int pods;
    const struct tkm_api_node_cache *entry; /* borrowed, NULL when absent */
    const struct tkm_api_nodestatus *src;   /* the object holding the entry */
};

struct kt_row {
    const struct tkm_api_cache *cache; /* borrowed */
    struct kt_cell *cells;             /* n_nodes, owned */
    size_t counts[KT_STATE_COUNT];     /* nodes per state */
    int pods;                          /* pods using it, summed over nodes */
};

struct kt_matrix {
    struct kt_node *nodes; /* sorted by name, owned */
    size_t n_nodes;
    struct kt_row *rows; /* namespaced caches by (namespace, name), then cluster caches */
    size_t n_rows;
};

/* Builds the matrix: a column per node named by any node status object, a
 * row per cache. 0 or -ENOMEM. */
int kt_matrix_build(const struct kt_world *w, struct kt_matrix *m);
void kt_matrix_release(struct kt_matrix *m);
/* A sentence saying why a cell is what it is ("" for ready cells). */
void kt_cell_reason(const struct kt_row *r, const struct kt_cell *c, char *out, size_t n);
/* "tkc/name" or "tkcc/name" into out. */
void kt_cache_ref(const struct tkm_api_cache *c, char *out, size_t n);
/* The cache's condition status ("True", "False", "Unknown", "" when absent). */
const char *kt_cache_cond(const struct tkm_api_cache *c, const char *type,
                          const struct tkm_api_condition **out);

/* ---- rendering ----------------------------------------------------------------- */

enum kt_by {
    KT_BY_AUTO = 0, /* node columns when they fit the width, else by GPU type */
    KT_BY_NODE,
    KT_BY_GPU_TYPE,
};

struct kt_render_opts {
    size_t width;          /* the terminal width; 0: unlimited */
    int color;             /* 1: ANSI colours */
    enum kt_by by;         /* columns */
    int wide;              /* -o wide: DIGEST and IMAGE columns, every exception */
    int all_namespaces;    /* a NAMESPACE column */
    size_t max_exceptions; /* lines under a grouped table (0: 20); wide: all */
    int hits; /* kt_render_status sets it: a HIT column when some cache has compiles counted */
};

/* "9/10": the pods served cache c without compiling anything / the pods
 * served (status.compiles, summed by tkm-controller), or "-" when no pod was
 * counted. */
void kt_hit_text(const struct tkm_api_cache *c, char *out, size_t n);
/* The status matrix as text (a table, then notes; a HIT column after CACHE
 * when some cache has compiles counted). 0 or -ENOMEM. */
int kt_render_status(const struct kt_matrix *m, const struct kt_render_opts *o,
                     struct tkm_buf *out);
/* The "By variant:" table under the status (kt_render_status adds it): per
 * cache, the nodes where it is usable grouped by the variant they use, and
 * the nodes whose GPUs no variant fits grouped by GPU type and reason
 * (NoVariant, HostArchMismatch), from the node status entries. Nothing when
 * no node reports variants. 0 or -ENOMEM. */
int kt_render_variants(const struct kt_matrix *m, const struct kt_render_opts *o,
                       struct tkm_buf *out);
/* `kubectl tkm schedule`: the nodeSelector and nodeAffinity recipe (YAML
 * with comments) for pods of cache c, with its Node label (status.nodeLabel,
 * else tkm_api_node_label()). 0, -EINVAL, -ENOMEM. */
int kt_render_schedule(const struct tkm_api_cache *c, struct tkm_buf *out);

/* The status document (schema in docs/kubectl-tkm.md). NULL on ENOMEM. */
json_t *kt_status_json(const struct kt_matrix *m);

/* The display width of UTF-8 text (code points; every one is one column). */
size_t kt_text_width(const char *s);
/* The width to lay out for: cols_env (COLUMNS) when a number in 1..100000,
 * else the terminal's tty_cols when > 0, else 80 (piped). */
size_t kt_width_pick(const char *cols_env, int tty_cols);
/* "nvidia-h200" -> "H200", "amd-mi300x" -> "MI300X", "none" -> "NO GPU". */
void kt_gpu_label(const char *gpu_type, char *out, size_t n);

/* ---- why ------------------------------------------------------------------------ */

/* The chain for one cache (row r) on one node (column index node, or
 * (size_t)-1 for every node reporting it, summarised). Text. */
int kt_render_why(const struct kt_matrix *m, size_t row, size_t node, int color,
                  struct tkm_buf *out);
json_t *kt_why_json(const struct kt_matrix *m, size_t row, size_t node);

/* ---- check ---------------------------------------------------------------------- */

/* A node status's gpus[] entry as lib/gpu's struct tkm_gpu, as the agent
 * probed it (backend from the vendor, compute capability and CUDA version
 * parsed back). A GPU without arch is not usable (fail closed). */
void kt_gpu_from_api(const struct tkm_api_gpu *a, struct tkm_gpu *g);

struct kt_check_node {
    const struct kt_node *node;   /* borrowed from the matrix */
    int compatible;               /* >= 1 GPU compatible */
    struct tkm_compat_verdict *v; /* per GPU, owned */
    size_t n_v;
};

struct kt_check {
    struct kt_check_node *nodes; /* one per matrix node, owned */
    size_t n_nodes, n_compatible;
};

/* Judges every node of m with tkm_compat_check (the agent's function). */
int kt_check_run(const struct kt_matrix *m, const struct tkm_triton_summary *s, struct kt_check *c);
void kt_check_release(struct kt_check *c);
/* Text: nodes grouped by (GPU type, verdict, reason), node names listed
 * (all with wide, else the first 5). */
int kt_render_check(const struct kt_check *c, const char *image, const char *digest,
                    const struct tkm_triton_summary *s, const struct kt_render_opts *o,
                    struct tkm_buf *out);
json_t *kt_check_json(const struct kt_check *c, const char *image, const char *digest,
                      const struct tkm_triton_summary *s);

/* ---- yaml ---------------------------------------------------------------------- */

/* A JSON document as YAML (block style; strings that would read back as
 * another type are quoted). 0, -EINVAL, -ENOMEM. */
int kt_yaml_dump(const json_t *doc, struct tkm_buf *out);
/* JSON with two-space indent and a newline, keys in insertion order. */
int kt_json_dump(const json_t *doc, struct tkm_buf *out);

#endif
