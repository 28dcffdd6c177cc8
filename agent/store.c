/*
 * store.c - the verified store and the CSI-facing socket's operations.
 *
 * Materialize: declared for the pod's namespace (agent/declared.h) -> the
 * cache verified and compatible here (else FAILED_PRECONDITION with the
 * entry's reason) -> admission by the disk budget (else RESOURCE_EXHAUSTED)
 * -> the layer pulled by digest (a session pull job into a private layout
 * under <store>/pulls) and extracted into the store (lib/store's state
 * ingest on the thread pool; concurrent requests for one digest share one
 * pull) -> the extracted kernels checked against the config label (a label
 * that lies about the arch removes the entry: LabelMismatch) -> a reference
 * for (pod, volume) -> store path, target arch, mountPath hint.
 * A full disk or budget is RESOURCE_EXHAUSTED with reason StoreFull (the bytes
 * needed and free). Every failure after the refusals above is the cache's
 * lastFailure in the node status until it is next materialized, and counted
 * by reason (tkm_agent_materialize_failures_total).
 * Release drops the reference; a GC timer removes unused digests after the
 * grace period and when the budget is exceeded, least recently used first.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <fcntl.h>

#include <tkm/triton/parts.h>
#include <tkm/archive.h>
#include <tkm/fs.h>
#include <tkm/log.h>
#include <tkm/mirrors.h>
#include <tkm/oci/ref.h>
#include <tkm/util.h>

#include "agent.h"
#include "declared.h"

#define GC_PERIOD_MS (60 * 1000)

/* A Materialize call waiting for its digest to be present. */
struct agent_mat {
    struct agent_mat *next;
    struct agent_rpc_call *call;
    const struct agent_materialize_req *req; /* borrowed from call */
    char *cache_key;                         /* the index's key of the declared cache */
};

/* One layer digest being made present (pull, extract, check). */
struct agent_pull {
    struct agent_pull *next;
    struct agent *a;
    char layer[80], manifest[80];
    char *cache_key;
    struct tkm_oci_ref ref;
    char *layout;
    struct tkm_oci_job *job;
    struct tkm_store_state_job *sjob;
    struct agent_mat *waiters;
    uint64_t t0;
    int cancelled;
    int queued; /* waits for a download slot (--max-concurrent-pulls), no job yet */
    /* registry mirrors (mirrors.c): eps[0..use) are tried in order before the
     * verified upstream session; ep is the one in flight (use: the upstream) */
    struct tkm_mirror_endpoint *eps;
    size_t n_eps, use, ep;
    char source[TKM_OCI_NAME_MAX + 64]; /* endpoint_name() of what served the download */
};

static int64_t now_s(void)
{
    return (int64_t)time(NULL);
}

static void mat_free(struct agent_mat *m)
{
    free(m->cache_key);
    free(m);
}

static void vol_free(struct agent_vol *v)
{
    free(v->volume_id);
    free(v->pod_ns);
    free(v->pod_name);
    free(v->pod_uid);
    free(v->cache_ns);
    free(v->cache_name);
    free(v);
}

/* the cache key of a volume: "ns/name", or "name" for a cluster cache */
static void vol_key(const struct agent_vol *v, char *key, size_t size)
{
    if (v->cache_ns[0])
        snprintf(key, size, "%s/%s", v->cache_ns, v->cache_name);
    else
        snprintf(key, size, "%s", v->cache_name);
}

static int vol_add(struct agent *a, const struct tkm_store_ref *r)
{
    struct agent_vol *v = calloc(1, sizeof *v);
    if (!v)
        return -ENOMEM;
    v->volume_id = strdup(r->volume_id);
    v->pod_ns = strdup(r->pod_namespace ? r->pod_namespace : "");
    v->pod_name = strdup(r->pod_name ? r->pod_name : "");
    v->pod_uid = strdup(r->pod_uid ? r->pod_uid : "");
    v->cache_ns = strdup(r->cache_namespace ? r->cache_namespace : "");
    v->cache_name = strdup(r->cache_name ? r->cache_name : "");
    snprintf(v->digest, sizeof v->digest, "%s", r->digest);
    if (!v->volume_id || !v->pod_ns || !v->pod_name || !v->pod_uid || !v->cache_ns ||
        !v->cache_name) {
        vol_free(v);
        return -ENOMEM;
    }
    v->next = a->vols;
    a->vols = v;
    char key[512];
    vol_key(v, key, sizeof key);
    agent_metrics_compiles_open(a, v->pod_ns, key);
    return 0;
}

/* Counts what the pod of volume_id compiled (its scratch counts) into its
 * cache's summary, for the cache's pinned digest. */
static void vol_count(struct agent *a, const char *volume_id, const struct agent_scratch *s)
{
    char key[512], now[32];
    for (const struct agent_vol *v = a->vols; v && s->present; v = v->next) {
        if (strcmp(v->volume_id, volume_id) != 0)
            continue;
        vol_key(v, key, sizeof key);
        /* a cache being deleted is no longer counted (its series went) */
        const struct agent_cache *ac = agent_cache_get(a, key);
        struct agent_compiles *c = ac ? agent_compiles_get(&a->compiles, key, 1) : NULL;
        if (!c)
            return;
        tkm_api_now(now, sizeof now);
        agent_compiles_add(c, ac->digest, now, s);
        agent_metrics_compiles(a, v->pod_ns, key, s);
        return;
    }
}

static void vol_remove(struct agent *a, const char *volume_id)
{
    for (struct agent_vol **pp = &a->vols; *pp; pp = &(*pp)->next)
        if (!strcmp((*pp)->volume_id, volume_id)) {
            struct agent_vol *v = *pp;
            *pp = v->next;
            vol_free(v);
            return;
        }
}

int agent_store_extracted(struct agent *a, const char *layer)
{
    char *p = NULL;
    if (!a->store || !layer || !layer[0])
        return 0;
    int rc = tkm_store_lookup(a->store, layer, &p, NULL);
    free(p);
    return rc == 0;
}

/* ---- opening ---------------------------------------------------------------------------- */

