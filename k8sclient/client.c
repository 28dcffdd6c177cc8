/*
 * client.c - the Kubernetes client: credentials, raw requests, retries.
 *
 * A struct k8s_req wraps one logical request. It may go on the wire several
 * times (retries, a re-authenticated attempt after a 401); each attempt is one
 * tkm_http request. Every k8s_req owns a uv_timer_t used for retry delays and
 * for deferred delivery (cancel while no attempt is in flight), so the
 * request's memory is freed from that timer's close callback. The client is
 * freed once every request is gone, no exec plugin runs in the thread pool and
 * the transport has closed.
 */
#include <k8s/client.h>

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include <tkm/backoff.h>
#include <tkm/bug.h>
#include <tkm/fs.h>
#include <tkm/http.h>
#include <tkm/log.h>
#include <tkm/util.h>

#include "client-int.h"
#include "config-int.h"

#define DEFAULT_TIMEOUT_MS   30000
#define DEFAULT_MAX_BODY     (64u * 1024 * 1024)
#define DEFAULT_RETRIES      3
#define DEFAULT_TOKEN_RELOAD 60000
#define RETRY_AFTER_MAX_S    30
#define EXEC_EXPIRY_SKEW_S   10
#define DEFAULT_CA_RELOAD    60000
#define CA_MAX_BYTES         (1024u * 1024u)

struct k8s_client {
    uv_loop_t *loop;
    struct tkm_http *http;
    struct k8s_config cfg;
    char *user_agent;
    uint64_t timeout_ms;
    size_t max_body;
    int max_retries;
    uint64_t token_reload_ms;
    uint64_t seed;
    /* Credentials in use. */
    char *token;
    uint64_t token_read_ms;
    struct k8s_exec_result exec;
    /* The CA bundle of cfg.ca_file, read by the client and handed to curl
     * as a blob so a rotated file is used for new connections. */
    char *ca_pem;
    size_t ca_pem_len;
    struct k8s__file_stamp ca_stamp;
    uint64_t ca_checked_ms, ca_reload_ms;
    unsigned ca_reloads;
    /* An exec plugin running in the thread pool. */
    int exec_running;
    uv_work_t exec_work;
    struct k8s_exec_result exec_new;
    struct tkm_err exec_err;
    int exec_rc;
    /* Requests: live ones, and those whose timer is closing. */
    struct k8s_req *reqs;
    unsigned req_closing;
    int closing, http_closing;
    void (*closed_cb)(void *data);
    void *closed_data;
};

struct k8s_req {
    struct k8s_client *c;
    struct k8s_req *prev, *next;
    char *method, *path, *content_type, *accept;
    char *body;
    size_t body_len;
    uint64_t timeout_ms, idle_ms;
    enum k8s_idem idem;
    int no_retry;
    k8s_data_cb data_cb;
    k8s_response_cb done;
    void *data;
    struct tkm_http_req *hreq;
    uv_timer_t timer;
    int attempts;
    struct tkm_backoff bo; /* between attempts without Retry-After */
    int auth_retried;
    int ca_retried;   /* a TLS failure was retried once with a re-read CA */
    int waiting_exec; /* parked until the exec plugin returns */
    int exec_fresh;   /* the plugin just ran for this request: send as is */
    int cancelled;
    int streamed; /* data_cb saw bytes: never retried */
    int delivered;
    struct k8s_status st;
};

static void send_attempt(struct k8s_req *r);
static void maybe_closed(struct k8s_client *c);

int k8s__status_local(struct k8s_status *st, int rc, const char *fmt, ...)
{
    if (!st)
        return rc;
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    k8s_status_release(st);
    st->rc = rc;
    st->message = strdup(msg);
    return rc;
}

/* ---- credentials ----------------------------------------------------------- */

static int set_token(struct k8s_client *c, const char *tok)
{
    char *t = strdup(tok);
    if (!t)
        return -ENOMEM;
    free(c->token);
    c->token = t;
    return 0;
}

