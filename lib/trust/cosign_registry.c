/*
 * cosign_registry.c - fetches a cosign .sig manifest and its payloads from a
 * registry and verifies them (tkm_cosign_verify_registry, see cosign.h).
 */
#include <errno.h>
#include <openssl/crypto.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include <tkm/trust/cosign.h>
#include <tkm/buf.h>
#include <tkm/http.h>
#include <tkm/oci/registry.h>
#include <tkm/oci/session.h>

#include "oci/session-int.h"
#include "trust-int.h"

int tkm__trust_fetch_payloads(struct tkm_oci_registry *r, const char *repo,
                              const struct tkm_cosign_layer *layers, size_t n, const char *where,
                              struct tkm_buf **payloads_out, struct tkm_cosign_blob **blobs_out,
                              struct tkm_err *err)
{
    struct tkm_buf *payloads = calloc(n ? n : 1, sizeof(*payloads));
    struct tkm_cosign_blob *blobs = calloc(n ? n : 1, sizeof(*blobs));
    int rc = 0;
    if (!payloads || !blobs) {
        rc = tkm_err_set(err, -ENOMEM, "out of memory");
        goto fail;
    }
    for (size_t i = 0; i < n; i++)
        tkm_buf_init(&payloads[i], TKM_COSIGN_MAX_PAYLOAD);
    for (size_t i = 0; i < n; i++) {
        struct tkm_oci_desc d;
        memset(&d, 0, sizeof d);
        snprintf(d.media_type, sizeof d.media_type, "%s", TKM_COSIGN_MEDIA_TYPE);
        snprintf(d.digest, sizeof d.digest, "%s", layers[i].digest);
        d.size = layers[i].size;
        if ((rc = tkm_oci_registry_fetch_blob_mem(r, repo, &d, &payloads[i], err)) < 0) {
            tkm_err_prefix(err, "signature payload %zu of %s", i, where);
            goto fail;
        }
        blobs[i] = (struct tkm_cosign_blob){
            layers[i].digest, (const unsigned char *)payloads[i].data, payloads[i].len};
    }
    *payloads_out = payloads;
    *blobs_out = blobs;
    return 0;
fail:
    tkm__trust_payloads_free(payloads, blobs, payloads && blobs ? n : 0);
    return rc;
}

void tkm__trust_payloads_free(struct tkm_buf *payloads, struct tkm_cosign_blob *blobs, size_t n)
{
    for (size_t i = 0; payloads && i < n; i++)
        tkm_buf_release(&payloads[i]);
    free(payloads);
    free(blobs);
}

int tkm_cosign_verify_registry(struct tkm_oci_registry *r, const char *repo,
                               const char *image_digest, const char *pubkey_pem, size_t pem_len,
                               struct tkm_cosign_result *res, struct tkm_err *err)
{
    struct tkm_buf man = TKM_BUF_INIT(TKM_COSIGN_MAX_MANIFEST);
    struct tkm_cosign_layer *layers = NULL;
    struct tkm_buf *payloads = NULL;
    struct tkm_cosign_blob *blobs = NULL;
    size_t n = 0;
    char tag[80], ct[256], mdigest[TKM_OCI_DIGEST_LEN + 1];
    int rc = tkm_cosign_sig_tag(image_digest, tag);
    if (rc < 0)
        return tkm_err_set(err, rc, "image digest '%s' is not sha256:<64 hex>", image_digest);
    rc = tkm_oci_registry_get_manifest(r, repo, tag, &man, ct, sizeof ct, mdigest, err);
    if (rc == -ENOENT) {
        tkm_err_clear(err);
        rc = tkm_err_set(err, -ENOENT, "%s@%s is not signed: no signature manifest %s:%s", repo,
                         image_digest, repo, tag);
        goto out;
    }
    if (rc < 0)
        goto out;
    if ((rc = tkm_cosign_sig_layers(man.data, man.len, &layers, &n, err)) < 0) {
        tkm_err_prefix(err, "%s:%s", repo, tag);
        goto out;
    }
    {
        char where[TKM_OCI_NAME_MAX + 100];
        snprintf(where, sizeof where, "%s:%s", repo, tag);
        if ((rc = tkm__trust_fetch_payloads(r, repo, layers, n, where, &payloads, &blobs, err)) < 0)
            goto out;
    }
    rc =
        tkm_cosign_verify(man.data, man.len, blobs, n, pubkey_pem, pem_len, image_digest, res, err);
out:
    tkm__trust_payloads_free(payloads, blobs, n);
    free(layers);
    tkm_buf_release(&man);
    return rc;
}

