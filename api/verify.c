/*
 * verify.c - the verify job (see <tkm/api/verify.h>): credentials -> session
 * (the context's pool) -> resolve -> inspect -> policy -> signature ->
 * summary, on the loop, one callback.
 *
 * A job waits on at most one registry job at a time (oci) and on up to two
 * apiserver reads (creds, policy: pending), which cannot be cancelled. A
 * cancelled job keeps its memory until all of them have reported, then frees
 * itself without calling back.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include <tkm/api/verify.h>
#include <tkm/daemon.h>
#include <tkm/oci/digest.h>
#include <tkm/oci/ref.h>
#include <tkm/reach.h>
#include <tkm/trust/sigjob.h>
#include <tkm/util.h>

/* One session of the pool: key is "host\nsha256 of the auth bytes" (or
 * "\nanonymous"). A handful per daemon (hosts x credentials): a list. */
struct pool_ent {
    struct pool_ent *next;
    struct tkm_oci_session *s;
    char key[];
};

struct tkm_verify_ctx {
    uv_loop_t *loop;
    struct tkm_http *http;
    uint64_t timeout_ms, pull_deadline_ms, pull_deadline_opt, max_recv_bps;
    struct pool_ent *sessions;
    struct tkm_oci_reach *reach; /* the admin's registry reach policy (a reference), or NULL */
    struct tkm_verify_job *jobs; /* every job not yet freed */
    size_t n_sessions, n_jobs;
    int closing;
    uv_timer_t timer;         /* closed last: its close callback reports the close */
    struct tkm_closer closes; /* the sessions' closes, then the timer's */
    void (*close_cb)(void *data);
    void *close_data;
};

struct tkm_verify_job {
    struct tkm_verify_ctx *ctx;
    struct tkm_verify_job *prev, *next;
    tkm_verify_cb cb;
    void *data;
    int (*known)(const struct tkm_verify_result *r, void *data);
    unsigned flags;
    int cancelled;
    int calling; /* cb is running: cancel is a no-op */
    int pending; /* apiserver reads in flight */
    struct tkm_oci_job *oci;
    enum { OCI_RESOLVE, OCI_INSPECT, OCI_SUMMARY, OCI_SIG } oci_what; /* what oci is */
    struct tkm_oci_ref ref;
    /* creds: the docker config the session is made with (NULL: anonymous) */
    char *auth;
    int creds_rc;
    const char *creds_reason;
    char creds_msg[512];
    /* policy */
    struct tkm_api_policy *pol;
    int pol_rc;
    const char *pol_reason;
    char pol_msg[768];
    struct tkm_verify_result res;
};

/* ---- the context ---------------------------------------------------------------------- */

int tkm_verify_ctx_new(uv_loop_t *loop, struct tkm_http *http, const struct tkm_verify_ctx_opts *o,
                       struct tkm_verify_ctx **out, struct tkm_err *err)
{
    struct tkm_verify_ctx *c;
    int rc;
    if (!loop || !http || !out)
        return tkm_err_set(err, -EINVAL, "tkm_verify_ctx_new: missing argument");
    if (!(c = calloc(1, sizeof *c)))
        return tkm_err_set(err, -ENOMEM, "out of memory");
    if ((rc = uv_timer_init(loop, &c->timer)) < 0) {
        free(c);
        return tkm_err_set(err, rc, "uv_timer_init: %s", uv_strerror(rc));
    }
    c->timer.data = c;
    c->loop = loop;
    c->http = http;
    c->timeout_ms = o && o->timeout_ms ? o->timeout_ms : 30000;
    c->pull_deadline_ms = c->pull_deadline_opt = o ? o->pull_deadline_ms : 0;
    c->max_recv_bps = o ? o->max_recv_bps : 0;
    *out = c;
    return 0;
}

static void ctx_closed(uv_handle_t *h)
{
    struct tkm_verify_ctx *c = h->data;
    tkm_oci_reach_unref(c->reach);
    if (c->close_cb)
        c->close_cb(c->close_data);
    free(c);
}

/* The sessions have reported closed: the timer goes, whose close callback
 * reports the context's close. */
static void sessions_closed(void *data)
{
    struct tkm_verify_ctx *c = data;
    uv_close((uv_handle_t *)&c->timer, ctx_closed);
}

/* The context is closing and its last job is gone: each session closes once
 * its own jobs have reported (the caller's layer pulls too); the last of them
 * closes the timer. Nothing of the http client is used after the callback. */
