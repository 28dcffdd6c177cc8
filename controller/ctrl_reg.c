/*
 * ctrl_reg.c - the controller's registry work, all on the loop: one session
 * per (registry host, credentials), reused for the life of the process;
 * resolve (tag -> digest), inspect (the Triton summary labels) and the one
 * signature step, ctrl_reg_verify().
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tkm/daemon.h>
#include <tkm/log.h>
#include <tkm/http.h>
#include <tkm/util.h>
#include <tkm/oci/digest.h>
#include <tkm/oci/ref.h>
#include <tkm/oci/registry.h>
#include <tkm/oci/session.h>
#include <tkm/triton/image.h>
#include <tkm/trust/sigjob.h>

#include "ctrl-int.h"

struct ctrl_reg {
    uv_loop_t *loop;
    struct tkm_http *http;
    struct ctrl_map sessions; /* "host\nauth-digest" -> struct tkm_oci_session */
    uint64_t timeout_ms;
    struct tkm_closer closing; /* ctrl_reg_close(): the sessions */
    void (*closed_cb)(void *data);
    void *closed_data;
};

struct ctrl_reg_op {
    struct ctrl_reg *reg;
    ctrl_reg_cb cb;
    void *data;
    struct tkm_oci_job *job; /* resolve/inspect */
    int cancelled;
    char digest[CTRL_DIGEST_MAX];
};

int ctrl_reg_new(uv_loop_t *loop, struct tkm_http *http, const struct ctrl_reg_opts *o,
                 struct ctrl_reg **out, struct tkm_err *err)
{
    struct ctrl_reg *r = calloc(1, sizeof *r);
    if (!r)
        return tkm_err_set(err, -ENOMEM, "out of memory");
    r->loop = loop;
    r->http = http;
    r->timeout_ms = o && o->timeout_ms ? o->timeout_ms : 30000;
    *out = r;
    return 0;
}

static void sessions_closed(void *data)
{
    struct ctrl_reg *r = data;
    void (*cb)(void *) = r->closed_cb;
    void *cb_data = r->closed_data;
    ctrl_map_release(&r->sessions);
    free(r);
    if (cb)
        cb(cb_data);
}

static int close_session(const char *key, void *val, void *data)
{
    struct ctrl_reg *r = data;
    (void)key;
    tkm_oci_session_close(val, tkm_closer_done, tkm_closer_add(&r->closing));
    return 0;
}

void ctrl_reg_close(struct ctrl_reg *r, void (*closed_cb)(void *data), void *data)
{
    if (!r)
        return;
    r->closed_cb = closed_cb;
    r->closed_data = data;
    tkm_closer_init(&r->closing, sessions_closed, r);
    ctrl_map_foreach(&r->sessions, close_session, r);
    tkm_closer_done(&r->closing);
}

void ctrl_reg_free(struct ctrl_reg *r)
{
    ctrl_reg_close(r, NULL, NULL);
}

const char *ctrl_reg_reason(int rc, int *retry)
{
    *retry = 1;
    switch (rc) {
    case -ENOENT: /* pushed later, perhaps: looked at again every 5 min */
        *retry = 0;
        return "ImageNotFound";
    case -EACCES:
        return "RegistryUnauthorized";
    case -EPERM:
        return "RegistryForbidden";
    case -EINVAL:
    case -EPROTO:
    case -EBADMSG:
        *retry = 0;
        return "InvalidImage";
    default:
        return "RegistryUnreachable";
    }
}

static struct tkm_oci_session *session_for(struct ctrl_reg *r, const char *host, const void *auth,
                                           size_t auth_len, struct tkm_err *err)
{
    char key[TKM_OCI_NAME_MAX + 2 + CTRL_DIGEST_MAX] = {0};
    char ad[CTRL_DIGEST_MAX] = "anonymous";
    if (auth && auth_len)
        tkm_oci_digest_bytes(auth, auth_len, ad);
    snprintf(key, sizeof key, "%s\n%s", host, ad);
    struct tkm_oci_session *s = ctrl_map_get(&r->sessions, key);
    if (s)
        return s;
    struct tkm_oci_registry_opts o = {.auth_json = auth,
                                      .auth_json_len = auth_len,
                                      .anonymous = !(auth && auth_len),
                                      .timeout_ms = r->timeout_ms};
    if (tkm_oci_session_new(r->http, host, &o, &s, err) < 0)
        return NULL;
    if (ctrl_map_put(&r->sessions, key, s, NULL) < 0) {
        tkm_oci_session_free(s);
        tkm_err_set(err, -ENOMEM, "out of memory");
        return NULL;
    }
    return s;
}

