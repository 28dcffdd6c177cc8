/*
 * cache.c - the caches the agent watches and their one reconcile function.
 *
 * The informers (TritonKernelCache in all namespaces, TritonKernelCacheCluster,
 * the ConfigMap tkm-config) decode each event once into the index
 * (declared.h) and put the cache's key on the work queue (k8s/workqueue.h),
 * as tkm-controller does. agent_cache_reconcile() runs per key: it reads the
 * cache's current decoded state and, unless its result is for the current
 * inputs (spec, pinned digest, tkm-config) and younger than
 * AGENT_REVERIFY_MS, runs the pipeline: pull credentials -> inspect by
 * digest (manifest, config, Triton labels) -> effective policy -> signature
 * -> per-GPU verdicts. The key stays in processing until the pipeline
 * reports; a transient failure is retried with the queue's backoff
 * (K8S_WQ_RETRY), a result is re-verified through add_after. Its sinks: the
 * node status (agent_status_changed) and the store's prefetch.
 * docs/agent.md has the design.
 */
#include <errno.h>
#include <malloc.h>
#include <stdlib.h>
#include <string.h>

#include <tkm/log.h>
#include <tkm/oci/ref.h>
#include <tkm/triton/image.h>
#include <tkm/trust/sigjob.h>
#include <tkm/api/verify.h>
#include <tkm/util.h>

#include "agent.h"

/* One pass of the pipeline (a verify job) for one queue key. */
struct agent_run {
    struct agent_cache *ac;
    struct agent *a;
    char *key;    /* the queue key in processing */
    char *inputs; /* the inputs it verifies (ac->inputs when it started) */
    uint64_t cfg; /* ... and tkm-config's generation */
    struct tkm_verify_job *job;
    /* a variant index: the picked variants' inspections in flight (variants.c) */
    struct agent_vinsp *vi;
    size_t n_vi, vpending;
    int abandoned;      /* abandoned with inspections in flight: freed by the last one */
    char vreason[64];   /* a transient inspection failure: the run's */
    char vmessage[768]; /* ... and its message */
};

/* One variant's inspection in a run. */
struct agent_vinsp {
    struct agent_run *r;
    size_t idx; /* in ac->variants */
    struct tkm_oci_job *job;
};

static void run_release(struct agent_run *r)
{
    free(r->key);
    free(r->inputs);
    free(r->vi);
    free(r);
}

/* Ends the key's processing (after_ms: re-verify then) and frees r (unless
 * inspections are still to report: the last one frees it). */
static void run_free(struct agent_run *r, enum k8s_wq_result res, uint64_t after_ms)
{
    struct agent *a = r->a;
    if (after_ms)
        k8s_workqueue_done_after(a->q, r->key, after_ms);
    else
        k8s_workqueue_done(a->q, r->key, res);
    if (r->vpending)
        r->abandoned = 1;
    else
        run_release(r);
    /* A burst of verifications (start, tkm-config changed) has many registry
     * jobs in flight at once; their buffers are freed in an order that leaves
     * the heap fragmented, and glibc keeps such memory. Give it back once the
     * burst is over. */
    if (--a->runs_inflight == 0)
        malloc_trim(0);
}

/* Cancels the run of ac (the job never calls back then) and ends its key's
 * processing: an add made before or after runs the key again. */
static void run_abandon(struct agent_cache *ac)
{
    struct agent_run *r = ac->run;
    if (!r)
        return;
    ac->run = NULL;
    if (r->job)
        tkm_verify_job_cancel(r->job);
    r->ac = NULL;
    for (size_t i = 0; i < r->n_vi; i++)
        if (r->vi[i].job)
            tkm_oci_job_cancel(r->vi[i].job); /* each still reports (-ECANCELED) */
    run_free(r, K8S_WQ_OK, 0);
}

static void enqueue(struct agent *a, const char *key)
{
    if (a->q && !a->stopping)
        k8s_workqueue_add(a->q, key);
}

struct agent_index *agent_caches_index(struct agent *a)
{
    if (!a->idx.live)
        agent_index_init(&a->idx, &a->caches);
    return &a->idx;
}

struct agent_cache *agent_cache_get(struct agent *a, const char *key)
{
    struct agent_cache *ac = agent_index_get(&a->idx, key);
    return ac && ac->live ? ac : NULL;
}

int agent_cache_usable(const struct agent_cache *ac)
{
    return ac->inspected && !ac->reason[0];
}

static int a_once(const struct agent_cache *ac)
{
    return ac->a->o.once;
}

static int cache_pending(const struct agent *a, const struct agent_cache *ac)
{
    return ac->run || !ac->verified_at_ms || ac->verified_cfg != a->cfg_gen ||
           (ac->inputs && (!ac->verified_inputs || strcmp(ac->inputs, ac->verified_inputs) != 0));
}

