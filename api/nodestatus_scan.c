/*
 * nodestatus_scan.c - a node status read without a jansson tree (see
 * tkm_api_nodestatus_scan() in tkm/api/v1alpha1.h).
 *
 * tkm_jscan validates the text (grammar, duplicate keys), then the checks of
 * nodestatus.c and json.c are applied to spans: each object is walked once,
 * picking the members it has a rule for. Pass 1 checks everything (so a bad
 * object never reaches the callback); pass 2 reads the entries again and
 * calls back. Strings are unescaped into the caller's scratch buffers.
 *
 * tkm_api_nodestatus_decode() is this scan (nothing else checks a node
 * status), then the validated text copied into the struct.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tkm/triton/cache.h>

#include "api-int.h"

#define KIND         "TritonKernelCacheNodeStatus"
#define KIND_CLUSTER "TritonKernelCacheNodeStatusCluster"
#define STR_MAX      (16u * 1024u * 1024u)

enum jt { J_ABSENT = 0, J_NULL, J_OBJ, J_ARR, J_STR, J_INT, J_REAL, J_BOOL };

/* One member picked out of an object. */
struct fld {
    enum jt t;
    size_t off, len;
};

void tkm_api_nsscan_init(struct tkm_api_nsscan *s)
{
    tkm_jscan_init(&s->js);
    tkm_buf_init(&s->head, STR_MAX);
    tkm_buf_init(&s->str, STR_MAX);
}

void tkm_api_nsscan_release(struct tkm_api_nsscan *s)
{
    if (!s)
        return;
    tkm_jscan_release(&s->js);
    tkm_buf_release(&s->head);
    tkm_buf_release(&s->str);
}

static enum jt jtype(const char *p, size_t off, size_t len)
{
    switch (p[off]) {
    case '{':
        return J_OBJ;
    case '[':
        return J_ARR;
    case '"':
        return J_STR;
    case 't':
    case 'f':
        return J_BOOL;
    case 'n':
        return J_NULL;
    default:
        for (size_t i = off; i < off + len; i++)
            if (p[i] == '.' || p[i] == 'e' || p[i] == 'E')
                return J_REAL;
        return J_INT;
    }
}

/* As json.c's type_name(). */
static const char *jt_name(enum jt t)
{
    static const char *const names[] = {"null",
                                        "null",
                                        "an object",
                                        "a list",
                                        "a string",
                                        "an integer",
                                        "a number with a fraction",
                                        "a boolean"};
    return names[t];
}

/* Picks the members of the object at off named in keys[0..nk) into out. */
static void pick(const char *p, size_t n, size_t off, const char *const *keys, size_t nk,
                 struct fld *out)
{
    struct tkm_jscan_member m;
    size_t pos = off;
    memset(out, 0, nk * sizeof *out);
    while (tkm_jscan_next(p, n, &pos, &m)) {
        for (size_t k = 0; k < nk; k++) {
            if (out[k].t == J_ABSENT && tkm_jscan_key_is(p, &m, keys[k])) {
                out[k] = (struct fld){jtype(p, m.val, m.val_len), m.val, m.val_len};
                break;
            }
        }
    }
}

/* null counts as absent, as json.c's get(). */
static int present(const struct fld *f)
{
    return f->t != J_ABSENT && f->t != J_NULL;
}

static int want(const struct fld *f, enum jt t, const char *path, const char *key,
                struct tkm_err *err)
{
    static const char *const want_names[] = {"",         "",           "an object", "a list",
                                             "a string", "an integer", "",          "a boolean"};
    if (!present(f) || f->t == t)
        return 0;
    return tkm_err_set(err, -EPROTO, "%s%s%s: expected %s, got %s", path, *path ? "." : "", key,
                       want_names[t], jt_name(f->t));
}

/* An integer member within [min, max] (json.c's tkm__api_int). */
static int want_int(const char *p, const struct fld *f, const char *path, const char *key,
                    int64_t min, int64_t max, int64_t *out, struct tkm_err *err)
{
    int rc = want(f, J_INT, path, key, err);
    *out = 0;
    if (rc || !present(f))
        return rc;
    /* validated: fits int64 */
    size_t i = f->off;
    int neg = p[i] == '-';
    uint64_t u = 0;
    for (i += (size_t)neg; i < f->off + f->len; i++)
        u = u * 10 + (uint64_t)(p[i] - '0');
    int64_t v = neg ? (int64_t)(0 - u) : (int64_t)u;
    if (v < min || v > max)
        return tkm_err_set(err, -EPROTO, "%s%s%s: %lld is out of range [%lld, %lld]", path,
                           *path ? "." : "", key, (long long)v, (long long)min, (long long)max);
    *out = v;
    return 0;
}

/* A list member of at most max entries (json.c's tkm__api_arr). */
static int want_arr(const char *p, size_t n, const struct fld *f, const char *path, const char *key,
                    size_t max, size_t *count, struct tkm_err *err)
{
    struct tkm_jscan_member m;
    size_t pos = f->off, c = 0;
    int rc = want(f, J_ARR, path, key, err);
    *count = 0;
    if (rc || !present(f))
        return rc;
    while (tkm_jscan_next(p, n, &pos, &m))
        c++;
    if (c > max)
        return tkm_err_set(err, -EPROTO, "%s%s%s: %zu entries, more than the %zu allowed", path,
                           *path ? "." : "", key, c, max);
    *count = c;
    return 0;
}

