/*
 * registry.c - the synchronous registry client (see registry.h): a thin
 * wrapper that runs the asynchronous core (session.c, ops.c) on a private
 * loop until each operation completes. There is no second implementation:
 * authentication, retries, hashing and error sentences are the core's.
 */
#include <tkm/oci/registry.h>

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include <tkm/http.h>
#include <tkm/oci/digest.h>
#include <tkm/oci/session.h>

#include "oci/session-int.h"

#define REG_CHUNK   (8u << 20)
#define REG_URL_MAX TKM__OCI_URL_MAX

struct tkm_oci_registry {
    uv_loop_t loop;
    int loop_ready;
    struct tkm_http *http;
    struct tkm_oci_session *s;
    const atomic_int *cancel; /* opts->cancel, borrowed, or NULL */
    uv_timer_t poll;          /* looks at cancel while a request runs */
    int poll_ready, cancelled;
    char host[256];
};

int tkm_oci_registry_new(const char *host, const struct tkm_oci_registry_opts *opts,
                         struct tkm_oci_registry **out, struct tkm_err *err)
{
    struct tkm_oci_registry *r = calloc(1, sizeof *r);
    int rc;
    if (!r)
        return tkm_err_set(err, -ENOMEM, "registry %s: out of memory", host);
    if ((rc = uv_loop_init(&r->loop)) != 0) {
        rc = tkm_err_set(err, rc, "registry %s: cannot create an event loop: %s", host,
                         uv_strerror(rc));
        goto fail;
    }
    r->loop_ready = 1;
    snprintf(r->host, sizeof r->host, "%s", host);
    r->cancel = opts ? opts->cancel : NULL;
    if (r->cancel && (rc = uv_timer_init(&r->loop, &r->poll)) != 0) {
        rc = tkm_err_set(err, rc, "registry %s: cannot create a timer: %s", host, uv_strerror(rc));
        goto fail;
    }
    r->poll_ready = r->cancel != NULL;
    r->poll.data = r;
    if ((rc = tkm_http_new(&r->loop, NULL, &r->http, err)) != 0 ||
        (rc = tkm_oci_session_new(r->http, host, opts, &r->s, err)) != 0)
        goto fail;
    *out = r;
    return 0;
fail:
    tkm_oci_registry_free(r);
    return rc;
}

void tkm_oci_registry_free(struct tkm_oci_registry *r)
{
    if (!r)
        return;
    tkm_oci_session_close(r->s, NULL, NULL);
    if (r->http)
        tkm_http_close(r->http, NULL, NULL);
    if (r->poll_ready)
        uv_close((uv_handle_t *)&r->poll, NULL);
    if (r->loop_ready) {
        uv_run(&r->loop, UV_RUN_DEFAULT);
        uv_loop_close(&r->loop);
    }
    free(r);
}

struct tkm_oci_session *tkm__oci_registry_session(struct tkm_oci_registry *r)
{
    return r->s;
}

/* ---- running the core to completion -------------------------------------- */

struct wait {
    int done, rc;
    struct tkm_err *err;
    struct tkm_http_resp *resp; /* generic calls: takes the response */
};

static void wait_op(int rc, struct tkm_err *e, void *data)
{
    struct wait *w = data;
    w->rc = rc;
    if (rc && w->err && e)
        *w->err = *e;
    w->done = 1;
}

static void wait_call(int rc, struct tkm_http_resp *resp, struct tkm_err *e, void *data)
{
    struct wait *w = data;
    tkm_buf_release(&w->resp->body);
    tkm_buf_release(&w->resp->headers);
    *w->resp = *resp; /* takes the buffers */
    tkm_buf_init(&resp->body, resp->body.max);
    tkm_buf_init(&resp->headers, resp->headers.max);
    w->resp->url = NULL;
    wait_op(rc, e, data);
}

