/*
 * ctrl_rec.c - the cache reconciler.
 *
 * One queue key per cache ("c:ns/name", "c:/name" for the cluster kind). A
 * reconcile is a chain of steps; each step either finds its result in
 * memory (struct ctrl_cache) or SQLite, or starts ONE asynchronous operation
 * whose callback runs the chain again from the top with the current object
 * from the informer. The key stays "processing" meanwhile, so a cache is
 * never worked on twice at once, and an edit made during a step is seen by
 * the next one (a result computed for an old spec is kept only under the
 * inputs it was computed for).
 *
 *   finalizer -> pin (resolve) -> re-resolve annotation -> verify (policy,
 *   SQLite, registry) -> summary (inspect) -> status
 *
 * The registry steps are verify jobs (<tkm/api/verify.h>, shared with
 * tkm-agent): each reads the cache's pull Secrets, takes the session of the
 * controller's one pool and runs its part of the pipeline; what the
 * controller does with the result (pin, SQLite, conditions, Events) is here.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdarg.h>
#include <string.h>
#include <time.h>

#include <tkm/backoff.h>
#include <tkm/log.h>
#include <tkm/oci/digest.h>
#include <tkm/oci/ref.h>
#include <tkm/api/policy.h>
#include <tkm/api/verify.h>
#include <k8s/events.h>
#include <k8s/informer.h>
#include <k8s/workqueue.h>

#include "ctrl-int.h"

/* A failure to remember until its retry: why is "Reason\0message" (owned,
 * NULL when none). */
struct fail {
    int rc;
    unsigned n;
    unsigned cfg_gen; /* ctrl.cfg_gen when it failed: a new tkm-config retries at once */
    uint64_t retry_at;
    char *why;
};

/* An Event to emit once the status write that carries its transition is
 * answered: exists only between the two (msg owned). */
struct pending_event {
    const char *type, *reason; /* static strings */
    char *msg;
};

/* The reconciler's memory of one cache: ~400 bytes, plus strings sized to
 * their content; what only one step or one registry operation needs is
 * allocated for it and freed when it is over. */
struct ctrl_cache {
    struct ctrl *c;
    struct ctrl_cidx *cidx;
    char *qkey;            /* owned: "c:ns/name\0ns" ("c:/name\0" for the cluster kind) */
    const char *name, *ns; /* borrowed: into qkey's block */
    char *uid;             /* owned, NULL before the first view */
    uint64_t t0;
    int cluster;
    int rr_state; /* 0 none, 1 re-resolved (annotation to remove), 2 removed */
    /* the pin; pin_f also holds a failure to read the pull Secrets (a Secret
     * created after the cache is the usual order of `kubectl apply -f dir/`):
     * read again at pin_f.retry_at */
    char *pin_image;
    char pin[CTRL_DIGEST_MAX];
    char *want_image;
    struct fail pin_f;
    /* verification: ver_key ("pin|generation|config rv") is what the result
     * in ver_why was computed for; want_key exists while a verification is
     * under way */
    char *ver_key, *want_key;
    char *ver_why; /* owned: "Reason\0message" of the result, or NULL */
    int ver_done, ver_usable, ver_mode, ver_retry;
    enum tkm_api_cond_status ver_status;
    uint64_t ver_retry_at;
    unsigned ver_n;
    /* summary: sum_done when the summary step is over for the pin (read, or
     * nothing to read); cleared when the pin changes */
    int has_sum, sum_done;
    struct tkm_api_summary sum;
    uint64_t sum_retry_at;
    /* the pinned index's variants (owned; none for a single image): read
     * by the summary step (vars_done), or again when the status step meets
     * a variant digest it does not know (vars_want: after a restart the
     * summary comes from the status, the variants do not) */
    struct ctrl_variant *vars;
    size_t n_vars;
    int vars_done, vars_want;
    /* status: sha256 of the bodies (all zero: none) */
    uint8_t written_hash[32];
    uint8_t prewrite_hash[32]; /* the informer's status when we wrote: it has not caught up while
                                  equal */
    uint8_t new_hash[32];
    enum tkm_api_cond_status
        conds[4]; /* Verified, Ready, Progressing, Degraded, as last computed */
    uint64_t written_at;
    uint64_t dirty_since; /* uv_now of the first change not written yet (settling), or 0 */
    /* the last step ended waiting for the node entries to settle, with nothing else to do,
     * at the object of this resourceVersion and config (settle_key(); 0: no): see settle_fast() */
    uint64_t settle_rv;
    struct pending_event *ev; /* owned: n_ev events, NULL when none */
    int n_ev;
    unsigned patches;
    struct tkm_verify_job *op; /* the verify job in flight (owned by c->verify), or NULL */
    /* Node labels (ctrl_labels.c): label_known once the cache has been judged; label_digest
     * the digest id it may be used at (0: nowhere) */
    char *label; /* owned: its Node label key, made on first use */
    uint32_t label_digest;
    int label_known;
    /* staged prefetch (ctrl_grant.c): NULL while tkm-config prefetchSlots is 0;
     * grant_at: uv_now when its earliest grant times out (0: none) */
    struct ctrl_grant *grant;
    uint64_t grant_at;
};
/* The reconciler's fixed memory per cache: strings are sized to their content
 * and allocated while needed (was 6 KiB of fixed arrays: 6 MB at 1000 caches). */
_Static_assert(sizeof(struct ctrl_cache) <= 512, "struct ctrl_cache grew past 512 bytes");

/* The object as a step sees it. */
struct view {
    json_t *j;
    struct tkm_api_cache cache;
    const char *deletion_ts;
    int has_fin;
    const char *rr;
};

static void step(struct ctrl_cache *cc);

static const struct k8s_resource *res_of(const struct ctrl_cache *cc)
{
    return cc->cluster ? &tkm_api_res_tkcc : &tkm_api_res_tkc;
}

static const char *kind_of(const struct ctrl_cache *cc)
{
    return cc->cluster ? "TritonKernelCacheCluster" : "TritonKernelCache";
}

/* The delay before retrying after the n-th failure in a row (n from 0):
 * libtkm's one backoff (1 s doubling to 5 min, no jitter) replayed from its
 * start, so that a cache keeps a 4-byte count per failure rather than a
 * struct tkm_backoff (64 bytes) each. A failure a retry will not cure
 * (retry 0) is looked at again every 5 min. */
static uint64_t backoff_ms(unsigned n, int retry)
{
    struct tkm_backoff b = {.initial_ms = 1000, .max_ms = 300000};
    uint64_t d = b.max_ms;
    for (unsigned i = 0; retry && i <= n && i < 16; i++) /* capped from the 10th on */
        d = tkm_backoff_next(&b, 0);
    return d;
}

/* A heap string of exactly its length (NULL: out of memory). */
static char *dupf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static char *dupf(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    char *p = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (!p)
        return NULL;
    va_start(ap, fmt);
    vsnprintf(p, (size_t)n + 1, fmt, ap);
    va_end(ap);
    return p;
}

/* "Reason\0message" in one allocation (NULL: out of memory), cut where the
 * status has always cut them (47 and 767 bytes). */
