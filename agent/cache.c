/*
 * cache.c - the caches the agent watches and the per-cache pipeline:
 * pinned digest -> pull credentials -> inspect by digest (manifest, config,
 * Triton labels) -> effective policy -> signature -> per-GPU verdicts.
 * docs/agent.md has the state machine.
 */
#include <errno.h>
#include <malloc.h>
#include <stdlib.h>
#include <string.h>

#include <tkm/log.h>
#include <tkm/oci/ref.h>
#include <tkm/triton/image.h>
#include <tkm/trust/sigjob.h>
#include <tkm/util.h>

#include "agent.h"

/* One pass of the pipeline. Outlives its cache when the cache goes away or
 * restarts (ac NULL): the callbacks in flight then only free it. */
struct agent_run {
    struct agent_cache *ac;
    struct agent *a;
    struct tkm_oci_ref ref;
    struct tkm_oci_session *s;
    struct tkm_oci_job *job;
    struct agent_sig *sig;
    int api_inflight; /* creds or policy resolve: not cancellable, wait for it */
    enum tkm_sig_mode mode;
    struct tkm_triton_summary summary;
    char *layer;
};

static void run_free(struct agent_run *r)
{
    struct agent *a = r->a;
    tkm_triton_summary_release(&r->summary);
    free(r->layer);
    free(r);
    /* A burst of verifications (start, tkm-config changed) has many registry
     * jobs in flight at once; their buffers are freed in an order that leaves
     * the heap fragmented, and glibc keeps such memory. Give it back once the
     * burst is over. */
    if (a && --a->runs_inflight == 0)
        malloc_trim(0);
}

/* Detaches and cancels the run of ac (its callbacks free it). */
static void run_abandon(struct agent_cache *ac)
{
    struct agent_run *r = ac->run;
    if (!r)
        return;
    ac->run = NULL;
    r->ac = NULL;
    if (r->job)
        tkm_oci_job_cancel(r->job);
    else if (r->sig)
        agent_sig_cancel(r->sig);
}

int agent_cache_usable(const struct agent_cache *ac)
{
    return ac->inspected && !ac->reason[0];
}

static void timer_closed(uv_handle_t *h)
{
    free(h);
}

void agent_cache_free(struct agent_cache *ac)
{
    if (!ac)
        return;
    run_abandon(ac);
    if (ac->timer)
        uv_close((uv_handle_t *)ac->timer, timer_closed);
    tkm_api_cache_release(&ac->c);
    tkm_triton_summary_release(&ac->summary);
    free(ac->verdicts.v);
    free(ac->layer_digest);
    free(ac->inputs);
    free(ac->key);
    free(ac);
}

struct agent_cache *agent_cache_find(struct agent *a, int cluster, const char *ns, const char *name)
{
    for (struct agent_cache *ac = a->caches; ac; ac = ac->next)
        if (ac->c.cluster == !!cluster && !strcmp(ac->c.meta.name, name) &&
            (cluster || !strcmp(ac->c.meta.ns ? ac->c.meta.ns : "", ns ? ns : "")))
            return ac;
    return NULL;
}

static int a_once(const struct agent_cache *ac)
{
    return ac->a->o.once;
}