/* Re-reads the token file (small, local: read on the loop, as client-go
 * does). On failure the previous token stays in use. */
static void reload_token_file(struct k8s_client *c)
{
    struct tkm_buf b = TKM_BUF_INIT(64 * 1024);
    struct tkm_err e = {0};
    c->token_read_ms = tkm_now_ms();
    if (tkm_read_file(c->cfg.token_file, b.max, &b, "tokenFile", &e) == 0) {
        k8s__trim(&b);
        if (b.len == 0)
            tkm_warn("k8s: tokenFile \"%s\" is empty; keeping the previous token",
                     c->cfg.token_file);
        else if (!c->token || strcmp(c->token, b.data) != 0)
            set_token(c, b.data);
    } else {
        tkm_warn("k8s: %s; keeping the previous token", e.msg);
    }
    tkm_buf_release(&b);
}

/* ---- CA bundle rotation ------------------------------------------------------ */

int k8s__file_stamp_get(const char *path, struct k8s__file_stamp *out)
{
    struct stat st;
    if (stat(path, &st) != 0)
        return -errno;
    out->dev = (uint64_t)st.st_dev;
    out->ino = (uint64_t)st.st_ino;
    out->size = (int64_t)st.st_size;
    out->mtime_ns = (int64_t)st.st_mtim.tv_sec * 1000000000LL + st.st_mtim.tv_nsec;
    return 0;
}

int k8s__file_stamp_eq(const struct k8s__file_stamp *a, const struct k8s__file_stamp *b)
{
    return a->dev == b->dev && a->ino == b->ino && a->size == b->size && a->mtime_ns == b->mtime_ns;
}

/* Reads cfg.ca_file when its stamp (inode, size, mtime) changed. A stat or
 * read is small and local: done on the loop, like the token file. A file
 * that cannot be read, or holds no certificate, leaves the previous bundle
 * in use. Returns 1 when a new bundle was taken. */
static int ca_reload(struct k8s_client *c)
{
    struct k8s__file_stamp now;
    struct tkm_buf b = TKM_BUF_INIT(CA_MAX_BYTES);
    struct tkm_err e = {0};
    int taken = 0;
    c->ca_checked_ms = tkm_now_ms();
    if (k8s__file_stamp_get(c->cfg.ca_file, &now) != 0 ||
        (c->ca_pem && k8s__file_stamp_eq(&now, &c->ca_stamp)))
        return 0;
    if (tkm_read_file(c->cfg.ca_file, b.max, &b, "certificate-authority", &e) != 0) {
        tkm_warn("k8s: %s; keeping the previous CA bundle", e.msg);
    } else if (!b.len || !strstr(b.data, "-----BEGIN CERTIFICATE-----")) {
        tkm_warn("k8s: certificate-authority \"%s\" holds no PEM certificate; keeping the "
                 "previous CA bundle",
                 c->cfg.ca_file);
    } else if (!c->ca_pem || b.len != c->ca_pem_len || memcmp(b.data, c->ca_pem, b.len) != 0) {
        size_t len = 0;
        char *p = tkm_buf_detach(&b, &len);
        if (p) {
            if (c->ca_pem) {
                c->ca_reloads++;
                tkm_info("k8s: certificate-authority \"%s\" changed; new connections use it",
                         c->cfg.ca_file);
            }
            free(c->ca_pem);
            c->ca_pem = p;
            c->ca_pem_len = len;
            taken = 1;
        }
    }
    if (taken || c->ca_pem)
        c->ca_stamp = now;
    tkm_buf_release(&b);
    return taken;
}

unsigned k8s__client_ca_reloads(const struct k8s_client *c)
{
    return c->ca_reloads;
}

static int exec_expired(const struct k8s_client *c)
{
    return c->exec.expires_unix &&
           (long long)time(NULL) >= c->exec.expires_unix - EXEC_EXPIRY_SKEW_S;
}