#define WHY_REASON_MAX 47
#define WHY_MSG_MAX    767
static char *why_make(const char *reason, const char *msg)
{
    size_t r = strlen(reason ? reason : ""), m = strlen(msg ? msg : "");
    r = r > WHY_REASON_MAX ? WHY_REASON_MAX : r;
    m = m > WHY_MSG_MAX ? WHY_MSG_MAX : m;
    char *p = malloc(r + m + 2);
    if (!p)
        return NULL;
    memcpy(p, reason ? reason : "", r);
    p[r] = '\0';
    memcpy(p + r + 1, msg ? msg : "", m);
    p[r + 1 + m] = '\0';
    return p;
}

static const char *why_reason(const char *why)
{
    return why ? why : "";
}

static const char *why_msg(const char *why)
{
    return why ? why + strlen(why) + 1 : "";
}

/* "sha256:<64 hex>" -> 32 bytes; anything else (a failed hash: "") -> zeros. */
static void hash_set(uint8_t out[32], const char *s)
{
    static const char pre[] = "sha256:";
    memset(out, 0, 32);
    if (strncmp(s, pre, sizeof pre - 1) != 0 || strlen(s) != sizeof pre - 1 + 64)
        return;
    s += sizeof pre - 1;
    for (int i = 0; i < 64; i++) {
        int c = s[i], v = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
        if (v < 0) {
            memset(out, 0, 32);
            return;
        }
        out[i / 2] = (uint8_t)(out[i / 2] | (i % 2 ? v : v << 4));
    }
}

static void events_clear(struct ctrl_cache *cc)
{
    for (int i = 0; i < cc->n_ev; i++)
        free(cc->ev[i].msg);
    free(cc->ev);
    cc->ev = NULL;
    cc->n_ev = 0;
}

static void ver_flight_clear(struct ctrl_cache *cc)
{
    free(cc->want_key);
    cc->want_key = NULL;
}

/* Frees what the memory owns, except qkey. */
static void cache_strings_free(struct ctrl_cache *cc)
{
    free(cc->uid);
    free(cc->pin_image);
    free(cc->want_image);
    free(cc->pin_f.why);
    free(cc->ver_key);
    free(cc->ver_why);
    free(cc->label);
    ver_flight_clear(cc);
    events_clear(cc);
    tkm_api_summary_release(&cc->sum);
    free(cc->vars);
    cc->vars = NULL;
    cc->n_vars = 0;
}

/* The cache's Node label key (NULL: no memory). */
static const char *label_of(struct ctrl_cache *cc)
{
    char key[TKM_API_NODE_LABEL_MAX];
    if (!cc->label && ctrl_label_of(cc->qkey + 2, key, sizeof key) == 0)
        cc->label = strdup(key);
    return cc->label;
}

/* The cache's labels follow what it now is (usable_digest 0: nowhere). Only a change
 * of that walks the Nodes: a node's own changes queue it (node_entries_changed). */
static void labels_set(struct ctrl_cache *cc, uint32_t usable_digest)
{
    if (cc->label_known && cc->label_digest == usable_digest)
        return;
    cc->label_known = 1;
    cc->label_digest = usable_digest;
    ctrl_labels_check(cc->c, cc->cidx, label_of(cc), usable_digest);
}

int ctrl_cache_label_state(const struct ctrl_cache *cc, uint32_t *usable_digest)
{
    *usable_digest = cc->label_digest;
    return cc->label_known;
}

const struct ctrl_grant *ctrl_cache_grant(const struct ctrl_cache *cc)
{
    return cc->grant;
}

void ctrl_cache_free(struct ctrl_cache *cc)
{
    if (!cc)
        return;
    tkm_verify_job_cancel(cc->op); /* it never calls back */
    ctrl_grant_free(cc->grant);
    cache_strings_free(cc);
    free(cc->qkey);
    free(cc);
}

/* A new memory for queue key qkey (borrowed). NULL: out of memory. */
static struct ctrl_cache *cache_new(struct ctrl *c, struct ctrl_cidx *x, const char *qkey)
{
    struct ctrl_cache *cc = calloc(1, sizeof *cc);
    const char *key = qkey + 2, *slash = strchr(key, '/');
    size_t kl = strlen(qkey), nl = slash ? (size_t)(slash - key) : 0;
    if (!cc || !(cc->qkey = malloc(kl + 1 + nl + 1))) {
        free(cc);
        return NULL;
    }
    memcpy(cc->qkey, qkey, kl + 1);
    memcpy(cc->qkey + kl + 1, key, nl);
    cc->qkey[kl + 1 + nl] = '\0';
    cc->name = slash ? cc->qkey + 2 + nl + 1 : cc->qkey + 2;
    cc->ns = cc->qkey + kl + 1;
    cc->c = c;
    cc->cidx = x;
    cc->cluster = key[0] == '/';
    return cc;
}

static void cache_reset(struct ctrl_cache *cc)
{
    struct ctrl *c = cc->c;
    struct ctrl_cidx *x = cc->cidx;
    char *qkey = cc->qkey;
    const char *name = cc->name, *ns = cc->ns;
    int cluster = cc->cluster;
    uint64_t t0 = cc->t0;
    cache_strings_free(cc);
    memset(cc, 0, sizeof *cc);
    cc->c = c;
    cc->cidx = x;
    cc->qkey = qkey;
    cc->name = name;
    cc->ns = ns;
    cc->cluster = cluster;
    cc->t0 = t0;
}

static void finish(struct ctrl_cache *cc, int result, uint64_t after_ms)
{
    cc->settle_rv = 0; /* whatever ends a step but the settle wait: the next one is whole */
    ctrl_done(cc->c, cc->qkey, cc->cluster, cc->t0, result, after_ms);
}

/* What a settle-wait step saw: FNV-1a of the object's resourceVersion and the tkm-config
 * generation (a new config is acted on at once); never 0 (0 is "none"). */
static uint64_t settle_key(const struct ctrl_cache *cc, const char *rv)
{
    uint64_t h = 0xcbf29ce484222325u ^ ((uint64_t)cc->c->cfg_gen * 0x9e3779b97f4a7c15u);
    for (; rv && *rv; rv++)
        h = (h ^ (unsigned char)*rv) * 0x100000001b3u;
    return h ? h : 1;
}

static void fail_clear(struct fail *f)
{
    free(f->why);
    memset(f, 0, sizeof *f);
}

static void fail_set(struct fail *f, int rc, const char *reason, const char *msg, int retry,
                     uint64_t now)
{
    f->rc = rc;
    free(f->why);
    f->why = why_make(reason, msg); /* NULL (no memory): reason and message read "" */
    f->retry_at = now + backoff_ms(f->n, retry);
    f->n++;
}

/* A failure of the pin step, remembered with the tkm-config it happened under:
 * pin_step tries again at once when tkm-config changes (RegistryNotAllowed). */
static void pin_fail(struct ctrl_cache *cc, int rc, const char *reason, const char *msg, int retry,
                     uint64_t now)
{
    fail_set(&cc->pin_f, rc, reason, msg, retry, now);
    cc->pin_f.cfg_gen = cc->c->cfg_gen;
}

static void event(struct ctrl_cache *cc, const char *type, const char *reason, const char *msg)
{
    struct k8s_object_ref ref = {.api_version = TKM_API_GROUP_VERSION,
                                 .kind = kind_of(cc),
                                 .namespace = cc->cluster ? NULL : cc->ns,
                                 .name = cc->name,
                                 .uid = cc->uid ? cc->uid : ""};
    if (!cc->c->rec)
        return;
    cc->c->m.events++;
    k8s_event_emit(cc->c->rec, &ref, type, reason, "%s", msg);
}