static void ctx_finish(struct tkm_verify_ctx *c)
{
    tkm_closer_init(&c->closes, sessions_closed, c);
    while (c->sessions) {
        struct pool_ent *e = c->sessions;
        c->sessions = e->next;
        tkm_oci_session_close(e->s, tkm_closer_done, tkm_closer_add(&c->closes));
        free(e);
    }
    c->n_sessions = 0;
    tkm_closer_done(&c->closes);
}

void tkm_verify_ctx_close(struct tkm_verify_ctx *c, void (*cb)(void *data), void *data)
{
    if (!c || c->closing)
        return;
    c->closing = 1;
    c->close_cb = cb;
    c->close_data = data;
    /* cancelling may free a job: walk with the next pointer taken first */
    for (struct tkm_verify_job *j = c->jobs, *n; j; j = n) {
        n = j->next;
        tkm_verify_job_cancel(j);
    }
    if (!c->jobs)
        ctx_finish(c);
}

void tkm_verify_ctx_set_pull_deadline(struct tkm_verify_ctx *c, uint64_t ms)
{
    if (!c)
        return;
    c->pull_deadline_ms = ms ? ms : c->pull_deadline_opt;
    for (struct pool_ent *e = c->sessions; e; e = e->next)
        tkm_oci_session_set_deadline(e->s, c->pull_deadline_ms);
}

int tkm_verify_ctx_session(struct tkm_verify_ctx *c, const char *host, const void *auth_json,
                           size_t auth_len, struct tkm_oci_session **out, struct tkm_err *err)
{
    char ad[TKM_OCI_DIGEST_LEN + 1] = "anonymous";
    size_t hl = strlen(host), kl;
    struct pool_ent *e;
    int rc;
    if (c->closing)
        return tkm_err_set(err, -ESHUTDOWN, "the registry sessions are closing");
    if (auth_json && auth_len && tkm_oci_digest_bytes(auth_json, auth_len, ad) < 0)
        return tkm_err_set(err, -ENOMEM, "out of memory");
    kl = hl + 1 + strlen(ad);
    for (e = c->sessions; e; e = e->next)
        if (strlen(e->key) == kl && memcmp(e->key, host, hl) == 0 && e->key[hl] == '\n' &&
            strcmp(e->key + hl + 1, ad) == 0) {
            *out = e->s;
            return 0;
        }
    if (!(e = malloc(sizeof *e + kl + 1)))
        return tkm_err_set(err, -ENOMEM, "out of memory");
    snprintf(e->key, kl + 1, "%s\n%s", host, ad);
    struct tkm_oci_registry_opts o = {.auth_json = auth_json,
                                      .auth_json_len = auth_len,
                                      .anonymous = !(auth_json && auth_len),
                                      .timeout_ms = c->timeout_ms,
                                      .deadline_ms = c->pull_deadline_ms,
                                      .max_recv_bps = c->max_recv_bps};
    if ((rc = tkm_oci_session_new(c->http, host, &o, &e->s, err)) < 0) {
        free(e);
        return rc;
    }
    tkm_oci_session_set_reach(e->s, c->reach);
    e->next = c->sessions;
    c->sessions = e;
    c->n_sessions++;
    *out = e->s;
    return 0;
}

int tkm_verify_ctx_reach(struct tkm_verify_ctx *c, const struct tkm_api_config *cfg,
                         const struct tkm_reach_config *flags, struct tkm_err *err)
{
    struct tkm_reach_policy p;
    struct tkm_oci_reach *r;
    int rc = tkm_api_reach_policy(cfg, flags, &p, err);
    if (rc) {
        tkm_reach_policy_release(&p);
        return rc;
    }
    if (!(r = tkm_oci_reach_new(&p)))
        return tkm_err_set(err, -ENOMEM, "out of memory");
    tkm_oci_reach_unref(c->reach);
    c->reach = r;
    for (struct pool_ent *e = c->sessions; e; e = e->next)
        tkm_oci_session_set_reach(e->s, r);
    return 0;
}

size_t tkm_verify_ctx_sessions(const struct tkm_verify_ctx *c)
{
    return c ? c->n_sessions : 0;
}

size_t tkm_verify_ctx_jobs(const struct tkm_verify_ctx *c)
{
    return c ? c->n_jobs : 0;
}

/* ---- the job's life -------------------------------------------------------------------- */