static int store_open(struct agent *a, struct tkm_err *err)
{
    struct tkm_store_state_report rep = {0};
    struct tkm_store_ref *refs = NULL;
    size_t n = 0;
    char pulls[4096];
    int rc = tkm_mkdir_p(a->o.store_dir, 0755, NULL);
    if (rc < 0)
        return tkm_err_set(err, rc, "--store-dir %s: cannot create it: %s", a->o.store_dir,
                           strerror(-rc));
    rc = tkm_store_open(a->o.store_dir, &a->store, err);
    if (rc < 0)
        return rc;
    rc = tkm_store_state_open(a->store, now_s(), &a->state, &rep, err);
    if (rc < 0)
        return rc;
    if (rep.rebuilt)
        tkm_warn("store %s: state.db was unreadable, moved to %s and rebuilt from the directory",
                 a->o.store_dir, rep.moved_to);
    if (rep.rows_dropped || rep.adopted || rep.unmarked || rep.unreadable)
        tkm_info("store %s reconciled: %llu rows dropped, %llu trees adopted, %llu unmarked, "
                 "%llu unreadable removed",
                 a->o.store_dir, (unsigned long long)rep.rows_dropped,
                 (unsigned long long)rep.adopted, (unsigned long long)rep.unmarked,
                 (unsigned long long)rep.unreadable);
    /* pulls of an earlier run are partial by definition: start clean */
    snprintf(pulls, sizeof pulls, "%s/pulls", a->o.store_dir);
    if ((rc = tkm_rmtree_at(AT_FDCWD, pulls)) < 0)
        tkm_warn("%s: %s (left behind)", pulls, strerror(-rc));
    if (mkdir(pulls, 0700) < 0 && errno != EEXIST)
        return tkm_err_set(err, -errno, "%s: %s", pulls, strerror(errno));
    rc = tkm_store_state_refs(a->state, NULL, &refs, &n, err);
    if (rc < 0)
        return rc;
    for (size_t i = 0; i < n && rc == 0; i++)
        if (!strchr(refs[i].volume_id, '/')) /* a volume's other layers: ref_key() */
            rc = vol_add(a, &refs[i]);
    tkm_store_state_refs_free(refs, n);
    if (n)
        tkm_info("store %s: %zu volume reference(s) kept from the last run", a->o.store_dir, n);
    return rc;
}

void agent_store_close(struct agent *a)
{
    while (a->vols) {
        struct agent_vol *v = a->vols;
        a->vols = v->next;
        vol_free(v);
    }
    tkm_store_state_free(a->state);
    a->state = NULL;
    tkm_store_free(a->store);
    a->store = NULL;
}

/* ---- pulling and extracting one digest --------------------------------------------------- */

static void pull_free(struct agent_pull *p)
{
    tkm_mirror_endpoints_free(p->eps, p->n_eps);
    free(p->cache_key);
    free(p->layout);
    free(p);
}

static void pull_unlink(struct agent *a, struct agent_pull *p)
{
    for (struct agent_pull **pp = &a->pulls; *pp; pp = &(*pp)->next)
        if (*pp == p) {
            *pp = p->next;
            return;
        }
}

static int mat_continue(struct agent *a, struct agent_mat *m);
static void pf_settle(struct agent *a);
static void pulls_kick(struct agent *a);
static int pull_job(struct agent_pull *p, struct agent_cache *ac, struct tkm_err *err);
static void mirror_fell_back(struct agent_pull *p, struct agent_cache *ac,
                             const struct tkm_err *err);
static void endpoint_name(const struct agent_pull *p, size_t k, char *out, size_t n);

/* The cache was materialized (or prefetched): its lastFailure goes. */
static void fail_clear(struct agent_cache *ac)
{
    if (ac)
        ac->fail_reason[0] = ac->fail_message[0] = ac->fail_at[0] = 0;
}

/* Ends a pull: every waiter gets the store path, or code and message. */
static void pull_done(struct agent_pull *p, const char *path, int code, const char *msg)
{
    struct agent *a = p->a;
    pull_unlink(a, p);
    if (p->layout)
        tkm_rmtree_at(AT_FDCWD, p->layout);
    if (path)
        fail_clear(agent_cache_get(a, p->cache_key));
    while (p->waiters) {
        struct agent_mat *m = p->waiters;
        p->waiters = m->next;
        if (path && mat_continue(a, m)) /* the next layer of its volume, or the answer */
            continue;
        if (!path)
            agent_rpc_fail(m->call, code, msg);
        mat_free(m);
    }
    pull_free(p);
    pulls_kick(a);
    pf_settle(a);
    agent_status_changed(a);
}

/* Bytes an unprivileged writer may still use on the store's filesystem. */
static uint64_t store_free(const struct agent *a)
{
    struct statvfs sv;
    return statvfs(a->o.store_dir, &sv) == 0 ? (uint64_t)sv.f_bavail * sv.f_frsize : 0;
}

/* A failed Materialize (or prefetch) of cache key: its lastFailure in the node
 * status until it is next materialized, and the failure counted by reason. */
static void fail_record(struct agent *a, const char *key, const char *reason, const char *msg)
{
    struct agent_cache *ac = key ? agent_cache_get(a, key) : NULL;
    agent_metrics_materialize_failure(a, reason);
    if (!ac)
        return;
    snprintf(ac->fail_reason, sizeof ac->fail_reason, "%s", reason);
    snprintf(ac->fail_message, sizeof ac->fail_message, "%s", msg);
    tkm_api_now(ac->fail_at, sizeof ac->fail_at);
    agent_status_changed(a);
}

/* Ends a pull with "reason: detail" for every waiter; recorded unless the agent
 * is stopping. A full disk (rc -ENOSPC, -EDQUOT) becomes StoreFull with the bytes the
 * layer needs (download and extraction) and those free once the pull's own
 * files are gone. */
static void pull_fail(struct agent_pull *p, int code, const char *reason, int rc,
                      const char *detail)
{
    struct agent *a = p->a;
    struct agent_cache *ac = agent_cache_get(a, p->cache_key);
    struct agent_layer buf[TKM_VARIANTS_MAX];
    const struct agent_layer *L = ac ? agent_cache_layer_find(ac, p->layer, buf) : NULL;
    char m[1400];
    if (rc == -ENOSPC || rc == -EDQUOT) {
        if (p->layout) {
            tkm_rmtree_at(AT_FDCWD, p->layout);
            free(p->layout);
            p->layout = NULL;
        }
        code = TKM_GRPC_RESOURCE_EXHAUSTED;
        reason = AGENT_REASON_STORE_FULL;
        snprintf(m, sizeof m,
                 AGENT_REASON_STORE_FULL
                 ": cache %s needs %llu bytes in the store (%llu to download, %llu "
                 "extracted); its filesystem has %llu bytes free on node %s: %s",
                 p->cache_key, L ? (unsigned long long)(L->layer_bytes + L->cache_bytes) : 0ULL,
                 L ? (unsigned long long)L->layer_bytes : 0ULL,
                 L ? (unsigned long long)L->cache_bytes : 0ULL, (unsigned long long)store_free(a),
                 a->o.node_name, detail);
    } else {
        snprintf(m, sizeof m, "%s: %s", reason, detail);
    }
    if (!a->stopping)
        fail_record(a, p->cache_key, reason, m);
    pull_done(p, NULL, code, m);
}

/* The label must not lie: the arch targets of the kernels actually in the
 * layer must be those the config label announced (lib/triton scans each
 * kernel's metadata). Runs on the thread pool. */
struct label_check {
    uv_work_t w;
    struct agent_pull *p;
    char *path;
    struct tkm_triton_summary label; /* copy of the label's targets */
    int rc;
    char msg[768];
};

static void label_targets(const struct tkm_triton_summary *s, char *out, size_t n)
{
    size_t used = 0;
    out[0] = 0;
    for (size_t i = 0; i < s->n_targets && used < n; i++) {
        const struct tkm_triton_target *t = &s->targets[i].target;
        int w = snprintf(out + used, n - used, "%s%s %s warp %d", i ? ", " : "", t->backend,
                         t->arch, t->warp_size);
        if (w < 0)
            break;
        used += (size_t)w;
    }
}

