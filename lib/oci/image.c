/* image.c - see image.h. */
#include <tkm/oci/image.h>

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <tkm/buf.h>
#include <tkm/http.h>
#include <tkm/oci/digest.h>
#include <tkm/oci/layout.h>
#include <tkm/oci/session.h>

#include "oci/session-int.h"

#define IMG_PATH_MAX 4096

void tkm_oci_pull_result_release(struct tkm_oci_pull_result *res)
{
    if (!res)
        return;
    tkm_oci_manifest_release(&res->parsed);
    tkm_oci_config_release(&res->config);
    memset(res, 0, sizeof *res);
}

/* ---- the synchronous wrappers: a job on a private loop ------------------ */

struct sync_job {
    int done, rc;
    struct tkm_oci_pull_result *res;
    struct tkm_err *err;
    struct tkm_oci_job *job;  /* borrowed until sync_cb (done) */
    const atomic_int *cancel; /* opts.cancel, or NULL */
};

/* How often the private loop looks at opts.cancel. */
#define SYNC_CANCEL_POLL_MS 50

static void sync_cb(struct tkm_oci_job *job, int rc, struct tkm_oci_job_result *res,
                    const struct tkm_err *err, void *data)
{
    struct sync_job *sj = data;
    (void)job;
    sj->rc = rc;
    if (rc == 0) {
        *sj->res = res->image; /* moved out */
        memset(&res->image, 0, sizeof res->image);
    } else if (sj->err && err) {
        *sj->err = *err;
    }
    sj->done = 1;
}

/* The repeat timer that turns opts.cancel into tkm_oci_job_cancel(). */
static void sync_poll_cancel(uv_timer_t *t)
{
    struct sync_job *sj = t->data;
    if (sj->done || !atomic_load(sj->cancel))
        return;
    uv_timer_stop(t);
    tkm_oci_job_cancel(sj->job); /* sync_cb gets -ECANCELED from the loop */
}

/* Runs one inspect (layout NULL) or pull job to completion on a private
 * loop, http client and session; opts.cancel stops it. */
static int run_job(const struct tkm_oci_ref *ref, const struct tkm_oci_registry_opts *ro,
                   const char *layout, const char *tag, int layers, struct tkm_oci_pull_result *res,
                   struct tkm_err *err)
{
    uv_loop_t loop;
    uv_timer_t poll;
    struct tkm_http *http = NULL;
    struct tkm_oci_session *s = NULL;
    struct sync_job sj = {.res = res, .err = err, .cancel = ro ? ro->cancel : NULL};
    int rc, polling = 0;
    memset(res, 0, sizeof *res);
    if (sj.cancel && atomic_load(sj.cancel))
        return tkm_err_set(err, -ECANCELED, "%s %s/%s: cancelled", layout ? "pull" : "inspect",
                           ref->host, ref->repo);
    if ((rc = uv_loop_init(&loop)) != 0)
        return tkm_err_set(err, rc, "registry %s: cannot create an event loop: %s", ref->host,
                           uv_strerror(rc));
    if (sj.cancel && (rc = uv_timer_init(&loop, &poll)) != 0) {
        rc = tkm_err_set(err, rc, "registry %s: cannot create a timer: %s", ref->host,
                         uv_strerror(rc));
        goto out;
    }
    polling = sj.cancel != NULL;
    poll.data = &sj;
    if ((rc = tkm_http_new(&loop, NULL, &http, err)) != 0 ||
        (rc = tkm_oci_session_new(http, ref->host, ro, &s, err)) != 0)
        goto out;
    rc = layout ? tkm__oci_job_pull(s, ref, layout, tag, layers, sync_cb, &sj, &sj.job, err)
                : tkm_oci_job_inspect(s, ref, sync_cb, &sj, &sj.job, err);
    if (rc)
        goto out;
    if (polling) /* fails only without a callback or on a closing handle */
        uv_timer_start(&poll, sync_poll_cancel, SYNC_CANCEL_POLL_MS, SYNC_CANCEL_POLL_MS);
    while (!sj.done)
        uv_run(&loop, UV_RUN_ONCE);
    rc = sj.rc;
out:
    if (polling)
        uv_close((uv_handle_t *)&poll, NULL);
    tkm_oci_session_close(s, NULL, NULL);
    tkm_http_close(http, NULL, NULL);
    uv_run(&loop, UV_RUN_DEFAULT);
    uv_loop_close(&loop);
    return rc;
}

int tkm_oci_inspect(const struct tkm_oci_ref *ref, const struct tkm_oci_registry_opts *ro,
                    struct tkm_oci_pull_result *res, struct tkm_err *err)
{
    return run_job(ref, ro, NULL, NULL, 0, res, err);
}