/* ---- the view ------------------------------------------------------------------- */

static int has_finalizer(const json_t *md)
{
    size_t i;
    json_t *f;
    json_array_foreach(json_object_get(md, "finalizers"), i, f)
    {
        if (json_is_string(f) && strcmp(json_string_value(f), CTRL_FINALIZER) == 0)
            return 1;
    }
    return 0;
}

static int view_load(struct ctrl_cache *cc, struct view *v, struct tkm_err *err)
{
    struct ctrl *c = cc->c;
    const char *key = cc->qkey + 2 + (cc->cluster ? 1 : 0);
    const struct k8s_obj *o = k8s_informer_get_key(c->inf[cc->cluster], key);
    memset(v, 0, sizeof *v);
    if (!o)
        return -ENOENT;
    /* one parse for the decoded cache and the fields it does not carry */
    int rc = tkm_api_cache_decode_root(o->json, o->json_len, &v->cache, &v->j, err);
    if (rc < 0) {
        if (!cc->uid || strcmp(cc->uid, o->uid ? o->uid : "") != 0) { /* for the Event */
            free(cc->uid);
            cc->uid = strdup(o->uid ? o->uid : "");
        }
        return rc;
    }
    json_t *md = json_object_get(v->j, "metadata");
    v->deletion_ts = json_string_value(json_object_get(md, "deletionTimestamp"));
    v->has_fin = has_finalizer(md);
    v->rr =
        json_string_value(json_object_get(json_object_get(md, "annotations"), CTRL_ANN_RERESOLVE));
    return 0;
}

static void view_release(struct view *v)
{
    json_decref(v->j);
    tkm_api_cache_release(&v->cache);
}

/* ---- finalizer -------------------------------------------------------------------- */

static void fin_done(int rc, json_t *obj, const struct k8s_status *st, void *data)
{
    (void)obj;
    struct ctrl_cache *cc = data;
    char line[512];
    if (rc < 0) {
        tkm_warn("controller: %s: finalizer: %s", cc->qkey, k8s_status_str(st, line, sizeof line));
        cc->c->m.errors[cc->cluster]++;
        finish(cc, rc == -ENOENT ? K8S_WQ_OK : K8S_WQ_RETRY, 0);
        return;
    }
    if (!cc->c->stopping && cc->patches == 1) { /* removed: the cache is gone for us */
        if (cc->uid)
            ctrl_state_forget(cc->c->state, cc->uid);
        finish(cc, K8S_WQ_OK, 0);
        return;
    }
    finish(cc, K8S_WQ_OK, 0); /* the update event runs the next round */
}

/* Applies metadata.finalizers = [ours] (add 1) or no finalizers (add 0: SSA
 * then drops the one this manager owns). */
static int finalizer_apply(struct ctrl_cache *cc, int add)
{
    json_t *md = json_pack("{s:s}", "name", cc->name);
    json_t *body = json_pack("{s:s, s:s, s:o}", "apiVersion", TKM_API_GROUP_VERSION, "kind",
                             kind_of(cc), "metadata", md);
    struct k8s_apply_opts ao = {.field_manager = CTRL_FIELD_MANAGER, .force = 1};
    int rc = -ENOMEM;
    if (!body)
        goto out;
    if (!cc->cluster)
        json_object_set_new(md, "namespace", json_string(cc->ns));
    if (add)
        json_object_set_new(md, "finalizers", json_pack("[s]", CTRL_FINALIZER));
    cc->patches = add ? 0 : 1;
    cc->c->m.finalizer_writes++;
    rc =
        k8s_apply_async(cc->c->c, res_of(cc), cc->cluster ? NULL : cc->ns, body, &ao, fin_done, cc);
out:
    json_decref(body);
    return rc;
}

/* ---- cleanup of a deleted cache ---------------------------------------------------- */

static void entry_patch_done(int rc, json_t *obj, const struct k8s_status *st, void *data)
{
    (void)obj;
    struct ctrl_cache *cc = data;
    char line[512];
    if (rc < 0 && rc != -ENOENT && rc != -EINVAL)
        tkm_warn("controller: %s: removing a node's entry: %s", cc->qkey,
                 k8s_status_str(st, line, sizeof line));
    if (--cc->patches == 0)
        finish(cc, K8S_WQ_OK, 2000);
}

static int entry_remove(struct ctrl_cache *cc, const struct ctrl_nsobj *o)
{
    char path[400];
    snprintf(path, sizeof path, "/status/caches/%s", cc->name);
    json_t *patch = json_pack("[{s:s, s:s}]", "op", "remove", "path", path);
    struct k8s_patch_opts po = {.type = K8S_PATCH_JSON, .subresource = "status"};
    int rc =
        patch
            ? k8s_patch_async(cc->c->c, o->cluster ? &tkm_api_res_tkcnsc : &tkm_api_res_tkcns,
                              o->cluster ? NULL : o->ns, o->node, patch, &po, entry_patch_done, cc)
            : -ENOMEM;
    json_decref(patch);
    if (rc == 0)
        tkm_info("controller: %s: removing the entry of node %s (its agent did not)", cc->qkey,
                 o->node);
    return rc;
}

static time_t parse_ts(const char *s)
{
    struct tm tm = {0};
    if (!s || !strptime(s, "%Y-%m-%dT%H:%M:%S", &tm))
        return 0;
    return timegm(&tm);
}

struct cleanup_walk {
    struct ctrl_cache *cc;
    int expired;
};

/* Removes a node's entry itself when its Node is gone or the wait expired
 * (the patch is asynchronous: the index does not change during the walk). */
static int cleanup_entry(const struct ctrl_entry *e, const struct ctrl_nsobj *o, const char *why,
                         void *data)
{
    (void)e;
    (void)why;
    struct cleanup_walk *w = data;
    struct ctrl *c = w->cc->c;
    int node_gone = c->w_synced[2] && !tkm_strmap_get(&c->idx.nodes, o->node);
    if ((w->expired || node_gone) && entry_remove(w->cc, o) == 0)
        w->cc->patches++;
    return 0;
}

static void cleanup(struct ctrl_cache *cc, const struct view *v)
{
    struct ctrl *c = cc->c;
    struct ctrl_cidx *x = cc->cidx;
    labels_set(cc, 0); /* a cache being deleted is usable nowhere */
    if (!v->has_fin) {
        finish(cc, K8S_WQ_OK, 0);
        return;
    }
    if (x->n == 0) {
        if (finalizer_apply(cc, 0) < 0)
            finish(cc, K8S_WQ_RETRY, 0);
        return;
    }
    time_t deadline = parse_ts(v->deletion_ts) + (time_t)(c->o.cleanup_timeout_ms / 1000);
    time_t now = time(NULL);
    int expired = now >= deadline;
    cc->patches = 0;
    struct cleanup_walk w = {cc, expired};
    ctrl_cidx_foreach(x, cleanup_entry, &w);
    if (cc->patches)
        return; /* entry_patch_done finishes */
    uint64_t left = expired ? 5000 : (uint64_t)(deadline - now) * 1000 + 100;
    tkm_dbg("controller: %s: waiting for %u node(s) to drop their entries", cc->qkey, x->n);
    finish(cc, K8S_WQ_OK, left < 5000 ? left : 5000);
}