static void label_run(uv_work_t *w)
{
    struct label_check *lc = w->data;
    struct tkm_triton_cache c = {0};
    struct tkm_err e = {0};
    char got[256], want[256], tp[4200];
    struct stat st;
    /* a multi-part image's store: the Triton part is <path>/triton; an MCV vLLM-only
     * image's label describes the Triton kernels under <path>/vllm */
    snprintf(tp, sizeof tp, "%s%s", lc->path, tkm_parts_is_root(lc->path) ? "/triton" : "");
    if (tkm_parts_is_root(lc->path) && stat(tp, &st) != 0) {
        struct tkm_vllm_info v = {0};
        snprintf(tp, sizeof tp, "%s/vllm", lc->path);
        lc->rc = tkm_vllm_scan(&v, tp, &e);
        if (lc->rc == 0)
            lc->rc = tkm_triton_summary_parse(&c.summary, v.summary, &e);
        tkm_vllm_info_release(&v);
    } else {
        lc->rc = tkm_triton_cache_scan(&c, tp, &e);
    }
    if (lc->rc < 0) {
        snprintf(lc->msg, sizeof lc->msg, "the extracted cache cannot be read: %s",
                 tkm_err_str(&e));
        return;
    }
    int same = c.summary.n_targets == lc->label.n_targets;
    for (size_t i = 0; same && i < c.summary.n_targets; i++) {
        const struct tkm_triton_target *x = &c.summary.targets[i].target,
                                       *y = &lc->label.targets[i].target;
        same = !strcmp(x->backend, y->backend) && !strcmp(x->arch, y->arch) &&
               x->warp_size == y->warp_size;
    }
    if (!same) {
        label_targets(&c.summary, got, sizeof got);
        label_targets(&lc->label, want, sizeof want);
        snprintf(lc->msg, sizeof lc->msg,
                 "label mismatch: the image config's cache.triton.image/summary label says "
                 "[%s], but the %zu kernels in the layer are built for [%s]",
                 want, c.n_kernels, got[0] ? got : "nothing");
        lc->rc = -EBADMSG;
    }
    tkm_triton_cache_release(&c);
}

static void on_removed_bad(int rc, const char *digest, uint64_t freed, const struct tkm_err *err,
                           void *data)
{
    (void)freed;
    (void)data;
    if (rc < 0)
        tkm_warn("removing %s from the store: %s", digest, tkm_err_str(err));
    else
        tkm_info("removed %s from the store (its label lied)", digest);
}

static void label_done(uv_work_t *w, int status)
{
    struct label_check *lc = w->data;
    struct agent_pull *p = lc->p;
    struct agent *a = p->a;
    struct agent_cache *ac = agent_cache_get(a, p->cache_key);
    struct agent_layer buf[TKM_VARIANTS_MAX];
    struct agent_layer *L = ac ? agent_cache_layer_find(ac, p->layer, buf) : NULL;
    struct tkm_err e = {0};
    if (status == 0 && lc->rc == 0) {
        if (L)
            *L->label_checked = 1;
        pull_done(p, lc->path, 0, NULL);
    } else {
        if (ac && L && ac->variants.from_index && lc->rc == -EBADMSG) {
            /* a variant's label lied: its GPUs lose it, the others keep theirs */
            struct agent_variant *av = &ac->vars[L->variant];
            av->state = -1;
            snprintf(av->reason, sizeof av->reason, "LabelMismatch");
            snprintf(av->message, sizeof av->message, "%s", lc->msg);
            agent_cache_rejudge(ac);
        } else if (ac && lc->rc == -EBADMSG) {
            snprintf(ac->reason, sizeof ac->reason, "LabelMismatch");
            snprintf(ac->message, sizeof ac->message, "%s", lc->msg);
        }
        if (tkm_store_state_remove_start(a->loop, a->state, p->layer, on_removed_bad, NULL, &e) < 0)
            tkm_warn("%s", tkm_err_str(&e));
        tkm_warn("cache %s@%s: %s", p->cache_key, p->layer, lc->msg);
        pull_fail(p, TKM_GRPC_FAILED_PRECONDITION,
                  lc->rc == -EBADMSG ? "LabelMismatch" : "ExtractFailed", lc->rc, lc->msg);
    }
    tkm_triton_summary_release(&lc->label);
    free(lc->path);
    free(lc);
}

static int summary_copy(struct tkm_triton_summary *dst, const struct tkm_triton_summary *src)
{
    memset(dst, 0, sizeof *dst);
    dst->targets = calloc(src->n_targets + 1, sizeof *dst->targets);
    if (!dst->targets)
        return -ENOMEM;
    memcpy(dst->targets, src->targets, src->n_targets * sizeof *dst->targets);
    dst->n_targets = src->n_targets;
    return 0;
}

static void pull_check(struct agent_pull *p, const char *path);

static void on_ingested(int rc, const char *digest, const char *path,
                        const struct tkm_store_ingest_info *info, const struct tkm_err *err,
                        void *data)
{
    struct agent_pull *p = data;
    struct agent *a = p->a;
    (void)digest;
    p->sjob = NULL;
    if (rc < 0) {
        char m[1200];
        snprintf(m, sizeof m, "extracting %s into the store failed: %s", p->layer,
                 tkm_err_str(err));
        if (rc != -ECANCELED)
            tkm_warn("cache %s: %s", p->cache_key, m);
        a->extract_errors++;
        pull_fail(p, rc == -ECANCELED ? TKM_GRPC_UNAVAILABLE : TKM_GRPC_INTERNAL, "ExtractFailed",
                  rc, m);
        return;
    }
    double secs = (double)(tkm_now_ms() - p->t0) / 1000.0;
    if (info && !info->existed) {
        a->extractions++;
        a->extract_seconds += secs;
        agent_metrics_extraction(a, secs);
        tkm_info("extracted %s (%s) from %s in %.2f s: %llu files, %llu bytes", p->layer,
                 p->cache_key, p->source[0] ? p->source : "the store", secs,
                 (unsigned long long)info->archive.files,
                 (unsigned long long)info->archive.file_bytes);
    }
    pull_check(p, path);
}

/* The digest is in the store at path: check the kernels against the label
 * once per process, then answer the waiters. */
static void pull_check(struct agent_pull *p, const char *path)
{
    struct agent *a = p->a;
    struct agent_cache *ac = agent_cache_get(a, p->cache_key);
    struct agent_layer buf[TKM_VARIANTS_MAX];
    struct agent_layer *L = ac ? agent_cache_layer_find(ac, p->layer, buf) : NULL;
    if (!L) {
        pull_done(p, NULL, TKM_GRPC_UNAVAILABLE,
                  "the cache was deleted or changed while it was pulled; retry");
        return;
    }
    if (*L->label_checked) {
        pull_done(p, path, 0, NULL);
        return;
    }
    struct label_check *lc = calloc(1, sizeof *lc);
    if (!lc || !(lc->path = strdup(path)) || summary_copy(&lc->label, L->summary) < 0) {
        if (lc) {
            free(lc->path);
            tkm_triton_summary_release(&lc->label);
        }
        free(lc);
        pull_fail(p, TKM_GRPC_INTERNAL, "Internal", 0, "out of memory");
        return;
    }
    lc->w.data = lc;
    lc->p = p;
    if (uv_queue_work(a->loop, &lc->w, label_run, label_done) < 0) {
        free(lc->path);
        tkm_triton_summary_release(&lc->label);
        free(lc);
        pull_fail(p, TKM_GRPC_INTERNAL, "Internal", 0, "cannot queue the label check");
    }
}