void agent_once_check(struct agent *a)
{
    if (!a->o.once || a->stopping || !a->probed)
        return;
    if (!a->o.image &&
        (!a->inf_tkc || !k8s_informer_has_synced(a->inf_tkc) ||
         !k8s_informer_has_synced(a->inf_tkcc) || !k8s_informer_has_synced(a->inf_cfg)))
        return;
    for (struct agent_cache *ac = a->caches; ac; ac = ac->next)
        if (ac->state == AGENT_CS_RUNNING || ac->state == AGENT_CS_BACKOFF)
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
    free(ac->verdicts.v);
    memset(&ac->verdicts, 0, sizeof ac->verdicts);
    if (!ac->inspected)
        return;
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

uint64_t agent_cache_take_parts(struct agent_cache *ac, const struct tkm_oci_config *cfg)
{
    struct tkm_inductor_info in;
    const char *l = tkm_oci_config_label(cfg, TKM_INDUCTOR_LABEL_SUMMARY);
    uint64_t extra = 0, v;
    memset(&ac->inductor, 0, sizeof ac->inductor);
    ac->has_inductor = l != NULL;
    if (l && tkm_inductor_summary_parse(&in, l, NULL) == 0)
        ac->inductor = in.facts;
    static const char *const sizes[] = {TKM_INDUCTOR_LABEL_SIZE, TKM_VLLM_LABEL_SIZE};
    for (size_t i = 0; i < 2; i++)
        if ((l = tkm_oci_config_label(cfg, sizes[i])) && tkm_parse_u64(l, UINT64_MAX, &v) == 0)
            extra += v;
    return extra;
}

void agent_caches_rejudge_all(struct agent *a)
{
    for (struct agent_cache *ac = a->caches; ac; ac = ac->next)
        agent_cache_rejudge(ac);
    agent_status_changed(a);
}

static void on_timer(uv_timer_t *t)
{
    agent_cache_kick(t->data);
}

static void schedule(struct agent_cache *ac, uint64_t ms)
{
    if (!ac->timer) {
        ac->timer = malloc(sizeof *ac->timer);
        if (!ac->timer)
            return;
        uv_timer_init(ac->a->loop, ac->timer);
        ac->timer->data = ac;
    }
    uv_timer_start(ac->timer, on_timer, ms, 0);
}

/* The run ended with a result (reason "" = usable) or a transient failure. */
static void run_finish(struct agent_run *r, int transient)
{
    struct agent_cache *ac = r->ac;
    ac->run = NULL;
    if (transient) {
        ac->backoff_ms = ac->backoff_ms ? ac->backoff_ms * 2 : AGENT_BACKOFF_MIN_MS;
        if (ac->backoff_ms > AGENT_BACKOFF_MAX_MS)
            ac->backoff_ms = AGENT_BACKOFF_MAX_MS;
        ac->state = AGENT_CS_BACKOFF;
        tkm_warn("cache %s: %s: %s (retrying in %llu ms)", ac->key, ac->reason, ac->message,
                 (unsigned long long)ac->backoff_ms);
        if (a_once(ac))
            ac->state = AGENT_CS_DONE; /* --once reports the failure instead of retrying */
        else
            schedule(ac, ac->backoff_ms);
    } else {
        ac->backoff_ms = 0;
        ac->state = AGENT_CS_DONE;
        ac->verified_at_ms = tkm_now_ms();
        if (!a_once(ac))
            schedule(ac, AGENT_REVERIFY_MS);
        if (ac->reason[0])
            tkm_info("cache %s@%s: %s: %s", ac->key, ac->digest, ac->reason, ac->message);
        else
            tkm_info("cache %s@%s: verified=%d, judged for %zu GPU(s)", ac->key, ac->digest,
                     ac->verified, ac->verdicts.n);
        if (!a_once(ac))
            agent_store_prefetch(ac->a, ac);
    }
    run_free(r);
    agent_status_changed(ac->a);
    agent_once_check(ac->a);
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
            free(ac->verdicts.v);
            memset(&ac->verdicts, 0, sizeof ac->verdicts);
        }
    }
    run_finish(r, transient);
}

/* CamelCase reason and transience of a registry job's failure. */
static const char *registry_reason(int rc, const char *msg, int *transient)
{
    *transient = 0;
    switch (rc) {
    case -EACCES:
        return "RegistryUnauthorized";
    case -EPERM:
        return "RegistryForbidden";
    case -ENOENT:
        return strstr(msg, "label") ? "NotATritonCache" : "ImageNotFound";
    case -EBADMSG:
        return "DigestMismatch";
    case -EINVAL:
    case -EPROTO:
    case -ENOTSUP:
    case -E2BIG:
    case -EMSGSIZE:
        return "InvalidImage";
    default:
        *transient = 1;
        return "RegistryUnreachable";
    }
}