/* opts.cancel became nonzero: the request that runs is cancelled (its
 * callback reports -ECANCELED on a later loop turn), and so is every later
 * one: the client is done. */
static void poll_cancel(uv_timer_t *t)
{
    struct tkm_oci_registry *r = t->data;
    if (r->cancelled || !atomic_load(r->cancel))
        return;
    r->cancelled = 1;
    uv_timer_stop(t);
    tkm__oci_session_cancel_all(r->s);
}

/* Runs the private loop until the operation w waits for has reported
 * (started: what starting it returned; nonzero: it never ran). */
static int run(struct tkm_oci_registry *r, struct wait *w, int started)
{
    if (!started && !r->cancelled && r->cancel && atomic_load(r->cancel))
        r->cancelled = 1;
    if (!started && r->cancelled)
        tkm__oci_session_cancel_all(r->s);
    else if (!started && r->poll_ready)
        uv_timer_start(&r->poll, poll_cancel, 50, 50);
    while (!started && !w->done)
        uv_run(&r->loop, UV_RUN_ONCE);
    if (r->poll_ready)
        uv_timer_stop(&r->poll);
    if (r->cancelled)
        return tkm_err_set(w->err, -ECANCELED, "registry %s: cancelled", r->host);
    return started ? started : w->rc;
}

/* One request of a push that must answer status want (or want2, when not 0):
 * resp is initialised here and released by the caller in every case; url is
 * kept in resp->url for error sentences; any other status is an error that
 * quotes the registry's, about what. */
static int reg_do(struct tkm_oci_registry *r, const struct tkm__oci_req *q, long want, long want2,
                  const char *what, struct tkm_http_resp *resp, struct tkm_err *err)
{
    struct wait w = {.err = err, .resp = resp};
    tkm_http_resp_init(resp);
    int rc = run(r, &w, tkm__oci_call_start(r->s, q, wait_call, &w, NULL, err));
    resp->url = q->url;
    if (rc == 0 && resp->status != want && (!want2 || resp->status != want2))
        rc = tkm__oci_status_error(r->s, resp, what, err);
    return rc;
}

/* ---- manifests ----------------------------------------------------------- */

int tkm_oci_registry_get_manifest(struct tkm_oci_registry *r, const char *repo,
                                  const char *reference, struct tkm_buf *body, char *content_type,
                                  size_t ct_n, char digest[TKM_OCI_DIGEST_LEN + 1],
                                  struct tkm_err *err)
{
    struct tkm__oci_manifest m = {.body = TKM_BUF_INIT(TKM_OCI_MANIFEST_MAX)};
    struct wait w = {.err = err};
    int rc = run(r, &w, tkm__oci_get_manifest(r->s, repo, reference, &m, wait_op, &w, NULL, err));
    if (rc)
        goto out;
    tkm_buf_reset(body);
    if ((rc = tkm_buf_append(body, m.body.data, m.body.len)) != 0) {
        rc = tkm_err_set(err, rc, "manifest %s/%s: %zu bytes do not fit the caller's buffer", repo,
                         reference, m.body.len);
        goto out;
    }
    if (content_type && ct_n)
        snprintf(content_type, ct_n, "%s", m.content_type);
    memcpy(digest, m.digest, TKM_OCI_DIGEST_LEN + 1);
out:
    tkm_buf_release(&m.body);
    return rc;
}

int tkm_oci_registry_put_manifest(struct tkm_oci_registry *r, const char *repo,
                                  const char *reference, const char *media_type, const void *p,
                                  size_t n, struct tkm_err *err)
{
    struct tkm_buf url = TKM_BUF_INIT(REG_URL_MAX);
    struct tkm_http_resp resp;
    char scope[600];
    int rc;
    tkm__oci_scope(scope, sizeof scope, repo, 1);
    tkm_http_resp_init(&resp);
    if ((rc = tkm__oci_api_url(r->s, &url, "/%s/manifests/%s", repo, reference)) != 0)
        goto out;
    struct tkm__oci_req q = {.method = "PUT",
                             .url = url.data,
                             .scope = scope,
                             .content_type = media_type,
                             .body = p,
                             .body_len = n};
    rc = reg_do(r, &q, 201, 200, "manifest upload", &resp, err);
out:
    tkm_http_resp_release(&resp);
    tkm_buf_release(&url);
    return rc;
}