/* Appends the string member (or nothing) to b; *at gets its offset or
 * SIZE_MAX when absent. */
static int str_to(const char *p, const struct fld *f, struct tkm_buf *b, size_t *at,
                  struct tkm_err *err)
{
    *at = SIZE_MAX;
    if (!present(f))
        return 0;
    *at = b->len;
    int rc = tkm_jscan_str(p, f->off, f->len, b);
    return rc < 0 ? tkm_err_set(err, rc == -E2BIG ? -EPROTO : rc, "strings too long") : 0;
}

static const char *at_or_null(const struct tkm_buf *b, size_t at)
{
    return at == SIZE_MAX ? NULL : b->data + at;
}

/* ---- checks -------------------------------------------------------------------------- */

/* The members each object has a rule for (the checks and the tree read the same). */
static const char *const gpu_keys[] = {"id",
                                       "warpSize",
                                       "memoryBytes",
                                       "migMode",
                                       "gpuType",
                                       "vendor",
                                       "productName",
                                       "arch",
                                       "computeCapability",
                                       "driverVersion",
                                       "cudaDriverVersion",
                                       "rocmVersion",
                                       "uuid",
                                       "pciBusId"};
static const char *const group_keys[] = {"ids", "gpuType", "reason", "message"};
static const char *const pod_keys[] = {"namespace", "name", "uid", "volumeId"};
static const char *const entry_keys[] = {
    "digest",   "verified", "extracted",   "compatibleGPUs", "incompatibleGPUs",
    "pods",     "error",    "lastUpdated", "lastFailure",    "variants",
    "fallback", "compiles", "prefetch"};
#define N_ENTRY_KEYS (sizeof entry_keys / sizeof entry_keys[0])
static const char *const variant_keys[] = {"digest", "gpuIds"};
static const char *const failure_keys[] = {"reason", "message", "time"};
/* the counts first, in struct tkm_api_compiles' order */
static const char *const compiles_keys[] = {"podsServed",      "podsCompiled", "tritonKernels",
                                            "inductorEntries", "vllmEntries",  "bytes",
                                            "topKernels",      "since"};
static const char *const kernel_keys[] = {"name", "pods"};
static const char *const root_keys[] = {"apiVersion", "kind", "metadata", "status"};
static const char *const meta_keys[] = {"name",       "namespace",        "uid", "resourceVersion",
                                        "generation", "deletionTimestamp"};
static const char *const status_keys[] = {"nodeName", "gpus", "caches", "lastUpdated"};

static int gpu_check(const char *p, size_t n, size_t off, const char *path, struct tkm_err *err)
{
    const char *const *keys = gpu_keys;
    struct fld f[14];
    int64_t v;
    int rc;
    if (jtype(p, off, 1) != J_OBJ)
        return tkm_err_set(err, -EPROTO, "%s: expected an object", path);
    pick(p, n, off, keys, 14, f);
    if ((rc = want_int(p, &f[0], path, "id", INT32_MIN, INT32_MAX, &v, err)) ||
        (rc = want_int(p, &f[1], path, "warpSize", INT32_MIN, INT32_MAX, &v, err)) ||
        (rc = want_int(p, &f[2], path, "memoryBytes", 0, INT64_MAX, &v, err)) ||
        (rc = want(&f[3], J_BOOL, path, "migMode", err)))
        return rc;
    for (size_t k = 4; k < 14; k++)
        if ((rc = want(&f[k], J_STR, path, keys[k], err)))
            return rc;
    if (f[0].t == J_ABSENT) /* "id": null counts as there, as in gpu_decode() */
        return tkm_err_set(err, -EPROTO, "%s.id: missing", path);
    return 0;
}

/* A list of GPU ids (at most 64, each an integer >= 0 that fits int32). */
static int ids_check(const char *p, size_t n, const struct fld *f, const char *path,
                     const char *key, size_t *count, struct tkm_err *err)
{
    struct tkm_jscan_member id;
    size_t pos = f->off, k = 0;
    int rc = want_arr(p, n, f, path, key, 64, count, err);
    if (rc || !*count)
        return rc;
    for (; tkm_jscan_next(p, n, &pos, &id); k++) {
        struct fld x = {jtype(p, id.val, id.val_len), id.val, id.val_len};
        int64_t v = -1;
        if (x.t == J_INT)
            want_int(p, &x, "", "", INT64_MIN, INT64_MAX, &v, NULL);
        if (x.t != J_INT || v < 0 || v > INT32_MAX)
            return tkm_err_set(err, -EPROTO, "%s.%s[%zu]: expected a GPU id (an integer >= 0)",
                               path, key, k);
    }
    return 0;
}

/* A string member of at most max bytes, appended to b (*at: its offset, SIZE_MAX when absent). */
static int str_max(const char *p, const struct fld *f, const char *path, const char *key,
                   size_t max, struct tkm_buf *b, size_t *at, struct tkm_err *err)
{
    int rc = want(f, J_STR, path, key, err);
    if (rc || (rc = str_to(p, f, b, at, err)) || *at == SIZE_MAX)
        return rc;
    if (strlen(b->data + *at) > max)
        return tkm_err_set(err, -EPROTO, "%s.%s: longer than %zu bytes", path, key, max);
    return 0;
}