size_t agent_caches_pending(const struct agent *a)
{
    size_t n = 0;
    for (const struct agent_cache *ac = a->caches; ac; ac = ac->next)
        n += cache_pending(a, ac);
    return n;
}

void agent_once_check(struct agent *a)
{
    if (!a->o.once || a->stopping || !a->probed)
        return;
    if (!a->o.image &&
        (!a->inf_tkc || !k8s_informer_has_synced(a->inf_tkc) ||
         !k8s_informer_has_synced(a->inf_tkcc) || !k8s_informer_has_synced(a->inf_cfg)))
        return;
    if (agent_caches_pending(a))
        return;
    if (a->o.image)
        agent_caches_rejudge_all(a);
    agent_stop(a, agent_once_print(a));
}

/* ---- results --------------------------------------------------------------- */

static void set_reason(struct agent_cache *ac, const char *reason, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void set_reason(struct agent_cache *ac, const char *reason, const char *fmt, ...)
{
    va_list ap;
    snprintf(ac->reason, sizeof ac->reason, "%s", reason);
    va_start(ap, fmt);
    vsnprintf(ac->message, sizeof ac->message, fmt, ap);
    va_end(ap);
}

void agent_cache_rejudge(struct agent_cache *ac)
{
    struct agent *a = ac->a;
    agent_verdicts_release(&ac->verdicts);
    if (!ac->inspected)
        return;
    if (ac->variants.from_index) {
        int rc = agent_variants_judge(ac, &ac->verdicts);
        if (rc < 0)
            return;
        if (rc > 0 && !ac->run && a->q) {
            /* a GPU (after a probe) picks a variant not inspected yet: verify again */
            free(ac->verified_inputs);
            ac->verified_inputs = NULL;
            enqueue(a, ac->key);
        }
        ac->verdicts.judged = 1;
        tkm_api_now(ac->judged_at, sizeof ac->judged_at);
        return;
    }
    ac->verdicts.v = calloc(a->gpus.n ? a->gpus.n : 1, sizeof *ac->verdicts.v);
    if (!ac->verdicts.v)
        return;
    for (size_t i = 0; i < a->gpus.n; i++) {
        tkm_compat_check(&ac->summary, &a->gpus.gpus[i], &ac->verdicts.v[i]);
        /* the Inductor part too: a GPU uses the image only if every part fits */
        if (ac->has_inductor)
            tkm_inductor_compat_combine(&ac->inductor, &a->gpus.gpus[i], &ac->verdicts.v[i]);
    }
    ac->verdicts.n = a->gpus.n;
    ac->verdicts.judged = 1;
    tkm_api_now(ac->judged_at, sizeof ac->judged_at);
}

/* The Inductor facts of cfg into *has / *f; the extra bytes of its parts. */
static uint64_t take_parts(int *has, struct tkm_inductor_facts *f, const struct tkm_oci_config *cfg)
{
    struct tkm_inductor_info in;
    const char *l = tkm_oci_config_label(cfg, TKM_INDUCTOR_LABEL_SUMMARY);
    uint64_t extra = 0, v;
    memset(f, 0, sizeof *f);
    *has = l != NULL;
    if (l && tkm_inductor_summary_parse(&in, l, NULL) == 0)
        *f = in.facts;
    static const char *const sizes[] = {TKM_INDUCTOR_LABEL_SIZE, TKM_VLLM_LABEL_SIZE};
    for (size_t i = 0; i < 2; i++)
        if ((l = tkm_oci_config_label(cfg, sizes[i])) && tkm_parse_u64(l, UINT64_MAX, &v) == 0)
            extra += v;
    return extra;
}

uint64_t agent_cache_take_parts(struct agent_cache *ac, const struct tkm_oci_config *cfg)
{
    return take_parts(&ac->has_inductor, &ac->inductor, cfg);
}

/* The bytes an image's layer extracts to: its size label, else a generous guess
 * from the compressed size, plus its other parts' labels. */
static uint64_t image_bytes(const char *size_label, uint64_t layer_size, uint64_t extra)
{
    uint64_t sz = 0;
    if (!size_label || tkm_parse_u64(size_label, UINT64_MAX, &sz) < 0 || sz == 0)
        sz = layer_size * 4;
    return sz + extra;
}

void agent_caches_rejudge_all(struct agent *a)
{
    for (struct agent_cache *ac = a->caches; ac; ac = ac->next)
        agent_cache_rejudge(ac);
    agent_status_changed(a);
}

/* Records that the result is for the run's inputs. */
static void run_record(struct agent_run *r)
{
    struct agent_cache *ac = r->ac;
    free(ac->verified_inputs);
    ac->verified_inputs = r->inputs;
    r->inputs = NULL;
    ac->verified_cfg = r->cfg;
    ac->verified_at_ms = tkm_now_ms();
}

/* The run ended with a result (reason "" = usable) or a transient failure. */
static void run_finish(struct agent_run *r, int transient)
{
    struct agent_cache *ac = r->ac;
    struct agent *a = r->a;
    ac->run = NULL;
    if (transient && !a_once(ac)) {
        /* the result stays for the inputs it was for; the queue retries
         * with its backoff (AGENT_BACKOFF_MIN_MS doubling to _MAX_MS) */
        tkm_warn("cache %s: %s: %s (retry %u, with backoff)", ac->key, ac->reason, ac->message,
                 k8s_workqueue_num_requeues(a->q, r->key) + 1);
        run_free(r, K8S_WQ_RETRY, 0);
    } else {
        run_record(r);
        if (transient) /* --once reports the failure instead of retrying */
            tkm_warn("cache %s: %s: %s", ac->key, ac->reason, ac->message);
        else if (ac->reason[0])
            tkm_info("cache %s@%s: %s: %s", ac->key, ac->digest, ac->reason, ac->message);
        else
            tkm_info("cache %s@%s: verified=%d, judged for %zu GPU(s)", ac->key, ac->digest,
                     ac->verified, ac->verdicts.n);
        if (!a_once(ac))
            agent_store_prefetch(a, ac);
        run_free(r, K8S_WQ_OK, a_once(ac) ? 0 : AGENT_REVERIFY_MS);
    }
    agent_status_changed(a);
    agent_once_check(a);
}

/* A failure. A transient one (registry or apiserver unreachable) keeps an
 * earlier good result of the same inputs and retries with backoff. */
static void run_fail(struct agent_run *r, int transient, const char *reason, const char *msg)
{
    struct agent_cache *ac = r->ac;
    if (transient && ac->inspected && !ac->reason[0]) {
        tkm_warn("cache %s: re-verification failed (%s: %s); keeping the earlier result", ac->key,
                 reason, msg);
    } else {
        set_reason(ac, reason, "%s", msg);
        if (!transient || !ac->inspected) {
            ac->inspected = 0;
            ac->verified = 0;
            agent_verdicts_release(&ac->verdicts);
        }
    }
    run_finish(r, transient);
}

/* A failure worth retrying soon: the registry or the apiserver did not
 * answer (the verify job's reasons). */
static int transient_failure(int rc, const char *reason)
{
    return rc == -ECANCELED || !strcmp(reason, "RegistryUnreachable") ||
           !strcmp(reason, TKM_OCI_REASON_PULL_DEADLINE) || !strcmp(reason, "APIUnavailable") ||
           !strcmp(reason, "Internal");
}

/* The inspected image becomes the cache's: the summary every GPU is judged
 * against, its one layer, its size for admission. 0, or < 0 after run_fail. */
static int take_image(struct agent_run *r, struct tkm_verify_result *res)
{
    struct agent_cache *ac = r->ac;
    const struct tkm_triton_image *im = &res->image;
    const struct tkm_oci_manifest *m = &res->manifest;
    if (m->n_descs != 1) {
        run_fail(r, 0, "InvalidImage", "a Triton cache image has exactly one layer");
        return -1;
    }
    if (strcmp(res->image_digest, ac->digest) != 0) {
        char msg[256];
        snprintf(msg, sizeof msg, "the registry served manifest %s for pinned digest %s",
                 res->image_digest, ac->digest);
        run_fail(r, 0, "DigestMismatch", msg);
        return -1;
    }
    agent_verdicts_release(&ac->verdicts);
    agent_cache_variants_clear(ac); /* it was a variant index before */
    tkm_triton_summary_release(&ac->summary);
    ac->summary = res->image.summary; /* moved out (verify.h allows it) */
    memset(&res->image.summary, 0, sizeof res->image.summary);
    if (!ac->layer_digest || strcmp(ac->layer_digest, m->descs[0].digest) != 0)
        ac->label_checked = 0;
    free(ac->layer_digest);
    ac->layer_digest = strdup(m->descs[0].digest);
    ac->cache_bytes =
        image_bytes(im->size_bytes, m->descs[0].size, agent_cache_take_parts(ac, &im->config));
    ac->parts = tkm_parts_from_config(&im->config);
    ac->layer_bytes = m->descs[0].size;
    ac->inspected = 1;
    ac->reason[0] = 0;
    ac->message[0] = 0;
    agent_cache_rejudge(ac);
    return 0;
}

/* ---- a variant index ------------------------------------------------------------ */

/* The index's variants become the cache's (res->variants moved out). What was known of
 * a variant of the same digest in the last result is kept (inspected once). */
static void take_variants(struct agent_run *r, struct tkm_verify_result *res)
{
    struct agent_cache *ac = r->ac;
    struct tkm_variant_set set = res->variants;
    struct agent_variant *vars = calloc(set.n ? set.n : 1, sizeof *vars);
    memset(&res->variants, 0, sizeof res->variants);
    if (!vars) {
        tkm_variant_set_release(&set);
        run_fail(r, 1, "Internal", "out of memory");
        return;
    }
    for (size_t i = 0; i < set.n; i++)
        for (size_t j = 0; ac->vars && j < ac->variants.n; j++)
            if (ac->vars[j].state && !strcmp(set.v[i].digest, ac->variants.v[j].digest)) {
                vars[i] = ac->vars[j];
                memset(&ac->vars[j], 0, sizeof ac->vars[j]);
                break;
            }
    agent_verdicts_release(&ac->verdicts);
    agent_cache_variants_clear(ac);
    tkm_triton_summary_release(&ac->summary);
    free(ac->layer_digest);
    ac->layer_digest = NULL;
    ac->has_inductor = 0;
    ac->variants = set;
    ac->vars = vars;
    ac->reason[0] = 0;
    ac->message[0] = 0;
}

/* A failed inspection: transient (the run retries) or the variant's own verdict. */
static void variant_failed(struct agent_run *r, struct agent_variant *av, int rc,
                           const struct tkm_err *err)
{
    const char *reason = rc == -EBADMSG ? "VariantMismatch" : rc == -ENOENT ? "InvalidImage" : NULL;
    if (!reason && rc != -EPROTO && rc != -EINVAL) {
        int retry = 1;
        snprintf(r->vreason, sizeof r->vreason, "%s",
                 rc == -ECANCELED ? "RegistryUnreachable"
                                  : tkm_verify_registry_reason(rc, tkm_err_str(err), &retry));
        snprintf(r->vmessage, sizeof r->vmessage, "inspecting a variant: %s", tkm_err_str(err));
        return;
    }
    av->state = -1;
    snprintf(av->reason, sizeof av->reason, "%s", reason ? reason : "InvalidImage");
    snprintf(av->message, sizeof av->message, "%s", tkm_err_str(err));
}

void agent_variant_take(struct agent_cache *ac, size_t idx, const struct tkm_oci_job_result *res)
{
    const struct tkm_variant *v = &ac->variants.v[idx];
    struct agent_variant *av = &ac->vars[idx];
    const struct tkm_triton_image *im = res->detail;
    const struct tkm_oci_manifest *m = &res->image.parsed;
    char d[128];
    struct tkm_err e = {0};
    tkm_variant_describe(v, d, sizeof d);
    av->state = -1;
    snprintf(av->reason, sizeof av->reason, "VariantMismatch");
    if (strcmp(res->digest, v->digest) != 0) {
        snprintf(av->message, sizeof av->message,
                 "variant %s: the registry served manifest %s for %s", d, res->digest, v->digest);
        return;
    }
    if (m->n_descs != 1) {
        snprintf(av->reason, sizeof av->reason, "InvalidImage");
        snprintf(av->message, sizeof av->message,
                 "variant %s (%s): a Triton cache image has exactly one layer", d, v->digest);
        return;
    }
    if (tkm_variant_check_image(v, &im->config, &im->summary, av->message, sizeof av->message) < 0)
        return;
    if (tkm_triton_summary_parse(&av->summary, im->summary_label, &e) < 0 ||
        !(av->layer_digest = strdup(m->descs[0].digest))) {
        snprintf(av->message, sizeof av->message, "variant %s: %s", d, tkm_err_str(&e));
        return;
    }
    av->layer_bytes = m->descs[0].size;
    av->cache_bytes = image_bytes(im->size_bytes, m->descs[0].size,
                                  take_parts(&av->has_inductor, &av->inductor, &im->config));
    av->parts = tkm_parts_from_config(&im->config);
    av->state = 1;
    av->reason[0] = 0;
    av->message[0] = 0;
}

static void variants_done(struct agent_run *r)
{
    struct agent_cache *ac = r->ac;
    if (r->vreason[0]) {
        run_fail(r, 1, r->vreason, r->vmessage);
        return;
    }
    ac->inspected = 1;
    agent_cache_rejudge(ac);
    run_finish(r, 0);
}

static void on_variant(struct tkm_oci_job *job, int rc, struct tkm_oci_job_result *res,
                       const struct tkm_err *err, void *data)
{
    struct agent_vinsp *vi = data;
    struct agent_run *r = vi->r;
    (void)job;
    vi->job = NULL;
    r->vpending--;
    if (r->abandoned) {
        if (!r->vpending)
            run_release(r);
        return;
    }
    if (rc < 0)
        variant_failed(r, &r->ac->vars[vi->idx], rc, err);
    else
        agent_variant_take(r->ac, vi->idx, res);
    if (!r->vpending)
        variants_done(r);
}

/* Starts inspecting the variants this node's GPUs pick and no earlier result knows.
 * The number started (the run finishes when they report), 0 (none needed), or < 0
 * after run_fail. */
static int variants_inspect(struct agent_run *r)
{
    struct agent_cache *ac = r->ac;
    struct agent *a = r->a;
    struct tkm_err e = {0};
    struct tkm_oci_ref ref;
    if (!(r->vi = calloc(a->gpus.n + 1, sizeof *r->vi))) {
        run_fail(r, 1, "Internal", "out of memory");
        return -1;
    }
    if (tkm_oci_ref_parse(&ref, ac->c.spec.cache_image, &e) < 0) {
        run_fail(r, 0, "InvalidImage", tkm_err_str(&e));
        return -1;
    }
    ref.tag[0] = 0;
    for (size_t i = 0; i < a->gpus.n; i++) {
        size_t idx = 0;
        int seen = 0;
        if (tkm_variant_pick(&ac->variants, &a->gpus.gpus[i], NULL, &idx, NULL, NULL, 0) < 0 ||
            ac->vars[idx].state)
            continue;
        for (size_t j = 0; j < r->n_vi; j++)
            seen |= r->vi[j].idx == idx;
        if (seen)
            continue;
        struct agent_vinsp *vi = &r->vi[r->n_vi];
        vi->r = r;
        vi->idx = idx;
        snprintf(ref.digest, sizeof ref.digest, "%s", ac->variants.v[idx].digest);
        if (!ac->session ||
            tkm_triton_job_inspect(ac->session, &ref, on_variant, vi, &vi->job, &e) < 0) {
            variant_failed(r, &ac->vars[idx], -EIO, &e);
            continue;
        }
        r->n_vi++;
        r->vpending++;
    }
    if (!r->vpending && r->vreason[0]) {
        run_fail(r, 1, r->vreason, r->vmessage);
        return -1;
    }
    return (int)r->vpending;
}

/* The verify job reported (api/verify.h): the agent's part is judging the
 * GPUs and what the signature verdict means on this node. */
static void on_verified(const struct tkm_verify_result *cres, void *data)
{
    struct agent_run *r = data;
    struct agent_cache *ac = r->ac;
    struct tkm_verify_result *res = (struct tkm_verify_result *)cres; /* image: movable */
    r->job = NULL;
    if (res->session)
        ac->session = res->session; /* the layer is pulled through it */
    switch (res->failed) {
    case TKM_VERIFY_DONE:
        break;
    case TKM_VERIFY_STEP_POLICY:
        /* before the image counts: no cache is usable without its policy */
        run_fail(r, transient_failure(res->rc, res->reason), res->reason, res->message);
        return;
    case TKM_VERIFY_STEP_SESSION:
        run_fail(r, 0, "InvalidImage", res->message);
        return;
    default: /* credentials, inspect */
        if (!strcmp(res->reason, "RegistryUnreachable"))
            r->a->registry_errors++;
        run_fail(r, transient_failure(res->rc, res->reason), res->reason, res->message);
        return;
    }
    if (res->variants.from_index) {
        take_variants(r, res);
        if (!ac->vars)
            return; /* run_fail'ed */
    } else if (take_image(r, res) < 0) {
        return;
    }
    ac->sig_mode = res->mode;
    tkm_dbg("cache %s: policy %s", ac->key, res->policy_describe);
    if (res->sig_state == TKM_VERIFY_SIG_DISABLED) {
        ac->verified = 0;
        snprintf(ac->message, sizeof ac->message, "signature verification disabled by %s",
                 res->policy_describe);
    } else if (res->verified) {
        ac->verified = 1;
        tkm_dbg("cache %s: signature verified (%s at %s)", ac->key,
                tkm_sig_format_name(res->sig.format), res->sig.location);
    } else if (!strcmp(res->sig_reason, "RegistryUnreachable") ||
               !strcmp(res->sig_reason, TKM_OCI_REASON_PULL_DEADLINE)) {
        ac->verified = 0;
        r->a->registry_errors++;
        run_fail(r, 1, res->sig_reason, res->sig_message);
        return;
    } else if (res->mode == TKM_SIG_MODE_AUDIT) { /* Audit: reported, never refused */
        ac->verified = 0;
        snprintf(ac->message, sizeof ac->message, "Audit: %s: %s", res->sig_reason,
                 res->sig_message);
    } else {
        ac->verified = 0;
        set_reason(ac, res->sig_reason, "signature policy Enforce: %s", res->sig_message);
    }
    if (ac->variants.from_index && !ac->reason[0]) {
        /* usable so far: inspect what the GPUs pick, then judge them */
        int n = variants_inspect(r);
        if (n < 0)
            return;
        if (n > 0) {
            ac->inspected = 0; /* until they report: Materialize answers "retry" */
            return;
        }
        variants_done(r);
        return;
    }
    run_finish(r, 0);
}

/* The result of ac is for its current inputs and tkm-config and not being
 * retried: 1 with *age_ms. */
static int result_current(struct agent *a, const struct agent_cache *ac, const char *key,
                          uint64_t *age_ms)
{
    if (!ac->verified_inputs || strcmp(ac->verified_inputs, ac->inputs) != 0 ||
        ac->verified_cfg != a->cfg_gen || k8s_workqueue_num_requeues(a->q, key) > 0)
        return 0;
    *age_ms = tkm_now_ms() - ac->verified_at_ms;
    return 1;
}

/* The one reconcile function: key's current decoded state -> nothing to do,
 * a re-verification later (done_after), or a pass of the pipeline that ends
 * the key's processing when it reports (run_finish). */
static void agent_cache_reconcile(struct k8s_workqueue *q, const char *key, void *data)
{
    struct agent *a = data;
    struct agent_cache *ac = agent_cache_get(a, key);
    struct tkm_err e = {0};
    uint64_t age = 0;
    /* gone (its node status entry already went), or tkm-config not known
     * yet (every key is queued again when it is) */
    if (!ac || !a->cfg_ready || a->stopping) {
        k8s_workqueue_done(q, key, K8S_WQ_OK);
        return;
    }
    if (result_current(a, ac, key, &age) && (!ac->digest[0] || age < AGENT_REVERIFY_MS)) {
        if (!ac->digest[0] || a_once(ac)) /* a pin is an event: nothing to re-verify */
            k8s_workqueue_done(q, key, K8S_WQ_OK);
        else /* Secrets are not watched: verify again every AGENT_REVERIFY_MS */
            k8s_workqueue_done_after(q, key, AGENT_REVERIFY_MS - age);
        return;
    }
    const char *d = ac->c.status.resolved_digest;
    if (!d || !tkm_oci_digest_valid(d)) {
        ac->digest[0] = 0;
        ac->inspected = 0;
        set_reason(ac, "DigestNotPinned",
                   "waiting for tkm-controller to pin status.resolvedDigest (the agent never "
                   "resolves tags)");
        free(ac->verified_inputs);
        ac->verified_inputs = strdup(ac->inputs);
        ac->verified_cfg = a->cfg_gen;
        ac->verified_at_ms = tkm_now_ms();
        k8s_workqueue_done(q, key, ac->verified_inputs ? K8S_WQ_OK : K8S_WQ_RETRY);
        agent_status_changed(a);
        agent_once_check(a);
        return;
    }
    if (strcmp(ac->digest, d) != 0) {
        snprintf(ac->digest, sizeof ac->digest, "%s", d);
        ac->inspected = 0;
    }
    struct agent_run *r = calloc(1, sizeof *r);
    if (!r || !(r->key = strdup(key)) || !(r->inputs = strdup(ac->inputs))) {
        if (r)
            free(r->key);
        free(r);
        k8s_workqueue_done(q, key, K8S_WQ_RETRY);
        return;
    }
    r->ac = ac;
    r->a = a;
    r->cfg = a->cfg_gen;
    ac->run = r;
    a->runs_inflight++;
    struct tkm_verify_req vr = {.flags = TKM_VERIFY_INSPECT | TKM_VERIFY_SIGNATURE,
                                .kc = a->kc,
                                .cache = &ac->c,
                                .digest = d,
                                .cfg = &a->cfg,
                                .config_ns = a->o.ns};
    int rc = tkm_verify_start(a->verify, &vr, on_verified, r, &r->job, &e);
    if (rc == -ENOMEM)
        run_fail(r, 1, "Internal", "out of memory");
    else if (rc < 0)
        run_fail(r, 0, "InvalidImage", tkm_err_str(&e));
}

/* tkm-config changed (or became known): every cache is verified again. */
static void reverify_all(struct agent *a)
{
    a->cfg_gen++;
    for (struct agent_cache *ac = a->caches; ac; ac = ac->next) {
        run_abandon(ac);
        enqueue(a, ac->key);
    }
}

/* ---- informers -------------------------------------------------------------------- */

static void on_cache_obj(const struct k8s_obj *o, void *data)
{
    struct agent *a = data;
    struct agent_cache *ac = NULL;
    struct tkm_err e = {0};
    int rc = agent_index_apply(&a->idx, o, &ac, &e);
    if (rc < 0) {
        tkm_warn("ignoring %s: %s", o->key, tkm_err_str(&e));
        return;
    }
    ac->a = a;
    if (rc == AGENT_INDEX_SAME) { /* only the controller's status moved: keep the result */
        if (ac->prefetch == TKM_API_PREFETCH_WAITING) /* its prefetch.granted may name us now */
            agent_store_prefetch(a, ac);
        return;
    }
    run_abandon(ac); /* its callbacks end the key's processing; the add runs it again */
    if (rc == AGENT_INDEX_GONE) {
        /* Being deleted: the controller's finalizer waits for every node to drop the
         * entry, so it goes at once. */
        tkm_info("cache %s deleted: its node status entry goes", o->key);
        agent_forget_compiles(a, ac->key);
        agent_status_changed(a);
        return;
    }
    enqueue(a, ac->key);
}

static void on_cache_add(const struct k8s_obj *o, void *data)
{
    on_cache_obj(o, data);
}

static void on_cache_update(const struct k8s_obj *old, const struct k8s_obj *cur, void *data)
{
    (void)old;
    on_cache_obj(cur, data);
}

static void on_cache_delete(const struct k8s_obj *o, int unknown, void *data)
{
    struct agent *a = data;
    struct agent_cache *ac = agent_index_get(&a->idx, o->key);
    int live = ac && ac->live;
    (void)unknown;
    if (!(ac = agent_index_take(&a->idx, o->key)))
        return;
    run_abandon(ac);
    agent_forget_compiles(a, o->key); /* its series and summary go */
    if (live) {
        tkm_info("cache %s deleted: its node status entry goes", o->key);
        agent_status_changed(a);
    }
    agent_cache_destroy(ac);
}

static void on_synced(void *data)
{
    struct agent *a = data;
    tkm_dbg("informer synced");
    if (!a->cfg_ready && a->inf_cfg && k8s_informer_has_synced(a->inf_cfg)) {
        a->cfg_ready = 1;
        reverify_all(a);
    }
    agent_once_check(a);
    agent_status_changed(a);
}

static void on_watch_error(int rc, const char *msg, uint64_t delay_ms, void *data)
{
    struct agent *a = data;
    a->watch_restarts++;
    tkm_warn("watch failed (%d): %s; retrying in %llu ms", rc, msg, (unsigned long long)delay_ms);
}

static void config_apply(struct agent *a, const struct k8s_obj *o)
{
    struct tkm_api_config cfg = {0};
    struct tkm_err e = {0};
    json_t *cm = NULL;
    if (o && k8s_obj_parse(o, &cm, &e) < 0) {
        tkm_warn("ConfigMap %s/%s: %s", a->o.ns, TKM_API_CONFIG_NAME, tkm_err_str(&e));
        return;
    }
    char *inputs =
        cm ? json_dumps(json_object_get(cm, "data"), JSON_COMPACT | JSON_SORT_KEYS) : strdup("");
    if (tkm_api_config_decode(cm, &cfg, &e) < 0 ||
        tkm_verify_ctx_reach(a->verify, &cfg, &a->o.reach, &e) < 0) {
        /* a bad tkm-config: keep the last good one and say so */
        tkm_warn("ConfigMap %s/%s: %s (keeping the previous settings)", a->o.ns,
                 TKM_API_CONFIG_NAME, tkm_err_str(&e));
        tkm_api_config_release(&cfg);
        json_decref(cm);
        free(inputs);
        return;
    }
    json_decref(cm);
    tkm_api_config_floor_default(&cfg, a->o.signature_floor);
    int changed = !a->cfg_inputs || !inputs || strcmp(a->cfg_inputs, inputs) != 0;
    tkm_api_config_release(&a->cfg);
    a->cfg = cfg;
    tkm_verify_ctx_set_pull_deadline(a->verify, cfg.pull_deadline_ms);
    free(a->cfg_inputs);
    a->cfg_inputs = inputs;
    if (changed) {
        tkm_info("tkm-config %s: re-verifying every cache", o ? "changed" : "absent");
        reverify_all(a);
    }
}

static void on_cfg_add(const struct k8s_obj *o, void *data)
{
    config_apply(data, o);
}

static void on_cfg_update(const struct k8s_obj *old, const struct k8s_obj *cur, void *data)
{
    (void)old;
    config_apply(data, cur);
}

static void on_cfg_delete(const struct k8s_obj *o, int unknown, void *data)
{
    (void)o;
    (void)unknown;
    config_apply(data, NULL);
}

static void on_own_add(const struct k8s_obj *o, void *data)
{
    agent_status_own_event(data, o, 0);
}

static void on_own_update(const struct k8s_obj *old, const struct k8s_obj *cur, void *data)
{
    (void)old;
    agent_status_own_event(data, cur, 0);
}

static void on_own_delete(const struct k8s_obj *o, int unknown, void *data)
{
    (void)unknown;
    agent_status_own_event(data, o, 1);
}

static int informer(struct agent *a, const struct k8s_resource *res, const char *ns,
                    const char *fsel, int kind, struct k8s_informer **out, struct tkm_err *err)
{
    struct k8s_informer_opts io = {0};
    io.watch.res = res;
    io.watch.ns = ns;
    io.watch.field_selector = fsel;
    io.data = a;
    io.handler.on_synced = on_synced;
    io.handler.on_error = on_watch_error;
    /* nothing in the agent reads managedFields: most of a small object's bytes */
    io.strip_managed_fields = 1;
    if (kind == 0) {
        io.handler.on_add = on_cache_add;
        io.handler.on_update = on_cache_update;
        io.handler.on_delete = on_cache_delete;
    } else if (kind == 1) {
        io.handler.on_add = on_cfg_add;
        io.handler.on_update = on_cfg_update;
        io.handler.on_delete = on_cfg_delete;
    } else {
        io.handler.on_add = on_own_add;
        io.handler.on_update = on_own_update;
        io.handler.on_delete = on_own_delete;
    }
    return k8s_informer_start(a->kc, &io, out, err);
}

int agent_caches_start(struct agent *a, struct tkm_err *err)
{
    struct k8s_workqueue_opts qo = {.workers = AGENT_WORKERS,
                                    .base_delay_ms = AGENT_BACKOFF_MIN_MS,
                                    .max_delay_ms = AGENT_BACKOFF_MAX_MS};
    char fsel[512];
    int rc;
    agent_caches_index(a);
    /* --pull-bandwidth split evenly over the downloads that may run at once */
    struct tkm_verify_ctx_opts vo = {.pull_deadline_ms = a->o.pull_deadline_ms,
                                     .max_recv_bps = agent_download_bps(a)};
    if ((rc = tkm_verify_ctx_new(a->loop, a->http, &vo, &a->verify, err)) < 0 ||
        (rc = tkm_verify_ctx_reach(a->verify, NULL, &a->o.reach, err)) < 0 ||
        (rc = k8s_workqueue_new(a->loop, &qo, agent_cache_reconcile, a, &a->q, err)) < 0)
        return rc;
    snprintf(fsel, sizeof fsel, "metadata.name=%s", TKM_API_CONFIG_NAME);
    if ((rc = informer(a, &k8s_res_configmaps, a->o.ns, fsel, 1, &a->inf_cfg, err)) < 0 ||
        (rc = informer(a, &tkm_api_res_tkc, NULL, NULL, 0, &a->inf_tkc, err)) < 0 ||
        (rc = informer(a, &tkm_api_res_tkcc, NULL, NULL, 0, &a->inf_tkcc, err)) < 0)
        return rc;
    if (a->o.once)
        return 0;
    snprintf(fsel, sizeof fsel, "metadata.name=%s", a->o.node_name);
    if ((rc = informer(a, &tkm_api_res_tkcns, NULL, fsel, 2, &a->inf_ns, err)) < 0 ||
        (rc = informer(a, &tkm_api_res_tkcnsc, NULL, fsel, 2, &a->inf_nsc, err)) < 0)
        return rc;
    return 0;
}

/* ---- stop ------------------------------------------------------------------------------ */

/* The queue or the verify context closed: the last one calls back. */
static void part_closed(void *data)
{
    struct agent *a = data;
    if (--a->caches_closing == 0 && a->caches_closed)
        a->caches_closed(a);
}

static void queue_closed(void *data)
{
    struct agent *a = data;
    a->q = NULL;
    part_closed(a);
}

void agent_caches_close(struct agent *a, void (*cb)(struct agent *a))
{
    /* each run's job cancelled and its key done, so the queue closes at once */
    for (struct agent_cache *ac = a->caches; ac; ac = ac->next)
        run_abandon(ac);
    agent_index_release(&a->idx);
    agent_compiles_free_all(&a->compiles);
    a->caches_closed = cb;
    a->caches_closing = 1; /* this function's own share, dropped below */
    if (a->verify) {
        a->caches_closing++;
        tkm_verify_ctx_close(a->verify, part_closed, a);
        a->verify = NULL;
    }
    if (a->q) {
        a->caches_closing++;
        k8s_workqueue_close(a->q, queue_closed, a);
    }
    part_closed(a);
}