/* ---- blobs --------------------------------------------------------------- */

/* 1 when the blob exists, 0 when not, < 0 on error (a push skips what is there). */
static int blob_exists(struct tkm_oci_registry *r, const char *repo, const char *digest,
                       struct tkm_err *err)
{
    struct wait w = {.err = err};
    int exists = 0;
    int rc = run(r, &w, tkm__oci_blob_exists(r->s, repo, digest, &exists, wait_op, &w, NULL, err));
    return rc ? rc : exists;
}

/* ---- push ---------------------------------------------------------------- */

/* The absolute upload URL from a 202's Location header, into loc. */
static int upload_location(struct tkm_oci_registry *r, const struct tkm_http_resp *resp,
                           struct tkm_buf *loc, struct tkm_err *err)
{
    char hdr[4096];
    int n = tkm_http_resp_header(resp, "Location", hdr, sizeof hdr);
    if (n < 0 || (size_t)n >= sizeof hdr)
        return tkm_err_set(err, -EPROTO, "%s: upload response without a usable Location header",
                           resp->url);
    tkm_buf_reset(loc);
    if (hdr[0] == '/')
        return tkm__oci_url(r->s, loc, "%s", hdr);
    if (strncasecmp(hdr, "https://", 8) != 0 && strncasecmp(hdr, "http://", 7) != 0)
        return tkm_err_set(err, -EPROTO, "%s: upload Location '%.200s' is not a URL", resp->url,
                           hdr);
    return tkm_buf_puts(loc, hdr);
}

/* POST /v2/<repo>/blobs/uploads/ -> loc. */
static int upload_start(struct tkm_oci_registry *r, const char *repo, const char *scope,
                        struct tkm_buf *loc, struct tkm_err *err)
{
    struct tkm_buf url = TKM_BUF_INIT(REG_URL_MAX);
    struct tkm_http_resp resp;
    int rc = tkm__oci_api_url(r->s, &url, "/%s/blobs/uploads/", repo);
    tkm_http_resp_init(&resp);
    if (rc)
        goto out;
    struct tkm__oci_req q = {.method = "POST",
                             .url = url.data,
                             .scope = scope,
                             .content_type = "application/octet-stream",
                             .extra = "Content-Length: 0"};
    if ((rc = reg_do(r, &q, 202, 0, "blob upload start", &resp, err)) == 0)
        rc = upload_location(r, &resp, loc, err);
out:
    tkm_http_resp_release(&resp);
    tkm_buf_release(&url);
    return rc;
}

/* PUT loc?digest=D with the last (or only) bytes. */
static int upload_finish(struct tkm_oci_registry *r, const char *scope, const struct tkm_buf *loc,
                         const char *digest, const void *p, size_t n, struct tkm_err *err)
{
    struct tkm_buf url = TKM_BUF_INIT(REG_URL_MAX);
    struct tkm_http_resp resp;
    char what[128];
    int rc = tkm_buf_printf(&url, "%s%sdigest=%s", loc->data, strchr(loc->data, '?') ? "&" : "?",
                            digest);
    snprintf(what, sizeof what, "blob %s upload", digest);
    tkm_http_resp_init(&resp);
    if (rc)
        goto out;
    struct tkm__oci_req q = {.method = "PUT",
                             .url = url.data,
                             .scope = scope,
                             .content_type = "application/octet-stream",
                             .body = n ? p : NULL,
                             .body_len = n,
                             .extra = n ? NULL : "Content-Length: 0"};
    rc = reg_do(r, &q, 201, 0, what, &resp, err);
out:
    tkm_http_resp_release(&resp);
    tkm_buf_release(&url);
    return rc;
}