/* compatibleGPUs / incompatibleGPUs. With s (incompatible ones): each
 * group's gpuType and reason go to s->str (offsets in s->grp_at), the first
 * group's reason and message too (offsets in at[0..1]). */
static int groups_check(const char *p, size_t n, const struct fld *f, const char *path,
                        const char *key, struct tkm_api_nsscan *s, size_t *count, size_t at[2],
                        struct tkm_err *err)
{
    const char *const *keys = group_keys;
    struct tkm_jscan_member m;
    struct fld g[4];
    char gp[512];
    size_t pos = f->off, i = 0, nids;
    int rc = want_arr(p, n, f, path, key, TKM_API_NS_GROUPS_MAX, count, err);
    at[0] = at[1] = SIZE_MAX;
    if (rc || !*count)
        return rc;
    for (; tkm_jscan_next(p, n, &pos, &m); i++) {
        snprintf(gp, sizeof gp, "%s.%s[%zu]", path, key, i);
        if (jtype(p, m.val, m.val_len) != J_OBJ)
            return tkm_err_set(err, -EPROTO, "%s: expected an object", gp);
        pick(p, n, m.val, keys, 4, g);
        if ((rc = ids_check(p, n, &g[0], gp, "ids", &nids, err)) ||
            (rc = want(&g[1], J_STR, gp, "gpuType", err)) ||
            (s && (rc = want(&g[2], J_STR, gp, "reason", err))) ||
            (s && (rc = want(&g[3], J_STR, gp, "message", err))))
            return rc;
        if (!s)
            continue;
        s->grp[i].n_ids = nids;
        if ((rc = str_to(p, &g[1], &s->str, &s->grp_at[i][0], err)) ||
            (rc = str_to(p, &g[2], &s->str, &s->grp_at[i][1], err)))
            return rc;
        if (i == 0 && ((rc = str_to(p, &g[2], &s->str, &at[0], err)) ||
                       (rc = str_to(p, &g[3], &s->str, &at[1], err))))
            return rc;
    }
    return 0;
}

/* variants[]: the CRD's bounds (digest 128 bytes, 64 ids); the digests go
 * to s->str (offsets in s->var_at). */
static int variants_check(const char *p, size_t n, const struct fld *f, const char *path,
                          struct tkm_api_nsscan *s, size_t *count, struct tkm_err *err)
{
    struct tkm_jscan_member m;
    struct fld g[2];
    char vp[512];
    size_t pos = f->off, i = 0;
    int rc = want_arr(p, n, f, path, "variants", TKM_API_NS_VARIANTS_MAX, count, err);
    if (rc || !*count)
        return rc;
    for (; tkm_jscan_next(p, n, &pos, &m); i++) {
        struct tkm_api_nsscan_variant *v = &s->var[i];
        snprintf(vp, sizeof vp, "%s.variants[%zu]", path, i);
        if (jtype(p, m.val, m.val_len) != J_OBJ)
            return tkm_err_set(err, -EPROTO, "%s: expected an object", vp);
        pick(p, n, m.val, variant_keys, 2, g);
        if ((rc = str_max(p, &g[0], vp, "digest", 128, &s->str, &s->var_at[i], err)) ||
            (rc = ids_check(p, n, &g[1], vp, "gpuIds", &v->n_gpu_ids, err)))
            return rc;
    }
    return 0;
}

static int pods_check(const char *p, size_t n, const struct fld *f, const char *path, size_t *count,
                      struct tkm_err *err)
{
    const char *const *keys = pod_keys;
    struct tkm_jscan_member m;
    struct fld g[4];
    char pp[512];
    size_t pos = f->off, i = 0;
    int rc = want_arr(p, n, f, path, "pods", 1024, count, err);
    if (rc || !*count)
        return rc;
    for (; tkm_jscan_next(p, n, &pos, &m); i++) {
        snprintf(pp, sizeof pp, "%s.pods[%zu]", path, i);
        if (jtype(p, m.val, m.val_len) != J_OBJ)
            return tkm_err_set(err, -EPROTO, "%s: expected an object", pp);
        pick(p, n, m.val, keys, 4, g);
        for (size_t k = 0; k < 4; k++)
            if ((rc = want(&g[k], J_STR, pp, keys[k], err)))
                return rc;
    }
    return 0;
}

/* lastFailure: an object of three strings. */
static int failure_check(const char *p, size_t n, const struct fld *f, const char *path,
                         struct tkm_err *err)
{
    struct fld g[3];
    char fp[420];
    int rc = want(f, J_OBJ, path, "lastFailure", err);
    if (rc || !present(f))
        return rc;
    snprintf(fp, sizeof fp, "%s.lastFailure", path);
    pick(p, n, f->off, failure_keys, 3, g);
    for (size_t k = 0; k < 3; k++)
        if ((rc = want(&g[k], J_STR, fp, failure_keys[k], err)))
            return rc;
    return 0;
}

