/*
 * cosign_registry.c - fetches a cosign .sig manifest and its payloads from a
 * registry and verifies them (tkm_cosign_verify_registry, see cosign.h).
 */
#include <errno.h>
#include <openssl/crypto.h>
#include <string.h>
#include <uv.h>

#include <tkm/trust/cosign.h>
#include <tkm/buf.h>
#include <tkm/oci/registry.h>

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
    payloads = calloc(n, sizeof(*payloads));
    blobs = calloc(n, sizeof(*blobs));
    if (!payloads || !blobs) {
        rc = tkm_err_set(err, -ENOMEM, "out of memory");
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        struct tkm_oci_desc d;
        memset(&d, 0, sizeof d);
        snprintf(d.media_type, sizeof d.media_type, "%s", TKM_COSIGN_MEDIA_TYPE);
        snprintf(d.digest, sizeof d.digest, "%s", layers[i].digest);
        d.size = layers[i].size;
        tkm_buf_init(&payloads[i], TKM_COSIGN_MAX_PAYLOAD);
        if ((rc = tkm_oci_registry_fetch_blob_mem(r, repo, &d, &payloads[i], err)) < 0) {
            tkm_err_prefix(err, "signature payload %zu of %s:%s", i, repo, tag);
            goto out;
        }
        blobs[i] = (struct tkm_cosign_blob){
            layers[i].digest, (const unsigned char *)payloads[i].data, payloads[i].len};
    }
    rc =
        tkm_cosign_verify(man.data, man.len, blobs, n, pubkey_pem, pem_len, image_digest, res, err);
out:
    for (size_t i = 0; payloads && i < n; i++)
        tkm_buf_release(&payloads[i]);
    free(payloads);
    free(blobs);
    free(layers);
    tkm_buf_release(&man);
    return rc;
}

struct verify_job {
    uv_work_t work;
    struct tkm_oci_registry *r;
    char *repo, *digest, *pem;
    size_t pem_len;
    tkm_cosign_verify_cb cb;
    void *data;
    int rc;
    struct tkm_cosign_result res;
    struct tkm_err err;
};

static void verify_job_free(struct verify_job *j)
{
    free(j->repo);
    free(j->digest);
    free(j->pem);
    free(j);
}

static void verify_work(uv_work_t *w)
{
    struct verify_job *j = w->data;
    j->rc =
        tkm_cosign_verify_registry(j->r, j->repo, j->digest, j->pem, j->pem_len, &j->res, &j->err);
    /* OpenSSL keeps per-thread state (the error queue); pool threads never
     * exit while the loop lives, so release it after each job. */
    OPENSSL_thread_stop();
}

static void verify_after(uv_work_t *w, int status)
{
    struct verify_job *j = w->data;
    if (status == UV_ECANCELED) {
        tkm_err_clear(&j->err);
        j->rc = tkm_err_set(&j->err, -ECANCELED, "verification of %s cancelled", j->digest);
    }
    j->cb(j->rc, j->rc == 0 ? &j->res : NULL, &j->err, j->data);
    verify_job_free(j);
}

int tkm_cosign_verify_start(struct uv_loop_s *loop, struct tkm_oci_registry *r, const char *repo,
                            const char *image_digest, const char *pubkey_pem, size_t pem_len,
                            tkm_cosign_verify_cb cb, void *data, struct tkm_err *err)
{
    struct verify_job *j = calloc(1, sizeof(*j));
    int rc;
    if (!j || !(j->repo = strdup(repo)) || !(j->digest = strdup(image_digest)) ||
        !(j->pem = malloc(pem_len + 1))) {
        rc = tkm_err_set(err, -ENOMEM, "out of memory");
        goto fail;
    }
    memcpy(j->pem, pubkey_pem, pem_len);
    j->pem[pem_len] = '\0';
    j->pem_len = pem_len;
    j->r = r;
    j->cb = cb;
    j->data = data;
    j->work.data = j;
    if ((rc = uv_queue_work(loop, &j->work, verify_work, verify_after)) != 0) {
        rc = tkm_err_set(err, rc, "verification of %s: uv_queue_work: %s", image_digest,
                         uv_strerror(rc));
        goto fail;
    }
    return 0;
fail:
    if (j)
        verify_job_free(j);
    return rc;
}
