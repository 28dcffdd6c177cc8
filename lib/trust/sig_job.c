/*
 * sig_job.c - tkm_sig_verify_registry on the libuv thread pool, for daemons
 * with one loop (see bundle.h). The policy is copied deeply, so the caller's
 * may go away once _start returns.
 */
#include <errno.h>
#include <openssl/crypto.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include <tkm/trust/bundle.h>

struct sig_job {
    uv_work_t work;
    struct tkm_oci_registry *r;
    char *repo, *digest, *root;
    struct tkm_sig_key *keys;
    struct tkm_sig_identity *ids;
    struct tkm_sig_policy pol;
    tkm_sig_verify_cb cb;
    void *data;
    int rc;
    struct tkm_sig_result res;
    struct tkm_err err;
};

static char *dup_n(const char *p, size_t n)
{
    char *s = malloc(n + 1);
    if (s) {
        memcpy(s, p, n);
        s[n] = '\0';
    }
    return s;
}

static char *dup_opt(const char *s, int *fail)
{
    char *d = s ? strdup(s) : NULL;
    if (s && !d)
        *fail = 1;
    return d;
}

static void job_free(struct sig_job *j)
{
    for (size_t i = 0; j->keys && i < j->pol.nkeys; i++)
        free((char *)j->keys[i].pem);
    for (size_t i = 0; j->ids && i < j->pol.nidentities; i++) {
        free((char *)j->ids[i].issuer);
        free((char *)j->ids[i].subject);
        free((char *)j->ids[i].subject_regexp);
    }
    free(j->keys);
    free(j->ids);
    free(j->root);
    free(j->repo);
    free(j->digest);
    free(j);
}

/* A deep copy of p into j->pol; 0 or -ENOMEM (j_free releases a partial one). */
static int copy_policy(struct sig_job *j, const struct tkm_sig_policy *p)
{
    int fail = 0;
    j->pol = *p;
    j->pol.nkeys = 0;
    j->pol.nidentities = 0;
    j->pol.trusted_root = NULL;
    if (p->nkeys && !(j->keys = calloc(p->nkeys, sizeof *j->keys)))
        return -ENOMEM;
    for (size_t i = 0; i < p->nkeys; i++, j->pol.nkeys++) {
        j->keys[i].len = p->keys[i].len;
        if (!(j->keys[i].pem = dup_n(p->keys[i].pem, p->keys[i].len)))
            return -ENOMEM;
    }
    if (p->nidentities && !(j->ids = calloc(p->nidentities, sizeof *j->ids)))
        return -ENOMEM;
    for (size_t i = 0; i < p->nidentities; i++, j->pol.nidentities++) {
        j->ids[i].issuer = dup_opt(p->identities[i].issuer, &fail);
        j->ids[i].subject = dup_opt(p->identities[i].subject, &fail);
        j->ids[i].subject_regexp = dup_opt(p->identities[i].subject_regexp, &fail);
    }
    if (fail || (p->trusted_root && !(j->root = dup_n(p->trusted_root, p->trusted_root_len))))
        return -ENOMEM;
    j->pol.keys = j->keys;
    j->pol.identities = j->ids;
    j->pol.trusted_root = j->root;
    return 0;
}

static void job_work(uv_work_t *w)
{
    struct sig_job *j = w->data;
    j->rc = tkm_sig_verify_registry(j->r, j->repo, j->digest, &j->pol, &j->res, &j->err);
    /* OpenSSL keeps per-thread state; pool threads live as long as the loop. */
    OPENSSL_thread_stop();
}

static void job_after(uv_work_t *w, int status)
{
    struct sig_job *j = w->data;
    if (status == UV_ECANCELED) {
        tkm_err_clear(&j->err);
        j->rc = tkm_err_set(&j->err, -ECANCELED, "verification of %s cancelled", j->digest);
    }
    j->cb(j->rc, j->rc == 0 ? &j->res : NULL, &j->err, j->data);
    job_free(j);
}

int tkm_sig_verify_start(struct uv_loop_s *loop, struct tkm_oci_registry *r, const char *repo,
                         const char *image_digest, const struct tkm_sig_policy *pol,
                         tkm_sig_verify_cb cb, void *data, struct tkm_err *err)
{
    struct sig_job *j = calloc(1, sizeof(*j));
    int rc;
    if (!j || !(j->repo = strdup(repo)) || !(j->digest = strdup(image_digest)) ||
        copy_policy(j, pol) < 0) {
        rc = tkm_err_set(err, -ENOMEM, "out of memory");
        goto fail;
    }
    if ((rc = tkm_sig_policy_check(&j->pol, err)) < 0)
        goto fail;
    j->r = r;
    j->cb = cb;
    j->data = data;
    j->work.data = j;
    if ((rc = uv_queue_work(loop, &j->work, job_work, job_after)) != 0) {
        rc = tkm_err_set(err, rc, "verification of %s: uv_queue_work: %s", image_digest,
                         uv_strerror(rc));
        goto fail;
    }
    return 0;
fail:
    if (j)
        job_free(j);
    return rc;
}