/* compiles: counts >= 0, at most 10 topKernels named [A-Za-z0-9_.-]{1,128}
 * with pods >= 0, since RFC 3339; into c (the names and since go to s->str,
 * offsets in s->top_at and s->since_at). */
static int compiles_check(const char *p, size_t n, const struct fld *f, const char *path,
                          struct tkm_api_nsscan *s, struct tkm_api_compiles *c, struct tkm_err *err)
{
    int64_t *counts[] = {&c->pods_served,      &c->pods_compiled, &c->triton_kernels,
                         &c->inductor_entries, &c->vllm_entries,  &c->bytes};
    struct tkm_jscan_member m;
    struct fld g[8], k[2];
    char cp[420], kp[460];
    size_t pos, i = 0;
    int rc = want(f, J_OBJ, path, "compiles", err);
    s->since_at = SIZE_MAX;
    if (rc || !present(f))
        return rc;
    snprintf(cp, sizeof cp, "%s.compiles", path);
    pick(p, n, f->off, compiles_keys, 8, g);
    for (size_t j = 0; j < 6; j++)
        if ((rc = want_int(p, &g[j], cp, compiles_keys[j], 0, INT64_MAX, counts[j], err)))
            return rc;
    if ((rc = want_arr(p, n, &g[6], cp, "topKernels", TKM_API_COMPILES_TOP, &c->n_top, err)) ||
        (rc = str_max(p, &g[7], cp, "since", 64, &s->str, &s->since_at, err)))
        return rc;
    if (s->since_at != SIZE_MAX && !tkm_api_time_ok(s->str.data + s->since_at))
        return tkm_err_set(err, -EPROTO, "%s.since: \"%.40s\" is not an RFC 3339 time", cp,
                           s->str.data + s->since_at);
    for (pos = g[6].off; c->n_top && tkm_jscan_next(p, n, &pos, &m); i++) {
        snprintf(kp, sizeof kp, "%s.topKernels[%zu]", cp, i);
        if (jtype(p, m.val, m.val_len) != J_OBJ)
            return tkm_err_set(err, -EPROTO, "%s: expected an object", kp);
        pick(p, n, m.val, kernel_keys, 2, k);
        if ((rc =
                 str_max(p, &k[0], kp, "name", TKM_KERNEL_NAME_MAX, &s->str, &s->top_at[i], err)) ||
            (rc = want_int(p, &k[1], kp, "pods", 0, INT64_MAX, &s->top[i].pods, err)))
            return rc;
        if (s->top_at[i] == SIZE_MAX ||
            !tkm_kernel_name_ok(s->str.data + s->top_at[i], strlen(s->str.data + s->top_at[i])))
            return tkm_err_set(err, -EPROTO, "%s.name: expected [A-Za-z0-9_.-]{1,128}", kp);
    }
    c->present = 1;
    return 0;
}

/* Offsets in s->str to pointers (nothing more is appended for this entry). */
static void entry_lists(struct tkm_api_nsscan *s, struct tkm_api_nsscan_entry *e)
{
    for (size_t i = 0; i < e->n_incompatible; i++) {
        s->grp[i].gpu_type = at_or_null(&s->str, s->grp_at[i][0]);
        s->grp[i].reason = at_or_null(&s->str, s->grp_at[i][1]);
    }
    for (size_t i = 0; i < e->n_variants; i++)
        s->var[i].digest = at_or_null(&s->str, s->var_at[i]);
    e->incompatible = s->grp;
    e->variants = s->var;
    for (size_t i = 0; i < e->compiles.n_top; i++)
        s->top[i].name = s->str.data + s->top_at[i];
    e->compiles.top = e->compiles.n_top ? s->top : NULL;
    e->compiles.since = (char *)at_or_null(&s->str, s->since_at);
}

/* "Waiting" / "Pulling" (status.caches.<name>.prefetch); -EPROTO otherwise. */
static int prefetch_parse(const char *s, enum tkm_api_prefetch_state *out)
{
    if (strcmp(s, "Waiting") == 0)
        *out = TKM_API_PREFETCH_WAITING;
    else if (strcmp(s, "Pulling") == 0)
        *out = TKM_API_PREFETCH_PULLING;
    else
        return -EPROTO;
    return 0;
}

/* One status.caches member: checked, and read into e (strings in s->str,
 * which is reset first). */