int tkm_oci_pull(const struct tkm_oci_ref *ref, const struct tkm_oci_registry_opts *ro,
                 const char *layout_dir, const char *tag, int layers,
                 struct tkm_oci_pull_result *res, struct tkm_err *err)
{
    if (!layout_dir)
        return tkm_err_set(err, -EINVAL, "pull: a layout directory is required");
    return run_job(ref, ro, layout_dir, tag, layers, res, err);
}

int tkm_oci_layout_load(const char *layout_dir, const char *tag, struct tkm_oci_pull_result *res,
                        struct tkm_err *err)
{
    struct tkm_buf b = TKM_BUF_INIT(TKM_OCI_MANIFEST_MAX);
    char what[IMG_PATH_MAX + 80];
    int rc;
    memset(res, 0, sizeof *res);
    if ((rc = tkm_oci_layout_find(layout_dir, tag, &res->manifest, err)) != 0 ||
        (rc = tkm_oci_layout_read_blob(layout_dir, &res->manifest, &b, err)) != 0)
        goto out;
    snprintf(what, sizeof what, "layout %s manifest %s", layout_dir, res->manifest.digest);
    if ((rc = tkm_oci_manifest_parse(&res->parsed, res->manifest.media_type, b.data, b.len, what,
                                     err)) != 0)
        goto out;
    if (res->parsed.kind != TKM_OCI_KIND_MANIFEST) {
        rc = tkm_err_set(err, -ENOTSUP, "%s: an index; tkm layouts hold image manifests", what);
        goto out;
    }
    if ((rc = tkm_oci_layout_read_blob(layout_dir, &res->parsed.config, &b, err)) != 0)
        goto out;
    snprintf(what, sizeof what, "layout %s config %s", layout_dir, res->parsed.config.digest);
    rc = tkm_oci_config_parse(&res->config, b.data, b.len, what, err);
out:
    if (rc)
        tkm_oci_pull_result_release(res);
    tkm_buf_release(&b);
    return rc;
}

int tkm_oci_push(const char *layout_dir, const char *tag, const struct tkm_oci_ref *ref,
                 const struct tkm_oci_registry_opts *ro, char digest[TKM_OCI_DIGEST_LEN + 1],
                 int *uploaded, struct tkm_err *err)
{
    struct tkm_oci_pull_result img;
    struct tkm_oci_registry *r = NULL;
    struct tkm_buf b = TKM_BUF_INIT(TKM_OCI_MANIFEST_MAX);
    char path[IMG_PATH_MAX];
    int rc, skipped = 0, up = 0;
    if (ro && ro->cancel && atomic_load(ro->cancel))
        return tkm_err_set(err, -ECANCELED, "push %s/%s: cancelled", ref->host, ref->repo);
    if ((rc = tkm_oci_layout_load(layout_dir, tag, &img, err)) != 0)
        return rc;
    if (ref->digest[0] && strcmp(ref->digest, img.manifest.digest) != 0) {
        rc = tkm_err_set(err, -EINVAL,
                         "push: the reference names %s but the layout's manifest is %s",
                         ref->digest, img.manifest.digest);
        goto out;
    }
    if ((rc = tkm_oci_registry_new(ref->host, ro, &r, err)) != 0)
        goto out;
    /* the config, then the layers: each verified in the layout first */
    for (size_t i = 0; i <= img.parsed.n_descs; i++) {
        const struct tkm_oci_desc *d = i ? &img.parsed.descs[i - 1] : &img.parsed.config;
        if ((rc = tkm_oci_layout_verify_blob(layout_dir, d, err)) != 0)
            goto out;
        tkm_oci_layout_blob_path(layout_dir, d->digest, path, sizeof path);
        if ((rc = tkm_oci_registry_push_blob_file(r, ref->repo, path, d->digest, d->size, &skipped,
                                                  err)) != 0)
            goto out;
        up += !skipped;
    }
    if ((rc = tkm_oci_layout_read_blob(layout_dir, &img.manifest, &b, err)) != 0)
        goto out;
    rc = tkm_oci_registry_put_manifest(r, ref->repo, ref->tag[0] ? ref->tag : img.manifest.digest,
                                       img.manifest.media_type, b.data, b.len, err);
    if (rc == 0 && digest)
        memcpy(digest, img.manifest.digest, TKM_OCI_DIGEST_LEN + 1);
    if (rc == 0 && uploaded)
        *uploaded = up;
out:
    tkm_oci_registry_free(r);
    tkm_oci_pull_result_release(&img);
    tkm_buf_release(&b);
    return rc;
}