static void on_pulled(struct tkm_oci_job *job, int rc, struct tkm_oci_job_result *res,
                      const struct tkm_err *err, void *data)
{
    struct agent_pull *p = data;
    struct agent *a = p->a;
    struct tkm_err e = {0};
    char blob[4200], src[600];
    (void)job;
    p->job = NULL;
    struct agent_cache *ac = agent_cache_get(a, p->cache_key);
    if (rc < 0 && rc != -ECANCELED && !p->cancelled && p->ep < p->use) {
        /* a mirror failed (unreachable, wrong bytes, ...): the next endpoint */
        if (ac && ac->session) {
            mirror_fell_back(p, ac, err);
            p->ep++;
            if (pull_job(p, ac, &e) == 0)
                return;
            rc = e.code ? e.code : -EIO;
            err = &e;
        }
    }
    pulls_kick(a); /* its download slot is free (extraction does not hold one) */
    if (rc < 0) {
        char m[1200];
        int transient = rc != -EBADMSG && rc != -ENOENT && rc != -EACCES && rc != -EPERM &&
                        rc != -EINVAL && rc != -ECANCELED && rc != -ENOSPC && rc != -EDQUOT;
        if (transient)
            a->registry_errors++;
        snprintf(m, sizeof m, "pulling %s: %s", p->layer, tkm_err_str(err));
        pull_fail(p, transient || rc == -ECANCELED ? TKM_GRPC_UNAVAILABLE : TKM_GRPC_INTERNAL,
                  rc == -EBADMSG ? "DigestMismatch"
                  : rc == -ETIME ? TKM_OCI_REASON_PULL_DEADLINE
                  : transient    ? "RegistryUnreachable"
                                 : "PullFailed",
                  rc, m);
        return;
    }
    if (strcmp(res->digest, p->manifest) != 0 || res->image.parsed.n_descs != 1 ||
        strcmp(res->image.parsed.descs[0].digest, p->layer) != 0) {
        pull_fail(p, TKM_GRPC_FAILED_PRECONDITION, "DigestMismatch", 0,
                  "the pulled image is not the one that was verified");
        return;
    }
    endpoint_name(p, p->ep, p->source, sizeof p->source);
    if (ac)
        snprintf(ac->pulled_from, sizeof ac->pulled_from, "%s", p->source);
    if (p->ep < p->use)
        a->pulled_bytes_mirror += res->image.parsed.descs[0].size;
    else
        a->pulled_bytes_upstream += res->image.parsed.descs[0].size;
    struct tkm_archive_opts o;
    tkm_archive_opts_init(&o);
    /* A multi-part image (Inductor, vLLM beside Triton) lands as triton/,
     * inductor/, vllm/ in the store; a Triton-only one as the cache itself. */
    if (tkm_parts_from_config(&res->image.config) & (TKM_PART_INDUCTOR | TKM_PART_VLLM))
        o.rename = tkm_parts_rename_pairs();
    else
        o.strip = "io.triton.cache/";
    o.blob_size = res->image.parsed.descs[0].size;
    if (res->image.config.n_diff_ids == 1)
        o.diff_id = res->image.config.diff_ids[0];
    snprintf(blob, sizeof blob, "%s/blobs/sha256/%s", p->layout, p->layer + 7);
    snprintf(src, sizeof src, "%s %s@%s", p->cache_key, p->ref.repo, p->manifest);
    rc = tkm_store_state_ingest_start(a->loop, a->state, p->layer, blob, &o, src, on_ingested, p,
                                      &p->sjob, &e);
    if (rc < 0)
        pull_fail(p, TKM_GRPC_INTERNAL, "ExtractFailed", rc, tkm_err_str(&e));
}

/* Where endpoint k of p's plan is, for messages: "mirror <host>" or "upstream <host>". */
static void endpoint_name(const struct agent_pull *p, size_t k, char *out, size_t n)
{
    if (k < p->use)
        snprintf(out, n, "%s %s%s", p->eps[k].upstream ? "registry" : "mirror", p->eps[k].host,
                 p->eps[k].path && strcmp(p->eps[k].path, "/v2") ? p->eps[k].path : "");
    else
        snprintf(out, n, "upstream %s", p->ref.host);
}

/* A mirror failed: an Event and a count, never a failure of the pull while
 * another endpoint is left. */
static void mirror_fell_back(struct agent_pull *p, struct agent_cache *ac,
                             const struct tkm_err *err)
{
    char from[TKM_OCI_NAME_MAX + 64], to[TKM_OCI_NAME_MAX + 64];
    endpoint_name(p, p->ep, from, sizeof from);
    endpoint_name(p, p->ep + 1, to, sizeof to);
    p->a->mirror_fallbacks++;
    tkm_warn("cache %s: pulling %s from %s failed: %s; trying %s", p->cache_key, p->manifest, from,
             tkm_err_str(err), to);
    agent_cache_event(p->a, ac, "Warning", "MirrorFallback",
                      "node %s: pulling %.19s from %s failed (%s); trying %s", p->a->o.node_name,
                      p->manifest, from, tkm_err_str(err), to);
}

/* Starts p's download at endpoint p->ep of its plan (mirrors first), falling
 * forward past endpoints whose job cannot start; the last is ac's verified
 * upstream session. */
static int pull_job(struct agent_pull *p, struct agent_cache *ac, struct tkm_err *err)
{
    while (p->ep < p->use) {
        const struct tkm_mirror_endpoint *ep = &p->eps[p->ep];
        struct tkm_oci_ref r = p->ref;
        struct tkm_err e = {0};
        struct tkm_oci_session *s =
            agent_mirror_session(p->a, ep, tkm_oci_session_deadline(ac->session), &e);
        snprintf(r.host, sizeof r.host, "%s", ep->host);
        snprintf(r.repo, sizeof r.repo, "%s", ep->repo);
        if (s && tkm_oci_job_pull(s, &r, p->layout, "agent", on_pulled, p, &p->job, &e) == 0)
            return 0;
        mirror_fell_back(p, ac, &e);
        p->ep++;
    }
    return tkm_oci_job_pull(ac->session, &p->ref, p->layout, "agent", on_pulled, p, &p->job, err);
}

/* Downloads running (a job in flight). */
static unsigned pulls_running(const struct agent *a)
{
    unsigned n = 0;
    for (const struct agent_pull *p = a->pulls; p; p = p->next)
        n += p->job != NULL;
    return n;
}

/* Starts queued pulls, oldest first (a->pulls is newest first), while fewer
 * than --max-concurrent-pulls downloads run. */