static int entry_read(const char *p, size_t n, const struct tkm_jscan_member *m,
                      struct tkm_api_nsscan *s, struct tkm_api_nsscan_entry *e, struct tkm_err *err)
{
    struct tkm_buf *b = &s->str;
    struct fld f[N_ENTRY_KEYS];
    char path[400];
    size_t at_name, at_digest, at_error, at_fallback, at_prefetch, at_why[2], dummy[2];
    const char *pf;
    int rc;
    memset(e, 0, sizeof *e);
    tkm_buf_reset(b);
    at_name = 0;
    if ((rc = tkm_jscan_str(p, m->key, m->key_len, b)) < 0)
        return tkm_err_set(err, rc == -E2BIG ? -EPROTO : rc, "status.caches: name too long");
    snprintf(path, sizeof path, "status.caches[\"%.300s\"]", b->data);
    if (jtype(p, m->val, m->val_len) != J_OBJ)
        return tkm_err_set(err, -EPROTO, "%s: expected an object", path);
    pick(p, n, m->val, entry_keys, N_ENTRY_KEYS, f);
    if ((rc = want(&f[0], J_STR, path, "digest", err)) ||
        (rc = want(&f[1], J_BOOL, path, "verified", err)) ||
        (rc = want(&f[2], J_BOOL, path, "extracted", err)) ||
        (rc = groups_check(p, n, &f[3], path, "compatibleGPUs", NULL, &e->n_compatible, dummy,
                           err)) ||
        (rc = groups_check(p, n, &f[4], path, "incompatibleGPUs", s, &e->n_incompatible, at_why,
                           err)) ||
        (rc = pods_check(p, n, &f[5], path, &e->n_pods, err)) ||
        (rc = want(&f[6], J_STR, path, "error", err)) ||
        (rc = want(&f[7], J_STR, path, "lastUpdated", err)) ||
        (rc = failure_check(p, n, &f[8], path, err)) ||
        (rc = variants_check(p, n, &f[9], path, s, &e->n_variants, err)) ||
        (rc = want(&f[10], J_STR, path, "fallback", err)) ||
        (rc = compiles_check(p, n, &f[11], path, s, &e->compiles, err)) ||
        (rc = want(&f[12], J_STR, path, "prefetch", err)) ||
        (rc = str_to(p, &f[10], b, &at_fallback, err)) ||
        (rc = str_to(p, &f[12], b, &at_prefetch, err)) ||
        (rc = str_to(p, &f[0], b, &at_digest, err)) || (rc = str_to(p, &f[6], b, &at_error, err)))
        return rc;
    e->fallback = at_or_null(b, at_fallback);
    if (e->fallback && strcmp(e->fallback, "Empty") != 0)
        return tkm_err_set(err, -EPROTO, "%s.fallback: \"%.32s\", expected Empty", path,
                           e->fallback);
    if ((pf = at_or_null(b, at_prefetch)) && prefetch_parse(pf, &e->prefetch) < 0)
        return tkm_err_set(err, -EPROTO, "%s.prefetch: \"%.32s\", expected Waiting or Pulling",
                           path, pf);
    e->verified = present(&f[1]) && p[f[1].off] == 't';
    e->extracted = present(&f[2]) && p[f[2].off] == 't';
    e->name = b->data + at_name;
    e->digest = at_or_null(b, at_digest);
    e->error = at_or_null(b, at_error);
    e->incompatible_reason = at_or_null(b, at_why[0]);
    e->incompatible_message = at_or_null(b, at_why[1]);
    entry_lists(s, e);
    return 0;
}

/* Offsets in s->head of the head's strings (SIZE_MAX: absent): pointers
 * are taken once nothing more is appended (the buffer may move). */
struct hoff {
    size_t at[5]; /* name, ns, uid, resourceVersion, nodeName */
};

static void head_set(const struct tkm_buf *b, const struct hoff *o, struct tkm_api_nsscan_head *h)
{
    h->name = at_or_null(b, o->at[0]);
    h->ns = at_or_null(b, o->at[1]);
    h->uid = at_or_null(b, o->at[2]);
    h->resource_version = at_or_null(b, o->at[3]);
    h->node_name = at_or_null(b, o->at[4]);
}

/* kind, apiVersion and metadata (json.c's tkm__api_parse and meta_decode);
 * strings into s->head. */
static int head_read(struct tkm_api_nsscan *s, const char *p, size_t n, size_t root,
                     struct tkm_api_nsscan_head *h, struct hoff *o, struct fld *status,
                     struct tkm_err *err)
{
    struct fld r[4], md[6];
    size_t at[2];
    int64_t gen;
    int rc;
    for (size_t i = 0; i < 5; i++)
        o->at[i] = SIZE_MAX;
    pick(p, n, root, root_keys, 4, r);
    if ((rc = want(&r[0], J_STR, "", "apiVersion", err)) ||
        (rc = want(&r[1], J_STR, "", "kind", err)) ||
        (rc = str_to(p, &r[0], &s->head, &at[0], err)) ||
        (rc = str_to(p, &r[1], &s->head, &at[1], err)))
        return rc;
    const char *av = at_or_null(&s->head, at[0]), *k = at_or_null(&s->head, at[1]);
    if (av && strcmp(av, TKM_API_GROUP_VERSION) != 0)
        return tkm_err_set(err, -EPROTO, "apiVersion: \"%s\", expected \"%s\"", av,
                           TKM_API_GROUP_VERSION);
    if (k && strcmp(k, KIND) != 0 && strcmp(k, KIND_CLUSTER) != 0)
        return tkm_err_set(err, -EPROTO, "kind: \"%s\", expected %s or %s", k, KIND, KIND_CLUSTER);
    int cluster = k && strcmp(k, KIND_CLUSTER) == 0;
    if ((rc = want(&r[2], J_OBJ, "", "metadata", err)))
        return rc;
    if (!present(&r[2]))
        return tkm_err_set(err, -EPROTO, "metadata: missing");
    pick(p, n, r[2].off, meta_keys, 6, md);
    if ((rc = want(&md[0], J_STR, "metadata", "name", err)))
        return rc;
    if (!present(&md[0]))
        return tkm_err_set(err, -EPROTO, "metadata.name: missing");
    if ((rc = want(&md[1], J_STR, "metadata", "namespace", err)) ||
        (rc = want(&md[2], J_STR, "metadata", "uid", err)) ||
        (rc = want(&md[3], J_STR, "metadata", "resourceVersion", err)) ||
        (rc = want_int(p, &md[4], "metadata", "generation", 0, INT64_MAX, &gen, err)) ||
        (rc = want(&md[5], J_STR, "metadata", "deletionTimestamp", err)))
        return rc;
    for (size_t i = 0; i < 4; i++)
        if ((rc = str_to(p, &md[i], &s->head, &o->at[i], err)))
            return rc;
    /* objects from a typed list or watch may lack kind: the namespace says */
    h->cluster = k ? cluster : !present(&md[1]);
    *status = r[3];
    return 0;
}

