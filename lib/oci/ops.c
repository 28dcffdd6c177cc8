/*
 * ops.c - registry operations on the asynchronous core (session-int.h):
 * manifest GET (hashed, pinned), blob GET (streamed, hashed, exact size),
 * blob HEAD and the referrers GET. Each is one call with checked results.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include <jansson.h>

#include <tkm/oci/digest.h>

#include "oci/session-int.h"

struct tkm__oci_op {
    struct tkm_oci_session *s;
    struct tkm__oci_call *call;
    tkm__oci_op_cb cb;
    void *data;
    char what[TKM_OCI_DIGEST_LEN + 600];
    char reference[TKM_OCI_NAME_MAX + 1];
    struct tkm__oci_manifest *m; /* manifest */
    int *exists;                 /* HEAD */
    struct tkm_buf *body;        /* referrers */
    json_t *index;               /* referrers: page 1, manifests of every page merged */
    unsigned pages;              /* referrers: pages read */
    char scope[600];             /* the request's (referrers: the next pages') */
    char link[TKM__OCI_URL_MAX]; /* referrers: the next page's URL */
    /* blob sink */
    struct tkm_oci_desc d;
    int fd;
    struct tkm_buf *mem;
    struct tkm_oci_hasher h;
    int hashing;
    uint64_t next_progress;
    int write_errno;
    char where[512];
};

static void op_report(struct tkm__oci_op *op, int rc, struct tkm_err *err)
{
    if (op->hashing)
        tkm_oci_hasher_release(&op->h);
    json_decref(op->index);
    op->cb(rc, err, op->data);
    free(op);
}

void tkm__oci_op_cancel(struct tkm__oci_op *op)
{
    if (op)
        tkm__oci_call_cancel(op->call);
}

static int op_new(struct tkm_oci_session *s, tkm__oci_op_cb cb, void *data,
                  struct tkm__oci_op **out, struct tkm_err *err)
{
    struct tkm__oci_op *op = calloc(1, sizeof *op);
    if (!op)
        return tkm_err_set(err, -ENOMEM, "registry %s: out of memory", tkm__oci_session_host(s));
    op->s = s;
    op->cb = cb;
    op->data = data;
    op->fd = -1;
    *out = op;
    return 0;
}

/* Starts q for op with the pull (or push) scope of repo; on failure op is
 * freed and cb never runs. */
static int op_start(struct tkm__oci_op *op, const char *repo, int push, struct tkm__oci_req *q,
                    tkm__oci_call_cb done, struct tkm__oci_op **out, struct tkm_err *err)
{
    tkm__oci_scope(op->scope, sizeof op->scope, repo, push);
    q->scope = op->scope;
    int rc = tkm__oci_call_start(op->s, q, done, op, &op->call, err);
    if (rc) {
        if (op->hashing)
            tkm_oci_hasher_release(&op->h);
        free(op);
        return rc;
    }
    if (out)
        *out = op;
    return 0;
}

/* ---- manifests ----------------------------------------------------------- */

static void manifest_done(int rc, struct tkm_http_resp *resp, struct tkm_err *err, void *data)
{
    struct tkm__oci_op *op = data;
    struct tkm__oci_manifest *m = op->m;
    char got[TKM_OCI_DIGEST_LEN + 1];
    if (rc == -E2BIG)
        tkm_err_prefix(err, "manifest larger than %u bytes", TKM_OCI_MANIFEST_MAX);
    if (rc)
        goto out;
    if (resp->status != 200) {
        rc = tkm__oci_status_error(op->s, resp, "manifest", err);
        goto out;
    }
    if ((rc = tkm_oci_digest_bytes(resp->body.data, resp->body.len, got)) != 0) {
        tkm_err_set(err, rc, "manifest %s: cannot hash: %s", resp->url, strerror(-rc));
        goto out;
    }
    if (tkm_oci_digest_valid(op->reference) && strcmp(op->reference, got) != 0) {
        rc = tkm_err_set(err, -EBADMSG,
                         "manifest %s: digest mismatch: expected %s, the bytes received hash to %s",
                         resp->url, op->reference, got);
        goto out;
    }
    if (tkm_http_resp_header(resp, "Content-Type", m->content_type, sizeof m->content_type) < 0)
        m->content_type[0] = '\0';
    tkm_buf_reset(&m->body);
    if ((rc = tkm_buf_append(&m->body, resp->body.data, resp->body.len)) != 0) {
        rc = tkm_err_set(err, rc, "manifest %s: %zu bytes do not fit the caller's buffer",
                         resp->url, resp->body.len);
        goto out;
    }
    memcpy(m->digest, got, sizeof got);
out:
    op_report(op, rc, err);
}