static void finish(struct ctrl_reg_op *op, struct ctrl_reg_result *res)
{
    if (op->cancelled && res->rc == 0) {
        res->rc = -ECANCELED;
        res->reason = "Cancelled";
    }
    op->cb(res, op->data);
    ctrl_summary_release(&res->summary);
    free(op);
}

static void job_failed(struct ctrl_reg_result *res, int rc, const struct tkm_err *err)
{
    res->rc = rc;
    res->reason = ctrl_reg_reason(rc, &res->retry);
    snprintf(res->message, sizeof res->message, "%s", err ? tkm_err_str(err) : strerror(-rc));
}

static void resolve_done(struct tkm_oci_job *job, int rc, struct tkm_oci_job_result *res,
                         const struct tkm_err *err, void *data)
{
    (void)job;
    struct ctrl_reg_op *op = data;
    struct ctrl_reg_result r = {.rc = rc};
    if (rc < 0)
        job_failed(&r, rc, err);
    else
        snprintf(r.digest, sizeof r.digest, "%s", res->digest);
    finish(op, &r);
}

/* A new operation on image's registry: *ref parsed from image, *s the
 * session for its host (auth: a docker config JSON, or NULL). NULL with err
 * set when the reference is invalid or memory runs out. */
static struct ctrl_reg_op *op_new(struct ctrl_reg *r, const char *image, const void *auth,
                                  size_t auth_len, ctrl_reg_cb cb, void *data,
                                  struct tkm_oci_ref *ref, struct tkm_oci_session **s,
                                  struct tkm_err *err)
{
    if (tkm_oci_ref_parse(ref, image, err) < 0)
        return NULL;
    *s = session_for(r, ref->host, auth, auth_len, err);
    if (!*s) {
        if (!err->code)
            tkm_err_set(err, -ENOMEM, "out of memory");
        return NULL;
    }
    struct ctrl_reg_op *op = calloc(1, sizeof *op);
    if (!op) {
        tkm_err_set(err, -ENOMEM, "out of memory");
        return NULL;
    }
    op->reg = r;
    op->cb = cb;
    op->data = data;
    return op;
}

/* rc: what starting op's job returned. Frees op when it did not start. */
static int op_started(struct ctrl_reg_op *op, int rc, struct ctrl_reg_op **out)
{
    if (rc < 0) {
        free(op);
        return rc;
    }
    if (out)
        *out = op;
    return 0;
}

int ctrl_reg_resolve(struct ctrl_reg *r, const char *image, const void *auth, size_t auth_len,
                     ctrl_reg_cb cb, void *data, struct ctrl_reg_op **out, struct tkm_err *err)
{
    struct tkm_oci_ref ref;
    struct tkm_oci_session *s;
    struct ctrl_reg_op *op = op_new(r, image, auth, auth_len, cb, data, &ref, &s, err);
    if (!op)
        return err->code ? err->code : -ENOMEM;
    return op_started(op,
                      tkm_oci_job_resolve(s, ref.repo, tkm_oci_ref_reference(&ref), resolve_done,
                                          op, &op->job, err),
                      out);
}

/* The image's Triton summary as the API spells it. */
static int summary_from(struct tkm_api_summary *d, const struct tkm_triton_image *im)
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
    d->targets = calloc(s->n_targets, sizeof *d->targets);
    if (!d->targets)
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
        if (!o->backend || !o->arch)
            return -ENOMEM;
    }
    return 0;
}