static void job_free(struct tkm_verify_job *j)
{
    struct tkm_verify_ctx *c = j->ctx;
    if (j->prev)
        j->prev->next = j->next;
    else
        c->jobs = j->next;
    if (j->next)
        j->next->prev = j->prev;
    c->n_jobs--;
    if (j->auth) {
        memset(j->auth, 0, strlen(j->auth));
        free(j->auth);
    }
    tkm_api_policy_free(j->pol);
    tkm_triton_image_release(&j->res.image);
    tkm_oci_manifest_release(&j->res.manifest);
    tkm_variant_set_release(&j->res.variants);
    free(j);
    if (c->closing && !c->jobs)
        ctx_finish(c);
}

/* A callback of something the job waited for came in: 1 when the job was
 * cancelled (freed here once nothing else is in flight: the caller returns). */
static int gone(struct tkm_verify_job *j)
{
    if (!j->cancelled)
        return 0;
    if (!j->pending && !j->oci)
        job_free(j);
    return 1;
}

/* The job ends: step is the one that failed (TKM_VERIFY_DONE: none). */
static void finish(struct tkm_verify_job *j)
{
    struct tkm_verify_result *r = &j->res;
    if (!r->reason)
        r->reason = "";
    if (!r->summary_reason)
        r->summary_reason = "";
    if (!r->sig_reason)
        r->sig_reason = "";
    j->calling = 1;
    j->cb(r, j->data);
    job_free(j);
}

/* A message for a condition, an event or a node status (dst, n bytes): the
 * error text with control characters, invalid UTF-8 and bidi overrides
 * escaped and cut to fit (tkm_escape), since parts of it may quote what a
 * registry or a signature document holds (docs/security.md). */
static void set_message(char *dst, size_t n, const char *msg)
{
    tkm_escape(msg, strlen(msg), dst, n);
}

static void fail(struct tkm_verify_job *j, enum tkm_verify_step step, int rc, const char *reason,
                 const char *msg, int retry)
{
    struct tkm_verify_result *r = &j->res;
    r->failed = step;
    r->rc = rc < 0 ? rc : -EIO;
    r->reason = reason;
    r->retry = retry;
    set_message(r->message, sizeof r->message, msg ? msg : strerror(-r->rc));
    finish(j);
}

void tkm_verify_job_cancel(struct tkm_verify_job *j)
{
    if (!j || j->cancelled || j->calling)
        return;
    j->cancelled = 1;
    if (j->oci)
        tkm_oci_job_cancel(j->oci); /* its callback frees the job (when nothing else waits) */
}

const char *tkm_verify_registry_reason(int rc, const char *msg, int *retry)
{
    *retry = 0;
    switch (rc) {
    case TKM_OCI_EREACH: /* the decision changes only with the spec or tkm-config */
        return TKM_REACH_REASON_NOT_ALLOWED;
    case -ENOENT:
        return msg && strstr(msg, "label") ? "NotATritonCache" : "ImageNotFound";
    case -EBADMSG:
        return "DigestMismatch";
    case -EINVAL:
    case -EPROTO:
    case -ENOTSUP:
    case -E2BIG:
    case -EMSGSIZE:
        return "InvalidImage";
    case -EACCES:
        *retry = 1;
        return "RegistryUnauthorized";
    case -EPERM:
        *retry = 1;
        return "RegistryForbidden";
    case -ETIME:
        *retry = 1;
        return TKM_OCI_REASON_PULL_DEADLINE;
    default:
        *retry = 1;
        return "RegistryUnreachable";
    }
}

static void registry_fail(struct tkm_verify_job *j, enum tkm_verify_step step, int rc,
                          const struct tkm_err *err)
{
    int retry;
    const char *msg = err ? tkm_err_str(err) : strerror(-rc);
    const char *reason = tkm_verify_registry_reason(rc, msg, &retry);
    fail(j, step, rc, reason, msg, retry);
}

/* ---- the steps, in order ----------------------------------------------------------------- */

static void step_registry(struct tkm_verify_job *j);
static void step_after_resolve(struct tkm_verify_job *j);
static void step_policy(struct tkm_verify_job *j);
static void step_summary(struct tkm_verify_job *j);

/* Both apiserver reads are in: the registry part starts, unless the
 * credentials could not be read. */