int tkm__oci_get_manifest(struct tkm_oci_session *s, const char *repo, const char *reference,
                          struct tkm__oci_manifest *m, tkm__oci_op_cb cb, void *data,
                          struct tkm__oci_op **out, struct tkm_err *err)
{
    struct tkm_buf url = TKM_BUF_INIT(TKM__OCI_URL_MAX);
    struct tkm__oci_op *op = NULL;
    int rc;
    if (strlen(reference) > TKM_OCI_NAME_MAX)
        return tkm_err_set(err, -EINVAL, "manifest reference '%.80s...' is too long", reference);
    if ((rc = tkm__oci_api_url(s, &url, "/%s/manifests/%s", repo, reference)) != 0) {
        rc = tkm_err_set(err, rc, "%s/%s: URL too long", repo, reference);
        goto out;
    }
    if ((rc = op_new(s, cb, data, &op, err)) != 0)
        goto out;
    snprintf(op->reference, sizeof op->reference, "%s", reference);
    op->m = m;
    struct tkm__oci_req q = {.method = "GET",
                             .url = url.data,
                             .accept = TKM_OCI_MANIFEST_ACCEPT,
                             .max_body = TKM_OCI_MANIFEST_MAX};
    rc = op_start(op, repo, 0, &q, manifest_done, out, err);
out:
    tkm_buf_release(&url);
    return rc;
}

/* ---- blobs --------------------------------------------------------------- */

static int blob_data(struct tkm_http_req *req, const char *p, size_t n, void *data)
{
    struct tkm__oci_op *op = data;
    void *ud = NULL;
    tkm_oci_progress_cb progress = tkm__oci_session_progress(op->s, &ud);
    (void)req;
    if (op->h.bytes + n > op->d.size)
        return 1; /* more than declared */
    if (tkm_oci_hasher_update(&op->h, p, n) != 0)
        return 3;
    if (op->mem) {
        if (tkm_buf_append(op->mem, p, n) != 0)
            return 4;
    } else {
        for (size_t off = 0; off < n;) {
            ssize_t w = write(op->fd, p + off, n - off);
            if (w < 0 && errno == EINTR)
                continue;
            if (w < 0) {
                op->write_errno = errno;
                return 2;
            }
            off += (size_t)w;
        }
    }
    if (progress && op->h.bytes >= op->next_progress) {
        progress(ud, op->h.bytes, op->d.size);
        op->next_progress = op->h.bytes + (1u << 20);
    }
    return 0;
}

/* Starts the sink over (a retried download). */
static int blob_reset(void *data)
{
    struct tkm__oci_op *op = data;
    tkm_oci_hasher_release(&op->h);
    op->hashing = 0;
    if (op->mem)
        tkm_buf_reset(op->mem);
    else if (ftruncate(op->fd, 0) != 0 || lseek(op->fd, 0, SEEK_SET) != 0)
        return -errno;
    op->next_progress = 0;
    int rc = tkm_oci_hasher_init(&op->h);
    op->hashing = rc == 0;
    return rc;
}