/* ---- registry work: the verify job (<tkm/api/verify.h>) ------------------------------- */

/* A job for the cache as v shows it: flags, the image and digest (NULL:
 * the spec's image, resolve), the known() hook. The job reads the pull
 * Secrets itself. 0, or < 0 with err (cb never called). */
static int job_start(struct ctrl_cache *cc, const struct view *v, unsigned flags, const char *image,
                     const char *digest, int (*known)(const struct tkm_verify_result *, void *),
                     tkm_verify_cb cb, struct tkm_err *err)
{
    struct tkm_verify_req q = {.flags = flags,
                               .kc = cc->c->c,
                               .cache = &v->cache,
                               .image = image,
                               .digest = digest,
                               .cfg = &cc->c->cfg,
                               .config_ns = cc->c->o.ns,
                               .known = known};
    return tkm_verify_start(cc->c->verify, &q, cb, cc, &cc->op, err);
}

/* ---- the pin ------------------------------------------------------------------------ */

static void pin_set(struct ctrl_cache *cc, const char *image, const char *digest)
{
    if (!cc->pin_image || strcmp(cc->pin_image, image) != 0) {
        free(cc->pin_image);
        cc->pin_image = strdup(image);
    }
    if (strcmp(cc->pin, digest) != 0 || cc->pin_f.rc) {
        if (strcmp(cc->pin, digest) != 0)
            cc->sum_done = cc->vars_done = cc->vars_want = 0; /* the summary step is for a pin */
        snprintf(cc->pin, sizeof cc->pin, "%s", digest);
        ctrl_state_pin_put(cc->c->state, cc->uid, image, digest);
    }
    fail_clear(&cc->pin_f);
}

static void resolve_done(const struct tkm_verify_result *r, void *data)
{
    struct ctrl_cache *cc = data;
    cc->op = NULL;
    uint64_t now = uv_now(cc->c->loop);
    if (r->failed == TKM_VERIFY_STEP_CREDS) {
        /* Retried with backoff (1 s doubling to 5 min), the Secret read again
         * each time: it may simply not exist yet. */
        pin_fail(cc, r->rc, r->reason, r->message, 1, now);
    } else if (r->failed) {
        tkm_warn("controller: %s: resolving %s: %s", cc->qkey, cc->want_image, r->message);
        pin_fail(cc, r->rc, r->reason, r->message, r->retry, now);
        if (cc->pin[0])
            event(cc, "Warning", "ResolveFailed", r->message);
    } else {
        tkm_info("controller: %s: %s pinned to %s", cc->qkey, cc->want_image, r->digest);
        if (cc->pin[0] && strcmp(cc->pin, r->digest) != 0) {
            char m[400];
            snprintf(m, sizeof m, "%s re-resolved: %s (was %s)", cc->want_image, r->digest,
                     cc->pin);
            event(cc, "Normal", "Repinned", m);
        }
        pin_set(cc, cc->want_image, r->digest);
        if (cc->rr_state == 0)
            cc->rr_state = 1;
    }
    step(cc);
}

static int pin_step(struct ctrl_cache *cc, const struct view *v)
{
    const struct tkm_api_cache *k = &v->cache;
    const char *image = k->spec.cache_image;
    struct tkm_oci_ref ref;
    struct tkm_err err = {0};
    char d[CTRL_DIGEST_MAX];
    uint64_t now = uv_now(cc->c->loop);
    int same = cc->pin_image && strcmp(cc->pin_image, image) == 0 && cc->pin[0];
    int rr = v->rr && cc->rr_state == 0;
    if (tkm_oci_ref_parse(&ref, image, &err) < 0) {
        pin_fail(cc, err.code, "InvalidImage", tkm_err_str(&err), 0, now);
        return 0;
    }
    if (ref.digest[0]) { /* a digest in the spec is taken as is */
        pin_set(cc, image, ref.digest);
        if (v->rr && cc->rr_state == 0)
            cc->rr_state = 1;
        return 0;
    }
    if (same && !rr)
        return 0;
    if (!same && !rr && ctrl_state_pin_get(cc->c->state, cc->uid, image, d) == 1) {
        pin_set(cc, image, d);
        return 0;
    }
    if (!same && !rr && !cc->pin_image && k->status.resolved_digest &&
        k->status.observed_generation == k->meta.generation) {
        pin_set(cc, image, k->status.resolved_digest); /* pinned by an earlier run */
        return 0;
    }
    /* a failure waits for its retry, unless tkm-config or the image changed since */
    if (cc->pin_f.rc && now < cc->pin_f.retry_at && cc->pin_f.cfg_gen == cc->c->cfg_gen &&
        cc->want_image && strcmp(cc->want_image, image) == 0)
        return 0;
    free(cc->want_image);
    cc->want_image = strdup(image);
    cc->c->m.registry_ops++;
    tkm_dbg("controller: %s: resolving %s", cc->qkey, image);
    if (!cc->want_image ||
        job_start(cc, v, TKM_VERIFY_RESOLVE, NULL, NULL, NULL, resolve_done, &err) < 0) {
        pin_fail(cc, err.code ? err.code : -ENOMEM, "InvalidImage", tkm_err_str(&err), 0, now);
        return 0;
    }
    return 1;
}

static void rr_done(int rc, json_t *obj, const struct k8s_status *st, void *data)
{
    (void)obj;
    struct ctrl_cache *cc = data;
    char line[512];
    if (rc < 0 && rc != -EINVAL && rc != -ENOENT)
        tkm_warn("controller: %s: removing %s: %s", cc->qkey, CTRL_ANN_RERESOLVE,
                 k8s_status_str(st, line, sizeof line));
    cc->rr_state = 2;
    step(cc);
}

/* The annotation tkm.io/re-resolve, once acted upon, is removed (only if it
 * still holds the value seen: a JSON patch test). */
static int rr_step(struct ctrl_cache *cc, const struct view *v)
{
    if (!v->rr) {
        cc->rr_state = 0;
        return 0;
    }
    if (cc->rr_state != 1)
        return 0;
    json_t *p = json_pack("[{s:s, s:s, s:s}, {s:s, s:s}]", "op", "test", "path",
                          "/metadata/annotations/tkm.io~1re-resolve", "value", v->rr, "op",
                          "remove", "path", "/metadata/annotations/tkm.io~1re-resolve");
    struct k8s_patch_opts po = {.type = K8S_PATCH_JSON};
    int rc = p ? k8s_patch_async(cc->c->c, res_of(cc), cc->cluster ? NULL : cc->ns, cc->name, p,
                                 &po, rr_done, cc)
               : -ENOMEM;
    json_decref(p);
    if (rc < 0) {
        cc->rr_state = 2;
        return 0;
    }
    return 1;
}

/* ---- verification -------------------------------------------------------------------- */

static void ver_set(struct ctrl_cache *cc, int ok, const char *reason, const char *msg, int retry)
{
    uint64_t now = uv_now(cc->c->loop);
    free(cc->ver_key);
    cc->ver_key = cc->want_key; /* the result is for the inputs the step started with */
    cc->want_key = NULL;
    cc->ver_done = 1;
    cc->ver_status = ok ? TKM_API_COND_TRUE : TKM_API_COND_FALSE;
    cc->ver_usable =
        ok || cc->ver_mode == TKM_SIG_MODE_AUDIT || cc->ver_mode == TKM_SIG_MODE_DISABLED;
    free(cc->ver_why);
    cc->ver_why = why_make(reason, msg);
    cc->ver_retry = !ok && retry;
    if (ok) {
        cc->ver_n = 0;
    } else {
        cc->ver_retry_at = now + backoff_ms(cc->ver_n, 1);
        cc->ver_n++;
    }
}