/* PATCH one chunk at offset off; loc is updated to the next Location. */
static int upload_chunk(struct tkm_oci_registry *r, const char *scope, struct tkm_buf *loc,
                        uint64_t off, const void *p, size_t n, struct tkm_err *err)
{
    struct tkm_http_resp resp;
    char range[96];
    int rc;
    snprintf(range, sizeof range, "Content-Range: %llu-%llu", (unsigned long long)off,
             (unsigned long long)(off + n - 1));
    struct tkm__oci_req q = {.method = "PATCH",
                             .url = loc->data,
                             .scope = scope,
                             .content_type = "application/octet-stream",
                             .extra = range,
                             .body = p,
                             .body_len = n};
    if ((rc = reg_do(r, &q, 202, 0, "blob chunk upload", &resp, err)) == 0)
        rc = upload_location(r, &resp, loc, err);
    tkm_http_resp_release(&resp);
    return rc;
}

static int read_full(int fd, char *p, size_t n, size_t *got)
{
    size_t off = 0;
    while (off < n) {
        ssize_t rd = read(fd, p + off, n - off);
        if (rd < 0 && errno == EINTR)
            continue;
        if (rd < 0)
            return -errno;
        if (rd == 0)
            break;
        off += (size_t)rd;
    }
    *got = off;
    return 0;
}

int tkm_oci_registry_push_blob_file(struct tkm_oci_registry *r, const char *repo, const char *path,
                                    const char *digest, uint64_t size, int *skipped,
                                    struct tkm_err *err)
{
    struct tkm_buf loc = TKM_BUF_INIT(REG_URL_MAX);
    char scope[600];
    char *chunk = NULL;
    void *ud = NULL;
    tkm_oci_progress_cb progress = tkm__oci_session_progress(r->s, &ud);
    int fd = -1, rc = blob_exists(r, repo, digest, err);
    if (skipped)
        *skipped = rc == 1;
    if (rc != 0)
        return rc < 0 ? rc : 0;
    tkm__oci_scope(scope, sizeof scope, repo, 1);
    if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0) {
        rc = tkm_err_set(err, -errno, "blob %s: open %s: %s", digest, path, strerror(errno));
        goto out;
    }
    if (!(chunk = malloc(REG_CHUNK))) {
        rc = -ENOMEM;
        goto out;
    }
    if ((rc = upload_start(r, repo, scope, &loc, err)) != 0)
        goto out;
    uint64_t off = 0;
    for (;;) {
        size_t got = 0;
        if ((rc = read_full(fd, chunk, REG_CHUNK, &got)) != 0) {
            rc = tkm_err_set(err, rc, "blob %s: read %s: %s", digest, path, strerror(-rc));
            goto out;
        }
        if (off + got > size) {
            rc = tkm_err_set(err, -EBADMSG, "blob %s: %s is larger than %llu bytes", digest, path,
                             (unsigned long long)size);
            goto out;
        }
        if (off + got == size) { /* the last piece goes with the PUT */
            rc = upload_finish(r, scope, &loc, digest, chunk, got, err);
            off += got;
            break;
        }
        if (got == 0) {
            rc = tkm_err_set(err, -EBADMSG, "blob %s: %s ended after %llu of %llu bytes", digest,
                             path, (unsigned long long)off, (unsigned long long)size);
            goto out;
        }
        if ((rc = upload_chunk(r, scope, &loc, off, chunk, got, err)) != 0)
            goto out;
        off += got;
        if (progress)
            progress(ud, off, size);
    }
    if (rc == 0 && progress)
        progress(ud, off, size);
out:
    if (fd >= 0)
        close(fd);
    free(chunk);
    tkm_buf_release(&loc);
    return rc;
}