/* ---- the verify job on a registry session (the caller's loop) ----------- */

struct cv_ctx {
    struct tkm_oci_job *job;
    char tag[80];
    char digest[TKM_OCI_DIGEST_LEN + 1];
    char repo[TKM_OCI_NAME_MAX + 1];
    char *pem;
    size_t pem_len;
    struct tkm__oci_manifest man;
    struct tkm_cosign_layer *layers;
    size_t n, i;
    struct tkm_buf *payloads;
    struct tkm_cosign_result res;
};

static void cv_free(void *p)
{
    struct cv_ctx *c = p;
    for (size_t i = 0; c->payloads && i < c->n; i++)
        tkm_buf_release(&c->payloads[i]);
    free(c->payloads);
    free(c->layers);
    if (c->pem) {
        OPENSSL_cleanse(c->pem, c->pem_len);
        free(c->pem);
    }
    tkm_buf_release(&c->man.body);
    free(c);
}

static void cv_next(struct cv_ctx *c);

static void cv_payload(int rc, struct tkm_err *err, void *data)
{
    struct cv_ctx *c = data;
    if (rc) {
        tkm_err_prefix(err, "signature payload %zu of %s:%s", c->i, c->repo, c->tag);
        tkm__oci_job_ext_report(c->job, rc, err);
        return;
    }
    c->i++;
    cv_next(c);
}

/* Fetches the next payload, or verifies them all (a pure function, on the
 * loop: one signature check per layer) and reports. */
static void cv_next(struct cv_ctx *c)
{
    struct tkm_err err = {0};
    int rc;
    if (c->i < c->n) {
        struct tkm_oci_desc d;
        memset(&d, 0, sizeof d);
        snprintf(d.media_type, sizeof d.media_type, "%s", TKM_COSIGN_MEDIA_TYPE);
        snprintf(d.digest, sizeof d.digest, "%s", c->layers[c->i].digest);
        d.size = c->layers[c->i].size;
        rc =
            tkm__oci_get_blob(tkm__oci_job_ext_session(c->job), c->repo, &d, -1, NULL,
                              &c->payloads[c->i], cv_payload, c, tkm__oci_job_ext_op(c->job), &err);
        if (rc)
            tkm__oci_job_ext_report(c->job, rc, &err);
        return;
    }
    struct tkm_cosign_blob *blobs = calloc(c->n ? c->n : 1, sizeof *blobs);
    if (!blobs) {
        tkm__oci_job_ext_report(c->job, tkm_err_set(&err, -ENOMEM, "out of memory"), &err);
        return;
    }
    for (size_t i = 0; i < c->n; i++)
        blobs[i] = (struct tkm_cosign_blob){
            c->layers[i].digest, (const unsigned char *)c->payloads[i].data, c->payloads[i].len};
    rc = tkm_cosign_verify(c->man.body.data, c->man.body.len, blobs, c->n, c->pem, c->pem_len,
                           c->digest, &c->res, &err);
    free(blobs);
    if (rc == 0)
        tkm__oci_job_ext_result(c->job)->detail = &c->res;
    tkm__oci_job_ext_report(c->job, rc, &err);
}

static void cv_manifest(int rc, struct tkm_err *err, void *data)
{
    struct cv_ctx *c = data;
    if (rc == -ENOENT) {
        tkm_err_clear(err);
        rc = tkm_err_set(err, -ENOENT, "%s@%s is not signed: no signature manifest %s:%s", c->repo,
                         c->digest, c->repo, c->tag);
    }
    if (rc == 0 &&
        (rc = tkm_cosign_sig_layers(c->man.body.data, c->man.body.len, &c->layers, &c->n, err)))
        tkm_err_prefix(err, "%s:%s", c->repo, c->tag);
    if (rc == 0 && !(c->payloads = calloc(c->n ? c->n : 1, sizeof *c->payloads)))
        rc = tkm_err_set(err, -ENOMEM, "out of memory");
    if (rc) {
        tkm__oci_job_ext_report(c->job, rc, err);
        return;
    }
    for (size_t i = 0; i < c->n; i++)
        tkm_buf_init(&c->payloads[i], TKM_COSIGN_MAX_PAYLOAD);
    cv_next(c);
}