static void pulls_kick(struct agent *a)
{
    while (!a->stopping && pulls_running(a) < a->o.max_pulls) {
        struct agent_pull *oldest = NULL;
        struct tkm_err e = {0};
        for (struct agent_pull *p = a->pulls; p; p = p->next)
            if (p->queued)
                oldest = p;
        if (!oldest)
            return;
        oldest->queued = 0;
        struct agent_cache *ac = agent_cache_get(a, oldest->cache_key);
        int rc = ac && ac->session ? pull_job(oldest, ac, &e)
                                   : tkm_err_set(&e, -EAGAIN, "no registry session for %s any more",
                                                 oldest->cache_key);
        if (rc < 0)
            pull_fail(oldest, TKM_GRPC_UNAVAILABLE, "RegistryUnreachable", rc, tkm_err_str(&e));
    }
}

/* Starts making layer L of ac present (or joins the pull in flight); m (taken,
 * may be NULL for a prefetch) waits for it. 0, or < 0 with m untouched. */
static int pull_start(struct agent *a, struct agent_cache *ac, const struct agent_layer *L,
                      struct agent_mat *m, struct tkm_err *err)
{
    for (struct agent_pull *p = a->pulls; p; p = p->next)
        if (!strcmp(p->layer, L->layer)) {
            if (m) {
                m->next = p->waiters;
                p->waiters = m;
            }
            return 0;
        }
    struct agent_pull *p = calloc(1, sizeof *p);
    if (!p)
        return tkm_err_set(err, -ENOMEM, "out of memory");
    p->a = a;
    p->t0 = tkm_now_ms();
    snprintf(p->layer, sizeof p->layer, "%s", L->layer);
    snprintf(p->manifest, sizeof p->manifest, "%s", L->manifest);
    struct tkm_buf lb;
    tkm_buf_init(&lb, 4096);
    p->cache_key = strdup(ac->key);
    if (!p->cache_key ||
        tkm_buf_printf(&lb, "%s/pulls/%.16s-%d", a->o.store_dir, L->manifest + 7, (int)getpid()) <
            0 ||
        tkm_oci_ref_parse(&p->ref, ac->c.spec.cache_image, err) < 0) {
        tkm_buf_release(&lb);
        pull_free(p);
        return err->code ? err->code : tkm_err_set(err, -ENOMEM, "out of memory");
    }
    p->layout = tkm_buf_detach(&lb, NULL);
    char *have = NULL;
    if (tkm_store_lookup(a->store, p->layer, &have, NULL) == 0) {
        /* already extracted (an earlier run): only the label check */
        if (m)
            p->waiters = m;
        p->next = a->pulls;
        a->pulls = p;
        free(p->layout);
        p->layout = NULL;
        pull_check(p, have);
        free(have);
        return 0;
    }
    if (!ac->session) {
        pull_free(p);
        return tkm_err_set(err, -EAGAIN, "no registry session for %s yet", ac->key);
    }
    snprintf(p->ref.digest, sizeof p->ref.digest, "%s", L->manifest);
    p->ref.tag[0] = 0;
    int prc = agent_mirrors_plan(a, &p->ref, &p->eps, &p->n_eps, &p->use, err);
    if (prc < 0) {
        pull_free(p);
        return prc;
    }
    if (pulls_running(a) >= a->o.max_pulls) {
        p->queued = 1; /* pulls_kick starts it, oldest first */
        tkm_dbg("pull of %s (%s) queued: %u downloads running (--max-concurrent-pulls)", p->layer,
                ac->key, (unsigned)a->o.max_pulls);
    } else {
        int rc = pull_job(p, ac, err);
        if (rc < 0) {
            pull_free(p);
            return rc;
        }
    }
    if (m)
        p->waiters = m;
    p->next = a->pulls;
    a->pulls = p;
    return 0;
}

/* ---- the socket's operations ------------------------------------------------------------------
 */

static struct agent_cache *mat_cache(struct agent *a, const struct agent_mat *m)
{
    return agent_cache_get(a, m->cache_key);
}

/* The arch the cache was judged compatible for here (the first such GPU's; "" when none). */
static const char *target_arch(const struct agent_cache *ac)
{
    for (size_t i = 0; i < ac->verdicts.n; i++) {
        const struct tkm_compat_verdict *v = &ac->verdicts.v[i];
        const struct tkm_triton_summary *s = agent_verdict_summary(ac, i);
        if (v->compatible && s && v->target_index >= 0 && (size_t)v->target_index < s->n_targets)
            return s->targets[v->target_index].target.arch;
    }
    return "";
}

/* The store reference key of a volume's layer k: the volume id for its first layer,
 * "<volume id>/<k>" for the others (a volume id never holds a '/', rpc.h). */
static void ref_key(char *out, size_t n, const char *volume_id, size_t k)
{
    if (k)
        snprintf(out, n, "%s/%zu", volume_id, k);
    else
        snprintf(out, n, "%s", volume_id);
}

