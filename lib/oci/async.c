/* async.c - see async.h. */
#include <tkm/oci/async.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define ASYNC_INSECURE_MAX 64

struct oci_job {
    uv_work_t work;
    struct tkm_oci_ref ref;
    struct tkm_oci_registry_opts opts;
    char *insecure[ASYNC_INSECURE_MAX + 1];
    char *auth_file, *ca_file, *layout, *tag;
    void *auth_json;
    int pull;
    int rc;
    struct tkm_oci_pull_result res;
    struct tkm_err err;
    tkm_oci_job_cb cb;
    void *data;
};

static void job_free(struct oci_job *j)
{
    for (size_t i = 0; i < ASYNC_INSECURE_MAX; i++)
        free(j->insecure[i]);
    free(j->auth_file);
    free(j->ca_file);
    free(j->layout);
    free(j->tag);
    if (j->auth_json) {
        memset(j->auth_json, 0, j->opts.auth_json_len);
        free(j->auth_json);
    }
    tkm_oci_pull_result_release(&j->res);
    free(j);
}

static int dup_str(char **out, const char *s)
{
    if (!s)
        return 0;
    return (*out = strdup(s)) ? 0 : -ENOMEM;
}

/* Deep-copies o into j->opts. */
static int copy_opts(struct oci_job *j, const struct tkm_oci_registry_opts *o, struct tkm_err *err)
{
    size_t n = 0;
    if (!o)
        return 0;
    j->opts = *o;
    if (o->insecure) {
        for (; o->insecure[n]; n++) {
            if (n >= ASYNC_INSECURE_MAX)
                return tkm_err_set(err, -E2BIG, "registry options: more than %d insecure hosts",
                                   ASYNC_INSECURE_MAX);
            if (dup_str(&j->insecure[n], o->insecure[n]))
                return -ENOMEM;
        }
        j->opts.insecure = (const char *const *)j->insecure;
    }
    if (dup_str(&j->auth_file, o->auth_file) || dup_str(&j->ca_file, o->ca_file))
        return -ENOMEM;
    j->opts.auth_file = j->auth_file;
    j->opts.ca_file = j->ca_file;
    if (o->auth_json) {
        if (!(j->auth_json = malloc(o->auth_json_len ? o->auth_json_len : 1)))
            return -ENOMEM;
        memcpy(j->auth_json, o->auth_json, o->auth_json_len);
        j->opts.auth_json = j->auth_json;
    }
    return 0;
}

static void job_work(uv_work_t *w)
{
    struct oci_job *j = w->data;
    if (j->pull)
        j->rc = tkm_oci_pull(&j->ref, &j->opts, j->layout, j->tag, 1, &j->res, &j->err);
    else
        j->rc = tkm_oci_inspect(&j->ref, &j->opts, &j->res, &j->err);
}

static void job_after(uv_work_t *w, int status)
{
    struct oci_job *j = w->data;
    if (status == UV_ECANCELED)
        j->rc = tkm_err_set(&j->err, -ECANCELED, "image %s/%s: cancelled before it started",
                            j->ref.host, j->ref.repo);
    j->cb(j->rc, &j->res, &j->err, j->data);
    job_free(j);
}

static int job_start(uv_loop_t *loop, const struct tkm_oci_ref *ref,
                     const struct tkm_oci_registry_opts *opts, const char *layout, const char *tag,
                     int pull, tkm_oci_job_cb cb, void *data, struct tkm_err *err)
{
    struct oci_job *j = calloc(1, sizeof *j);
    int rc;
    if (!j)
        return -ENOMEM;
    if (!cb || (pull && !layout)) {
        rc = tkm_err_set(err, -EINVAL, "image job: callback%s required", pull ? " and layout" : "");
        goto fail;
    }
    j->ref = *ref;
    j->pull = pull;
    j->cb = cb;
    j->data = data;
    j->work.data = j;
    if ((rc = copy_opts(j, opts, err)) != 0 || (rc = dup_str(&j->layout, layout)) != 0 ||
        (rc = dup_str(&j->tag, tag)) != 0)
        goto fail;
    if ((rc = uv_queue_work(loop, &j->work, job_work, job_after)) != 0) {
        rc = tkm_err_set(err, rc, "image job: uv_queue_work: %s", uv_strerror(rc));
        goto fail;
    }
    return 0;
fail:
    job_free(j);
    return rc;
}

int tkm_oci_inspect_start(uv_loop_t *loop, const struct tkm_oci_ref *ref,
                          const struct tkm_oci_registry_opts *opts, tkm_oci_job_cb cb, void *data,
                          struct tkm_err *err)
{
    return job_start(loop, ref, opts, NULL, NULL, 0, cb, data, err);
}

int tkm_oci_pull_start(uv_loop_t *loop, const struct tkm_oci_ref *ref,
                       const struct tkm_oci_registry_opts *opts, const char *layout_dir,
                       const char *tag, tkm_oci_job_cb cb, void *data, struct tkm_err *err)
{
    return job_start(loop, ref, opts, layout_dir, tag, 1, cb, data, err);
}