/* The job's known() hook: a result SQLite holds for this digest and policy
 * fingerprint is taken (no search). */
static int ver_known(const struct tkm_verify_result *r, void *data)
{
    struct ctrl_cache *cc = data;
    struct ctrl_verify_rec rec;
    cc->ver_mode = (int)r->mode;
    if (ctrl_state_verify_get(cc->c->state, cc->uid, r->digest, r->policy_fp, &rec) != 1) {
        cc->c->m.registry_ops++;
        tkm_dbg("controller: %s: searching the signature of %s", cc->qkey, cc->pin);
        return -1;
    }
    tkm_dbg("controller: %s: verification of %s known from the state", cc->qkey, cc->pin);
    ver_set(cc, rec.ok, rec.reason, rec.message, 1);
    return rec.ok ? 1 : 0;
}

/* The signature search's verdict, kept (with SQLite) unless a retry may
 * change it. */
static void ver_searched(struct ctrl_cache *cc, const struct tkm_verify_result *r)
{
    struct ctrl_verify_rec rec = {.ok = r->verified};
    const char *desc = r->policy_describe;
    char *msg;
    cc->c->m.verifications++;
    tkm_dbg("controller: %s: signature check of %s: rc %d %s", cc->qkey, cc->pin, r->sig_rc,
            r->verified ? "ok" : r->sig_reason);
    if (r->verified) {
        msg = dupf("%s verified with key %s (%.255s); signature found by %s (%s) at %s", cc->pin,
                   r->sig.key_id[0] ? r->sig.key_id : "keyless", desc,
                   tkm_sig_source_name(r->sig.source), tkm_sig_format_name(r->sig.format),
                   r->sig.location);
        ver_set(cc, 1, "SignatureVerified", msg, 0);
    } else {
        msg = dupf("%s%s (policy: %.255s)", r->sig_message,
                   r->mode == TKM_SIG_MODE_AUDIT ? "; Audit mode: nodes may use it anyway" : "",
                   desc);
        ver_set(cc, 0, r->sig_reason, msg, r->sig_retry);
    }
    free(msg);
    /* a refusal by the registry reach policy is no verdict on the signature: not kept */
    if (r->verified || (!r->sig_retry && r->sig_rc != TKM_OCI_EREACH)) {
        snprintf(rec.reason, sizeof rec.reason, "%s", why_reason(cc->ver_why));
        snprintf(rec.message, sizeof rec.message, "%s", why_msg(cc->ver_why));
        snprintf(rec.key_id, sizeof rec.key_id, "%s", r->verified ? r->sig.key_id : "");
        if (r->verified && !rec.key_id[0])
            snprintf(rec.key_id, sizeof rec.key_id, "keyless");
        ctrl_state_verify_put(cc->c->state, cc->uid, cc->pin, r->policy_fp, &rec);
    }
}

static void verify_done(const struct tkm_verify_result *r, void *data)
{
    struct ctrl_cache *cc = data;
    char *msg = NULL;
    cc->op = NULL;
    if (r->failed) { /* the policy (or the pull Secrets) could not be read */
        tkm_dbg("controller: %s: effective policy: rc %d %s", cc->qkey, r->rc, r->reason);
        cc->ver_mode = TKM_SIG_MODE_ENFORCE;
        ver_set(cc, 0, r->reason, r->message, 1);
    } else if (r->sig_state == TKM_VERIFY_SIG_DISABLED) {
        tkm_dbg("controller: %s: effective policy: %s", cc->qkey, r->policy_describe);
        cc->ver_mode = (int)r->mode;
        msg = dupf("signature checks are disabled by %s", r->policy_describe);
        ver_set(cc, 0, "VerificationDisabled", msg, 0);
    } else if (r->sig_state == TKM_VERIFY_SIG_SEARCHED) {
        ver_searched(cc, r);
    } /* TKM_VERIFY_SIG_KNOWN: ver_known() has set it */
    free(msg);
    ver_flight_clear(cc);
    step(cc);
}

/* The inputs a verification result holds for: "pin|generation|config rv"
 * (NULL: out of memory). */
static char *ver_key_of(const struct ctrl_cache *cc, const struct view *v)
{
    return dupf("%s|%lld|%s", cc->pin, (long long)v->cache.meta.generation, cc->c->cfg_rv);
}

static int verify_step(struct ctrl_cache *cc, const struct view *v)
{
    struct tkm_err err = {0};
    uint64_t now = uv_now(cc->c->loop);
    if (!cc->pin[0] || strcmp(cc->pin_image, v->cache.spec.cache_image) != 0)
        return 0;
    ver_flight_clear(cc);
    if (!(cc->want_key = ver_key_of(cc, v)))
        return 0; /* no memory: the status says Verifying, the next round tries again */
    if (cc->ver_done && cc->ver_key && strcmp(cc->ver_key, cc->want_key) == 0 &&
        !(cc->ver_retry && now >= cc->ver_retry_at)) {
        ver_flight_clear(cc);
        return 0;
    }
    if (job_start(cc, v, TKM_VERIFY_SIGNATURE, cc->pin_image, cc->pin, ver_known, verify_done,
                  &err) < 0) {
        ver_set(cc, 0, "InvalidPolicy", tkm_err_str(&err), 1);
        return 0;
    }
    return 1;
}

/* ---- summary ------------------------------------------------------------------------- */

/* The variants of an inspected pin (r->variants) into cc->vars: a variant
 * index's; none for a single image (its nodes name no variants). */
static void vars_take(struct ctrl_cache *cc, const struct tkm_verify_result *r)
{
    const struct tkm_variant_set *vs = &r->variants;
    size_t n = vs->from_index ? vs->n : 0;
    struct ctrl_variant *v = n ? calloc(n, sizeof *v) : NULL;
    if (n && !v)
        return; /* no memory: vars_done stays 0, asked again */
    for (size_t i = 0; i < n; i++) {
        const struct tkm_variant *x = &vs->v[i];
        snprintf(v[i].digest, sizeof v[i].digest, "%s", x->digest);
        snprintf(v[i].platform, sizeof v[i].platform, "%s/%s", x->os, x->architecture);
        snprintf(v[i].backend, sizeof v[i].backend, "%s", x->backend);
        snprintf(v[i].arch, sizeof v[i].arch, "%s", x->arch);
        v[i].warp_size = x->warp_size;
    }
    free(cc->vars);
    cc->vars = v;
    cc->n_vars = n;
    cc->vars_done = strcmp(r->digest, cc->pin) == 0;
}