static void exec_work_cb(uv_work_t *w)
{
    struct k8s_client *c = w->data;
    tkm_err_clear(&c->exec_err);
    c->exec_rc = k8s_exec_run(&c->cfg, &c->exec_new, &c->exec_err);
}

static void deliver(struct k8s_req *r, struct tkm_buf *body, long code, long ver);

static void exec_after_cb(uv_work_t *w, int status)
{
    struct k8s_client *c = w->data;
    c->exec_running = 0;
    if (status == 0 && c->exec_rc == 0) {
        k8s_exec_result_release(&c->exec);
        c->exec = c->exec_new;
        memset(&c->exec_new, 0, sizeof c->exec_new);
        if (c->exec.token)
            set_token(c, c->exec.token);
    } else if (c->exec_rc == 0) {
        c->exec_rc = status;
    }
    struct k8s_req *r = c->reqs;
    while (r) {
        struct k8s_req *next = r->next;
        if (r->waiting_exec) {
            r->waiting_exec = 0;
            r->exec_fresh = 1;
            if (c->exec_rc && !r->cancelled) {
                k8s_status_set_transport(&r->st, c->exec_rc, tkm_err_str(&c->exec_err));
                deliver(r, NULL, 0, 0);
            } else {
                send_attempt(r); /* delivers -ECANCELED itself when cancelled */
            }
        }
        r = next;
    }
    maybe_closed(c);
}

/* Starts the exec plugin in the thread pool unless it already runs. */
static int exec_refresh(struct k8s_client *c)
{
    if (c->exec_running)
        return 0;
    c->exec_work.data = c;
    int rc = uv_queue_work(c->loop, &c->exec_work, exec_work_cb, exec_after_cb);
    if (rc == 0)
        c->exec_running = 1;
    return rc;
}

/* ---- client ------------------------------------------------------------------ */

static int client_creds_init(struct k8s_client *c, struct tkm_err *err)
{
    if (c->cfg.auth == K8S_AUTH_TOKEN && c->cfg.token)
        return set_token(c, c->cfg.token);
    if (c->cfg.auth == K8S_AUTH_TOKEN_FILE) {
        struct tkm_buf b = TKM_BUF_INIT(64 * 1024);
        int rc = tkm_read_file(c->cfg.token_file, b.max, &b, "tokenFile", err);
        if (rc == 0) {
            k8s__trim(&b);
            rc = set_token(c, b.data);
        }
        tkm_buf_release(&b);
        c->token_read_ms = tkm_now_ms();
        return rc;
    }
    if (c->cfg.auth == K8S_AUTH_EXEC) {
        int rc = k8s_exec_run(&c->cfg, &c->exec, err);
        if (rc == 0 && c->exec.token)
            rc = set_token(c, c->exec.token);
        return rc;
    }
    return 0;
}