static int blob_check(struct tkm__oci_op *op, int rc, struct tkm_http_resp *resp,
                      struct tkm_err *err)
{
    char got[TKM_OCI_DIGEST_LEN + 1];
    const char *dg = op->d.digest;
    if (rc == -EINTR) {
        tkm_err_clear(err);
        if (resp->cb_rc == 1)
            return tkm_err_set(err, -EBADMSG,
                               "blob %s from %s: more bytes than the %llu its descriptor declares",
                               dg, resp->url, (unsigned long long)op->d.size);
        if (resp->cb_rc == 2)
            return tkm_err_set(err, -op->write_errno, "blob %s: write %s: %s", dg, op->where,
                               strerror(op->write_errno));
        return tkm_err_set(err, -ENOMEM, "blob %s: cannot hold %llu bytes in memory", dg,
                           (unsigned long long)op->d.size);
    }
    if (rc) {
        tkm_err_prefix(err, "blob %s", dg);
        return rc;
    }
    if (resp->status != 200) {
        char what[128];
        snprintf(what, sizeof what, "blob %s", dg);
        return tkm__oci_status_error(op->s, resp, what, err);
    }
    if (op->h.bytes != op->d.size)
        return tkm_err_set(
            err, -EBADMSG, "blob %s from %s: got %llu bytes, the descriptor says %llu", dg,
            resp->url, (unsigned long long)op->h.bytes, (unsigned long long)op->d.size);
    if ((rc = tkm_oci_hasher_final(&op->h, got)) != 0)
        return tkm_err_set(err, rc, "blob %s: cannot hash", dg);
    if (strcmp(got, dg) != 0)
        return tkm_err_set(err, -EBADMSG,
                           "blob %s from %s: digest mismatch: the bytes received hash to %s", dg,
                           resp->url, got);
    return 0;
}

static void blob_done(int rc, struct tkm_http_resp *resp, struct tkm_err *err, void *data)
{
    struct tkm__oci_op *op = data;
    void *ud = NULL;
    tkm_oci_progress_cb progress = tkm__oci_session_progress(op->s, &ud);
    rc = blob_check(op, rc, resp, err);
    if (rc == 0 && progress)
        progress(ud, op->h.bytes, op->d.size);
    if (rc && op->mem)
        tkm_buf_reset(op->mem);
    op_report(op, rc, err);
}

int tkm__oci_get_blob(struct tkm_oci_session *s, const char *repo, const struct tkm_oci_desc *d,
                      int fd, const char *where, struct tkm_buf *mem, tkm__oci_op_cb cb, void *data,
                      struct tkm__oci_op **out, struct tkm_err *err)
{
    struct tkm_buf url = TKM_BUF_INIT(TKM__OCI_URL_MAX);
    struct tkm__oci_op *op = NULL;
    int rc;
    if (!tkm_oci_digest_valid(d->digest))
        return tkm_err_set(err, -EINVAL, "blob digest '%.80s' is not sha256:<64 hex>", d->digest);
    if (fd < 0 && d->size > mem->max)
        return tkm_err_set(err, -E2BIG, "blob %s: %llu bytes exceed the %zu byte limit", d->digest,
                           (unsigned long long)d->size, mem->max);
    if ((rc = tkm__oci_api_url(s, &url, "/%s/blobs/%s", repo, d->digest)) != 0) {
        rc = tkm_err_set(err, rc, "%s: URL too long", repo);
        goto out;
    }
    if ((rc = op_new(s, cb, data, &op, err)) != 0)
        goto out;
    op->d = *d;
    op->fd = fd;
    op->mem = fd < 0 ? mem : NULL;
    snprintf(op->where, sizeof op->where, "%s", where ? where : "memory");
    if (op->mem)
        tkm_buf_reset(op->mem);
    if ((rc = tkm_oci_hasher_init(&op->h)) != 0) {
        free(op);
        rc = tkm_err_set(err, rc, "blob %s: cannot hash", d->digest);
        goto out;
    }
    op->hashing = 1;
    struct tkm__oci_req q = {.method = "GET",
                             .url = url.data,
                             .follow = 1,
                             .streaming = 1,
                             .data_cb = blob_data,
                             .reset = blob_reset,
                             .data = op};
    rc = op_start(op, repo, 0, &q, blob_done, out, err);
out:
    tkm_buf_release(&url);
    return rc;
}

static void exists_done(int rc, struct tkm_http_resp *resp, struct tkm_err *err, void *data)
{
    struct tkm__oci_op *op = data;
    if (rc == 0) {
        if (resp->status == 200)
            *op->exists = 1;
        else if (resp->status == 404)
            *op->exists = 0;
        else
            rc = tkm__oci_status_error(op->s, resp, "blob check", err);
    }
    op_report(op, rc, err);
}