static void judge_and_finish(struct agent_run *r)
{
    run_finish(r, 0);
}

static void on_sig(int rc, const char *reason, const char *desc, const struct tkm_err *err,
                   void *data)
{
    struct agent_run *r = data;
    r->sig = NULL;
    if (!r->ac) {
        run_free(r);
        return;
    }
    struct agent_cache *ac = r->ac;
    if (rc == 0) {
        ac->verified = 1;
        tkm_dbg("cache %s: signature verified (%s)", ac->key, desc ? desc : "");
        judge_and_finish(r);
        return;
    }
    ac->verified = 0;
    if (!strcmp(reason, "RegistryUnreachable")) {
        r->a->registry_errors++;
        run_fail(r, 1, reason, tkm_err_str(err));
        return;
    }
    if (r->mode == TKM_SIG_MODE_AUDIT) {
        /* Audit: reported, never refused */
        snprintf(ac->message, sizeof ac->message, "Audit: %s: %s", reason, tkm_err_str(err));
        judge_and_finish(r);
        return;
    }
    set_reason(ac, reason, "signature policy Enforce: %s", tkm_err_str(err));
    judge_and_finish(r);
}

static void on_policy(int rc, struct tkm_api_policy *pol, const char *reason,
                      const struct tkm_err *err, void *data)
{
    struct agent_run *r = data;
    struct tkm_err e = {0};
    r->api_inflight = 0;
    if (!r->ac) {
        tkm_api_policy_free(pol);
        run_free(r);
        return;
    }
    struct agent_cache *ac = r->ac;
    if (rc < 0) {
        if (rc == -ECANCELED) {
            run_fail(r, 1, "APIUnavailable", "cancelled");
            return;
        }
        run_fail(r, !strcmp(reason, "APIUnavailable"), reason ? reason : "InvalidPolicy",
                 tkm_err_str(err));
        return;
    }
    r->mode = pol->pol.mode;
    ac->sig_mode = pol->pol.mode;
    tkm_dbg("cache %s: policy %s", ac->key, pol->describe);
    if (pol->pol.mode == TKM_SIG_MODE_DISABLED) {
        ac->verified = 0;
        snprintf(ac->message, sizeof ac->message, "signature verification disabled by %s",
                 pol->describe);
        tkm_api_policy_free(pol);
        judge_and_finish(r);
        return;
    }
    rc = agent_sig_verify(r->s, r->ref.repo, ac->digest, &pol->pol, on_sig, r, &r->sig, &e);
    tkm_api_policy_free(pol); /* the verify copied what it needs */
    if (rc < 0) {
        if (r->mode == TKM_SIG_MODE_AUDIT) {
            snprintf(ac->message, sizeof ac->message, "Audit: %s", tkm_err_str(&e));
            judge_and_finish(r);
            return;
        }
        set_reason(ac, tkm_sig_reason(rc), "%s", tkm_err_str(&e));
        judge_and_finish(r);
    }
}