static void inspect_done(const struct tkm_verify_result *r, void *data)
{
    struct ctrl_cache *cc = data;
    int ok = !r->failed && r->inspected;
    cc->op = NULL;
    if (ok)
        vars_take(cc, r);
    if (cc->sum_done && !ok) { /* a read for the variants only: the summary stays */
        cc->sum_retry_at = uv_now(cc->c->loop) + 30000;
        step(cc);
        return;
    }
    tkm_api_summary_release(&cc->sum);
    cc->has_sum = 0;
    if (!r->failed && r->inspected && tkm_verify_api_summary(&r->image, &cc->sum) == 0) {
        cc->has_sum = 1;
        cc->sum_done = strcmp(r->digest, cc->pin) == 0;
    } else if (!r->failed &&
               (r->summary_rc == -ENOENT || r->summary_rc == -EINVAL || r->summary_rc == -EPROTO)) {
        /* not a Triton cache image (no summary label): nothing to show */
        tkm_warn("controller: %s: no summary for %s: %s", cc->qkey, cc->pin, r->summary_message);
        cc->sum_done = 1;
    } else {
        cc->sum_retry_at = uv_now(cc->c->loop) + 30000;
    }
    step(cc);
}

static int summary_step(struct ctrl_cache *cc, const struct view *v)
{
    const struct tkm_api_cache_status *st = &v->cache.status;
    struct tkm_err err = {0};
    int need_vars = cc->vars_want && !cc->vars_done;
    if (!cc->pin[0] || (cc->sum_done && !need_vars) || !cc->ver_usable)
        return 0;
    if (!cc->sum_done && st->resolved_digest && strcmp(st->resolved_digest, cc->pin) == 0 &&
        st->has_summary) {
        tkm_api_summary_release(&cc->sum);
        if (ctrl_summary_copy(&cc->sum, &st->summary) < 0)
            return 0;
        cc->has_sum = 1;
        cc->sum_done = 1;
        if (!need_vars)
            return 0;
    }
    if (uv_now(cc->c->loop) < cc->sum_retry_at)
        return 0;
    cc->c->m.registry_ops++;
    tkm_dbg("controller: %s: reading the summary labels of %s", cc->qkey, cc->pin);
    if (job_start(cc, v, TKM_VERIFY_SUMMARY, cc->pin_image, cc->pin, NULL, inspect_done, &err) <
        0) {
        cc->sum_done = 1;
        return 0;
    }
    return 1;
}
/* ---- status ------------------------------------------------------------------------------ */

/* key: ver_key_of() now (borrowed), NULL when it could not be made. */
static void verdict_of(struct ctrl_cache *cc, const struct view *v, const char *key,
                       struct ctrl_verdict *vd)
{
    const char *image = v->cache.spec.cache_image;
    int pinned = cc->pin[0] && cc->pin_image && strcmp(cc->pin_image, image) == 0;
    memset(vd, 0, sizeof *vd);
    if (cc->pin_f.rc && !pinned) {
        vd->verified = TKM_API_COND_FALSE;
        vd->reason = why_reason(cc->pin_f.why);
        vd->message = why_msg(cc->pin_f.why);
        return;
    }
    vd->digest = cc->pin;
    if (!pinned || !cc->ver_done || !cc->ver_key || !key || strcmp(cc->ver_key, key) != 0) {
        vd->verified = TKM_API_COND_UNKNOWN;
        vd->reason = pinned ? "Verifying" : "Resolving";
        vd->message = pinned ? "the signature is being verified" : "the tag is being resolved";
        vd->in_progress = 1;
        return;
    }
    vd->verified = cc->ver_status;
    vd->reason = why_reason(cc->ver_why);
    vd->message = why_msg(cc->ver_why);
    vd->usable = cc->ver_usable;
}

static int body_hash(const struct tkm_api_cache_status *st, const struct ctrl_cache *cc,
                     uint8_t out[32])
{
    char hex[TKM_OCI_DIGEST_LEN + 1] = "";
    struct tkm_api_cache_status tmp = *st;
    json_t *body = NULL;
    struct tkm_buf b = TKM_BUF_INIT(1 << 20);
    int rc;
    tmp.last_updated = NULL; /* a heartbeat is not a change */
    if ((rc = tkm_api_cache_status_apply(&tmp, cc->name, cc->cluster ? NULL : cc->ns, &body,
                                         NULL)) == 0 &&
        (rc = tkm_api_dump(body, &b)) == 0)
        rc = tkm_oci_digest_bytes(b.data, b.len, hex);
    hash_set(out, rc == 0 ? hex : "");
    json_decref(body);
    tkm_buf_release(&b);
    return rc;
}

/* The Events of the transitions from old to st, kept (cc->ev) until the
 * write is answered. */
#define EVENT_MSG_MAX 599
static void plan_events(struct ctrl_cache *cc, const struct tkm_api_cache_status *old,
                        const struct tkm_api_cache_status *st)
{
    static const char *const types[] = {"Verified", "Ready", "Degraded"};
    struct pending_event ev[3];
    int n = 0;
    events_clear(cc);
    for (int i = 0; i < 3; i++) {
        const char *r;
        enum tkm_api_cond_status was =
            ctrl_cond_get(old->conditions, old->n_conditions, types[i], &r);
        enum tkm_api_cond_status now = TKM_API_COND_UNKNOWN;
        const struct tkm_api_condition *nc = NULL;
        for (size_t k = 0; k < st->n_conditions; k++)
            if (strcmp(st->conditions[k].type, types[i]) == 0)
                nc = &st->conditions[k], now = nc->status;
        if (!nc || was == now)
            continue;
        struct pending_event *e = &ev[n];
        if (i == 0 && now == TKM_API_COND_TRUE)
            e->type = "Normal", e->reason = "Verified";
        else if (i == 0 && now == TKM_API_COND_FALSE && strcmp(nc->reason, "VerificationDisabled"))
            e->type = "Warning", e->reason = "VerificationFailed";
        else if (i == 1 && now == TKM_API_COND_TRUE)
            e->type = "Normal", e->reason = "Ready";
        else if (i == 2 && now == TKM_API_COND_TRUE)
            e->type = "Warning", e->reason = "Degraded";
        else
            continue;
        if (!(e->msg = dupf("%s: %s", nc->reason, nc->message)))
            continue; /* no memory: this Event is lost, the status is not */
        if (strlen(e->msg) > EVENT_MSG_MAX)
            e->msg[EVENT_MSG_MAX] = '\0';
        n++;
    }
    if (n && !(cc->ev = malloc((size_t)n * sizeof *cc->ev))) {
        while (n--)
            free(ev[n].msg);
        return;
    }
    if (n)
        memcpy(cc->ev, ev, (size_t)n * sizeof *cc->ev);
    cc->n_ev = n;
}

static uint64_t next_retry(const struct ctrl_cache *cc)
{
    uint64_t now = uv_now(cc->c->loop), at = UINT64_MAX;
    if (cc->pin_f.rc)
        at = cc->pin_f.retry_at;
    if (cc->ver_done && cc->ver_retry && cc->ver_retry_at < at)
        at = cc->ver_retry_at;
    if (cc->pin[0] && (!cc->sum_done || (cc->vars_want && !cc->vars_done)) && cc->sum_retry_at &&
        cc->sum_retry_at < at)
        at = cc->sum_retry_at;
    if (cc->grant_at && cc->grant_at < at)
        at = cc->grant_at;
    if (at == UINT64_MAX)
        return 0;
    return at > now ? at - now + 10 : 10;
}

