/*
 * job.c - image jobs on a session (see session.h): resolve, inspect and
 * pull, as chains of asynchronous operations on the loop, with the
 * file-system steps of a pull on the thread pool.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <tkm/archive.h>
#include <tkm/oci/digest.h>
#include <tkm/oci/layout.h>
#include <tkm/oci/session.h>

#include "oci/session-int.h"

enum job_kind { JOB_RESOLVE, JOB_INSPECT, JOB_PULL, JOB_EXT };
enum pool_step { STEP_PREPARE, STEP_COMMIT_BLOB, STEP_FINISH, STEP_ABORT };

struct tkm_oci_job {
    struct tkm__oci_link link; /* first: the session's list */
    struct tkm_oci_session *s;
    enum job_kind kind;
    char repo[TKM_OCI_NAME_MAX + 1];
    char reference[TKM_OCI_NAME_MAX + 1];
    char what[TKM_OCI_NAME_MAX * 2 + 80];
    char tag[TKM_OCI_NAME_MAX + 1];
    int layers; /* pull: fetch the layers (0: manifest and config only) */
    int (*stop)(const void *raw, size_t len); /* inspect: an index to stop at */
    tkm_oci_job_cb cb;
    void *data;
    struct tkm__oci_op *op; /* the operation in flight, or NULL */
    int in_pool, cancelled;
    struct tkm__oci_manifest m;
    struct tkm_oci_manifest top;
    struct tkm_buf cfg;
    struct tkm_oci_job_result res;
    /* pull */
    char layout[PATH_MAX];  /* where the caller wants it */
    char target[PATH_MAX];  /* where it is written: layout or the staging dir */
    int staged;             /* target is a staging dir to rename at the end */
    int made_staging;       /* the staging dir exists (remove it on failure) */
    unsigned char *present; /* per layer: already in the layout, verified */
    size_t layer;           /* the layer being fetched */
    int fd;                 /* its temporary file, or -1 */
    char tmp[PATH_MAX];
    struct tkm__oci_work work;
    enum pool_step step;
    int final_rc;
    struct tkm_err err;
    /* JOB_EXT: a job whose steps live elsewhere in libtkm (cosign verify) */
    void *ext;
    void (*ext_free)(void *ext);
    void (*ext_cancel)(void *ext);
};

static void job_next(struct tkm_oci_job *j);
static void job_fail(struct tkm_oci_job *j, int rc);

/* ---- lifetime ------------------------------------------------------------ */

static void job_free(struct tkm_oci_job *j)
{
    tkm_buf_release(&j->m.body);
    tkm_buf_release(&j->cfg);
    tkm_oci_manifest_release(&j->top);
    tkm_oci_pull_result_release(&j->res.image);
    free(j->present);
    if (j->ext_free)
        j->ext_free(j->ext);
    free(j);
}

/* Reports once (from the loop) and frees the job. */
static void job_report(struct tkm_oci_job *j, int rc)
{
    struct tkm_oci_session *s = j->s;
    if (rc == 0 && j->cancelled)
        rc = -ECANCELED;
    if (rc == -ECANCELED && !strstr(j->err.msg, "cancel"))
        tkm_err_set(&j->err, -ECANCELED, "%s: cancelled", j->what);
    if (rc == 0)
        tkm_err_clear(&j->err);
    j->cb(j, rc, &j->res, &j->err, j->data);
    tkm__oci_link_del(s, &j->link); /* may free s */
    job_free(j);
}

void tkm_oci_job_cancel(struct tkm_oci_job *j)
{
    if (!j || j->cancelled)
        return;
    j->cancelled = 1;
    if (j->ext_cancel)
        j->ext_cancel(j->ext); /* must not report synchronously */
    if (j->op)
        tkm__oci_op_cancel(j->op); /* its callback fails the job */
    /* in the pool: the after callback sees the flag */
}

static void job_link_cancel(struct tkm__oci_link *l)
{
    tkm_oci_job_cancel((struct tkm_oci_job *)l);
}