static void api_done(struct tkm_verify_job *j)
{
    if (j->pending)
        return;
    if (j->creds_rc < 0) {
        fail(j, TKM_VERIFY_STEP_CREDS, j->creds_rc, j->creds_reason, j->creds_msg, 1);
        return;
    }
    step_registry(j);
}

/* The dockerconfigjson a session is made with, from resolved creds (NULL
 * with *none 1 when there are none). */
static char *creds_auth(const char *host, const struct tkm_oci_creds *c, int *none)
{
    *none = !c || (!c->username[0] && !c->identity_token[0]);
    if (*none)
        return NULL;
    json_t *entry = json_object();
    if (entry && c->identity_token[0])
        json_object_set_new(entry, "identitytoken", json_string(c->identity_token));
    if (entry && c->username[0]) {
        json_object_set_new(entry, "username", json_string(c->username));
        json_object_set_new(entry, "password", json_string(c->password));
    }
    json_t *root = entry ? json_pack("{s:{s:o}}", "auths", host, entry) : NULL;
    char *s = root ? json_dumps(root, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
    json_decref(root);
    return s;
}

static void on_creds(int rc, const struct tkm_oci_creds *creds, const char *reason,
                     const struct tkm_err *err, void *data)
{
    struct tkm_verify_job *j = data;
    int none = 1;
    j->pending--;
    if (gone(j))
        return;
    if (rc == 0 && !(j->auth = creds_auth(j->ref.host, creds, &none)) && !none) {
        rc = -ENOMEM;
        reason = "APIUnavailable";
    }
    if (rc < 0) {
        j->creds_rc = rc;
        j->creds_reason = reason ? reason : "SecretNotFound";
        snprintf(j->creds_msg, sizeof j->creds_msg, "%s", err ? tkm_err_str(err) : strerror(-rc));
    }
    api_done(j);
}

static void on_policy(int rc, struct tkm_api_policy *pol, const char *reason,
                      const struct tkm_err *err, void *data)
{
    struct tkm_verify_job *j = data;
    j->pending--;
    if (gone(j)) {
        tkm_api_policy_free(pol);
        return;
    }
    if (rc < 0) {
        j->pol_rc = rc;
        j->pol_reason = reason ? reason : "InvalidPolicy";
        snprintf(j->pol_msg, sizeof j->pol_msg, "%s", err ? tkm_err_str(err) : strerror(-rc));
    } else {
        j->pol = pol;
    }
    api_done(j);
}

static void resolved(struct tkm_verify_job *j, int rc, const struct tkm_oci_job_result *res,
                     const struct tkm_err *err)
{
    if (rc < 0) {
        registry_fail(j, TKM_VERIFY_STEP_RESOLVE, rc, err);
        return;
    }
    snprintf(j->res.digest, sizeof j->res.digest, "%s", res->digest);
    j->res.resolved = 1;
    step_after_resolve(j);
}

static void inspected(struct tkm_verify_job *j, int rc, struct tkm_oci_job_result *res,
                      const struct tkm_err *err)
{
    struct tkm_verify_result *r = &j->res;
    if (rc == 0) {
        /* moved out of the job's result (session.h allows it) */
        struct tkm_variant_inspect *vi = (struct tkm_variant_inspect *)res->detail;
        if (vi->image) {
            r->image = *vi->image;
            memset(vi->image, 0, sizeof *vi->image);
            r->manifest = res->image.parsed;
            memset(&res->image.parsed, 0, sizeof res->image.parsed);
            snprintf(r->image_digest, sizeof r->image_digest, "%s", res->digest);
        }
        tkm_variant_set_release(&r->variants); /* a SUMMARY after an INSPECT: the newer */
        r->variants = vi->set;
        memset(&vi->set, 0, sizeof vi->set);
        r->inspected = 1;
    }
    if (j->oci_what == OCI_INSPECT) {
        if (rc < 0)
            registry_fail(j, TKM_VERIFY_STEP_INSPECT, rc, err);
        else
            step_policy(j);
        return;
    }
    if (rc < 0) {
        int retry;
        r->summary_rc = rc;
        set_message(r->summary_message, sizeof r->summary_message,
                    err ? tkm_err_str(err) : strerror(-rc));
        r->summary_reason = tkm_verify_registry_reason(rc, r->summary_message, &retry);
    }
    finish(j);
}

static void searched(struct tkm_verify_job *j, int rc, const struct tkm_oci_job_result *res,
                     const struct tkm_err *err)
{
    struct tkm_verify_result *r = &j->res;
    r->sig_state = TKM_VERIFY_SIG_SEARCHED;
    r->sig_rc = rc;
    r->sig_reason = tkm_sig_reason(rc);
    if (rc == 0) {
        r->verified = 1;
        if (res && res->detail)
            r->sig = *(const struct tkm_sig_result *)res->detail;
    } else {
        set_message(r->sig_message, sizeof r->sig_message, err ? tkm_err_str(err) : strerror(-rc));
        r->sig_retry = !strcmp(r->sig_reason, "RegistryUnreachable") ||
                       !strcmp(r->sig_reason, "RegistryUnauthorized") ||
                       !strcmp(r->sig_reason, "InternalError");
    }
    r->usable = r->verified || r->mode == TKM_SIG_MODE_AUDIT;
    step_summary(j);
}

/* The one callback of the job's registry jobs (resolve, inspect, search). */
static void on_oci(struct tkm_oci_job *job, int rc, struct tkm_oci_job_result *res,
                   const struct tkm_err *err, void *data)
{
    struct tkm_verify_job *j = data;
    (void)job;
    j->oci = NULL;
    if (gone(j))
        return;
    if (j->oci_what == OCI_RESOLVE)
        resolved(j, rc, res, err);
    else if (j->oci_what == OCI_SIG)
        searched(j, rc, res, err);
    else
        inspected(j, rc, res, err);
}

static int start_resolve(struct tkm_verify_job *j, struct tkm_err *err)
{
    j->oci_what = OCI_RESOLVE;
    return tkm_oci_job_resolve(j->res.session, j->ref.repo, tkm_oci_ref_reference(&j->ref), on_oci,
                               j, &j->oci, err);
}

static int start_inspect(struct tkm_verify_job *j, int summary, struct tkm_err *err)
{
    struct tkm_oci_ref ref = j->ref;
    snprintf(ref.digest, sizeof ref.digest, "%s", j->res.digest);
    j->oci_what = summary ? OCI_SUMMARY : OCI_INSPECT;
    return tkm_variants_job_inspect(j->res.session, &ref, on_oci, j, &j->oci, err);
}

/* The session for the image's host with the job's credentials, then the
 * first registry step. */
static void step_registry(struct tkm_verify_job *j)
{
    struct tkm_err err = {0};
    int rc = tkm_verify_ctx_session(j->ctx, j->ref.host, j->auth, j->auth ? strlen(j->auth) : 0,
                                    &j->res.session, &err);
    if (rc < 0) {
        fail(j, TKM_VERIFY_STEP_SESSION, rc, "InvalidImage", tkm_err_str(&err), 0);
        return;
    }
    if (j->res.digest[0]) {
        step_after_resolve(j);
        return;
    }
    if ((rc = start_resolve(j, &err)) < 0)
        fail(j, TKM_VERIFY_STEP_RESOLVE, rc, "InvalidImage", tkm_err_str(&err), 0);
}

static void step_after_resolve(struct tkm_verify_job *j)
{
    struct tkm_err err = {0};
    int rc;
    if (!(j->flags & TKM_VERIFY_INSPECT)) {
        step_policy(j);
        return;
    }
    if ((rc = start_inspect(j, 0, &err)) < 0)
        fail(j, TKM_VERIFY_STEP_INSPECT, rc, "InvalidImage", tkm_err_str(&err), 0);
}

static void step_policy(struct tkm_verify_job *j)
{
    struct tkm_verify_result *r = &j->res;
    struct tkm_err err = {0};
    int rc, k;
    if (!(j->flags & TKM_VERIFY_SIGNATURE)) {
        step_summary(j);
        return;
    }
    if (j->pol_rc < 0) {
        fail(j, TKM_VERIFY_STEP_POLICY, j->pol_rc, j->pol_reason, j->pol_msg, 1);
        return;
    }
    r->has_policy = 1;
    r->mode = j->pol->pol.mode;
    r->policy_source = j->pol->source;
    snprintf(r->policy_describe, sizeof r->policy_describe, "%s", j->pol->describe);
    tkm_verify_policy_fingerprint(&j->pol->pol, r->policy_fp);
    r->usable = 0;
    if (r->mode == TKM_SIG_MODE_DISABLED) {
        r->sig_state = TKM_VERIFY_SIG_DISABLED;
        r->usable = 1;
        step_summary(j);
        return;
    }
    if (j->known && (k = j->known(r, j->data)) >= 0) {
        r->sig_state = TKM_VERIFY_SIG_KNOWN;
        r->verified = k > 0;
        r->usable = r->verified || r->mode == TKM_SIG_MODE_AUDIT;
        step_summary(j);
        return;
    }
    j->oci_what = OCI_SIG;
    rc = tkm_sig_job_verify(r->session, j->ref.repo, r->digest, &j->pol->pol, on_oci, j, &j->oci,
                            &err);
    if (rc < 0) {
        r->sig_state = TKM_VERIFY_SIG_SEARCHED;
        r->sig_rc = rc;
        r->sig_reason =
            rc == -EINVAL || rc == TKM_SIG_EPOLICY ? "InvalidPolicy" : "VerificationError";
        r->sig_retry = 1;
        set_message(r->sig_message, sizeof r->sig_message, tkm_err_str(&err));
        r->usable = r->mode == TKM_SIG_MODE_AUDIT;
        step_summary(j);
    }
}

static void step_summary(struct tkm_verify_job *j)
{
    struct tkm_verify_result *r = &j->res;
    struct tkm_err err = {0};
    int rc, retry;
    if (!(j->flags & TKM_VERIFY_SUMMARY) || r->inspected || !r->usable) {
        finish(j);
        return;
    }
    if ((rc = start_inspect(j, 1, &err)) < 0) {
        r->summary_rc = rc;
        set_message(r->summary_message, sizeof r->summary_message, tkm_err_str(&err));
        r->summary_reason = tkm_verify_registry_reason(rc, r->summary_message, &retry);
        finish(j);
    }
}

/* ---- start ----------------------------------------------------------------------------- */

int tkm_verify_start(struct tkm_verify_ctx *c, const struct tkm_verify_req *q, tkm_verify_cb cb,
                     void *data, struct tkm_verify_job **out, struct tkm_err *err)
{
    const char *image = q && q->image   ? q->image
                        : q && q->cache ? q->cache->spec.cache_image
                                        : NULL;
    const unsigned all =
        TKM_VERIFY_RESOLVE | TKM_VERIFY_INSPECT | TKM_VERIFY_SIGNATURE | TKM_VERIFY_SUMMARY;
    struct tkm_verify_job *j;
    int rc, creds;
    if (c && c->closing)
        return tkm_err_set(err, -ESHUTDOWN, "the verify context is closing");
    if (!c || !q || !cb || !image || !q->flags || (q->flags & ~all))
        return tkm_err_set(err, -EINVAL, "tkm_verify_start: missing argument");
    creds = q->cache && q->cache->spec.n_image_pull_secrets;
    if ((creds || (q->flags & TKM_VERIFY_SIGNATURE)) && (!q->kc || !q->cache || !q->config_ns))
        return tkm_err_set(err, -EINVAL,
                           "tkm_verify_start: the cache's Secrets need a cache, a client and "
                           "the daemon's namespace");
    if (!(j = calloc(1, sizeof *j)))
        return tkm_err_set(err, -ENOMEM, "out of memory");
    if ((rc = tkm_oci_ref_parse(&j->ref, image, err)) < 0) {
        free(j);
        return rc;
    }
    if (q->digest && !tkm_oci_digest_valid(q->digest)) {
        free(j);
        return tkm_err_set(err, -EINVAL, "%s: \"%.80s\" is not a digest", image, q->digest);
    }
    snprintf(j->res.digest, sizeof j->res.digest, "%s", q->digest ? q->digest : j->ref.digest);
    if (!j->res.digest[0] && !(q->flags & TKM_VERIFY_RESOLVE)) {
        free(j);
        return tkm_err_set(err, -EINVAL, "%s: no digest to verify, and resolving was not asked",
                           image);
    }
    if (j->res.digest[0] && q->flags == TKM_VERIFY_RESOLVE) {
        free(j);
        return tkm_err_set(err, -EINVAL, "%s: nothing to do: the digest is known", image);
    }
    j->ctx = c;
    j->cb = cb;
    j->data = data;
    j->known = q->known;
    j->flags = q->flags;
    j->res.usable = 1;
    j->next = c->jobs;
    if (c->jobs)
        c->jobs->prev = j;
    c->jobs = j;
    c->n_jobs++;
    /* The apiserver reads side by side; their callbacks come from the loop. */
    if (creds) {
        if ((rc = tkm_api_pull_creds_resolve(q->kc, q->cache, q->config_ns, j->ref.host, on_creds,
                                             j, err)) < 0)
            goto fail;
        j->pending++;
    }
    if (q->flags & TKM_VERIFY_SIGNATURE) {
        if ((rc = tkm_api_policy_resolve(q->kc, q->cache, q->cfg, q->config_ns, on_policy, j,
                                         err)) < 0)
            goto fail;
        j->pending++;
    }
    if (!j->pending) { /* straight to the registry: its jobs call back from the loop */
        rc = tkm_verify_ctx_session(c, j->ref.host, NULL, 0, &j->res.session, err);
        if (rc == 0 && !j->res.digest[0])
            rc = start_resolve(j, err);
        else if (rc == 0 && (q->flags & (TKM_VERIFY_INSPECT | TKM_VERIFY_SUMMARY)))
            rc = start_inspect(j, !(q->flags & TKM_VERIFY_INSPECT), err);
        if (rc < 0)
            goto fail;
    }
    if (out)
        *out = j;
    return 0;
fail:
    j->cancelled = 1; /* a read already started reports later and frees it */
    if (!j->pending)
        job_free(j);
    return rc;
}

/* ---- helpers ----------------------------------------------------------------------------- */

int tkm_verify_api_summary(const struct tkm_triton_image *im, struct tkm_api_summary *d)
{
    const struct tkm_triton_summary *s = &im->summary;
    int64_t v = 0;
    memset(d, 0, sizeof *d);
    if (im->entry_count && tkm_parse_i64(im->entry_count, 0, INT64_MAX, &v) == 0)
        d->entry_count = v;
    if (im->size_bytes && tkm_parse_i64(im->size_bytes, 0, INT64_MAX, &v) == 0)
        d->cache_size_bytes = v;
    if (!s->n_targets)
        return 0;
    if (!(d->targets = calloc(s->n_targets, sizeof *d->targets)))
        return -ENOMEM;
    d->n_targets = s->n_targets;
    for (size_t i = 0; i < s->n_targets; i++) {
        const struct tkm_triton_summary_target *t = &s->targets[i];
        struct tkm_api_target *o = &d->targets[i];
        char ptx[32];
        o->warp_size = t->target.warp_size;
        o->backend = strdup(t->target.backend);
        o->arch = strdup(t->target.arch);
        if (s->n_triton_versions)
            o->triton_version = strdup(s->triton_versions[0]);
        if (t->ptx_max.major >= 0) {
            snprintf(ptx, sizeof ptx, "%d.%d", t->ptx_max.major, t->ptx_max.minor);
            o->ptx_version = strdup(ptx);
        }
        if (!o->backend || !o->arch || (s->n_triton_versions && !o->triton_version) ||
            (t->ptx_max.major >= 0 && !o->ptx_version)) {
            tkm_api_summary_release(d);
            return -ENOMEM;
        }
    }
    return 0;
}

void tkm_verify_policy_fingerprint(const struct tkm_sig_policy *p, char out[72])
{
    struct tkm_oci_hasher h;
    char d[TKM_OCI_DIGEST_LEN + 1];
    char num[64];
    tkm_oci_hasher_init(&h);
    snprintf(num, sizeof num, "mode=%d xrepo=%d keys=%zu ids=%zu\n", (int)p->mode,
             p->allow_cross_repository, p->nkeys, p->nidentities);
    tkm_oci_hasher_update(&h, num, strlen(num));
    for (size_t i = 0; i < p->nkeys; i++) {
        tkm_oci_hasher_update(&h, p->keys[i].pem, p->keys[i].len);
        tkm_oci_hasher_update(&h, "\n", 1);
    }
    if (p->trusted_root)
        tkm_oci_hasher_update(&h, p->trusted_root, p->trusted_root_len);
    for (size_t i = 0; i < p->nidentities; i++) {
        const struct tkm_sig_identity *id = &p->identities[i];
        const char *f[3] = {id->issuer, id->subject, id->subject_regexp};
        for (int k = 0; k < 3; k++) {
            tkm_oci_hasher_update(&h, f[k] ? f[k] : "", f[k] ? strlen(f[k]) : 0);
            tkm_oci_hasher_update(&h, "\n", 1);
        }
    }
    tkm_oci_hasher_final(&h, d);
    tkm_oci_hasher_release(&h);
    snprintf(out, 72, "%s", d);
}