/* status: everything but the entries' callback. */
static int status_check(struct tkm_api_nsscan *s, const char *p, size_t n, const struct fld *st,
                        struct tkm_api_nsscan_head *h, struct hoff *o, struct fld *caches,
                        struct tkm_err *err)
{
    struct tkm_jscan_member m;
    struct tkm_api_nsscan_entry e;
    struct fld f[4];
    char gp[64];
    size_t ngpus, pos, i = 0;
    int rc;
    memset(caches, 0, sizeof *caches);
    if ((rc = want(st, J_OBJ, "", "status", err)) || !present(st))
        return rc;
    pick(p, n, st->off, status_keys, 4, f);
    if ((rc = want(&f[0], J_STR, "status", "nodeName", err)) ||
        (rc = want_arr(p, n, &f[1], "status", "gpus", 64, &ngpus, err)))
        return rc;
    for (pos = f[1].off; ngpus && tkm_jscan_next(p, n, &pos, &m); i++) {
        snprintf(gp, sizeof gp, "status.gpus[%zu]", i);
        if ((rc = gpu_check(p, n, m.val, gp, err)))
            return rc;
    }
    if ((rc = want(&f[2], J_OBJ, "status", "caches", err)))
        return rc;
    if (present(&f[2])) {
        for (pos = f[2].off; tkm_jscan_next(p, n, &pos, &m);)
            h->n_caches++;
        if (h->n_caches > 512)
            return tkm_err_set(
                err, -EPROTO, "status.caches: %zu entries, more than the 512 allowed", h->n_caches);
        for (pos = f[2].off; tkm_jscan_next(p, n, &pos, &m);)
            if ((rc = entry_read(p, n, &m, s, &e, err)))
                return rc;
        *caches = f[2];
    }
    if ((rc = want(&f[3], J_STR, "status", "lastUpdated", err)) ||
        (rc = str_to(p, &f[0], &s->head, &o->at[4], err)))
        return rc;
    return 0;
}

int tkm_api_nodestatus_scan(struct tkm_api_nsscan *s, const char *json, size_t len,
                            struct tkm_api_nsscan_head *head, tkm_api_nsscan_cb entry, void *data,
                            struct tkm_err *err)
{
    struct tkm_api_nsscan_head h0, *h = head ? head : &h0;
    struct tkm_jscan_member m;
    struct tkm_api_nsscan_entry e;
    struct fld st = {0}, caches = {0};
    struct hoff o = {{SIZE_MAX, SIZE_MAX, SIZE_MAX, SIZE_MAX, SIZE_MAX}};
    size_t root, pos;
    int rc;
    memset(h, 0, sizeof *h);
    tkm_buf_reset(&s->head);
    root = tkm_jscan_ws(json, len, 0);
    if ((rc = tkm_jscan_validate(&s->js, json, len, KIND, err)) == 0 &&
        jtype(json, root, 1) != J_OBJ)
        rc = tkm_err_set(err, -EPROTO, "%s: expected a JSON object, got %s", KIND,
                         jt_name(jtype(json, root, len - root)));
    if (rc == 0 && (rc = head_read(s, json, len, root, h, &o, &st, err)) == 0)
        rc = status_check(s, json, len, &st, h, &o, &caches, err);
    if (rc) {
        const char *name = at_or_null(&s->head, o.at[0]);
        tkm_err_prefix(err, "%s %s", h->cluster ? KIND_CLUSTER : KIND, name ? name : "(unnamed)");
        memset(h, 0, sizeof *h);
        return rc;
    }
    head_set(&s->head, &o, h);
    if (!present(&caches) || !entry)
        return 0;
    for (pos = caches.off; tkm_jscan_next(json, len, &pos, &m);) {
        if ((rc = entry_read(json, len, &m, s, &e, err)))
            return rc;
        if ((rc = entry(h, &e, data)))
            return rc;
    }
    return 0;
}

/* ---- the tree form: the scan's verdict, then the values copied out -------------------- */

/* Reading validated text: only memory can fail (rc). */
struct tree {
    const char *p;
    size_t n;
    struct tkm_buf *tmp;
    int rc;
};

static char *t_str(struct tree *t, const struct fld *f)
{
    size_t at;
    char *s = NULL;
    if (!present(f))
        return NULL;
    tkm_buf_reset(t->tmp);
    if (str_to(t->p, f, t->tmp, &at, NULL) < 0 || !(s = strdup(t->tmp->data + at)))
        t->rc = -ENOMEM;
    return s;
}

