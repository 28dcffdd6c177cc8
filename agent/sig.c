/*
 * sig.c - the agent's one signature step (agent.h: agent_sig_verify).
 *
 * Today: the classic cosign .sig check as a job on the registry session
 * (tkm_cosign_job_verify), trying the policy's keys in order; the first that
 * verifies wins. When tkm_sig_job_verify (the full signature search:
 * referrers, Sigstore bundles, keyless) lands in lib/trust, this file
 * becomes one call to it.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <tkm/trust/cosign.h>

#include "agent.h"

struct agent_sig {
    struct tkm_oci_session *s;
    char *repo, *digest;
    char **keys;
    size_t *key_lens;
    size_t n, next;
    struct tkm_oci_job *job;
    agent_sig_cb cb;
    void *data;
    int worst; /* the most telling failure so far */
    struct tkm_err worst_err;
};

static void sig_free(struct agent_sig *v)
{
    for (size_t i = 0; i < v->n; i++)
        free(v->keys[i]);
    free(v->keys);
    free(v->key_lens);
    free(v->repo);
    free(v->digest);
    free(v);
}

/* Rank of a failure: a signature that is there but wrong says more than none. */
static int rank(int rc)
{
    switch (rc) {
    case -EBADMSG:
        return 4;
    case -EKEYREJECTED:
        return 3;
    case -ENOENT:
        return 1;
    default:
        return 2;
    }
}

static const char *sig_reason(int rc)
{
    switch (rc) {
    case -ENOENT:
        return "NoSignature";
    case -EKEYREJECTED:
        return "KeyMismatch";
    case -EBADMSG:
        return "SignatureMismatch";
    case -EACCES:
    case -EPERM:
        return "RegistryUnauthorized";
    case -EINVAL:
    case -EPROTO:
        return "InvalidSignature";
    default:
        return "RegistryUnreachable";
    }
}

static int sig_next(struct agent_sig *v, struct tkm_err *err);

static void on_job(struct tkm_oci_job *job, int rc, struct tkm_oci_job_result *res,
                   const struct tkm_err *err, void *data)
{
    struct agent_sig *v = data;
    struct tkm_err e = {0};
    (void)job;
    v->job = NULL;
    if (rc == 0) {
        const struct tkm_cosign_result *cr = res->detail;
        char desc[128];
        snprintf(desc, sizeof desc, "cosign signature layer %zu, key %s", cr ? cr->layer : 0,
                 cr ? cr->key_id : "?");
        v->cb(0, NULL, desc, NULL, v->data);
        sig_free(v);
        return;
    }
    if (rc == -ECANCELED || rc == -ENOENT || sig_reason(rc)[0] == 'R') {
        /* no signature at all, or the registry failed: another key changes nothing */
        v->cb(rc, sig_reason(rc), NULL, err, v->data);
        sig_free(v);
        return;
    }
    if (!v->worst || rank(rc) > rank(v->worst)) {
        v->worst = rc;
        v->worst_err = *err;
    }
    if (v->next < v->n && sig_next(v, &e) == 0)
        return;
    if (e.code)
        v->cb(e.code, "InvalidPolicy", NULL, &e, v->data);
    else
        v->cb(v->worst, sig_reason(v->worst), NULL, &v->worst_err, v->data);
    sig_free(v);
}

static int sig_next(struct agent_sig *v, struct tkm_err *err)
{
    size_t i = v->next++;
    return tkm_cosign_job_verify(v->s, v->repo, v->digest, v->keys[i], v->key_lens[i], on_job, v,
                                 &v->job, err);
}

int agent_sig_verify(struct tkm_oci_session *s, const char *repo, const char *digest,
                     const struct tkm_sig_policy *pol, agent_sig_cb cb, void *data,
                     struct agent_sig **out, struct tkm_err *err)
{
    if (pol->nkeys == 0)
        return tkm_err_set(err, -ENOTSUP,
                           "the policy has no public key: keyless verification is not available "
                           "in this agent yet");
    struct agent_sig *v = calloc(1, sizeof *v);
    if (!v)
        return tkm_err_set(err, -ENOMEM, "out of memory");
    v->s = s;
    v->cb = cb;
    v->data = data;
    v->repo = strdup(repo);
    v->digest = strdup(digest);
    v->keys = calloc(pol->nkeys, sizeof *v->keys);
    v->key_lens = calloc(pol->nkeys, sizeof *v->key_lens);
    if (!v->repo || !v->digest || !v->keys || !v->key_lens)
        goto nomem;
    for (size_t i = 0; i < pol->nkeys; i++) {
        v->keys[i] = malloc(pol->keys[i].len + 1);
        if (!v->keys[i])
            goto nomem;
        v->n++;
        memcpy(v->keys[i], pol->keys[i].pem, pol->keys[i].len);
        v->keys[i][pol->keys[i].len] = 0;
        v->key_lens[i] = pol->keys[i].len;
    }
    int rc = sig_next(v, err);
    if (rc < 0) {
        sig_free(v);
        return rc;
    }
    if (out)
        *out = v;
    return 0;
nomem:
    sig_free(v);
    return tkm_err_set(err, -ENOMEM, "out of memory");
}

void agent_sig_cancel(struct agent_sig *v)
{
    if (v && v->job)
        tkm_oci_job_cancel(v->job);
}