static void status_done(int rc, json_t *obj, const struct k8s_status *st, void *data)
{
    (void)obj;
    struct ctrl_cache *cc = data;
    char line[512];
    if (rc < 0) {
        tkm_warn("controller: %s: status: %s", cc->qkey, k8s_status_str(st, line, sizeof line));
        cc->c->m.errors[cc->cluster]++;
        events_clear(cc); /* the next write plans them again */
        finish(cc, rc == -ENOENT ? K8S_WQ_OK : K8S_WQ_RETRY, 0);
        return;
    }
    memcpy(cc->written_hash, cc->new_hash, sizeof cc->written_hash);
    cc->written_at = uv_now(cc->c->loop);
    cc->dirty_since = 0;
    cc->c->write_wall_ms = ctrl_wall_ms();
    cc->c->writes_since_idle++;
    for (int i = 0; i < cc->n_ev; i++)
        event(cc, cc->ev[i].type, cc->ev[i].reason, cc->ev[i].msg);
    events_clear(cc);
    uint64_t after = next_retry(cc);
    finish(cc, K8S_WQ_OK, after);
}

/* status.prefetch: the pull slots at the pinned digest (NULL: none pinned). */
static int grant_step(struct ctrl_cache *cc, const char *digest,
                      const struct tkm_api_cache_status *old, struct tkm_api_cache_status *st)
{
    const struct tkm_api_config *cfg = &cc->c->cfg;
    uint32_t d = digest && digest[0] ? ctrl_digest_id(digest) : 0;
    uint64_t now = uv_now(cc->c->loop), next = 0;
    int rc = 0;
    if (!cfg->prefetch_slots) {
        ctrl_grant_free(cc->grant);
        cc->grant = NULL;
        cc->grant_at = 0;
        return 0;
    }
    if (!cc->grant) {
        if (!(cc->grant = ctrl_grant_new()))
            return -ENOMEM;
        /* a controller that restarts keeps the grants its status shows */
        for (size_t i = 0; d && old->prefetch.present && old->resolved_digest &&
                           strcmp(old->resolved_digest, digest) == 0 && i < old->prefetch.n_granted;
             i++)
            if ((rc = ctrl_grant_seed(cc->grant, d, old->prefetch.granted[i], now)) < 0)
                return rc;
    }
    rc = ctrl_grant_update(cc->grant, cc->cidx, d, cfg->prefetch_slots,
                           cfg->prefetch_grant_timeout_ms, now, &st->prefetch, &next);
    cc->grant_at = next ? now + next : 0;
    return rc;
}

/* unknown: set to 1 when a node names a variant digest cc->vars lacks. */
static int status_build(struct ctrl_cache *cc, const struct view *v,
                        struct tkm_api_cache_status *st, char *now, int *unknown)
{
    struct ctrl_verdict vd;
    const struct tkm_api_cache_status *old = &v->cache.status;
    char *key = cc->pin[0] ? ver_key_of(cc, v) : NULL;
    verdict_of(cc, v, key, &vd);
    vd.variants = cc->vars;
    vd.n_variants = cc->n_vars;
    vd.unknown = unknown;
    tkm_api_now(now, 32);
    int rc = ctrl_agg_build(cc->cidx, &vd, v->cache.meta.generation, old->conditions,
                            old->n_conditions, now, st);
    if (rc == 0)
        rc = grant_step(cc, vd.digest, old, st);
    free(key);
    if (rc < 0)
        return rc;
    if (!vd.in_progress) /* while verifying again, the labels stay as they are */
        labels_set(cc, vd.usable ? ctrl_digest_id(vd.digest) : 0);
    if (cc->c->o.node_labels && label_of(cc) && !(st->node_label = strdup(cc->label)))
        return -ENOMEM;
    if (vd.digest && vd.digest[0] && !(st->resolved_digest = strdup(vd.digest)))
        return -ENOMEM;
    if (cc->has_sum && cc->sum_done) {
        if (ctrl_summary_copy(&st->summary, &cc->sum) < 0)
            return -ENOMEM;
        st->has_summary = 1;
    }
    return 0;
}

/* During a rollout every node report changes every cache, and each cache is
 * written once per max delay: with many caches those writes load the
 * apiserver that is busy with the reports (at 5000 nodes x 200 caches, 12,600
 * status writes beside 5000 reports). The max delay grows with the caches so
 * that these forced writes stay near 20 a second in all (client-go's default
 * QPS for a controller); the write once a cache's entries are quiet is not
 * delayed. */
static uint64_t rollout_max_delay(const struct ctrl *c)
{
    uint64_t d = c->o.status_max_delay_ms, spread = (uint64_t)c->idx.caches.count * 50u;
    return spread > d ? spread : d;
}

/* settle_wait_of(): the ms to wait for the cache's node entries to settle (0: quiet, write). */
static uint64_t settle_wait_of(struct ctrl_cache *cc)
{
    return ctrl_settle_wait(cc->c->o.status_settle_ms, rollout_max_delay(cc->c),
                            cc->cidx->changed_ms, &cc->dirty_since, uv_now(cc->c->loop));
}

/* Ends a step in the settle wait (or the earlier retry r, 0: none) and remembers key
 * (settle_key()) for settle_fast(). */
static void settle_requeue(struct ctrl_cache *cc, uint64_t wait, uint64_t r, uint64_t key)
{
    finish(cc, K8S_WQ_OK, r && r < wait ? r : wait);
    cc->settle_rv = key;
}

static void status_step(struct ctrl_cache *cc, const struct view *v)
{
    struct tkm_api_cache_status st = {0};
    char now[32];
    uint8_t cur_hash[32];
    json_t *body = NULL;
    uint64_t t = uv_now(cc->c->loop);
    /* While the nodes' reports keep changing this cache's entries, wait for
     * them to settle before aggregating: at 5000 nodes an aggregation walks
     * 5000 objects, and a rollout re-queues every cache on every report. */
    uint64_t wait = settle_wait_of(cc);
    if (wait) {
        tkm_dbg("controller: %s: node entries settling: status in %llu ms", cc->qkey,
                (unsigned long long)wait);
        settle_requeue(cc, wait, next_retry(cc), settle_key(cc, v->cache.meta.resource_version));
        return;
    }
    int unknown = 0;
    int rc = status_build(cc, v, &st, now, &unknown);
    if (rc == 0 && unknown && !cc->vars_done && !cc->vars_want && cc->ver_usable) {
        /* a variant not known yet (after a restart the summary came from the
         * status): read the index before writing, not a status with its
         * nodes pending */
        cc->vars_want = 1;
        tkm_api_cache_status_release(&st);
        finish(cc, K8S_WQ_OK, 1);
        return;
    }
    if (rc == 0)
        rc = body_hash(&st, cc, cc->new_hash);
    for (size_t i = 0; rc == 0 && i < st.n_conditions && i < 4; i++)
        cc->conds[i] = st.conditions[i].status;
    if (rc < 0)
        goto fail;
    body_hash(&v->cache.status, cc, cur_hash);
    if (memcmp(cur_hash, cc->new_hash, sizeof cur_hash) == 0) {
        cc->dirty_since = 0;
        tkm_api_cache_status_release(&st);
        tkm_dbg("controller: %s: status unchanged", cc->qkey);
        finish(cc, K8S_WQ_OK, next_retry(cc)); /* nothing changed: no write */
        return;
    }
    if (cc->written_at && t - cc->written_at < 10000 &&
        memcmp(cur_hash, cc->prewrite_hash, sizeof cur_hash) == 0 &&
        memcmp(cur_hash, cc->written_hash, sizeof cur_hash) != 0) {
        /* The informer still shows the status from before our last write: its
         * update event is on the way and queues the cache again. Comparing
         * with (and computing transitions from) the stale status would write
         * twice and emit a transition's Event twice. */
        tkm_api_cache_status_release(&st);
        tkm_dbg("controller: %s: the status read is from before the last write: again in 1 s",
                cc->qkey);
        finish(cc, K8S_WQ_OK, 1000);
        return;
    }
    if (cc->written_at && t - cc->written_at < cc->c->o.status_min_interval_ms) {
        uint64_t left = cc->c->o.status_min_interval_ms - (t - cc->written_at);
        tkm_api_cache_status_release(&st);
        tkm_dbg("controller: %s: status in %llu ms (--status-min-interval)", cc->qkey,
                (unsigned long long)left);
        finish(cc, K8S_WQ_OK, left);
        return;
    }
    plan_events(cc, &v->cache.status, &st);
    memcpy(cc->prewrite_hash, cur_hash, sizeof cur_hash);
    st.last_updated = strdup(now);
    struct k8s_apply_opts ao = {
        .field_manager = CTRL_FIELD_MANAGER, .force = 1, .subresource = "status"};
    if (!st.last_updated ||
        (rc = tkm_api_cache_status_apply(&st, cc->name, cc->cluster ? NULL : cc->ns, &body, NULL)) <
            0 ||
        (rc = k8s_apply_async(cc->c->c, res_of(cc), cc->cluster ? NULL : cc->ns, body, &ao,
                              status_done, cc)) < 0)
        goto fail;
    cc->c->m.status_writes++;
    tkm_dbg("controller: %s: writing status", cc->qkey);
    json_decref(body);
    tkm_api_cache_status_release(&st);
    return;
fail:
    tkm_warn("controller: %s: cannot build the status: %s", cc->qkey, strerror(-rc));
    json_decref(body);
    tkm_api_cache_status_release(&st);
    finish(cc, K8S_WQ_RETRY, 0);
}