int tkm__oci_blob_exists(struct tkm_oci_session *s, const char *repo, const char *digest,
                         int *exists, tkm__oci_op_cb cb, void *data, struct tkm__oci_op **out,
                         struct tkm_err *err)
{
    struct tkm_buf url = TKM_BUF_INIT(TKM__OCI_URL_MAX);
    struct tkm__oci_op *op = NULL;
    int rc;
    if ((rc = tkm__oci_api_url(s, &url, "/%s/blobs/%s", repo, digest)) != 0) {
        rc = tkm_err_set(err, rc, "%s: URL too long", repo);
        goto out;
    }
    if ((rc = op_new(s, cb, data, &op, err)) != 0)
        goto out;
    op->exists = exists;
    struct tkm__oci_req q = {.method = "HEAD", .url = url.data, .follow = 1};
    rc = op_start(op, repo, 1, &q, exists_done, out, err);
out:
    tkm_buf_release(&url);
    return rc;
}

/* ---- referrers ----------------------------------------------------------- */

/* The URL of the rel="next" link in a Link header value (RFC 8288:
 * `<uri-reference>; param=value; ...`, link-values separated by commas)
 * into out: 1 found, 0 none (other rels are ignored), -EBADMSG malformed. */
static int link_next(const char *v, char *out, size_t n)
{
    int found = 0;
    for (;;) {
        while (*v == ' ' || *v == '\t')
            v++;
        if (*v != '<')
            return -EBADMSG;
        const char *u = ++v, *e = strchr(u, '>');
        if (!e || e == u || (size_t)(e - u) >= n)
            return -EBADMSG;
        int next = 0;
        for (v = e + 1;;) {
            while (*v == ' ' || *v == '\t')
                v++;
            if (*v != ';')
                break;
            v++;
            while (*v == ' ' || *v == '\t')
                v++;
            const char *name = v;
            while (*v && !strchr("=;, \t\"<>", *v))
                v++;
            size_t nl = (size_t)(v - name);
            if (nl == 0 || *v != '=')
                return -EBADMSG;
            v++;
            const char *val = v;
            size_t vl;
            if (*v == '"') {
                val = ++v;
                while (*v && *v != '"' && *v != '\\')
                    v++;
                if (*v != '"')
                    return -EBADMSG; /* unterminated, or an escape: not for a rel */
                vl = (size_t)(v - val);
                v++;
            } else {
                while (*v && !strchr(";, \t\"<>", *v))
                    v++;
                vl = (size_t)(v - val);
                if (vl == 0)
                    return -EBADMSG;
            }
            /* rel is a space-separated list of relation types */
            for (size_t i = 0; nl == 3 && strncasecmp(name, "rel", 3) == 0 && i + 4 <= vl; i++)
                if ((i == 0 || val[i - 1] == ' ') && strncasecmp(val + i, "next", 4) == 0 &&
                    (i + 4 == vl || val[i + 4] == ' '))
                    next = 1;
        }
        if (next && !found) {
            for (const char *p = u; p < e; p++)
                if ((unsigned char)*p <= 0x20 || (unsigned char)*p >= 0x7f)
                    return -EBADMSG;
            memmove(out, u, (size_t)(e - u)); /* out may be v's own buffer: u > out */
            out[e - u] = '\0';
            found = 1;
        }
        if (*v == '\0')
            return found;
        if (*v != ',')
            return -EBADMSG;
        v++;
    }
}

/* The next page's URL from op->link (what the Link header named): a path on
 * this registry, "?query" on the current path, or an absolute URL with the
 * session's own scheme and host. Anything else is refused: the session's
 * credentials go to its registry only. */
static int referrers_next_url(struct tkm__oci_op *op, const char *cur, struct tkm_buf *url,
                              struct tkm_err *err)
{
    struct tkm_buf origin = TKM_BUF_INIT(TKM__OCI_URL_MAX);
    const char *l = op->link;
    int rc = tkm__oci_url(op->s, &origin, "%s", "");
    if (rc)
        goto out;
    if (l[0] == '/' && l[1] != '/') {
        rc = tkm__oci_url(op->s, url, "%s", l);
    } else if (l[0] == '?') {
        size_t pl = strcspn(cur, "?");
        rc = tkm_buf_printf(url, "%.*s%s", (int)pl, cur, l);
    } else if (strncasecmp(l, origin.data, origin.len) == 0 && l[origin.len] == '/') {
        rc = tkm_buf_printf(url, "%s%s", origin.data, l + origin.len);
    } else {
        rc = tkm_err_set(err, -EPERM,
                         "referrers %s: the Link header's next page is not on %s: not followed",
                         cur, origin.data);
        goto out;
    }
    if (rc)
        rc = tkm_err_set(err, rc, "referrers %s: next page URL too long", cur);
out:
    tkm_buf_release(&origin);
    return rc;
}