static int64_t t_int(struct tree *t, const struct fld *f)
{
    int64_t v = 0;
    want_int(t->p, f, "", "", INT64_MIN, INT64_MAX, &v, NULL);
    return v;
}

/* calloc of a validated list's entries (NULL for none). */
static void *t_list(struct tree *t, const struct fld *f, size_t size, size_t *count)
{
    void *v = NULL;
    want_arr(t->p, t->n, f, "", "", SIZE_MAX, count, NULL);
    if (*count && !(v = calloc(*count, size)))
        t->rc = -ENOMEM;
    return v;
}

static void gpu_tree(struct tree *t, size_t off, struct tkm_api_gpu *g)
{
    struct fld f[14];
    char **s[] = {&g->gpu_type,
                  &g->vendor,
                  &g->product_name,
                  &g->arch,
                  &g->compute_capability,
                  &g->driver_version,
                  &g->cuda_driver_version,
                  &g->rocm_version,
                  &g->uuid,
                  &g->pci_bus_id};
    pick(t->p, t->n, off, gpu_keys, 14, f);
    g->id = (int32_t)t_int(t, &f[0]);
    g->warp_size = (int32_t)t_int(t, &f[1]);
    g->memory_bytes = t_int(t, &f[2]);
    g->mig_mode = present(&f[3]) && t->p[f[3].off] == 't';
    for (size_t k = 0; k < 10; k++)
        *s[k] = t_str(t, &f[4 + k]);
}

/* A validated list of GPU ids into *ids / *n. */
static void ids_tree(struct tree *t, const struct fld *f, int32_t **ids, size_t *n)
{
    struct tkm_jscan_member id;
    size_t nids, ipos;
    if (!(*ids = t_list(t, f, sizeof **ids, &nids)))
        return;
    for (ipos = f->off; *n < nids && tkm_jscan_next(t->p, t->n, &ipos, &id);) {
        struct fld x = {J_INT, id.val, id.val_len};
        (*ids)[(*n)++] = (int32_t)t_int(t, &x);
    }
}

static void groups_tree(struct tree *t, const struct fld *f, int with_reason,
                        struct tkm_api_gpu_group **out, size_t *n)
{
    struct tkm_jscan_member m;
    struct fld g[4];
    size_t pos = f->off, cnt;
    if (!(*out = t_list(t, f, sizeof **out, &cnt)))
        return;
    while (*n < cnt && tkm_jscan_next(t->p, t->n, &pos, &m)) {
        struct tkm_api_gpu_group *gr = &(*out)[(*n)++];
        pick(t->p, t->n, m.val, group_keys, 4, g);
        gr->gpu_type = t_str(t, &g[1]);
        gr->reason = with_reason ? t_str(t, &g[2]) : NULL;
        gr->message = with_reason ? t_str(t, &g[3]) : NULL;
        ids_tree(t, &g[0], &gr->ids, &gr->n_ids);
    }
}

static void variants_tree(struct tree *t, const struct fld *f, struct tkm_api_node_cache *c)
{
    struct tkm_jscan_member m;
    struct fld g[2];
    size_t pos = f->off, cnt;
    if (!(c->variants = t_list(t, f, sizeof *c->variants, &cnt)))
        return;
    while (c->n_variants < cnt && tkm_jscan_next(t->p, t->n, &pos, &m)) {
        struct tkm_api_variant_use *v = &c->variants[c->n_variants++];
        pick(t->p, t->n, m.val, variant_keys, 2, g);
        v->digest = t_str(t, &g[0]);
        ids_tree(t, &g[1], &v->gpu_ids, &v->n_gpu_ids);
    }
}

static void compiles_tree(struct tree *t, const struct fld *f, struct tkm_api_compiles *c)
{
    int64_t *counts[] = {&c->pods_served,      &c->pods_compiled, &c->triton_kernels,
                         &c->inductor_entries, &c->vllm_entries,  &c->bytes};
    struct tkm_jscan_member m;
    struct fld g[8], k[2];
    size_t pos, cnt;
    if (!present(f))
        return;
    c->present = 1;
    pick(t->p, t->n, f->off, compiles_keys, 8, g);
    for (size_t j = 0; j < 6; j++)
        *counts[j] = t_int(t, &g[j]);
    c->since = t_str(t, &g[7]);
    if (!(c->top = t_list(t, &g[6], sizeof *c->top, &cnt)))
        return;
    for (pos = g[6].off; c->n_top < cnt && tkm_jscan_next(t->p, t->n, &pos, &m);) {
        struct tkm_api_kernel_count *kc = &c->top[c->n_top++];
        pick(t->p, t->n, m.val, kernel_keys, 2, k);
        kc->name = t_str(t, &k[0]);
        kc->pods = t_int(t, &k[1]);
    }
}