/* A Warning Event on the request's pod (none without a recorder: --once, tests). */
static void pod_warning(struct agent *a, const struct agent_materialize_req *req,
                        const char *reason, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void pod_warning(struct agent *a, const struct agent_materialize_req *req,
                        const char *reason, const char *fmt, ...)
{
    char msg[1600];
    va_list ap;
    if (!a->rec)
        return;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    struct k8s_object_ref pod = {.api_version = "v1",
                                 .kind = "Pod",
                                 .namespace = req->pod_ns,
                                 .name = req->pod_name,
                                 .uid = req->pod_uid};
    k8s_event_emit(a->rec, &pod, "Warning", reason, "%s", msg);
}

/* Every layer the volume uses is present at paths[]: take a reference on each
 * and reply. */
static void mat_answer(struct agent *a, struct agent_mat *m, struct agent_cache *ac,
                       const struct agent_layer *L, size_t nl, char **paths)
{
    const struct agent_materialize_req *req = m->req;
    struct tkm_err e = {0};
    const char *parts[3];
    char key[AGENT_RPC_MAX_VOLUME_ID + 32];
    int created = 0;
    for (size_t k = 0; k < nl; k++) {
        int c = 0;
        ref_key(key, sizeof key, req->volume_id, k);
        struct tkm_store_ref r = {.volume_id = key,
                                  .digest = L[k].layer,
                                  .pod_namespace = req->pod_ns,
                                  .pod_name = req->pod_name,
                                  .pod_uid = req->pod_uid,
                                  .cache_namespace = ac->c.cluster ? "" : ac->c.meta.ns,
                                  .cache_name = ac->c.meta.name};
        int rc = tkm_store_state_acquire(a->state, &r, now_s(), &c, &e);
        if (rc < 0) {
            agent_rpc_fail(m->call,
                           rc == -EEXIST   ? TKM_GRPC_ALREADY_EXISTS
                           : rc == -ENOENT ? TKM_GRPC_UNAVAILABLE
                                           : TKM_GRPC_INTERNAL,
                           tkm_err_str(&e));
            return;
        }
        if (k == 0) {
            created = c;
            if (created)
                vol_remove(a, req->volume_id); /* served empty before, now from the store */
            if (created && vol_add(a, &r) < 0)
                tkm_err("out of memory recording volume %s", req->volume_id);
        }
    }
    const char *mp = req->mount_path ? req->mount_path : ac->c.spec.mount_path;
    if (!mp && created)
        pod_warning(a, req, "NoMountPath",
                    "cache %s%s%s has no mountPath (neither the volume attribute nor the "
                    "cache's spec.mountPath): the group files keep the paths they were built "
                    "with, so Triton will not hit the cache unless TRITON_CACHE_DIR is that "
                    "path",
                    ac->c.cluster ? "" : ac->c.meta.ns, ac->c.cluster ? "" : "/", ac->c.meta.name);
    struct agent_materialize_result res = {.store_path = paths[0],
                                           .target_arch = target_arch(ac),
                                           .mount_path = mp,
                                           .cache_namespace = ac->c.cluster ? "" : ac->c.meta.ns,
                                           .cache_name = ac->c.meta.name,
                                           .digest = ac->digest,
                                           .store_paths = (const char *const *)paths,
                                           .n_store_paths = nl,
                                           .parts = parts,
                                           .n_parts = agent_parts_names(L[0].parts, parts)};
    tkm_info("materialized %s for pod %s/%s volume %s: %s%s", ac->key, req->pod_ns, req->pod_name,
             req->volume_id, paths[0], nl > 1 ? " (and the other variants' dirs)" : "");
    fail_clear(ac);
    agent_rpc_reply_materialize(m->call, &res);
    agent_status_changed(a);
}

/* Makes the next layer of m's volume present (m waits on its pull: 1), or answers m
 * once every layer is (or fails it: 0, the caller frees m). */
static int mat_continue(struct agent *a, struct agent_mat *m)
{
    struct agent_cache *ac = mat_cache(a, m);
    struct agent_layer L[TKM_VARIANTS_MAX];
    char *paths[TKM_VARIANTS_MAX] = {0};
    struct tkm_err e = {0};
    size_t nl = 0, have = 0;
    if (!ac || !agent_cache_usable(ac) || !(nl = agent_cache_layers(ac, L))) {
        char msg[1000];
        snprintf(msg, sizeof msg, "%s: %s", ac ? ac->reason : "NotDeclared",
                 ac ? ac->message : "the cache was deleted");
        agent_rpc_fail(m->call, TKM_GRPC_FAILED_PRECONDITION, msg);
        return 0;
    }
    for (; have < nl; have++)
        if (!*L[have].label_checked ||
            tkm_store_lookup(a->store, L[have].layer, &paths[have], NULL) < 0)
            break;
    if (have == nl)
        mat_answer(a, m, ac, L, nl, paths);
    for (size_t k = 0; k < nl; k++)
        free(paths[k]);
    if (have == nl)
        return 0;
    if (pull_start(a, ac, &L[have], m, &e) < 0) {
        fail_record(a, ac->key, "PullFailed", tkm_err_str(&e));
        agent_rpc_fail(m->call, TKM_GRPC_UNAVAILABLE, tkm_err_str(&e));
        return 0;
    }
    return 1;
}

/* Why ac cannot be used here, as a gRPC code and a message; 0 when it can.
 * *empty (optional) is set to the reason when no GPU here fits for
 * compatibility reasons only and the cache's policy is Empty: the caller may
 * serve an empty volume instead (the code is FAILED_PRECONDITION, msg the
 * sentence either way). */
static int cache_refusal(const struct agent *a, const struct agent_cache *ac, char *msg, size_t n,
                         const char **empty)
{
    const char *reason = NULL;
    int compat = 0;
    if (empty)
        *empty = NULL;
    if (!ac->live) {
        snprintf(msg, n, "cache %s is being deleted", ac->key);
        return TKM_GRPC_UNAVAILABLE;
    }
    if (!ac->digest[0]) {
        snprintf(msg, n, "%s: %s", ac->reason[0] ? ac->reason : "DigestNotPinned", ac->message);
        return TKM_GRPC_FAILED_PRECONDITION;
    }
    if (!ac->inspected && !ac->reason[0]) {
        snprintf(msg, n, "cache %s@%s is still being verified on node %s; retry", ac->key,
                 ac->digest, a->o.node_name);
        return TKM_GRPC_UNAVAILABLE;
    }
    if (!agent_cache_usable(ac)) {
        snprintf(msg, n, "%s: %s", ac->reason, ac->message);
        return !strcmp(ac->reason, "RegistryUnreachable") || !strcmp(ac->reason, "APIUnavailable")
                   ? TKM_GRPC_UNAVAILABLE
                   : TKM_GRPC_FAILED_PRECONDITION;
    }
    if (!agent_cache_fits(a, ac, &reason, &compat, msg, n)) {
        if (empty && compat && agent_cache_fallback(a, ac) == TKM_API_FALLBACK_EMPTY)
            *empty = reason;
        return TKM_GRPC_FAILED_PRECONDITION;
    }
    return 0;
}

/* No GPU here can use the cache and its policy is Empty: an empty writable
 * volume of the cache's parts. The pod is told once per volume (a Warning
 * event CacheNotUsed) and the volume counted; it is remembered (not in the
 * store: it holds nothing) so that Release knows it and pods[] names it. */
static void mat_empty(struct agent *a, struct agent_rpc_call *call,
                      const struct agent_materialize_req *req, const struct agent_cache *ac,
                      const char *reason, const char *msg)
{
    const char *parts[3];
    size_t np = agent_parts_names(ac->parts, parts);
    const char *cns = ac->c.cluster ? "" : ac->c.meta.ns;
    const struct agent_vol *known = NULL;
    for (const struct agent_vol *v = a->vols; v && !known; v = v->next)
        if (!strcmp(v->volume_id, req->volume_id))
            known = v;
    if (!known) {
        struct tkm_store_ref r = {.volume_id = req->volume_id,
                                  .digest = "",
                                  .pod_namespace = req->pod_ns,
                                  .pod_name = req->pod_name,
                                  .pod_uid = req->pod_uid,
                                  .cache_namespace = cns,
                                  .cache_name = ac->c.meta.name};
        if (vol_add(a, &r) < 0)
            tkm_err("out of memory recording volume %s", req->volume_id);
        agent_metrics_empty_volume(a, reason);
        pod_warning(a, req, "CacheNotUsed",
                    "cache %s%s%s is not used on node %s (whenIncompatible: Empty): the pod gets "
                    "an empty writable cache and compiles its own kernels. %s",
                    cns, cns[0] ? "/" : "", ac->c.meta.name, a->o.node_name, msg);
        tkm_info("volume %s of pod %s/%s: cache %s served empty: %s", req->volume_id, req->pod_ns,
                 req->pod_name, ac->key, msg);
    }
    struct agent_materialize_result res = {.mount_path = req->mount_path ? req->mount_path
                                                                         : ac->c.spec.mount_path,
                                           .cache_namespace = cns,
                                           .cache_name = ac->c.meta.name,
                                           .digest = ac->digest,
                                           .empty = 1,
                                           .empty_reason = reason,
                                           .empty_message = msg,
                                           .parts = parts,
                                           .n_parts = np};
    agent_rpc_reply_materialize(call, &res);
    agent_status_changed(a);
}

/* Admission: the cache's layers not in the store yet fit the disk budget once
 * unreferenced entries go; 0 with nothing to add. */
static int admit(struct agent *a, struct agent_cache *ac, char *msg, size_t n)
{
    struct tkm_err e = {0};
    struct agent_layer L[TKM_VARIANTS_MAX];
    size_t nl = agent_cache_layers(ac, L);
    int fits = 0;
    uint64_t need = 0, bytes = 0;
    for (size_t k = 0; k < nl; k++)
        if (!agent_store_extracted(a, L[k].layer))
            bytes += L[k].cache_bytes;
    if (!bytes)
        return 0;
    if (tkm_store_state_would_fit(a->state, bytes, a->o.store_budget, &fits, &need, &e) < 0) {
        snprintf(msg, n, "%s", tkm_err_str(&e));
        return TKM_GRPC_INTERNAL;
    }
    if (!fits) {
        struct tkm_store_stats st = {0};
        tkm_store_state_stats(a->state, &st, NULL);
        snprintf(msg, n,
                 AGENT_REASON_STORE_FULL
                 ": cache %s needs %llu bytes; the store's budget of %llu bytes has "
                 "%llu free: the rest is held by caches in use on node %s",
                 ac->key, (unsigned long long)bytes, (unsigned long long)a->o.store_budget,
                 (unsigned long long)(a->o.store_budget > st.referenced_bytes
                                          ? a->o.store_budget - st.referenced_bytes
                                          : 0),
                 a->o.node_name);
        return TKM_GRPC_RESOURCE_EXHAUSTED;
    }
    if (need)
        agent_store_gc(a, bytes); /* evict least recently used unreferenced entries first */
    return 0;
}

static void op_materialize(struct agent_rpc_call *call, const struct agent_materialize_req *req,
                           void *data)
{
    struct agent *a = data;
    struct agent_cache *ac = NULL;
    struct tkm_err e = {0};
    char msg[1200];
    if (!agent_ready(a)) {
        agent_rpc_fail(call, TKM_GRPC_UNAVAILABLE,
                       "tkm-agent is starting: informers not synced or the store not open");
        return;
    }
    int rc = agent_declared_find(&a->idx, req->pod_ns, req, &ac, &e);
    if (rc < 0) {
        agent_rpc_fail(call, agent_declared_grpc_code(rc), tkm_err_str(&e));
        return;
    }
    const char *empty = NULL;
    int code = cache_refusal(a, ac, msg, sizeof msg, &empty);
    if (empty) {
        mat_empty(a, call, req, ac, empty, msg);
        return;
    }
    if (!code && (code = admit(a, ac, msg, sizeof msg)) != 0)
        fail_record(a, ac->key,
                    code == TKM_GRPC_RESOURCE_EXHAUSTED ? AGENT_REASON_STORE_FULL : "Internal",
                    msg);
    if (code) {
        agent_rpc_fail(call, code, msg);
        return;
    }
    struct agent_mat *m = calloc(1, sizeof *m);
    if (!m || !(m->cache_key = strdup(ac->key))) {
        free(m);
        agent_rpc_fail(call, TKM_GRPC_INTERNAL, "out of memory");
        return;
    }
    m->call = call;
    m->req = req;
    if (!mat_continue(a, m))
        mat_free(m);
}

static void op_cancel(struct agent_rpc_call *call, void *data)
{
    /* the pull goes on for the other waiters and the store; the reply will
     * only free the handle */
    (void)call;
    (void)data;
}

static void op_release(struct agent_rpc_call *call, const struct agent_release_req *req, void *data)
{
    struct agent *a = data;
    struct tkm_err e = {0};
    if (!a->state) {
        agent_rpc_fail(call, TKM_GRPC_UNAVAILABLE, "tkm-agent is starting: the store is not open");
        return;
    }
    int rc = tkm_store_state_release(a->state, req->volume_id, now_s(), &e);
    if (rc == -ENOENT) {
        /* an empty volume (the Empty fallback) has no reference in the store */
        int empty = 0;
        for (const struct agent_vol *v = a->vols; v; v = v->next)
            empty |= !strcmp(v->volume_id, req->volume_id) && !v->digest[0];
        if (empty) {
            vol_count(a, req->volume_id, &req->scratch);
            vol_remove(a, req->volume_id);
            tkm_info("released empty volume %s", req->volume_id);
            agent_status_changed(a);
        }
        agent_rpc_reply_release(call, empty);
        return;
    }
    if (rc < 0) {
        agent_rpc_fail(call, TKM_GRPC_INTERNAL, tkm_err_str(&e));
        return;
    }
    /* the volume's other layers (variants): "<volume id>/<k>" */
    char key[AGENT_RPC_MAX_VOLUME_ID + 32];
    for (size_t k = 1; k < TKM_VARIANTS_MAX; k++) {
        ref_key(key, sizeof key, req->volume_id, k);
        if (tkm_store_state_release(a->state, key, now_s(), &e) < 0)
            break;
    }
    vol_count(a, req->volume_id, &req->scratch);
    vol_remove(a, req->volume_id);
    tkm_info("released volume %s", req->volume_id);
    agent_rpc_reply_release(call, 1);
    agent_status_changed(a);
}

static void op_status(struct agent_rpc_call *call, void *data)
{
    struct agent *a = data;
    char msg[256];
    int ready = agent_ready(a);
    size_t n = 0;
    for (struct agent_cache *ac = a->caches; ac; ac = ac->next)
        n += agent_cache_usable(ac);
    if (ready)
        snprintf(msg, sizeof msg, "%zu GPU(s), %zu usable cache(s)", a->gpus.n, n);
    else
        snprintf(msg, sizeof msg, "starting: %s",
                 a->state ? "informers not synced" : "store not open");
    struct agent_status_result r = {.ready = ready, .message = msg, .node_name = a->o.node_name};
    agent_rpc_reply_status(call, &r);
}

static const struct agent_rpc_ops ops = {
    .materialize = op_materialize, .release = op_release, .status = op_status, .cancel = op_cancel};

int agent_ready(const struct agent *a)
{
    return a->state && a->probed && a->inf_tkc && k8s_informer_has_synced(a->inf_tkc) &&
           k8s_informer_has_synced(a->inf_tkcc) && a->cfg_ready;
}

int agent_socket_start(struct agent *a, struct tkm_err *err)
{
    struct agent_rpc_opts ro = {.max_connections = (unsigned)a->o.socket_max_conns,
                                .idle_timeout_ms = a->o.socket_idle_ms};
    return agent_rpc_server_new(a->loop, a->o.socket, &ops, a, &ro, &a->rpc, err);
}

/* ---- prefetch and GC --------------------------------------------------------------------------
 */

/* Sets ac's prefetch state; the node status follows. */
static void pf_set(struct agent *a, struct agent_cache *ac, enum tkm_api_prefetch_state st)
{
    if (ac->prefetch == st)
        return;
    ac->prefetch = st;
    agent_status_changed(a);
}

/* A cache whose prefetch was Pulling and whose layers are no longer being
 * pulled (extracted or failed): the field goes, its slot is given back. */
static void pf_settle(struct agent *a)
{
    for (struct agent_cache *ac = a->caches; ac; ac = ac->next) {
        if (ac->prefetch != TKM_API_PREFETCH_PULLING)
            continue;
        struct agent_layer L[TKM_VARIANTS_MAX];
        size_t nl = agent_cache_layers(ac, L);
        int busy = 0;
        for (size_t k = 0; k < nl && !busy; k++)
            for (struct agent_pull *p = a->pulls; p && !busy; p = p->next)
                busy = !strcmp(p->layer, L[k].layer);
        if (!busy)
            pf_set(a, ac, TKM_API_PREFETCH_NONE);
    }
}

/* Staged prefetch (docs/prefetch.md): with tkm-config prefetchSlots above 0 a
 * cache whose layers must be downloaded waits until tkm-controller names this
 * node in the cache status' prefetch.granted (cache.c calls again when the
 * status changes while Waiting). Materialize never waits. */
void agent_store_prefetch(struct agent *a, struct agent_cache *ac)
{
    struct tkm_err e = {0};
    char msg[1200];
    if (!a->state || !a->cfg.prefetch || a->stopping ||
        cache_refusal(a, ac, msg, sizeof msg, NULL)) {
        pf_set(a, ac, TKM_API_PREFETCH_NONE);
        return;
    }
    if (admit(a, ac, msg, sizeof msg)) {
        tkm_warn("prefetch of %s skipped: %s", ac->key, msg);
        pf_set(a, ac, TKM_API_PREFETCH_NONE);
        return;
    }
    struct agent_layer L[TKM_VARIANTS_MAX];
    size_t nl = agent_cache_layers(ac, L), download = 0;
    for (size_t k = 0; k < nl; k++)
        download += !agent_store_extracted(a, L[k].layer);
    if (download && a->cfg.prefetch_slots &&
        !tkm_api_prefetch_granted(&ac->c.status.prefetch, a->o.node_name)) {
        if (ac->prefetch != TKM_API_PREFETCH_WAITING)
            tkm_info("prefetch of %s waits for a pull slot from tkm-controller (tkm-config "
                     "prefetchSlots %u)",
                     ac->key, a->cfg.prefetch_slots);
        pf_set(a, ac, TKM_API_PREFETCH_WAITING);
        return;
    }
    pf_set(a, ac,
           download && a->cfg.prefetch_slots ? TKM_API_PREFETCH_PULLING : TKM_API_PREFETCH_NONE);
    for (size_t k = 0; k < nl; k++)
        if (!(*L[k].label_checked && agent_store_extracted(a, L[k].layer)) &&
            pull_start(a, ac, &L[k], NULL, &e) < 0)
            tkm_warn("prefetch of %s: %s", ac->key, tkm_err_str(&e));
    pf_settle(a);
}

static void on_gc_removed(int rc, const char *digest, uint64_t freed, const struct tkm_err *err,
                          void *data)
{
    struct agent *a = data;
    if (rc < 0) {
        tkm_warn("GC of %s: %s", digest, tkm_err_str(err));
        return;
    }
    tkm_info("GC removed %s (%llu bytes)", digest, (unsigned long long)freed);
    for (struct agent_cache *ac = a->caches; ac; ac = ac->next) {
        if (ac->layer_digest && !strcmp(ac->layer_digest, digest))
            ac->label_checked = 0;
        for (size_t i = 0; ac->vars && i < ac->variants.n; i++)
            if (ac->vars[i].layer_digest && !strcmp(ac->vars[i].layer_digest, digest))
                ac->vars[i].label_checked = 0;
    }
    agent_status_changed(a);
}

/* Removes unused digests: idle past the grace period, and, while the store
 * (plus extra bytes about to come) exceeds the budget, least recently used. */
void agent_store_gc(struct agent *a, uint64_t extra)
{
    struct tkm_err e = {0};
    char **ds = NULL;
    size_t n = 0;
    uint64_t budget = a->o.store_budget > extra ? a->o.store_budget - extra : 1;
    if (!a->state || a->stopping)
        return;
    if (tkm_store_state_gc_plan(a->state, now_s(), (int64_t)(a->o.gc_grace_ms / 1000), budget, &ds,
                                &n, NULL, NULL, &e) < 0) {
        tkm_warn("GC plan: %s", tkm_err_str(&e));
        return;
    }
    for (size_t i = 0; i < n; i++) {
        int busy = 0;
        for (struct agent_pull *p = a->pulls; p; p = p->next)
            busy |= !strcmp(p->layer, ds[i]);
        if (!busy &&
            tkm_store_state_remove_start(a->loop, a->state, ds[i], on_gc_removed, a, &e) < 0)
            tkm_dbg("GC of %s: %s", ds[i], tkm_err_str(&e));
    }
    tkm_store_list_free(ds, n);
}

static void on_checkpoint(int rc, const struct tkm_err *err, void *data)
{
    struct agent *a = data;
    a->checkpointing = 0;
    if (rc < 0)
        tkm_warn("store state checkpoint: %s", tkm_err_str(err));
}

static void on_gc_timer(uv_timer_t *t)
{
    struct agent *a = t->data;
    struct tkm_err e = {0};
    agent_store_gc(a, 0);
    /* the WAL goes back into state.db off the loop (docs/store.md) */
    if (a->state && !a->checkpointing && tkm_store_state_wal_frames(a->state) > 1000) {
        if (tkm_store_state_checkpoint_start(a->loop, a->state, on_checkpoint, a, &e) == 0)
            a->checkpointing = 1;
        else
            tkm_warn("store state checkpoint: %s", tkm_err_str(&e));
    }
}

int agent_store_start(struct agent *a, struct tkm_err *err)
{
    int rc = store_open(a, err);
    if (rc < 0)
        return rc;
    /* at least once a minute; more often for a short grace period */
    uint64_t period = a->o.gc_grace_ms / 2 < GC_PERIOD_MS ? a->o.gc_grace_ms / 2 : GC_PERIOD_MS;
    if (period < 1000)
        period = 1000;
    uv_timer_start(&a->gc_timer, on_gc_timer, period, period);
    return agent_socket_start(a, err);
}

/* Stops what is in flight: pulls cancelled (a cancelled pull removes its
 * staging directory, a cancelled ingest leaves nothing visible), the socket
 * closed (calls in flight get UNAVAILABLE). */
void agent_store_stop(struct agent *a)
{
    /* queued pulls never started: their waiters get UNAVAILABLE now */
    for (struct agent_pull *p = a->pulls, *n; p; p = n) {
        n = p->next;
        if (p->queued)
            pull_done(p, NULL, TKM_GRPC_UNAVAILABLE, "tkm-agent is stopping");
    }
    for (struct agent_pull *p = a->pulls; p; p = p->next) {
        if (p->job)
            tkm_oci_job_cancel(p->job);
        if (p->sjob)
            tkm_store_state_job_cancel(p->sjob);
    }
    agent_rpc_server_close(a->rpc, NULL, NULL);
    a->rpc = NULL;
}
