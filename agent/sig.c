/*
 * sig.c - the agent's one signature step (agent.h: agent_sig_verify): the
 * signature search of lib/trust as a job on the registry session
 * (tkm_sig_job_verify: referrers and Sigstore bundles, the tag schema, the
 * classic .sig; keys and keyless), every request and check on the loop.
 * Reasons are tkm_sig_reason()'s (docs/security.md has the table).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <tkm/trust/sigjob.h>

#include "agent.h"

struct agent_sig {
    struct tkm_oci_job *job;
    agent_sig_cb cb;
    void *data;
};

static void on_job(struct tkm_oci_job *job, int rc, struct tkm_oci_job_result *res,
                   const struct tkm_err *err, void *data)
{
    struct agent_sig *v = data;
    (void)job;
    v->job = NULL;
    if (rc == 0) {
        const struct tkm_sig_result *sr = res->detail;
        char desc[900];
        snprintf(desc, sizeof desc, "%s at %s%s%s%s%s", tkm_sig_format_name(sr->format),
                 sr->location, sr->key_id[0] ? ", key " : "", sr->key_id,
                 sr->identity[0] ? ", identity " : "", sr->identity);
        v->cb(0, NULL, desc, NULL, v->data);
    } else {
        v->cb(rc, tkm_sig_reason(rc), NULL, err, v->data);
    }
    free(v);
}

int agent_sig_verify(struct tkm_oci_session *s, const char *repo, const char *digest,
                     const struct tkm_sig_policy *pol, agent_sig_cb cb, void *data,
                     struct agent_sig **out, struct tkm_err *err)
{
    struct agent_sig *v = calloc(1, sizeof *v);
    if (!v)
        return tkm_err_set(err, -ENOMEM, "out of memory");
    v->cb = cb;
    v->data = data;
    int rc = tkm_sig_job_verify(s, repo, digest, pol, on_job, v, &v->job, err);
    if (rc < 0) {
        free(v);
        return rc;
    }
    if (out)
        *out = v;
    return 0;
}

void agent_sig_cancel(struct agent_sig *v)
{
    if (v && v->job)
        tkm_oci_job_cancel(v->job);
}