int tkm_cosign_job_verify(struct tkm_oci_session *s, const char *repo, const char *image_digest,
                          const char *pubkey_pem, size_t pem_len, tkm_oci_job_cb cb, void *data,
                          struct tkm_oci_job **out, struct tkm_err *err)
{
    struct cv_ctx *c;
    struct tkm_oci_job *j = NULL;
    int rc;
    if (!repo || !image_digest || !pubkey_pem || strlen(repo) > TKM_OCI_NAME_MAX)
        return tkm_err_set(err, -EINVAL, "verify: repository, image digest and key are required");
    if (!(c = calloc(1, sizeof *c)))
        return tkm_err_set(err, -ENOMEM, "out of memory");
    tkm_buf_init(&c->man.body, TKM_COSIGN_MAX_MANIFEST);
    if ((rc = tkm_cosign_sig_tag(image_digest, c->tag)) < 0) {
        rc = tkm_err_set(err, rc, "image digest '%s' is not sha256:<64 hex>", image_digest);
        goto fail;
    }
    snprintf(c->digest, sizeof c->digest, "%s", image_digest);
    snprintf(c->repo, sizeof c->repo, "%s", repo);
    if (!(c->pem = malloc(pem_len + 1))) {
        rc = tkm_err_set(err, -ENOMEM, "out of memory");
        goto fail;
    }
    memcpy(c->pem, pubkey_pem, pem_len);
    c->pem[pem_len] = '\0';
    c->pem_len = pem_len;
    if ((rc = tkm__oci_job_ext_new(s, repo, c->tag, cb, data, &j, err)) != 0)
        goto fail;
    tkm__oci_job_ext_set(j, c, cv_free, NULL); /* freed with the job from here on */
    c->job = j;
    if ((rc = tkm__oci_get_manifest(s, repo, c->tag, &c->man, cv_manifest, c,
                                    tkm__oci_job_ext_op(j), err)) != 0) {
        tkm__oci_job_ext_discard(j);
        return rc;
    }
    tkm__oci_job_ext_link(j, out);
    return 0;
fail:
    cv_free(c);
    return rc;
}

/* ---- tkm_cosign_verify_start: the job above on a session of the caller's
 * loop, with the synchronous client's settings (nothing on the pool) ---- */

struct vs_ctx {
    struct tkm_http *http;
    struct tkm_oci_session *ses;
    tkm_cosign_verify_cb cb;
    void *data;
};

static void vs_http_closed(void *data)
{
    free(data);
}

static void vs_done(struct tkm_oci_job *job, int rc, struct tkm_oci_job_result *res,
                    const struct tkm_err *err, void *data)
{
    struct vs_ctx *v = data;
    (void)job;
    v->cb(rc, rc == 0 ? res->detail : NULL, err, v->data);
    tkm_oci_session_free(v->ses); /* its last job is this one: freed once it returns */
    tkm_http_close(v->http, vs_http_closed, v);
}

int tkm_cosign_verify_start(struct uv_loop_s *loop, struct tkm_oci_registry *r, const char *repo,
                            const char *image_digest, const char *pubkey_pem, size_t pem_len,
                            tkm_cosign_verify_cb cb, void *data, struct tkm_err *err)
{
    struct vs_ctx *v = calloc(1, sizeof *v);
    int rc;
    if (!v)
        return tkm_err_set(err, -ENOMEM, "out of memory");
    v->cb = cb;
    v->data = data;
    if ((rc = tkm_http_new(loop, NULL, &v->http, err)) != 0) {
        free(v);
        return rc;
    }
    if ((rc = tkm__oci_session_clone(tkm__oci_registry_session(r), v->http, &v->ses, err)) != 0 ||
        (rc = tkm_cosign_job_verify(v->ses, repo, image_digest, pubkey_pem, pem_len, vs_done, v,
                                    NULL, err)) != 0) {
        tkm_oci_session_free(v->ses);
        tkm_http_close(v->http, vs_http_closed, v);
        return rc;
    }
    return 0;
}