static void referrers_done(int rc, struct tkm_http_resp *resp, struct tkm_err *err, void *data);

/* Adds a 200 page's manifests to op->index (page 1 becomes it); then starts
 * the next page (1), or writes the merged index into op->body (0). */
static int referrers_page(struct tkm__oci_op *op, struct tkm_http_resp *resp, struct tkm_err *err)
{
    struct tkm_buf url = TKM_BUF_INIT(TKM__OCI_URL_MAX);
    json_t *page = NULL;
    char *dump = NULL;
    int rc = 0, more = 0;
    char lh[16];
    op->pages++;
    if (tkm_http_resp_header(resp, "Link", lh, sizeof lh) >= 0) {
        int ll = tkm_http_resp_header(resp, "Link", op->link, sizeof op->link);
        more =
            ll >= (int)sizeof op->link ? -EBADMSG : link_next(op->link, op->link, sizeof op->link);
        if (more < 0) {
            rc = tkm_err_set(err, -EBADMSG,
                             "referrers %s: malformed Link header (want <url>; rel=\"next\")",
                             resp->url);
            goto out;
        }
    }
    if (!more && !op->index) { /* one page: the bytes as they came */
        tkm_buf_reset(op->body);
        if ((rc = tkm_buf_append(op->body, resp->body.data, resp->body.len)) != 0)
            rc = tkm_err_set(err, rc, "referrers %s: %zu bytes do not fit the caller's buffer",
                             resp->url, resp->body.len);
        goto out;
    }
    page = json_loadb(resp->body.data ? resp->body.data : "", resp->body.len,
                      JSON_REJECT_DUPLICATES, NULL);
    json_t *ms = json_object_get(page, "manifests");
    if (!json_is_array(ms)) {
        rc = tkm_err_set(err, -EBADMSG, "referrers %s (page %u): not an OCI image index", resp->url,
                         op->pages);
        goto out;
    }
    if (!op->index) {
        op->index = json_incref(page);
    } else if (json_array_extend(json_object_get(op->index, "manifests"), ms) != 0) {
        rc = tkm_err_set(err, -ENOMEM, "referrers %s: out of memory", resp->url);
        goto out;
    }
    if (json_array_size(json_object_get(op->index, "manifests")) > TKM_OCI_REFERRERS_MAX) {
        rc = tkm_err_set(err, -E2BIG, "referrers %s: more than %d referrers over %u pages",
                         resp->url, TKM_OCI_REFERRERS_MAX, op->pages);
        goto out;
    }
    if (more && op->pages >= TKM_OCI_REFERRERS_MAX_PAGES) {
        rc = tkm_err_set(err, -ELOOP,
                         "referrers %s: stopped after %d pages, the registry still links a next "
                         "page (a loop?)",
                         resp->url, TKM_OCI_REFERRERS_MAX_PAGES);
        goto out;
    }
    if (more) {
        if (tkm__oci_session_freeing(op->s)) {
            rc = tkm_err_set(err, -ECANCELED, "referrers %s: cancelled", resp->url);
            goto out;
        }
        if ((rc = referrers_next_url(op, resp->url, &url, err)) != 0)
            goto out;
        struct tkm__oci_req q = {.method = "GET",
                                 .url = url.data,
                                 .scope = op->scope,
                                 .accept = TKM_OCI_MT_INDEX,
                                 .max_body = TKM_OCI_MANIFEST_MAX};
        if ((rc = tkm__oci_call_start(op->s, &q, referrers_done, op, &op->call, err)) == 0)
            rc = 1;
        goto out;
    }
    if (!(dump = json_dumps(op->index, JSON_COMPACT))) {
        rc = tkm_err_set(err, -ENOMEM, "referrers %s: out of memory", resp->url);
        goto out;
    }
    tkm_buf_reset(op->body);
    if ((rc = tkm_buf_puts(op->body, dump)) != 0)
        rc = tkm_err_set(err, rc,
                         "referrers %s: the %u pages' index does not fit the caller's "
                         "buffer",
                         resp->url, op->pages);
out:
    free(dump);
    json_decref(page);
    tkm_buf_release(&url);
    return rc;
}