static void on_inspect(struct tkm_oci_job *job, int rc, struct tkm_oci_job_result *res,
                       const struct tkm_err *err, void *data)
{
    struct agent_run *r = data;
    struct tkm_err e = {0};
    int transient;
    (void)job;
    r->job = NULL;
    if (!r->ac) {
        run_free(r);
        return;
    }
    struct agent_cache *ac = r->ac;
    if (rc < 0) {
        const char *reason = registry_reason(rc, tkm_err_str(err), &transient);
        if (transient)
            r->a->registry_errors++;
        run_fail(r, transient, reason, tkm_err_str(err));
        return;
    }
    const struct tkm_triton_image *im = res->detail;
    const struct tkm_oci_manifest *m = &res->image.parsed;
    if (m->n_descs != 1) {
        run_fail(r, 0, "InvalidImage", "a Triton cache image has exactly one layer");
        return;
    }
    if (strcmp(res->digest, ac->digest) != 0) {
        char msg[256];
        snprintf(msg, sizeof msg, "the registry served manifest %s for pinned digest %s",
                 res->digest, ac->digest);
        run_fail(r, 0, "DigestMismatch", msg);
        return;
    }
    /* the summary moves into the cache: it is what every GPU is judged against */
    tkm_triton_summary_release(&ac->summary);
    ac->summary = ((struct tkm_triton_image *)im)->summary;
    memset(&((struct tkm_triton_image *)im)->summary, 0, sizeof im->summary);
    if (!ac->layer_digest || strcmp(ac->layer_digest, m->descs[0].digest) != 0)
        ac->label_checked = 0;
    free(ac->layer_digest);
    ac->layer_digest = strdup(m->descs[0].digest);
    uint64_t sz = 0;
    if (!im->size_bytes || tkm_parse_u64(im->size_bytes, UINT64_MAX, &sz) < 0 || sz == 0)
        sz = m->descs[0].size * 4; /* no label: a generous guess from the compressed size */
    ac->cache_bytes = sz + agent_cache_take_parts(ac, &im->config);
    ac->inspected = 1;
    ac->reason[0] = 0;
    ac->message[0] = 0;
    agent_cache_rejudge(ac);
    r->api_inflight = 1;
    rc = tkm_api_policy_resolve(r->a->kc, &ac->c, &r->a->cfg, r->a->o.ns, on_policy, r, &e);
    if (rc < 0) {
        r->api_inflight = 0;
        run_fail(r, 0, "InvalidPolicy", tkm_err_str(&e));
    }
}