static void cache_tree(struct tree *t, const struct tkm_jscan_member *m,
                       struct tkm_api_node_cache *c)
{
    struct tkm_jscan_member pm;
    struct fld f[N_ENTRY_KEYS], g[4];
    size_t pos, cnt;
    tkm_buf_reset(t->tmp);
    if (tkm_jscan_str(t->p, m->key, m->key_len, t->tmp) < 0 || !(c->name = strdup(t->tmp->data)))
        t->rc = -ENOMEM;
    pick(t->p, t->n, m->val, entry_keys, N_ENTRY_KEYS, f);
    c->digest = t_str(t, &f[0]);
    c->verified = present(&f[1]) && t->p[f[1].off] == 't';
    c->extracted = present(&f[2]) && t->p[f[2].off] == 't';
    groups_tree(t, &f[3], 0, &c->compatible, &c->n_compatible);
    groups_tree(t, &f[4], 1, &c->incompatible, &c->n_incompatible);
    c->error = t_str(t, &f[6]);
    c->last_updated = t_str(t, &f[7]);
    variants_tree(t, &f[9], c);
    c->fallback = t_str(t, &f[10]);
    if (present(&f[12])) { /* checked by the scan */
        char *pf = t_str(t, &f[12]);
        if (pf)
            prefetch_parse(pf, &c->prefetch);
        free(pf);
    }
    compiles_tree(t, &f[11], &c->compiles);
    if (present(&f[8])) {
        pick(t->p, t->n, f[8].off, failure_keys, 3, g);
        c->fail_reason = t_str(t, &g[0]);
        c->fail_message = t_str(t, &g[1]);
        c->fail_time = t_str(t, &g[2]);
    }
    if (!(c->pods = t_list(t, &f[5], sizeof *c->pods, &cnt)))
        return;
    for (pos = f[5].off; c->n_pods < cnt && tkm_jscan_next(t->p, t->n, &pos, &pm);) {
        struct tkm_api_pod_ref *r = &c->pods[c->n_pods++];
        pick(t->p, t->n, pm.val, pod_keys, 4, g);
        r->ns = t_str(t, &g[0]);
        r->name = t_str(t, &g[1]);
        r->uid = t_str(t, &g[2]);
        r->volume_id = t_str(t, &g[3]);
    }
}

static int cache_cmp(const void *a, const void *b)
{
    return strcmp(((const struct tkm_api_node_cache *)a)->name,
                  ((const struct tkm_api_node_cache *)b)->name);
}

/* metadata and status of the validated object at root into out. */
static void nodestatus_tree(struct tree *t, size_t root, struct tkm_api_nodestatus *out)
{
    struct tkm_jscan_member m;
    struct fld r[4], md[6], f[4];
    struct tkm_api_node_status *st = &out->status;
    size_t pos, cnt;
    pick(t->p, t->n, root, root_keys, 4, r);
    pick(t->p, t->n, r[2].off, meta_keys, 6, md);
    out->meta.name = t_str(t, &md[0]);
    out->meta.ns = t_str(t, &md[1]);
    out->meta.uid = t_str(t, &md[2]);
    out->meta.resource_version = t_str(t, &md[3]);
    out->meta.generation = t_int(t, &md[4]);
    out->meta.deletion_timestamp = t_str(t, &md[5]);
    if (!present(&r[3]))
        return;
    pick(t->p, t->n, r[3].off, status_keys, 4, f);
    st->node_name = t_str(t, &f[0]);
    st->last_updated = t_str(t, &f[3]);
    if ((st->gpus = t_list(t, &f[1], sizeof *st->gpus, &cnt)))
        for (pos = f[1].off; st->n_gpus < cnt && tkm_jscan_next(t->p, t->n, &pos, &m);)
            gpu_tree(t, m.val, &st->gpus[st->n_gpus++]);
    if (!present(&f[2]))
        return;
    for (cnt = 0, pos = f[2].off; tkm_jscan_next(t->p, t->n, &pos, &m);)
        cnt++;
    if (cnt && !(st->caches = calloc(cnt, sizeof *st->caches))) {
        t->rc = -ENOMEM;
        return;
    }
    for (pos = f[2].off; st->n_caches < cnt && tkm_jscan_next(t->p, t->n, &pos, &m);)
        cache_tree(t, &m, &st->caches[st->n_caches++]);
    if (st->n_caches > 1)
        qsort(st->caches, st->n_caches, sizeof *st->caches, cache_cmp);
}

int tkm_api_nodestatus_decode(const char *json, size_t len, struct tkm_api_nodestatus *out,
                              struct tkm_err *err)
{
    struct tkm_api_nsscan s;
    struct tkm_api_nsscan_head h;
    int rc;
    memset(out, 0, sizeof *out);
    if (memchr(json, 0, len))
        return tkm_err_set(err, -EPROTO, "%s (unnamed): %s: not JSON: a NUL byte", KIND, KIND);
    tkm_api_nsscan_init(&s);
    if ((rc = tkm_api_nodestatus_scan(&s, json, len, &h, NULL, NULL, err)) == 0) {
        struct tree t = {json, len, &s.str, 0};
        out->cluster = h.cluster;
        nodestatus_tree(&t, tkm_jscan_ws(json, len, 0), out);
        if ((rc = t.rc) != 0) {
            tkm_err_set(err, rc, "%s %s: out of memory", h.cluster ? KIND_CLUSTER : KIND, h.name);
            tkm_api_nodestatus_release(out);
        }
    }
    tkm_api_nsscan_release(&s);
    return rc;
}