int k8s_client_new(uv_loop_t *loop, const struct k8s_config *cfg,
                   const struct k8s_client_opts *opts, struct k8s_client **out, struct tkm_err *err)
{
    if (!cfg || !cfg->server)
        return tkm_err_set(err, -EINVAL, "k8s client: the configuration has no server");
    struct k8s_client *c = calloc(1, sizeof *c);
    int rc;
    if (!c)
        return tkm_err_set(err, -ENOMEM, "k8s client: out of memory");
    c->loop = loop;
    k8s_config_init(&c->cfg);
    struct k8s_client_opts o = opts ? *opts : (struct k8s_client_opts){0};
    c->timeout_ms = o.timeout_ms ? o.timeout_ms : DEFAULT_TIMEOUT_MS;
    c->max_body = o.max_body ? o.max_body : DEFAULT_MAX_BODY;
    c->max_retries = o.max_retries < 0 ? 0 : (o.max_retries ? o.max_retries : DEFAULT_RETRIES);
    c->token_reload_ms = o.token_reload_ms ? o.token_reload_ms : DEFAULT_TOKEN_RELOAD;
    c->ca_reload_ms = o.ca_reload_ms ? o.ca_reload_ms : DEFAULT_CA_RELOAD;
    c->seed = tkm_now_ms() ^ (uint64_t)(uintptr_t)c;
    c->user_agent = strdup(o.user_agent ? o.user_agent : "tkm/" TKM_VERSION);
    if (!c->user_agent || k8s_config_copy(&c->cfg, cfg)) {
        rc = tkm_err_set(err, -ENOMEM, "k8s client: out of memory");
        goto fail;
    }
    if ((rc = client_creds_init(c, err)))
        goto fail;
    /* A CA file is read here and re-read when it changes; an unreadable one
     * is left to curl, which reports it on the first request. */
    if (c->cfg.ca_file && !c->cfg.ca_pem)
        ca_reload(c);
    struct tkm_http_opts ho = {.user_agent = c->user_agent};
    if ((rc = tkm_http_new(loop, &ho, &c->http, err)))
        goto fail;
    *out = c;
    return 0;
fail:
    k8s_config_release(&c->cfg);
    k8s_exec_result_release(&c->exec);
    free(c->ca_pem);
    free(c->token);
    free(c->user_agent);
    free(c);
    return rc;
}

uv_loop_t *k8s_client_loop(const struct k8s_client *c)
{
    return c->loop;
}

const char *k8s_client_namespace(const struct k8s_client *c)
{
    return c->cfg.namespace ? c->cfg.namespace : "default";
}

const char *k8s_client_server(const struct k8s_client *c)
{
    return c->cfg.server;
}

static void http_closed(void *data)
{
    struct k8s_client *c = data;
    void (*cb)(void *) = c->closed_cb;
    void *cbd = c->closed_data;
    k8s_config_release(&c->cfg);
    k8s_exec_result_release(&c->exec);
    k8s_exec_result_release(&c->exec_new);
    free(c->ca_pem);
    free(c->token);
    free(c->user_agent);
    free(c);
    if (cb)
        cb(cbd);
}

static void maybe_closed(struct k8s_client *c)
{
    if (!c->closing || c->http_closing || c->reqs || c->req_closing || c->exec_running)
        return;
    c->http_closing = 1;
    tkm_http_close(c->http, http_closed, c);
}

void k8s_client_close(struct k8s_client *c, void (*closed_cb)(void *data), void *data)
{
    if (!c || TKM_BUG(c->closing)) /* a second close would wait forever */
        return;
    c->closing = 1;
    c->closed_cb = closed_cb;
    c->closed_data = data;
    for (struct k8s_req *r = c->reqs; r; r = r->next)
        k8s_req_cancel(r);
    maybe_closed(c);
}

static void set_flag(void *data)
{
    *(int *)data = 1;
}

void k8s_client_free(struct k8s_client *c)
{
    if (!c)
        return;
    /* The flag outlives this frame as far as the compiler can tell (it is
     * stored in c, which the close frees), so it lives on the heap: GCC 12's
     * -Wdangling-pointer rejects a local here at -O2. */
    int *done = calloc(1, sizeof *done);
    if (!done)
        abort();
    uv_loop_t *loop = c->loop;
    k8s_client_close(c, set_flag, done);
    while (!*done)
        uv_run(loop, UV_RUN_ONCE);
    free(done);
}

/* ---- requests ---------------------------------------------------------------- */

static void req_timer_closed(uv_handle_t *h)
{
    struct k8s_req *r = h->data;
    struct k8s_client *c = r->c;
    k8s_status_release(&r->st);
    free(r->method);
    free(r->path);
    free(r->content_type);
    free(r->accept);
    free(r->body);
    free(r);
    c->req_closing--;
    maybe_closed(c);
}