static int job_new(struct tkm_oci_session *s, enum job_kind kind, const char *repo,
                   const char *reference, tkm_oci_job_cb cb, void *data, struct tkm_oci_job **out,
                   struct tkm_err *err)
{
    struct tkm_oci_job *j;
    if (!s || !cb || !repo || !reference)
        return tkm_err_set(err, -EINVAL,
                           "image job: session, repository, reference and "
                           "callback are required");
    if (tkm__oci_session_freeing(s))
        return tkm_err_set(err, -ESHUTDOWN, "image job: the session for %s is closing",
                           tkm__oci_session_host(s));
    if (strlen(repo) > TKM_OCI_NAME_MAX || strlen(reference) > TKM_OCI_NAME_MAX)
        return tkm_err_set(err, -EINVAL, "image job: repository or reference too long");
    if (!(j = calloc(1, sizeof *j)))
        return tkm_err_set(err, -ENOMEM, "image job: out of memory");
    j->s = s;
    j->kind = kind;
    j->cb = cb;
    j->data = data;
    j->fd = -1;
    memcpy(j->repo, repo, strlen(repo) + 1);
    memcpy(j->reference, reference, strlen(reference) + 1);
    snprintf(j->what, sizeof j->what, "%s/%s%s%s", tkm__oci_session_host(s), repo,
             tkm_oci_digest_valid(reference) ? "@" : ":", reference);
    tkm_buf_init(&j->m.body, TKM_OCI_MANIFEST_MAX);
    tkm_buf_init(&j->cfg, TKM_OCI_MANIFEST_MAX);
    j->link.cancel = job_link_cancel;
    *out = j;
    return 0;
}

/* ---- the thread-pool steps of a pull ------------------------------------- */

/* Splits layout into its absolute parent and base name; makes a staging
 * directory beside it when it does not exist yet. */
static int pull_target(struct tkm_oci_job *j)
{
    char d[PATH_MAX], *pabs = NULL;
    struct stat sb;
    size_t n = strlen(j->layout);
    while (n > 1 && j->layout[n - 1] == '/')
        n--;
    memcpy(d, j->layout, n);
    d[n] = '\0';
    if (stat(d, &sb) == 0) {
        if (!S_ISDIR(sb.st_mode))
            return tkm_err_set(&j->err, -ENOTDIR, "pull: %s exists and is not a directory", d);
        snprintf(j->target, sizeof j->target, "%s", d);
        return 0;
    }
    const char *slash = strrchr(d, '/');
    const char *base = slash ? slash + 1 : d;
    if (!*base || strcmp(base, ".") == 0 || strcmp(base, "..") == 0)
        return tkm_err_set(&j->err, -EINVAL, "pull: '%s' does not name a directory", j->layout);
    char parent[PATH_MAX];
    snprintf(parent, sizeof parent, "%.*s", slash ? (int)(slash == d ? 1 : slash - d) : 1,
             slash ? d : ".");
    if (!(pabs = realpath(parent, NULL)))
        return tkm_err_set(&j->err, -errno, "pull: %s: %s", parent, strerror(errno));
    int w = snprintf(j->target, sizeof j->target, "%s/.%s.pull-XXXXXX",
                     strcmp(pabs, "/") == 0 ? "" : pabs, base);
    free(pabs);
    if (w < 0 || (size_t)w >= sizeof j->target)
        return tkm_err_set(&j->err, -ENAMETOOLONG, "pull: path too long: %.200s", j->layout);
    if (!mkdtemp(j->target))
        return tkm_err_set(&j->err, -errno, "pull: mkdtemp %s: %s", j->target, strerror(errno));
    j->staged = j->made_staging = 1;
    return 0;
}

static int step_prepare(struct tkm_oci_job *j)
{
    const struct tkm_oci_manifest *pm = &j->res.image.parsed;
    char dg[TKM_OCI_DIGEST_LEN + 1], path[PATH_MAX];
    int rc;
    if ((rc = pull_target(j)) != 0 || (rc = tkm_oci_layout_init(j->target, &j->err)) != 0 ||
        (rc = tkm_oci_layout_put_blob(j->target, j->cfg.data, j->cfg.len, dg, &j->err)) != 0 ||
        (rc = tkm_oci_layout_put_blob(j->target, j->m.body.data, j->m.body.len, dg, &j->err)))
        return rc;
    if (pm->n_descs && !(j->present = calloc(pm->n_descs, 1)))
        return tkm_err_set(&j->err, -ENOMEM, "pull: out of memory");
    for (size_t i = 0; i < pm->n_descs && !j->staged; i++) {
        struct tkm_err ignore = {0};
        if (tkm_oci_layout_blob_path(j->target, pm->descs[i].digest, path, sizeof path) != 0)
            return tkm_err_set(&j->err, -ENAMETOOLONG, "layout path too long: %.200s", j->target);
        /* Already here and intact: verified (a full hash) here on the pool. */
        j->present[i] = access(path, F_OK) == 0 &&
                        tkm_oci_layout_verify_blob(j->target, &pm->descs[i], &ignore) == 0;
    }
    return 0;
}