static void inspect_done(struct tkm_oci_job *job, int rc, struct tkm_oci_job_result *res,
                         const struct tkm_err *err, void *data)
{
    (void)job;
    struct ctrl_reg_op *op = data;
    struct ctrl_reg_result r = {.rc = rc};
    if (rc == -ENOENT && res == NULL) {
        job_failed(&r, rc, err);
    } else if (rc == -ENOENT) {
        job_failed(&r, rc, err);
    } else if (rc < 0) {
        job_failed(&r, rc, err);
    } else {
        const struct tkm_triton_image *im = res->detail;
        snprintf(r.digest, sizeof r.digest, "%s", op->digest);
        if (im && summary_from(&r.summary, im) == 0)
            r.has_summary = 1;
    }
    finish(op, &r);
}

int ctrl_reg_inspect(struct ctrl_reg *r, const char *image, const char *digest, const void *auth,
                     size_t auth_len, ctrl_reg_cb cb, void *data, struct ctrl_reg_op **out,
                     struct tkm_err *err)
{
    struct tkm_oci_ref ref;
    struct tkm_oci_session *s;
    struct ctrl_reg_op *op = op_new(r, image, auth, auth_len, cb, data, &ref, &s, err);
    if (!op)
        return err->code ? err->code : -ENOMEM;
    snprintf(ref.digest, sizeof ref.digest, "%s", digest);
    snprintf(op->digest, sizeof op->digest, "%s", digest);
    return op_started(op, tkm_triton_job_inspect(s, &ref, inspect_done, op, &op->job, err), out);
}

/* ---- the signature step --------------------------------------------------------- */

/* The search as a job on the host's session (tkm_sig_job_verify): every
 * request and check on the loop, cancellable like the other jobs. */
static void sig_done(struct tkm_oci_job *job, int rc, struct tkm_oci_job_result *res,
                     const struct tkm_err *err, void *data)
{
    (void)job;
    struct ctrl_reg_op *op = data;
    struct ctrl_reg_result r = {.rc = rc};
    const struct tkm_sig_result *sr = rc == 0 && res ? res->detail : NULL;
    if (rc < 0) {
        r.reason = tkm_sig_reason(rc);
        r.retry = strcmp(r.reason, "RegistryUnreachable") == 0 ||
                  strcmp(r.reason, "RegistryUnauthorized") == 0 ||
                  strcmp(r.reason, "InternalError") == 0;
        snprintf(r.message, sizeof r.message, "%s", err ? tkm_err_str(err) : strerror(-rc));
    } else {
        snprintf(r.digest, sizeof r.digest, "%s", op->digest);
        snprintf(r.key_id, sizeof r.key_id, "%s", sr && sr->key_id[0] ? sr->key_id : "keyless");
        snprintf(r.message, sizeof r.message, "signature found by %s (%s) at %s",
                 sr ? tkm_sig_source_name(sr->source) : "?",
                 sr ? tkm_sig_format_name(sr->format) : "?", sr ? sr->location : "?");
    }
    finish(op, &r);
}

int ctrl_reg_verify(struct ctrl_reg *r, const char *image, const char *digest,
                    const struct tkm_sig_policy *pol, const void *auth, size_t auth_len,
                    ctrl_reg_cb cb, void *data, struct ctrl_reg_op **out, struct tkm_err *err)
{
    struct tkm_oci_ref ref;
    struct tkm_oci_session *s;
    struct ctrl_reg_op *op = op_new(r, image, auth, auth_len, cb, data, &ref, &s, err);
    if (!op)
        return err->code ? err->code : -ENOMEM;
    snprintf(op->digest, sizeof op->digest, "%s", digest);
    return op_started(op, tkm_sig_job_verify(s, ref.repo, digest, pol, sig_done, op, &op->job, err),
                      out);
}

void ctrl_reg_cancel(struct ctrl_reg_op *op)
{
    if (!op)
        return;
    op->cancelled = 1;
    if (op->job)
        tkm_oci_job_cancel(op->job);
}

void ctrl_policy_fingerprint(const struct tkm_sig_policy *p, char out[72])
{
    struct tkm_oci_hasher h;
    char d[CTRL_DIGEST_MAX];
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