/* Calls the user's callback once, then frees r (through its timer). */
static void deliver(struct k8s_req *r, struct tkm_buf *body, long code, long ver)
{
    struct k8s_client *c = r->c;
    struct tkm_buf empty = TKM_BUF_INIT(0);
    if (r->cancelled && code == 0 && !r->st.rc)
        k8s_status_set_transport(&r->st, -ECANCELED, "request cancelled");
    struct k8s_response resp = {.rc = r->st.rc,
                                .code = code,
                                .body = body ? body : &empty,
                                .st = &r->st,
                                .http_version = ver};
    r->delivered = 1;
    if (r->prev)
        r->prev->next = r->next;
    else
        c->reqs = r->next;
    if (r->next)
        r->next->prev = r->prev;
    r->next = r->prev = NULL;
    c->req_closing++;
    uv_timer_stop(&r->timer);
    r->done(r, &resp, r->data);
    uv_close((uv_handle_t *)&r->timer, req_timer_closed);
}

static void on_timer(uv_timer_t *t)
{
    struct k8s_req *r = t->data;
    if (r->cancelled) {
        k8s_status_set_transport(&r->st, -ECANCELED, "request cancelled");
        deliver(r, NULL, 0, 0);
        return;
    }
    send_attempt(r);
}

static int on_http_data(struct tkm_http_req *hreq, const char *p, size_t n, void *data)
{
    (void)hreq;
    struct k8s_req *r = data;
    r->streamed = 1;
    return r->data_cb(r, p, n, r->data);
}

/* Decides whether to try again; returns 1 when a retry was scheduled. */
static int schedule_retry(struct k8s_req *r, long retry_after_s)
{
    struct k8s_client *c = r->c;
    if (r->no_retry || r->streamed || r->cancelled || c->closing || r->attempts > c->max_retries)
        return 0;
    if (!k8s_status_retryable(&r->st, r->idem == K8S_IDEMPOTENT))
        return 0;
    uint64_t ms = retry_after_s >= 0 ? (uint64_t)retry_after_s * 1000 : tkm_backoff_next(&r->bo, 0);
    tkm_dbg("k8s: %s %s: %s; retry %d in %llu ms", r->method, r->path,
            r->st.message ? r->st.message : "error", r->attempts, (unsigned long long)ms);
    uv_timer_start(&r->timer, on_timer, ms, 0);
    return 1;
}

static void on_http_done(struct tkm_http_req *hreq, struct tkm_http_resp *hr, void *data)
{
    (void)hreq;
    struct k8s_req *r = data;
    struct k8s_client *c = r->c;
    r->hreq = NULL;
    if (hr->code) {
        k8s_status_set_transport(&r->st, hr->code, hr->error);
        /* A TLS failure after the CA bundle rotated: the handshake sent
         * nothing, so any request may go again once with the new bundle. */
        if (hr->code == -EPROTO && c->ca_pem && !r->ca_retried && !r->cancelled && !c->closing &&
            ca_reload(c)) {
            r->ca_retried = 1;
            uv_timer_start(&r->timer, on_timer, 0, 0);
            return;
        }
        if (hr->code != -ECANCELED && schedule_retry(r, -1))
            return;
        deliver(r, NULL, hr->status, hr->status ? hr->http_version : 0);
        return;
    }
    if (hr->status >= 200 && hr->status < 300) {
        k8s_status_release(&r->st);
        deliver(r, &hr->body, hr->status, hr->http_version);
        return;
    }
    long ra = tkm_http_retry_after(hr, RETRY_AFTER_MAX_S);
    if (k8s_status_decode(&r->st, hr->status, hr->body.data, hr->body.len, ra) == -ENOMEM &&
        !r->st.rc)
        k8s_status_set_transport(&r->st, -ENOMEM, "out of memory decoding the error");
    if (r->st.retry_after_s > RETRY_AFTER_MAX_S)
        r->st.retry_after_s = RETRY_AFTER_MAX_S;
    /* 401: the credential may have rotated; reload once and try again. */
    if (hr->status == 401 && !r->auth_retried && !r->streamed && !r->cancelled) {
        r->auth_retried = 1;
        if (c->cfg.auth == K8S_AUTH_TOKEN_FILE) {
            reload_token_file(c);
            uv_timer_start(&r->timer, on_timer, 0, 0);
            return;
        }
        if (c->cfg.auth == K8S_AUTH_EXEC && exec_refresh(c) == 0) {
            r->waiting_exec = 1;
            return;
        }
    }
    if (schedule_retry(r, r->st.retry_after_s))
        return;
    deliver(r, NULL, hr->status, hr->status ? hr->http_version : 0);
}

