/*
 * e2e_sigjob - the signature search as a daemon runs it: jobs
 * (tkm_sig_job_verify) side by side on one libuv loop, one http client and
 * one registry session, against a real registry.
 *
 * Usage: e2e_sigjob --host HOST:PORT --key PUB [--key PUB ...] [--cancel]
 *          REPO@DIGEST ...
 *
 * Every REPO@DIGEST gets a job, all started at once. With --cancel one more
 * job of the first target is started and cancelled at once. When every job
 * has reported, one line per target, in argument order:
 *   target=REPO@DIGEST calls=1 rc=N reason=R source=S format=F key=ID found=N
 *   msg=MESSAGE   (only when rc != 0)
 * then "cancelled calls=N rc=N reason=R" with --cancel, and "jobs_left=N".
 * Exit 0 when every callback ran exactly once and no job is left (the
 * script judges the results), 1 otherwise.
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include <tkm/http.h>
#include <tkm/oci/session.h>
#include <tkm/trust/keys.h>
#include <tkm/trust/sigjob.h>

#define MAX_TARGETS 16
#define MAX_KEYS    4

struct one {
    char repo[256];
    const char *digest;
    int calls, rc;
    struct tkm_sig_result res;
    char msg[1024];
};

struct prog {
    struct one t[MAX_TARGETS + 1]; /* the last: the cancelled job */
    int n, pending;
};

static void on_done(struct tkm_oci_job *job, int rc, struct tkm_oci_job_result *res,
                    const struct tkm_err *err, void *data)
{
    struct one *o = data;
    (void)job;
    o->calls++;
    o->rc = rc;
    if (rc == 0)
        o->res = *(const struct tkm_sig_result *)res->detail;
    else
        snprintf(o->msg, sizeof o->msg, "%s", err->msg);
}

static void print_one(const struct one *o)
{
    printf("target=%s@%s calls=%d rc=%d reason=%s source=%s format=%s key=%s found=%zu\n", o->repo,
           o->digest, o->calls, o->rc, tkm_sig_reason(o->rc),
           o->rc == 0 ? tkm_sig_source_name(o->res.source) : "-",
           o->rc == 0 ? tkm_sig_format_name(o->res.format) : "-",
           o->rc == 0 && o->res.key_id[0] ? o->res.key_id : "-", o->rc == 0 ? o->res.found : 0);
    if (o->rc)
        printf("msg=%s\n", o->msg);
}

static int done_all(const struct prog *p, int with_cancel)
{
    for (int i = 0; i < p->n + with_cancel; i++)
        if (p->t[i].calls == 0)
            return 0;
    return 1;
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {{"host", required_argument, NULL, 'h'},
                                         {"key", required_argument, NULL, 'k'},
                                         {"cancel", no_argument, NULL, 'c'},
                                         {NULL, 0, NULL, 0}};
    struct prog p;
    struct tkm_err err = {0};
    struct tkm_sig_key keys[MAX_KEYS];
    char *pem[MAX_KEYS] = {0};
    size_t nkeys = 0;
    const char *host = NULL;
    int cancel = 0, c, st = 1, early = 0;
    uv_loop_t loop;
    struct tkm_http *http = NULL;
    struct tkm_oci_session *ses = NULL;
    memset(&p, 0, sizeof p);
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        if (c == 'h') {
            host = optarg;
        } else if (c == 'k' && nkeys < MAX_KEYS) {
            size_t len = 0;
            if (tkm_trust_read_file(optarg, 1 << 16, &pem[nkeys], &len, &err) < 0)
                goto usage;
            keys[nkeys] = (struct tkm_sig_key){pem[nkeys], len};
            nkeys++;
        } else if (c == 'c') {
            cancel = 1;
        } else {
            goto usage;
        }
    }
    for (int i = optind; i < argc && p.n < MAX_TARGETS; i++, p.n++) {
        const char *at = strchr(argv[i], '@');
        if (!at || (size_t)(at - argv[i]) >= sizeof p.t[0].repo)
            goto usage;
        memcpy(p.t[p.n].repo, argv[i], (size_t)(at - argv[i]));
        p.t[p.n].digest = at + 1;
    }
    if (!host || nkeys == 0 || p.n == 0)
        goto usage;
    struct tkm_sig_policy pol = {.keys = keys, .nkeys = nkeys};
    struct tkm_oci_registry_opts ro = {.anonymous = 1, .timeout_ms = 20000};
    if (tkm_http_global_init(&err) < 0 || uv_loop_init(&loop) != 0)
        goto fail;
    if (tkm_http_new(&loop, NULL, &http, &err) < 0 ||
        tkm_oci_session_new(http, host, &ro, &ses, &err) < 0)
        goto fail_loop;
    for (int i = 0; i < p.n; i++)
        if (tkm_sig_job_verify(ses, p.t[i].repo, p.t[i].digest, &pol, on_done, &p.t[i], NULL,
                               &err) < 0)
            goto fail_loop;
    if (cancel) {
        struct tkm_oci_job *j = NULL;
        p.t[p.n] = p.t[0];
        if (tkm_sig_job_verify(ses, p.t[0].repo, p.t[0].digest, &pol, on_done, &p.t[p.n], &j,
                               &err) < 0)
            goto fail_loop;
        tkm_oci_job_cancel(j);
        early = p.t[p.n].calls != 0; /* never from inside the cancel */
    }
    while (!done_all(&p, cancel))
        uv_run(&loop, UV_RUN_ONCE);
    st = early;
    if (early)
        fprintf(stderr, "e2e_sigjob: the cancelled job reported from inside the cancel\n");
    for (int i = 0; i < p.n; i++) {
        print_one(&p.t[i]);
        st |= p.t[i].calls != 1;
    }
    if (cancel) {
        printf("cancelled calls=%d rc=%d reason=%s\n", p.t[p.n].calls, p.t[p.n].rc,
               tkm_sig_reason(p.t[p.n].rc));
        st |= p.t[p.n].calls != 1;
    }
    printf("jobs_left=%zu\n", tkm_oci_session_jobs(ses));
    st |= tkm_oci_session_jobs(ses) != 0;
fail_loop:
    if (st && err.code)
        fprintf(stderr, "e2e_sigjob: %s\n", tkm_err_str(&err));
    tkm_oci_session_close(ses, NULL, NULL);
    if (http)
        tkm_http_close(http, NULL, NULL);
    uv_run(&loop, UV_RUN_DEFAULT);
    uv_loop_close(&loop);
    /* every callback ran exactly once, even after the loop ran dry */
    for (int i = 0; i < p.n + cancel; i++)
        st |= p.t[i].calls > 1;
    goto out;
fail:
    fprintf(stderr, "e2e_sigjob: %s\n", tkm_err_str(&err));
    goto out;
usage:
    fprintf(stderr,
            "usage: e2e_sigjob --host HOST:PORT --key PUB [--key PUB ...] [--cancel] "
            "REPO@DIGEST ...%s%s\n",
            err.code ? ": " : "", err.code ? tkm_err_str(&err) : "");
    st = 2;
out:
    for (size_t i = 0; i < nkeys; i++)
        free(pem[i]);
    return st ? (st == 2 ? 2 : 1) : 0;
}