static void referrers_done(int rc, struct tkm_http_resp *resp, struct tkm_err *err, void *data)
{
    struct tkm__oci_op *op = data;
    if (rc == 0 && op->pages > 0) {
        /* a later page: the API exists, so any failure is an error */
        char ct[128] = "";
        if (resp->status != 200)
            rc = tkm__oci_status_error(op->s, resp, "referrers", err);
        else if (tkm_http_resp_header(resp, "Content-Type", ct, sizeof ct) < 0 ||
                 strncmp(ct, TKM_OCI_MT_INDEX, strlen(TKM_OCI_MT_INDEX)) != 0)
            rc = tkm_err_set(err, -EBADMSG, "%s: answered a Content-Type that is not an OCI index",
                             resp->url);
        else if ((rc = referrers_page(op, resp, err)) == 1)
            return; /* the next page is on its way */
    } else if (rc == 0) {
        /* A registry without the API answers 400, 405, 501, or a 404 that
         * is not the OCI error for a missing repository or subject (the
         * route is unknown). A 200 must be an OCI image index. */
        const char *b = resp->body.data ? resp->body.data : "";
        int unknown = memmem(b, resp->body.len, "NAME_UNKNOWN", 12) ||
                      memmem(b, resp->body.len, "MANIFEST_UNKNOWN", 16);
        int api_missing = resp->status == 400 || resp->status == 405 || resp->status == 501 ||
                          (resp->status == 404 && !unknown);
        char ct[128] = "";
        if (resp->status == 200 && (tkm_http_resp_header(resp, "Content-Type", ct, sizeof ct) < 0 ||
                                    strncmp(ct, TKM_OCI_MT_INDEX, strlen(TKM_OCI_MT_INDEX)) != 0)) {
            rc = tkm_err_set(err, -ENOTSUP,
                             "%s: answered a Content-Type that is not an OCI index: the registry "
                             "has no referrers API",
                             resp->url);
        } else if (resp->status == 200) {
            if ((rc = referrers_page(op, resp, err)) == 1)
                return;
        } else if (api_missing) {
            rc = tkm_err_set(err, -ENOTSUP, "%s: HTTP %ld: the registry has no referrers API",
                             resp->url, resp->status);
        } else {
            rc = tkm__oci_status_error(op->s, resp, "referrers", err);
        }
    }
    op_report(op, rc, err);
}

int tkm__oci_get_referrers(struct tkm_oci_session *s, const char *repo, const char *digest,
                           const char *artifact_type, struct tkm_buf *body, tkm__oci_op_cb cb,
                           void *data, struct tkm__oci_op **out, struct tkm_err *err)
{
    struct tkm_buf url = TKM_BUF_INIT(TKM__OCI_URL_MAX);
    struct tkm__oci_op *op = NULL;
    int rc;
    if (!tkm_oci_digest_valid(digest))
        return tkm_err_set(err, -EINVAL, "referrers: '%.80s' is not sha256:<64 hex>", digest);
    for (const char *p = artifact_type; p && *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
              strchr(".+-_/", *p)))
            return tkm_err_set(err, -EINVAL, "referrers: artifact type '%.80s' is not a media type",
                               artifact_type);
    rc = tkm__oci_api_url(s, &url, "/%s/referrers/%s", repo, digest);
    for (const char *p = artifact_type; rc == 0 && p && *p; p++) {
        if (p == artifact_type)
            rc = tkm_buf_puts(&url, "?artifactType=");
        if (rc == 0) /* '/' and '+' percent-encoded: '+' would read as a space */
            rc = strchr("/+", *p) ? tkm_buf_printf(&url, "%%%02X", (unsigned char)*p)
                                  : tkm_buf_printf(&url, "%c", *p);
    }
    if (rc) {
        rc = tkm_err_set(err, rc, "%s: URL too long", repo);
        goto out;
    }
    if ((rc = op_new(s, cb, data, &op, err)) != 0)
        goto out;
    op->body = body;
    struct tkm__oci_req q = {.method = "GET",
                             .url = url.data,
                             .accept = TKM_OCI_MT_INDEX,
                             .max_body = TKM_OCI_MANIFEST_MAX};
    rc = op_start(op, repo, 0, &q, referrers_done, out, err);
out:
    tkm_buf_release(&url);
    return rc;
}