static int build_headers(struct k8s_req *r, char lines[4][8192], const char *hdrs[5])
{
    struct k8s_client *c = r->c;
    int n = 0;
    snprintf(lines[n], sizeof lines[n], "Accept: %s", r->accept ? r->accept : "application/json");
    hdrs[n] = lines[n];
    n++;
    if (r->body) {
        snprintf(lines[n], sizeof lines[n], "Content-Type: %s",
                 r->content_type ? r->content_type : "application/json");
        hdrs[n] = lines[n];
        n++;
    }
    if (c->token) {
        int w = snprintf(lines[n], sizeof lines[n], "Authorization: Bearer %s", c->token);
        if (w < 0 || (size_t)w >= sizeof lines[n])
            return -E2BIG;
        hdrs[n] = lines[n];
        n++;
    }
    hdrs[n] = NULL;
    return 0;
}

/* Puts one attempt on the wire, or parks r until credentials are fresh. */
static void send_attempt(struct k8s_req *r)
{
    struct k8s_client *c = r->c;
    if (r->cancelled) {
        k8s_status_set_transport(&r->st, -ECANCELED, "request cancelled");
        deliver(r, NULL, 0, 0);
        return;
    }
    if (c->cfg.auth == K8S_AUTH_TOKEN_FILE && tkm_now_ms() - c->token_read_ms >= c->token_reload_ms)
        reload_token_file(c);
    if (c->cfg.auth == K8S_AUTH_EXEC && !r->exec_fresh && exec_expired(c) && exec_refresh(c) == 0) {
        r->waiting_exec = 1;
        return;
    }
    if (c->ca_pem && tkm_now_ms() - c->ca_checked_ms >= c->ca_reload_ms)
        ca_reload(c);
    r->attempts++;
    r->exec_fresh = 0;
    char lines[4][8192];
    const char *hdrs[5];
    struct tkm_buf url = TKM_BUF_INIT(64 * 1024);
    struct tkm_err err = {0};
    int rc = build_headers(r, lines, hdrs);
    if (rc == 0)
        rc = tkm_buf_printf(&url, "%s%s", c->cfg.server, r->path);
    if (rc) {
        k8s_status_set_transport(&r->st, rc, "cannot build the request (token or path too long)");
        tkm_buf_release(&url);
        deliver(r, NULL, 0, 0);
        return;
    }
    struct tkm_http_tls tls = {
        .ca_file = c->ca_pem ? NULL : c->cfg.ca_file,
        .ca_pem = c->ca_pem ? c->ca_pem : c->cfg.ca_pem,
        .ca_pem_len = c->ca_pem ? c->ca_pem_len : c->cfg.ca_pem_len,
        .cert_file = c->cfg.cert_file,
        .cert_pem = c->exec.cert_pem ? c->exec.cert_pem : c->cfg.cert_pem,
        .cert_pem_len = c->exec.cert_pem ? c->exec.cert_pem_len : c->cfg.cert_pem_len,
        .key_file = c->cfg.key_file,
        .key_pem = c->exec.key_pem ? c->exec.key_pem : c->cfg.key_pem,
        .key_pem_len = c->exec.key_pem ? c->exec.key_pem_len : c->cfg.key_pem_len,
        .server_name = c->cfg.tls_server_name,
        .insecure = c->cfg.insecure,
    };
    struct tkm_http_req_opts o = {
        .method = r->method,
        .url = url.data,
        .headers = hdrs,
        .body = r->body,
        .body_len = r->body_len,
        .tls = &tls,
        .timeout_ms = r->timeout_ms == UINT64_MAX ? 0 : r->timeout_ms,
        .idle_timeout_ms = r->idle_ms,
        .max_body = c->max_body,
        .compressed = 1,
        .data_cb = r->data_cb ? on_http_data : NULL,
        .done_cb = on_http_done,
        .data = r,
    };
    rc = tkm_http_start(c->http, &o, &r->hreq, &err);
    tkm_buf_release(&url);
    if (rc) {
        k8s_status_set_transport(&r->st, rc, tkm_err_str(&err));
        deliver(r, NULL, 0, 0);
    }
}