static int step_commit_blob(struct tkm_oci_job *j)
{
    const char *dg = j->res.image.parsed.descs[j->layer].digest;
    int rc = 0;
    if (fsync(j->fd) != 0)
        rc = tkm_err_set(&j->err, -errno, "blob %s: fsync %s: %s", dg, j->tmp, strerror(errno));
    if (close(j->fd) != 0 && rc == 0)
        rc = tkm_err_set(&j->err, -errno, "blob %s: close %s: %s", dg, j->tmp, strerror(errno));
    j->fd = -1;
    if (rc == 0)
        rc = tkm_oci_layout_take_blob(j->target, j->tmp, dg, &j->err);
    if (rc)
        unlink(j->tmp);
    j->tmp[0] = '\0';
    return rc;
}

/* index.json last; a staged layout is then renamed into place. */
static int step_finish(struct tkm_oci_job *j)
{
    const char *tag = j->tag[0] ? j->tag : "latest";
    int rc = tkm_oci_layout_add_manifest(j->target, &j->res.image.manifest, tag, &j->err);
    if (rc || !j->staged)
        return rc;
    char parent[PATH_MAX];
    snprintf(parent, sizeof parent, "%s", j->target);
    char *slash = strrchr(parent, '/');
    if (slash)
        *(slash == parent ? slash + 1 : slash) = '\0';
    int pfd = open(slash ? parent : ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (pfd < 0 || syncfs(pfd) != 0)
        rc = tkm_err_set(&j->err, -errno, "pull: sync %s: %s", j->target, strerror(errno));
    else if (renameat2(AT_FDCWD, j->target, AT_FDCWD, j->layout, RENAME_NOREPLACE) != 0)
        rc = tkm_err_set(&j->err, -errno, "pull: rename %s to %s: %s", j->target, j->layout,
                         strerror(errno));
    else if ((j->made_staging = 0), fsync(pfd) != 0)
        rc = tkm_err_set(&j->err, -errno, "pull: fsync %s: %s", parent, strerror(errno));
    if (pfd >= 0)
        close(pfd);
    return rc;
}

static void step_abort(struct tkm_oci_job *j)
{
    if (j->fd >= 0)
        close(j->fd);
    j->fd = -1;
    if (j->tmp[0])
        unlink(j->tmp);
    if (j->made_staging)
        tkm_rmtree_at(AT_FDCWD, j->target);
    j->made_staging = 0;
}

static void pool_work(struct tkm__oci_work *w)
{
    struct tkm_oci_job *j = (struct tkm_oci_job *)((char *)w - offsetof(struct tkm_oci_job, work));
    switch (j->step) {
    case STEP_PREPARE:
        w->rc = step_prepare(j);
        break;
    case STEP_COMMIT_BLOB:
        w->rc = step_commit_blob(j);
        break;
    case STEP_FINISH:
        w->rc = step_finish(j);
        if (w->rc)
            step_abort(j);
        break;
    case STEP_ABORT:
        step_abort(j);
        w->rc = j->final_rc;
        break;
    }
}

static void pool_after(struct tkm__oci_work *w)
{
    struct tkm_oci_job *j = (struct tkm_oci_job *)((char *)w - offsetof(struct tkm_oci_job, work));
    j->in_pool = 0;
    if (j->step == STEP_ABORT || j->step == STEP_FINISH) {
        if (j->step == STEP_FINISH && w->rc == 0)
            j->cancelled = 0; /* the layout is in place: a late cancel does not undo it */
        job_report(j, w->rc);
        return;
    }
    if (w->rc) {
        job_fail(j, w->rc);
        return;
    }
    if (j->step == STEP_COMMIT_BLOB)
        j->res.image.bytes_fetched += j->res.image.parsed.descs[j->layer].size;
    if (j->cancelled) {
        job_fail(j, -ECANCELED);
        return;
    }
    j->layer += j->step == STEP_COMMIT_BLOB;
    job_next(j);
}

static void pool_go(struct tkm_oci_job *j, enum pool_step step)
{
    j->step = step;
    j->in_pool = 1;
    j->work.work = pool_work;
    j->work.after = pool_after;
    tkm__oci_pool_queue(j->s, &j->work);
}

static void job_fail(struct tkm_oci_job *j, int rc)
{
    if (j->kind == JOB_PULL && (j->made_staging || j->fd >= 0 || j->tmp[0])) {
        j->final_rc = rc;
        pool_go(j, STEP_ABORT);
        return;
    }
    job_report(j, rc);
}

/* ---- the loop steps -------------------------------------------------------- */

/* An operation of the job ended: forgets it; on failure takes its error
 * (err may be the job's own) and fails the job. Returns 1 when it failed. */
static int op_failed(struct tkm_oci_job *j, int rc, struct tkm_err *err)
{
    j->op = NULL;
    if (!rc)
        return 0;
    if (err != &j->err)
        j->err = *err;
    job_fail(j, rc);
    return 1;
}

static void on_blob(int rc, struct tkm_err *err, void *data)
{
    struct tkm_oci_job *j = data;
    if (op_failed(j, rc, err))
        return;
    pool_go(j, STEP_COMMIT_BLOB);
}

/* Fetches the next missing layer, or finishes the pull. */
static void job_next(struct tkm_oci_job *j)
{
    const struct tkm_oci_manifest *pm = &j->res.image.parsed;
    int rc;
    while (j->layers && j->layer < pm->n_descs && j->present[j->layer])
        j->layer++;
    if (!j->layers || j->layer >= pm->n_descs) {
        pool_go(j, STEP_FINISH);
        return;
    }
    const struct tkm_oci_desc *d = &pm->descs[j->layer];
    int w = snprintf(j->tmp, sizeof j->tmp, "%s/blobs/.pull-%d-%.16s.tmp", j->target, (int)getpid(),
                     tkm_oci_digest_hex(d->digest));
    if (w < 0 || (size_t)w >= sizeof j->tmp) {
        j->tmp[0] = '\0';
        job_fail(j, tkm_err_set(&j->err, -ENAMETOOLONG, "layout path too long: %.200s", j->target));
        return;
    }
    unlink(j->tmp);
    j->fd = open(j->tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (j->fd < 0) {
        rc = tkm_err_set(&j->err, -errno, "blob %s: create %s: %s", d->digest, j->tmp,
                         strerror(errno));
        j->tmp[0] = '\0';
        job_fail(j, rc);
        return;
    }
    if ((rc = tkm__oci_get_blob(j->s, j->repo, d, j->fd, j->tmp, NULL, on_blob, j, &j->op,
                                &j->err)) != 0)
        job_fail(j, rc);
}

static void on_config(int rc, struct tkm_err *err, void *data)
{
    struct tkm_oci_job *j = data;
    char what[TKM_OCI_DIGEST_LEN + 20];
    if (op_failed(j, rc, err))
        return;
    snprintf(what, sizeof what, "config %s", j->res.image.parsed.config.digest);
    if ((rc = tkm_oci_config_parse(&j->res.image.config, j->cfg.data, j->cfg.len, what, &j->err)) !=
            0 ||
        j->kind == JOB_INSPECT) {
        job_fail(j, rc);
        return;
    }
    pool_go(j, STEP_PREPARE);
}

static void fetch_config(struct tkm_oci_job *j)
{
    int rc = tkm__oci_get_blob(j->s, j->repo, &j->res.image.parsed.config, -1, NULL, &j->cfg,
                               on_config, j, &j->op, &j->err);
    if (rc)
        job_fail(j, rc);
}

static void on_image(int rc, struct tkm_err *err, void *data)
{
    struct tkm_oci_job *j = data;
    char what[TKM_OCI_NAME_MAX * 2 + 100];
    if (op_failed(j, rc, err))
        return;
    snprintf(what, sizeof what, "%s/%s@%s", tkm__oci_session_host(j->s), j->repo, j->m.digest);
    if ((rc = tkm_oci_manifest_parse(&j->res.image.parsed, j->m.content_type, j->m.body.data,
                                     j->m.body.len, what, &j->err)) != 0) {
        job_fail(j, rc);
        return;
    }
    if (j->res.image.parsed.kind != TKM_OCI_KIND_MANIFEST) {
        job_fail(j, tkm_err_set(&j->err, -EINVAL, "%s: index entry %s is not an image manifest",
                                j->what, j->m.digest));
        return;
    }
    fetch_config(j);
}

/* The reference's manifest arrived (hashed: j->m.digest pins it). */
static void on_top(int rc, struct tkm_err *err, void *data)
{
    struct tkm_oci_job *j = data;
    struct tkm_oci_pull_result *im = &j->res.image;
    char what[TKM_OCI_NAME_MAX * 2 + 100];
    const struct tkm_oci_desc *d;
    if (op_failed(j, rc, err))
        return;
    memcpy(j->res.digest, j->m.digest, sizeof j->res.digest);
    if (j->kind == JOB_RESOLVE) {
        job_report(j, 0);
        return;
    }
    snprintf(what, sizeof what, "%s/%s@%s", tkm__oci_session_host(j->s), j->repo, j->m.digest);
    if ((rc = tkm_oci_manifest_parse(&j->top, j->m.content_type, j->m.body.data, j->m.body.len,
                                     what, &j->err)) != 0) {
        job_fail(j, rc);
        return;
    }
    if (j->top.kind == TKM_OCI_KIND_INDEX) {
        memcpy(im->index_digest, j->top.digest, sizeof im->index_digest);
        if (j->stop && j->stop(j->m.body.data, j->m.body.len)) {
            im->parsed = j->top;
            memset(&j->top, 0, sizeof j->top);
            j->res.raw = j->m.body.data;
            j->res.raw_len = j->m.body.len;
            job_report(j, 0);
            return;
        }
        if ((rc = tkm_oci_index_select(&j->top, "linux", tkm_oci_host_arch(), NULL, &d, &j->err)) !=
            0) {
            job_fail(j, rc);
            return;
        }
        im->manifest = *d;
        memcpy(j->res.digest, d->digest, sizeof j->res.digest);
        /* by digest: the bytes are verified against it */
        if ((rc = tkm__oci_get_manifest(j->s, j->repo, d->digest, &j->m, on_image, j, &j->op,
                                        &j->err)) != 0)
            job_fail(j, rc);
        return;
    }
    im->parsed = j->top;
    memset(&j->top, 0, sizeof j->top);
    memset(&im->manifest, 0, sizeof im->manifest);
    snprintf(im->manifest.media_type, sizeof im->manifest.media_type, "%s", im->parsed.media_type);
    memcpy(im->manifest.digest, im->parsed.digest, sizeof im->manifest.digest);
    im->manifest.size = im->parsed.size;
    fetch_config(j);
}

/* ---- jobs whose steps live elsewhere in libtkm ------------------------------- */

int tkm__oci_job_ext_new(struct tkm_oci_session *s, const char *repo, const char *reference,
                         tkm_oci_job_cb cb, void *data, struct tkm_oci_job **out,
                         struct tkm_err *err)
{
    return job_new(s, JOB_EXT, repo, reference, cb, data, out, err);
}

void tkm__oci_job_ext_set(struct tkm_oci_job *j, void *ext, void (*ext_free)(void *ext),
                          void (*ext_cancel)(void *ext))
{
    j->ext = ext;
    j->ext_free = ext_free;
    j->ext_cancel = ext_cancel;
}

void tkm__oci_job_ext_link(struct tkm_oci_job *j, struct tkm_oci_job **out)
{
    tkm__oci_link_add(j->s, &j->link, 1);
    if (out)
        *out = j;
}

void tkm__oci_job_ext_discard(struct tkm_oci_job *j)
{
    job_free(j);
}

struct tkm__oci_op **tkm__oci_job_ext_op(struct tkm_oci_job *j)
{
    return &j->op;
}

struct tkm_oci_session *tkm__oci_job_ext_session(const struct tkm_oci_job *j)
{
    return j->s;
}

int tkm__oci_job_ext_cancelled(const struct tkm_oci_job *j)
{
    return j->cancelled;
}

struct tkm_oci_job_result *tkm__oci_job_ext_result(struct tkm_oci_job *j)
{
    return &j->res;
}

void tkm__oci_job_ext_report(struct tkm_oci_job *j, int rc, const struct tkm_err *err)
{
    j->op = NULL;
    if (rc && err && err != &j->err)
        j->err = *err;
    job_report(j, rc);
}

/* ---- starting jobs --------------------------------------------------------- */

/* Adds the job to its session and starts its first operation; on failure
 * the job is freed and its callback never runs. */
static int job_go(struct tkm_oci_job *j, struct tkm_oci_job **out, struct tkm_err *err)
{
    int rc = tkm__oci_get_manifest(j->s, j->repo, j->reference, &j->m, on_top, j, &j->op, err);
    if (rc) {
        job_free(j);
        return rc;
    }
    tkm__oci_link_add(j->s, &j->link, 1);
    if (out)
        *out = j;
    return 0;
}

int tkm_oci_job_resolve(struct tkm_oci_session *s, const char *repo, const char *reference,
                        tkm_oci_job_cb cb, void *data, struct tkm_oci_job **out,
                        struct tkm_err *err)
{
    struct tkm_oci_job *j;
    int rc = job_new(s, JOB_RESOLVE, repo, reference, cb, data, &j, err);
    return rc ? rc : job_go(j, out, err);
}

static int ref_job(struct tkm_oci_session *s, enum job_kind kind, const struct tkm_oci_ref *ref,
                   tkm_oci_job_cb cb, void *data, struct tkm_oci_job **j, struct tkm_err *err)
{
    if (!ref)
        return tkm_err_set(err, -EINVAL, "image job: a reference is required");
    if (s && strcmp(ref->host, tkm__oci_session_host(s)) != 0)
        return tkm_err_set(err, -EINVAL, "image job: %s/%s is not on the session's registry %s",
                           ref->host, ref->repo, tkm__oci_session_host(s));
    return job_new(s, kind, ref->repo, tkm_oci_ref_reference(ref), cb, data, j, err);
}

int tkm_oci_job_inspect(struct tkm_oci_session *s, const struct tkm_oci_ref *ref, tkm_oci_job_cb cb,
                        void *data, struct tkm_oci_job **out, struct tkm_err *err)
{
    return tkm__oci_job_inspect_stop(s, ref, NULL, cb, data, out, err);
}

int tkm__oci_job_inspect_stop(struct tkm_oci_session *s, const struct tkm_oci_ref *ref,
                              int (*stop)(const void *raw, size_t len), tkm_oci_job_cb cb,
                              void *data, struct tkm_oci_job **out, struct tkm_err *err)
{
    struct tkm_oci_job *j;
    int rc = ref_job(s, JOB_INSPECT, ref, cb, data, &j, err);
    if (rc)
        return rc;
    j->stop = stop;
    return job_go(j, out, err);
}

int tkm__oci_job_pull(struct tkm_oci_session *s, const struct tkm_oci_ref *ref,
                      const char *layout_dir, const char *tag, int layers, tkm_oci_job_cb cb,
                      void *data, struct tkm_oci_job **out, struct tkm_err *err)
{
    struct tkm_oci_job *j;
    const char *t = tag ? tag : ref && ref->tag[0] ? ref->tag : "latest";
    if (!layout_dir || !*layout_dir || strlen(layout_dir) >= PATH_MAX - 64)
        return tkm_err_set(err, -EINVAL,
                           "pull: a layout directory (shorter than %d bytes) is "
                           "required",
                           PATH_MAX - 64);
    if (strlen(t) > TKM_OCI_NAME_MAX)
        return tkm_err_set(err, -EINVAL, "pull: tag too long");
    int rc = ref_job(s, JOB_PULL, ref, cb, data, &j, err);
    if (rc)
        return rc;
    snprintf(j->layout, sizeof j->layout, "%s", layout_dir);
    snprintf(j->tag, sizeof j->tag, "%s", t);
    j->layers = layers;
    return job_go(j, out, err);
}

int tkm_oci_job_pull(struct tkm_oci_session *s, const struct tkm_oci_ref *ref,
                     const char *layout_dir, const char *tag, tkm_oci_job_cb cb, void *data,
                     struct tkm_oci_job **out, struct tkm_err *err)
{
    return tkm__oci_job_pull(s, ref, layout_dir, tag, 1, cb, data, out, err);
}