/* ---- the chain -------------------------------------------------------------------------- */

static void gone(struct ctrl_cache *cc)
{
    struct ctrl *c = cc->c;
    struct ctrl_cidx *x = cc->cidx;
    char *qkey = cc->qkey; /* the queue's key until ctrl_done */
    int kind = cc->cluster;
    uint64_t t0 = cc->t0;
    if (cc->uid && cc->uid[0])
        ctrl_state_forget(c->state, cc->uid);
    cc->label_known = 0; /* walk once more: the Nodes that still carry its label */
    labels_set(cc, 0);
    x->rec = NULL;
    cc->qkey = NULL;
    ctrl_cache_free(cc);
    ctrl_nodes_cache_gc(&c->idx, x);
    ctrl_done(c, qkey, kind, t0, K8S_WQ_OK, 0);
    free(qkey);
}

/* 1 when this step is the settle wait again, done without loading the object: the last
 * step ended there (every step before the status had nothing to do), the object and
 * tkm-config are the same, and no retry is due (a step whose only news is a node report, the bulk
 * of a rollout: each report queues every cache of the node, and loading the object parses it
 * whole). Anything else that ends a step clears settle_rv (finish()). */
static int settle_fast(struct ctrl_cache *cc)
{
    if (!cc->settle_rv)
        return 0;
    const struct k8s_obj *o =
        k8s_informer_get_key(cc->c->inf[cc->cluster], cc->qkey + 2 + (cc->cluster ? 1 : 0));
    uint64_t r = next_retry(cc);
    if (!o || settle_key(cc, o->resource_version) != cc->settle_rv || (r && r <= 10))
        return 0;
    uint64_t wait = settle_wait_of(cc);
    if (!wait)
        return 0;
    settle_requeue(cc, wait, r, cc->settle_rv);
    cc->c->m.settle_fast++;
    return 1;
}

static void step(struct ctrl_cache *cc)
{
    struct view v;
    struct tkm_err err = {0};
    int rc;
    if (cc->c->stopping || (cc->c->lease && !cc->c->leading)) {
        finish(cc, K8S_WQ_OK, 0);
        return;
    }
    if (settle_fast(cc))
        return;
    rc = view_load(cc, &v, &err);
    if (rc == -ENOENT) {
        view_release(&v);
        gone(cc);
        return;
    }
    if (rc < 0) {
        tkm_warn("controller: %s: %s", cc->qkey, tkm_err_str(&err));
        event(cc, "Warning", "InvalidSpec", tkm_err_str(&err));
        view_release(&v);
        finish(cc, K8S_WQ_DROP, 0);
        return;
    }
    const char *uid = v.cache.meta.uid ? v.cache.meta.uid : "";
    if (!cc->uid || strcmp(cc->uid, uid) != 0) {
        if (cc->uid && cc->uid[0])
            cache_reset(cc); /* deleted and created again under the same name */
        free(cc->uid);
        if (!(cc->uid = strdup(uid))) {
            view_release(&v);
            finish(cc, K8S_WQ_RETRY, 0);
            return;
        }
    }
    /* name and ns are those of the queue key, which is the object's */
    if (v.deletion_ts)
        cleanup(cc, &v);
    else if (!v.has_fin) {
        if (finalizer_apply(cc, 1) < 0)
            finish(cc, K8S_WQ_RETRY, 0);
    } else if (!pin_step(cc, &v) && !rr_step(cc, &v) && !verify_step(cc, &v) &&
               !summary_step(cc, &v))
        status_step(cc, &v);
    view_release(&v);
}

void ctrl_reconcile_cache(struct ctrl *c, const char *qkey)
{
    struct ctrl_cidx *x = ctrl_nodes_cache(&c->idx, qkey + 2, 1);
    struct ctrl_cache *cc = x ? x->rec : NULL;
    int cluster = qkey[2] == '/';
    if (x && !cc && (cc = cache_new(c, x, qkey)) != NULL)
        x->rec = cc;
    if (!cc) {
        ctrl_done(c, qkey, cluster, uv_now(c->loop), K8S_WQ_RETRY, 0);
        return;
    }
    cc->t0 = uv_now(c->loop);
    step(cc);
}

void ctrl_cache_conds(const struct ctrl_cache *cc, enum tkm_api_cond_status out[4])
{
    memcpy(out, cc->conds, sizeof cc->conds);
}

int ctrl_cache_ver_failed(const struct ctrl_cache *cc)
{
    return cc->conds[0] == TKM_API_COND_FALSE && cc->ver_done &&
           cc->ver_status == TKM_API_COND_FALSE &&
           strcmp(why_reason(cc->ver_why), "VerificationDisabled") != 0;
}

void ctrl_cache_changed(struct ctrl_cache *cc)
{
    if (cc && cc->op) {
        tkm_dbg("controller: %s: changed during a registry operation: cancelling it", cc->qkey);
        tkm_verify_job_cancel(cc->op); /* it never calls back: the key ends here; the update
                                          queued it again */
        cc->op = NULL;
        ver_flight_clear(cc);
        finish(cc, K8S_WQ_OK, 0);
    }
}

static int cancel_one(const char *key, void *val, void *data)
{
    struct ctrl_cidx *x = val;
    (void)key;
    (void)data;
    if (x->rec)
        ctrl_cache_changed(x->rec);
    return 0;
}

void ctrl_caches_cancel(struct ctrl *c)
{
    ctrl_map_each(&c->idx.caches, cancel_one, NULL);
}