static int dup_field(char **dst, const char *src)
{
    *dst = NULL;
    return src && !(*dst = strdup(src)) ? -ENOMEM : 0;
}

int k8s_request_start(struct k8s_client *c, const struct k8s_request *rq, k8s_data_cb data_cb,
                      k8s_response_cb done, void *data, struct k8s_req **out, struct tkm_err *err)
{
    if (!rq || !rq->method || !rq->path || rq->path[0] != '/' || !done)
        return tkm_err_set(err, -EINVAL,
                           "k8s request: method, a path starting with '/' and a callback are "
                           "required");
    if (c->closing)
        return tkm_err_set(err, -ESHUTDOWN, "%s %s: the client is closing", rq->method, rq->path);
    struct k8s_req *r = calloc(1, sizeof *r);
    if (!r)
        return tkm_err_set(err, -ENOMEM, "%s %s: out of memory", rq->method, rq->path);
    r->c = c;
    /* 200 ms x2 per attempt up to 5 s, plus up to 25 % jitter; the seed
     * comes from the client's generator, no globals. */
    r->bo = (struct tkm_backoff){.initial_ms = 200,
                                 .max_ms = 5000,
                                 .jitter_pct = 25,
                                 .rng = tkm_rand_range(&c->seed, 1, UINT64_MAX - 1)};
    k8s_status_init(&r->st);
    if (dup_field(&r->method, rq->method) || dup_field(&r->path, rq->path) ||
        dup_field(&r->content_type, rq->content_type) || dup_field(&r->accept, rq->accept) ||
        (rq->body && !(r->body = malloc(rq->body_len + 1)))) {
        free(r->method);
        free(r->path);
        free(r->content_type);
        free(r->accept);
        free(r);
        return tkm_err_set(err, -ENOMEM, "%s %s: out of memory", rq->method, rq->path);
    }
    if (rq->body) {
        memcpy(r->body, rq->body, rq->body_len);
        r->body[rq->body_len] = '\0';
        r->body_len = rq->body_len;
    }
    r->timeout_ms = rq->timeout_ms ? rq->timeout_ms : c->timeout_ms;
    r->idle_ms = rq->idle_timeout_ms;
    r->idem = rq->idempotent;
    r->no_retry = rq->no_retry;
    r->data_cb = data_cb;
    r->done = done;
    r->data = data;
    uv_timer_init(c->loop, &r->timer);
    r->timer.data = r;
    r->next = c->reqs;
    if (c->reqs)
        c->reqs->prev = r;
    c->reqs = r;
    if (out)
        *out = r;
    /* The first attempt goes out from the loop, so done never runs inside
     * this call even when the attempt fails at once. */
    uv_timer_start(&r->timer, on_timer, 0, 0);
    return 0;
}

void k8s_req_cancel(struct k8s_req *r)
{
    if (!r || r->cancelled || r->delivered)
        return;
    r->cancelled = 1;
    if (r->hreq)
        tkm_http_cancel(r->hreq); /* on_http_done delivers -ECANCELED */
    else if (!r->waiting_exec)
        uv_timer_start(&r->timer, on_timer, 0, 0);
}