/* Builds the dockerconfigjson a session is made with from resolved creds. */
static char *creds_auth(const char *host, const struct tkm_oci_creds *c)
{
    if (!c || (!c->username[0] && !c->identity_token[0]))
        return strdup("");
    json_t *entry = json_object();
    if (c->identity_token[0])
        json_object_set_new(entry, "identitytoken", json_string(c->identity_token));
    if (c->username[0]) {
        json_object_set_new(entry, "username", json_string(c->username));
        json_object_set_new(entry, "password", json_string(c->password));
    }
    json_t *root = json_pack("{s:{s:o}}", "auths", host, entry);
    char *s = root ? json_dumps(root, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
    json_decref(root);
    return s;
}

static void on_creds(int rc, const struct tkm_oci_creds *creds, const char *reason,
                     const struct tkm_err *err, void *data)
{
    struct agent_run *r = data;
    struct tkm_err e = {0};
    r->api_inflight = 0;
    if (!r->ac) {
        run_free(r);
        return;
    }
    if (rc < 0) {
        run_fail(r, rc == -ECANCELED || !strcmp(reason ? reason : "", "APIUnavailable"),
                 reason ? reason : "SecretNotFound", tkm_err_str(err));
        return;
    }
    char *auth = creds_auth(r->ref.host, creds);
    if (!auth) {
        run_fail(r, 1, "Internal", "out of memory");
        return;
    }
    rc = agent_session_get(r->a, r->ref.host, auth, &r->s, &e);
    free(auth);
    if (rc == 0)
        r->ac->session = r->s;
    if (rc == 0)
        rc = tkm_triton_job_inspect(r->s, &r->ref, on_inspect, r, &r->job, &e);
    if (rc < 0)
        run_fail(r, 0, "InvalidImage", tkm_err_str(&e));
}

void agent_cache_kick(struct agent_cache *ac)
{
    struct agent *a = ac->a;
    struct tkm_err e = {0};
    if (a->stopping)
        return;
    run_abandon(ac);
    if (!a->cfg_ready) {
        ac->state = AGENT_CS_RUNNING; /* kicked again once tkm-config is known */
        return;
    }
    if (ac->timer)
        uv_timer_stop(ac->timer);
    const char *d = ac->c.status.resolved_digest;
    if (!d || !tkm_oci_digest_valid(d)) {
        ac->state = AGENT_CS_PENDING;
        ac->digest[0] = 0;
        ac->inspected = 0;
        set_reason(ac, "DigestNotPinned",
                   "waiting for tkm-controller to pin status.resolvedDigest (the agent never "
                   "resolves tags)");
        agent_status_changed(a);
        agent_once_check(a);
        return;
    }
    if (strcmp(ac->digest, d) != 0) {
        snprintf(ac->digest, sizeof ac->digest, "%s", d);
        ac->inspected = 0;
    }
    struct agent_run *r = calloc(1, sizeof *r);
    if (!r)
        return;
    r->ac = ac;
    r->a = a;
    ac->run = r;
    a->runs_inflight++;
    ac->state = AGENT_CS_RUNNING;
    if (tkm_oci_ref_parse(&r->ref, ac->c.spec.cache_image, &e) < 0) {
        run_fail(r, 0, "InvalidImage", tkm_err_str(&e));
        return;
    }
    snprintf(r->ref.digest, sizeof r->ref.digest, "%s", d);
    r->api_inflight = 1;
    if (tkm_api_pull_creds_resolve(a->kc, &ac->c, a->o.ns, r->ref.host, on_creds, r, &e) < 0) {
        r->api_inflight = 0;
        run_fail(r, 0, "InvalidPolicy", tkm_err_str(&e));
    }
}

void agent_caches_reverify_all(struct agent *a)
{
    for (struct agent_cache *ac = a->caches; ac; ac = ac->next)
        agent_cache_kick(ac);
}

/* ---- sessions ------------------------------------------------------------------ */

int agent_session_get(struct agent *a, const char *host, const char *auth,
                      struct tkm_oci_session **out, struct tkm_err *err)
{
    for (struct agent_session *s = a->sessions; s; s = s->next)
        if (!strcmp(s->host, host) && !strcmp(s->auth, auth ? auth : "")) {
            *out = s->s;
            return 0;
        }
    struct agent_session *n = calloc(1, sizeof *n);
    struct tkm_oci_registry_opts ro = {0};
    int rc = -ENOMEM;
    if (!n)
        return tkm_err_set(err, -ENOMEM, "out of memory");
    n->host = strdup(host);
    n->auth = strdup(auth ? auth : "");
    if (!n->host || !n->auth)
        goto fail;
    if (n->auth[0]) {
        ro.auth_json = n->auth;
        ro.auth_json_len = strlen(n->auth);
    } else {
        ro.anonymous = 1;
    }
    rc = tkm_oci_session_new(a->http, host, &ro, &n->s, err);
    if (rc < 0)
        goto fail;
    n->next = a->sessions;
    a->sessions = n;
    *out = n->s;
    return 0;
fail:
    free(n->host);
    free(n->auth);
    free(n);
    return rc;
}

/* ---- informers -------------------------------------------------------------------- */

/* What a change of which re-verifies: the spec and the pinned digest (not the
 * controller's other status fields). *out owned. */
static char *cache_inputs(const char *json, size_t len, const char *digest)
{
    json_error_t je;
    json_t *o = json_loadb(json, len, JSON_REJECT_DUPLICATES, &je);
    json_t *in =
        json_pack("{s:O?,s:s?}", "spec", o ? json_object_get(o, "spec") : NULL, "digest", digest);
    char *s = in ? json_dumps(in, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
    json_decref(in);
    json_decref(o);
    return s;
}

int agent_cache_upsert_json(struct agent *a, const char *json, size_t len, struct agent_cache **out,
                            struct tkm_err *err)
{
    struct tkm_api_cache c = {0};
    int rc = tkm_api_cache_decode(json, len, &c, err);
    if (rc < 0)
        return rc;
    struct agent_cache *ac = agent_cache_find(a, c.cluster, c.meta.ns, c.meta.name);
    if (c.meta.deletion_timestamp) {
        /* Being deleted: the controller's finalizer waits for every node to drop the
         * entry, so it goes at once. */
        if (ac)
            agent_cache_remove(a, ac->key);
        tkm_api_cache_release(&c);
        if (out)
            *out = NULL;
        return 0;
    }
    char *inputs = cache_inputs(json, len, c.status.resolved_digest);
    if (!inputs) {
        tkm_api_cache_release(&c);
        return tkm_err_set(err, -ENOMEM, "out of memory");
    }
    if (!ac) {
        ac = calloc(1, sizeof *ac);
        struct tkm_buf k;
        tkm_buf_init(&k, 1024);
        if (!ac || (c.cluster ? tkm_buf_puts(&k, c.meta.name)
                              : tkm_buf_printf(&k, "%s/%s", c.meta.ns, c.meta.name)) < 0) {
            free(ac);
            free(inputs);
            tkm_buf_release(&k);
            tkm_api_cache_release(&c);
            return tkm_err_set(err, -ENOMEM, "out of memory");
        }
        ac->key = tkm_buf_detach(&k, NULL);
        ac->a = a;
        ac->next = a->caches;
        a->caches = ac;
    } else if (ac->inputs && !strcmp(ac->inputs, inputs)) {
        /* only the controller's status moved: keep the result */
        tkm_api_cache_release(&ac->c);
        ac->c = c;
        free(inputs);
        if (out)
            *out = NULL;
        return 0;
    }
    tkm_api_cache_release(&ac->c);
    ac->c = c;
    free(ac->inputs);
    ac->inputs = inputs;
    if (out)
        *out = ac;
    return 0;
}

void agent_cache_remove(struct agent *a, const char *key)
{
    for (struct agent_cache **pp = &a->caches; *pp; pp = &(*pp)->next) {
        if (strcmp((*pp)->key, key) == 0) {
            struct agent_cache *ac = *pp;
            *pp = ac->next;
            tkm_info("cache %s deleted: its node status entry goes", key);
            agent_cache_free(ac);
            agent_status_changed(a);
            return;
        }
    }
}

static void on_cache_obj(const struct k8s_obj *o, void *data)
{
    struct agent *a = data;
    struct agent_cache *ac = NULL;
    struct tkm_err e = {0};
    if (agent_cache_upsert_json(a, o->json, o->json_len, &ac, &e) < 0) {
        tkm_warn("ignoring %s: %s", o->key, tkm_err_str(&e));
        return;
    }
    if (ac)
        agent_cache_kick(ac);
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
    (void)unknown;
    agent_cache_remove(data, o->key);
}

static void on_synced(void *data)
{
    struct agent *a = data;
    tkm_dbg("informer synced");
    if (!a->cfg_ready && a->inf_cfg && k8s_informer_has_synced(a->inf_cfg)) {
        a->cfg_ready = 1;
        agent_caches_reverify_all(a);
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
    if (tkm_api_config_decode(cm, &cfg, &e) < 0) {
        /* a bad tkm-config: keep the last good one and say so */
        tkm_warn("ConfigMap %s/%s: %s (keeping the previous settings)", a->o.ns,
                 TKM_API_CONFIG_NAME, tkm_err_str(&e));
        json_decref(cm);
        free(inputs);
        return;
    }
    json_decref(cm);
    int changed = !a->cfg_inputs || !inputs || strcmp(a->cfg_inputs, inputs) != 0;
    tkm_api_config_release(&a->cfg);
    a->cfg = cfg;
    free(a->cfg_inputs);
    a->cfg_inputs = inputs;
    if (changed) {
        tkm_info("tkm-config %s: re-verifying every cache", o ? "changed" : "absent");
        agent_caches_reverify_all(a);
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
    char fsel[512];
    int rc;
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
