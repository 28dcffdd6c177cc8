/*
 * http.c - libcurl multi on a libuv loop. See http.h for the contract.
 *
 * How it fits together:
 *   - curl tells us which sockets to watch (sock_cb) and when to call it back
 *     (timer_fn). Each socket gets a struct http_sock holding a uv_poll_t,
 *     attached to curl's socket with curl_multi_assign(); the timeout is one
 *     uv_timer_t. Both call curl_multi_socket_action() and then collect
 *     finished transfers (check_done).
 *   - Cancellation and closing never act synchronously: they set a flag and
 *     arm the "deferred" timer (0 ms), whose callback finishes cancelled
 *     requests and tears the client down. So done_cb is never called from
 *     inside tkm_http_cancel()/tkm_http_close(), and curl handles are never
 *     removed from inside curl's own callbacks.
 *   - uv handles are freed only from their close callbacks; the client itself
 *     is freed when its last handle has closed.
 */
#include <tkm/http.h>

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <curl/curl.h>

#include <tkm/bug.h>
#include <tkm/util.h>

#define HTTP_DEFAULT_MAX_BODY (16u * 1024 * 1024)
#define HTTP_MAX_HEADERS      (256u * 1024)
#define HTTP_CONNECT_MS       10000L /* connection setup, every request */
#define HTTP_MAX_REDIRECTS    5L

struct http_sock {
    uv_poll_t poll; /* first member: the handle's address is the struct's */
    curl_socket_t fd;
    struct tkm_http *h;
    struct http_sock *prev, *next;
};

struct tkm_http {
    uv_loop_t *loop;
    CURLM *multi;
    uv_timer_t timer;    /* curl's timeout */
    uv_timer_t deferred; /* cancellations and close */
    char *user_agent;
    int closing;
    int cleaning; /* inside curl_multi_cleanup() */
    int torn_down;
    unsigned open_handles;
    void (*closed_cb)(void *data);
    void *closed_data;
    struct tkm_http_req *reqs; /* in flight, doubly linked */
    struct http_sock *socks;
    size_t inflight;
};

struct tkm_http_req {
    struct tkm_http *h;
    struct tkm_http_req *prev, *next;
    CURL *easy;
    struct curl_slist *hdrs;
    struct curl_slist *connect_to;
    struct curl_slist *resolve; /* CURLOPT_RESOLVE: the checked addresses (registry reach) */
    char *url;
    tkm_http_data_cb data_cb;
    tkm_http_done_cb done_cb;
    void *data;
    struct tkm_http_resp resp;
    int cancelled;
    int abort_code;               /* set by the write/header callbacks when they stop curl */
    int stream_state;             /* 0 undecided, 1 streaming to data_cb, 2 buffering */
    uint64_t timeout_ms, idle_ms; /* the limits set (0: none), to say which one hit */
    uint64_t last_byte_ms;        /* idle limit: when a byte last moved (or the start) */
    curl_off_t seen_dl, seen_ul;  /* ... and the counts then */
    int stalled;                  /* the idle limit stopped it */
    char errbuf[CURL_ERROR_SIZE];
};

/* ---- handle lifetime ---------------------------------------------------- */

static void check_done(struct tkm_http *h);

static void client_free_if_done(struct tkm_http *h)
{
    if (!h->torn_down || h->open_handles)
        return;
    void (*cb)(void *) = h->closed_cb;
    void *cbd = h->closed_data;
    free(h->user_agent);
    free(h);
    if (cb)
        cb(cbd);
}

static void timer_closed(uv_handle_t *hd)
{
    struct tkm_http *h = hd->data;
    h->open_handles--;
    client_free_if_done(h);
}

static void sock_closed(uv_handle_t *hd)
{
    struct http_sock *s = hd->data;
    struct tkm_http *h = s->h;
    free(s);
    h->open_handles--;
    client_free_if_done(h);
}

static void sock_unlink_close(struct tkm_http *h, struct http_sock *s)
{
    if (s->prev)
        s->prev->next = s->next;
    else
        h->socks = s->next;
    if (s->next)
        s->next->prev = s->prev;
    s->prev = s->next = NULL;
    uv_poll_stop(&s->poll);
    uv_close((uv_handle_t *)&s->poll, sock_closed);
}

/* ---- curl callbacks ------------------------------------------------------ */

static void poll_cb(uv_poll_t *p, int status, int events)
{
    struct http_sock *s = p->data;
    struct tkm_http *h = s->h;
    int flags = 0, running = 0;
    if (status < 0)
        flags |= CURL_CSELECT_ERR;
    if (events & UV_READABLE)
        flags |= CURL_CSELECT_IN;
    if (events & UV_WRITABLE)
        flags |= CURL_CSELECT_OUT;
    curl_multi_socket_action(h->multi, s->fd, flags, &running);
    check_done(h);
}

static int sock_cb(CURL *easy, curl_socket_t fd, int what, void *userp, void *socketp)
{
    (void)easy;
    struct tkm_http *h = userp;
    struct http_sock *s = socketp;
    if (what == CURL_POLL_REMOVE) {
        if (s) {
            if (!h->cleaning)
                curl_multi_assign(h->multi, fd, NULL);
            sock_unlink_close(h, s);
        }
        return 0;
    }
    if (!s) {
        s = calloc(1, sizeof *s);
        if (!s)
            return -1;
        if (uv_poll_init_socket(h->loop, &s->poll, fd) != 0) {
            free(s);
            return -1;
        }
        s->poll.data = s;
        s->fd = fd;
        s->h = h;
        s->next = h->socks;
        if (h->socks)
            h->socks->prev = s;
        h->socks = s;
        h->open_handles++;
        curl_multi_assign(h->multi, fd, s);
    }
    int ev = 0;
    if (what & CURL_POLL_IN)
        ev |= UV_READABLE;
    if (what & CURL_POLL_OUT)
        ev |= UV_WRITABLE;
    if (uv_poll_start(&s->poll, ev, poll_cb) != 0)
        return -1;
    return 0;
}

static void on_timeout(uv_timer_t *t)
{
    struct tkm_http *h = t->data;
    int running = 0;
    curl_multi_socket_action(h->multi, CURL_SOCKET_TIMEOUT, 0, &running);
    check_done(h);
}

static int timer_fn(CURLM *multi, long timeout_ms, void *userp)
{
    (void)multi;
    struct tkm_http *h = userp;
    if (timeout_ms < 0)
        uv_timer_stop(&h->timer);
    else /* 0 too: curl may not be called back from inside this function */
        uv_timer_start(&h->timer, on_timeout, (uint64_t)timeout_ms, 0);
    return 0;
}

static size_t write_cb(char *p, size_t size, size_t nmemb, void *userp)
{
    struct tkm_http_req *r = userp;
    size_t n = size * nmemb;
    if (r->cancelled)
        return 0;
    if (r->data_cb && r->stream_state == 0) {
        long st = 0;
        curl_easy_getinfo(r->easy, CURLINFO_RESPONSE_CODE, &st);
        r->stream_state = (st >= 200 && st < 300) ? 1 : 2;
    }
    if (r->stream_state == 1) {
        int rc = r->data_cb(r, p, n, r->data);
        if (rc) {
            r->resp.cb_rc = rc;
            r->abort_code = -EINTR;
            return 0;
        }
        return r->cancelled ? 0 : n;
    }
    int rc = tkm_buf_append(&r->resp.body, p, n);
    if (rc) {
        r->abort_code = rc;
        return 0;
    }
    return n;
}

static size_t header_cb(char *p, size_t size, size_t nmemb, void *userp)
{
    struct tkm_http_req *r = userp;
    size_t n = size * nmemb;
    /* A status line starts a new response (a redirect, 100 Continue): keep
     * only the headers of the final one. */
    if (n >= 5 && memcmp(p, "HTTP/", 5) == 0)
        tkm_buf_reset(&r->resp.headers);
    int rc = tkm_buf_append(&r->resp.headers, p, n);
    if (rc) {
        r->abort_code = rc;
        return 0;
    }
    return n;
}

/* ---- completion ---------------------------------------------------------- */

static int map_curl_code(CURLcode cc)
{
    switch (cc) {
    case CURLE_OK:
        return 0;
    case CURLE_OPERATION_TIMEDOUT:
        return -ETIMEDOUT;
    case CURLE_COULDNT_CONNECT:
        return -ECONNREFUSED;
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_RESOLVE_PROXY:
        return -EHOSTUNREACH;
    case CURLE_GOT_NOTHING:
    case CURLE_SEND_ERROR:
    case CURLE_RECV_ERROR:
    case CURLE_PARTIAL_FILE:
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM:
        return -ECONNRESET;
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_PEER_FAILED_VERIFICATION:
    case CURLE_SSL_CERTPROBLEM:
    case CURLE_SSL_CIPHER:
    case CURLE_SSL_CACERT_BADFILE:
    case CURLE_SSL_ISSUER_ERROR:
    case CURLE_SSL_PINNEDPUBKEYNOTMATCH:
    case CURLE_SSL_CRL_BADFILE:
    case CURLE_SSL_INVALIDCERTSTATUS:
        return -EPROTO;
    case CURLE_TOO_MANY_REDIRECTS:
        return -ELOOP;
    case CURLE_UNSUPPORTED_PROTOCOL:
    case CURLE_URL_MALFORMAT:
        return -EINVAL;
    case CURLE_OUT_OF_MEMORY:
        return -ENOMEM;
    default:
        return -EIO;
    }
}

static void req_free(struct tkm_http_req *r)
{
    if (!r)
        return;
    if (r->easy)
        curl_easy_cleanup(r->easy);
    curl_slist_free_all(r->hdrs);
    curl_slist_free_all(r->connect_to);
    curl_slist_free_all(r->resolve);
    tkm_buf_release(&r->resp.body);
    tkm_buf_release(&r->resp.headers);
    free(r->url);
    free(r);
}

/* The cause of a CURLE_OPERATION_TIMEDOUT, in words: no connection within
 * the connect limit, the whole-request limit, or a stall (fewer than 1
 * byte/s for the idle window), with the bytes received so far. */
static void timeout_why(struct tkm_http_req *r, char *out, size_t n)
{
    curl_off_t total_us = 0, sent_us = 0, got = 0;
    curl_easy_getinfo(r->easy, CURLINFO_TOTAL_TIME_T, &total_us);
    curl_easy_getinfo(r->easy, CURLINFO_PRETRANSFER_TIME_T, &sent_us);
    curl_easy_getinfo(r->easy, CURLINFO_SIZE_DOWNLOAD_T, &got);
    uint64_t ms = (uint64_t)total_us / 1000;
    if (r->stalled || (r->idle_ms && !(r->timeout_ms && ms + 5 >= r->timeout_ms) && sent_us))
        snprintf(out, n, "stalled: no data for %llu %s (%lld bytes received)",
                 (unsigned long long)(r->idle_ms % 1000 ? r->idle_ms : r->idle_ms / 1000),
                 r->idle_ms % 1000 ? "ms" : "s", (long long)got);
    else if (sent_us == 0)
        snprintf(out, n, "timed out connecting after %llu ms", (unsigned long long)ms);
    else if (r->timeout_ms && ms + 5 >= r->timeout_ms)
        snprintf(out, n, "timed out: no complete response within %llu ms (%lld bytes received)",
                 (unsigned long long)r->timeout_ms, (long long)got);
    else
        snprintf(out, n, "timed out after %llu ms (%lld bytes received)", (unsigned long long)ms,
                 (long long)got);
}

/* Removes r from curl and the client, reports to done_cb, frees r. */
static void req_finish(struct tkm_http_req *r, CURLcode cc)
{
    struct tkm_http *h = r->h;
    curl_multi_remove_handle(h->multi, r->easy);
    if (r->prev)
        r->prev->next = r->next;
    else
        h->reqs = r->next;
    if (r->next)
        r->next->prev = r->prev;
    h->inflight--;

    struct tkm_http_resp *resp = &r->resp;
    long st = 0, ver = 0;
    curl_easy_getinfo(r->easy, CURLINFO_RESPONSE_CODE, &st);
    curl_easy_getinfo(r->easy, CURLINFO_HTTP_VERSION, &ver);
    resp->status = st;
    resp->http_version = ver == CURL_HTTP_VERSION_2_0 ? 2 : (ver == CURL_HTTP_VERSION_3 ? 3 : 1);
    if (r->cancelled)
        resp->code = -ECANCELED;
    else if (cc != CURLE_OK && r->abort_code)
        resp->code = r->abort_code;
    else if (st >= 400 && map_curl_code(cc) == -ECONNRESET)
        /* The server answered with an error status, then ended the stream
         * early (a reset or a close after its reply began): a Go server
         * resets an HTTP/2 stream whose upload it did not read (401 before
         * the body), or closes after a short error body. Its status is the
         * answer; the body may be cut. */
        resp->code = 0;
    else
        resp->code = map_curl_code(cc);
    if (resp->code) {
        const char *why;
        char tmo[160];
        switch (resp->code) {
        case -ECANCELED:
            why = "cancelled";
            break;
        case -E2BIG:
            why = "response larger than the configured limit";
            break;
        case -EINTR:
            why = "stopped by the data callback";
            break;
        case -ETIMEDOUT:
            timeout_why(r, tmo, sizeof tmo);
            why = tmo;
            break;
        default:
            why = r->errbuf[0] ? r->errbuf : curl_easy_strerror(cc);
        }
        snprintf(resp->error, sizeof resp->error, "%s: %s", r->url, why);
    }
    r->done_cb(r, resp, r->data);
    req_free(r);
}

static void check_done(struct tkm_http *h)
{
    CURLMsg *m;
    int left = 0;
    while (h->multi && (m = curl_multi_info_read(h->multi, &left))) {
        if (m->msg != CURLMSG_DONE)
            continue;
        struct tkm_http_req *r = NULL;
        CURLcode cc = m->data.result; /* m is invalid after remove_handle */
        curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, (char **)&r);
        if (r)
            req_finish(r, cc);
    }
}

static void teardown(struct tkm_http *h)
{
    while (h->reqs) {
        h->reqs->cancelled = 1;
        req_finish(h->reqs, CURLE_ABORTED_BY_CALLBACK);
    }
    h->cleaning = 1;
    curl_multi_cleanup(h->multi); /* closes cached connections: sock_cb REMOVE */
    h->multi = NULL;
    while (h->socks)
        sock_unlink_close(h, h->socks);
    h->torn_down = 1;
    uv_close((uv_handle_t *)&h->timer, timer_closed);
    uv_close((uv_handle_t *)&h->deferred, timer_closed);
}

static void on_deferred(uv_timer_t *t)
{
    struct tkm_http *h = t->data;
    check_done(h);
    struct tkm_http_req *r = h->reqs;
    while (r) {
        struct tkm_http_req *next = r->next;
        if (r->cancelled) {
            req_finish(r, CURLE_ABORTED_BY_CALLBACK);
            next = h->reqs; /* done_cb may have cancelled or started others */
        }
        r = next;
    }
    if (h->closing && !h->torn_down)
        teardown(h);
}

/* ---- public ------------------------------------------------------------- */

int tkm_threadpool_init(unsigned size, struct tkm_err *err)
{
    char v[16];
    uint64_t cur = 0;
    const char *env = getenv("UV_THREADPOOL_SIZE");
    if (size == 0)
        size = TKM_THREADPOOL_SIZE;
    if (size > 1024)
        return tkm_err_set(err, -EINVAL, "thread pool: %u threads requested, libuv allows 1024",
                           size);
    if (env && tkm_parse_u64(env, 1024, &cur) == 0 && cur >= size)
        return (int)cur;
    snprintf(v, sizeof v, "%u", size);
    if (setenv("UV_THREADPOOL_SIZE", v, 1) != 0)
        return tkm_err_set(err, -errno, "thread pool: setenv UV_THREADPOOL_SIZE: %s",
                           strerror(errno));
    return (int)size;
}

int tkm_http_global_init(struct tkm_err *err)
{
    CURLcode cc = curl_global_init(CURL_GLOBAL_DEFAULT);
    if (cc != CURLE_OK)
        return tkm_err_set(err, -EIO, "curl_global_init: %s", curl_easy_strerror(cc));
    return 0;
}

int tkm_http_new(uv_loop_t *loop, const struct tkm_http_opts *opts, struct tkm_http **out,
                 struct tkm_err *err)
{
    struct tkm_http *h = calloc(1, sizeof *h);
    if (!h)
        return tkm_err_set(err, -ENOMEM, "http client: out of memory");
    h->loop = loop;
    const char *ua = opts && opts->user_agent ? opts->user_agent : "tkm/" TKM_VERSION;
    h->user_agent = strdup(ua);
    h->multi = curl_multi_init();
    if (!h->user_agent || !h->multi) {
        if (h->multi)
            curl_multi_cleanup(h->multi);
        free(h->user_agent);
        free(h);
        return tkm_err_set(err, -ENOMEM, "http client: cannot create the curl multi handle");
    }
    curl_multi_setopt(h->multi, CURLMOPT_SOCKETFUNCTION, sock_cb);
    curl_multi_setopt(h->multi, CURLMOPT_SOCKETDATA, h);
    curl_multi_setopt(h->multi, CURLMOPT_TIMERFUNCTION, timer_fn);
    curl_multi_setopt(h->multi, CURLMOPT_TIMERDATA, h);
    curl_multi_setopt(h->multi, CURLMOPT_PIPELINING, (long)CURLPIPE_MULTIPLEX);
    uv_timer_init(loop, &h->timer);
    uv_timer_init(loop, &h->deferred);
    h->timer.data = h;
    h->deferred.data = h;
    h->open_handles = 2;
    *out = h;
    return 0;
}

/* tls-server-name: connect to the URL's host:port but verify (and send SNI
 * for) server_name, by rewriting the URL's host and pinning the address with
 * CURLOPT_CONNECT_TO. */
static int apply_server_name(struct tkm_http_req *r, const char *server_name, struct tkm_err *err)
{
    int rc = -EINVAL;
    char *host = NULL, *port = NULL, *url = NULL;
    CURLU *u = curl_url();
    if (!u)
        return tkm_err_set(err, -ENOMEM, "%s: out of memory", r->url);
    if (curl_url_set(u, CURLUPART_URL, r->url, 0) != CURLUE_OK ||
        curl_url_get(u, CURLUPART_HOST, &host, 0) != CURLUE_OK ||
        curl_url_get(u, CURLUPART_PORT, &port, CURLU_DEFAULT_PORT) != CURLUE_OK) {
        tkm_err_set(err, -EINVAL, "%s: cannot parse the URL", r->url);
        goto out;
    }
    if (curl_url_set(u, CURLUPART_HOST, server_name, 0) != CURLUE_OK ||
        curl_url_get(u, CURLUPART_URL, &url, 0) != CURLUE_OK) {
        tkm_err_set(err, -EINVAL, "%s: tls server name \"%s\" is not a valid host name", r->url,
                    server_name);
        goto out;
    }
    char line[1024];
    int n = snprintf(line, sizeof line, "%s:%s:%s:%s", server_name, port, host, port);
    if (n < 0 || (size_t)n >= sizeof line) {
        tkm_err_set(err, -EINVAL, "%s: tls server name too long", r->url);
        goto out;
    }
    struct curl_slist *l = curl_slist_append(NULL, line);
    if (!l) {
        rc = tkm_err_set(err, -ENOMEM, "%s: out of memory", r->url);
        goto out;
    }
    r->connect_to = l;
    curl_easy_setopt(r->easy, CURLOPT_CONNECT_TO, l);
    curl_easy_setopt(r->easy, CURLOPT_URL, url);
    rc = 0;
out:
    curl_free(host);
    curl_free(port);
    curl_free(url);
    curl_url_cleanup(u);
    return rc;
}

static int apply_tls(struct tkm_http_req *r, const struct tkm_http_tls *t, struct tkm_err *err)
{
    CURL *e = r->easy;
    curl_easy_setopt(e, CURLOPT_SSL_VERIFYPEER, 1L);
    curl_easy_setopt(e, CURLOPT_SSL_VERIFYHOST, 2L);
    if (!t)
        return 0;
    if (t->insecure) {
        curl_easy_setopt(e, CURLOPT_SSL_VERIFYPEER, 0L);
        curl_easy_setopt(e, CURLOPT_SSL_VERIFYHOST, 0L);
    }
    if (t->ca_pem && t->ca_pem_len) {
        struct curl_blob b = {(void *)t->ca_pem, t->ca_pem_len, CURL_BLOB_COPY};
        if (curl_easy_setopt(e, CURLOPT_CAINFO_BLOB, &b) != CURLE_OK)
            return tkm_err_set(err, -ENOTSUP, "%s: libcurl cannot take a CA from memory", r->url);
    } else if (t->ca_file) {
        curl_easy_setopt(e, CURLOPT_CAINFO, t->ca_file);
        /* curl caches the parsed CA store (24 h by default); re-read a CA
         * file at most a minute after it changes (rotated in-cluster CA). */
        curl_easy_setopt(e, CURLOPT_CA_CACHE_TIMEOUT, 60L);
    }
    if (t->cert_pem && t->cert_pem_len) {
        struct curl_blob b = {(void *)t->cert_pem, t->cert_pem_len, CURL_BLOB_COPY};
        curl_easy_setopt(e, CURLOPT_SSLCERT_BLOB, &b);
        curl_easy_setopt(e, CURLOPT_SSLCERTTYPE, "PEM");
    } else if (t->cert_file) {
        curl_easy_setopt(e, CURLOPT_SSLCERT, t->cert_file);
    }
    if (t->key_pem && t->key_pem_len) {
        struct curl_blob b = {(void *)t->key_pem, t->key_pem_len, CURL_BLOB_COPY};
        curl_easy_setopt(e, CURLOPT_SSLKEY_BLOB, &b);
        curl_easy_setopt(e, CURLOPT_SSLKEYTYPE, "PEM");
    } else if (t->key_file) {
        curl_easy_setopt(e, CURLOPT_SSLKEY, t->key_file);
    }
    if (t->server_name && *t->server_name)
        return apply_server_name(r, t->server_name, err);
    return 0;
}

static int apply_method_body(struct tkm_http_req *r, const struct tkm_http_req_opts *o)
{
    CURL *e = r->easy;
    const char *m = o->method ? o->method : (o->body ? "POST" : "GET");
    if (o->body) {
        curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)o->body_len);
        if (curl_easy_setopt(e, CURLOPT_COPYPOSTFIELDS, o->body) != CURLE_OK)
            return -ENOMEM;
    }
    if (strcmp(m, "GET") == 0) {
        if (!o->body)
            curl_easy_setopt(e, CURLOPT_HTTPGET, 1L);
        else
            curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, m);
    } else if (strcmp(m, "HEAD") == 0) {
        curl_easy_setopt(e, CURLOPT_NOBODY, 1L);
    } else if (strcmp(m, "POST") == 0) {
        if (!o->body) {
            curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)0);
            curl_easy_setopt(e, CURLOPT_COPYPOSTFIELDS, "");
        }
    } else {
        curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, m);
    }
    return 0;
}

static int apply_headers(struct tkm_http_req *r, const struct tkm_http_req_opts *o)
{
    struct curl_slist *l = NULL, *n;
    /* No "Expect: 100-continue" round trip for large bodies. */
    if (!(l = curl_slist_append(NULL, "Expect:")))
        return -ENOMEM;
    for (const char *const *hp = o->headers; hp && *hp; hp++) {
        if (!(n = curl_slist_append(l, *hp))) {
            curl_slist_free_all(l);
            return -ENOMEM;
        }
        l = n;
    }
    r->hdrs = l;
    curl_easy_setopt(r->easy, CURLOPT_HTTPHEADER, l);
    return 0;
}

/* The idle limit (curl's progress callback, at least once a second while
 * the low-speed check runs): non-zero stops the transfer as a stall. */
static int idle_cb(void *p, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal,
                   curl_off_t ulnow)
{
    struct tkm_http_req *r = p;
    uint64_t now = tkm_now_ms();
    (void)dltotal;
    (void)ultotal;
    if (dlnow != r->seen_dl || ulnow != r->seen_ul) {
        r->seen_dl = dlnow;
        r->seen_ul = ulnow;
        r->last_byte_ms = now;
        return 0;
    }
    if (now - r->last_byte_ms < r->idle_ms)
        return 0;
    r->stalled = 1;
    r->abort_code = -ETIMEDOUT;
    return 1;
}

static void apply_limits(struct tkm_http_req *r, const struct tkm_http_req_opts *o)
{
    CURL *e = r->easy;
    r->timeout_ms = o->timeout_ms;
    r->idle_ms = o->idle_timeout_ms;
    curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, (long)o->timeout_ms);
    curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, HTTP_CONNECT_MS);
    curl_easy_setopt(e, CURLOPT_MAX_RECV_SPEED_LARGE, (curl_off_t)o->max_recv_bps);
    if (o->idle_timeout_ms) {
        /* curl's low-speed check (a moving average: it lags a stall by
         * seconds) keeps a 1 s tick going; idle_cb stops the transfer
         * when no byte has moved for exactly the idle limit. */
        long s = (long)((o->idle_timeout_ms + 999) / 1000);
        curl_easy_setopt(e, CURLOPT_LOW_SPEED_LIMIT, 1L);
        curl_easy_setopt(e, CURLOPT_LOW_SPEED_TIME, s);
        r->last_byte_ms = tkm_now_ms();
        curl_easy_setopt(e, CURLOPT_XFERINFOFUNCTION, idle_cb);
        curl_easy_setopt(e, CURLOPT_XFERINFODATA, r);
        curl_easy_setopt(e, CURLOPT_NOPROGRESS, 0L);
    }
    curl_easy_setopt(e, CURLOPT_TCP_KEEPALIVE, 1L);
    curl_easy_setopt(e, CURLOPT_TCP_KEEPIDLE, 30L);
    curl_easy_setopt(e, CURLOPT_TCP_KEEPINTVL, 15L);
    if (o->follow_redirects) {
        curl_easy_setopt(e, CURLOPT_FOLLOWLOCATION, 1L);
        curl_easy_setopt(e, CURLOPT_MAXREDIRS, HTTP_MAX_REDIRECTS);
        curl_easy_setopt(e, CURLOPT_UNRESTRICTED_AUTH, 0L);
        /* https never downgrades to http; plain http (tests) may go either way. */
        curl_easy_setopt(e, CURLOPT_REDIR_PROTOCOLS_STR,
                         strncasecmp(o->url, "https:", 6) == 0 ? "https" : "http,https");
    }
    if (o->compressed)
        curl_easy_setopt(e, CURLOPT_ACCEPT_ENCODING, "");
}

int tkm_http_start(struct tkm_http *h, const struct tkm_http_req_opts *o, struct tkm_http_req **out,
                   struct tkm_err *err)
{
    int rc;
    if (!o || !o->url || !o->done_cb)
        return tkm_err_set(err, -EINVAL, "http request: url and done_cb are required");
    if (strncasecmp(o->url, "https://", 8) != 0 && strncasecmp(o->url, "http://", 7) != 0)
        return tkm_err_set(err, -EINVAL, "%s: only http:// and https:// URLs are supported",
                           o->url);
    if (h->closing)
        return tkm_err_set(err, -ESHUTDOWN, "%s: the http client is closing", o->url);
    struct tkm_http_req *r = calloc(1, sizeof *r);
    if (!r)
        return tkm_err_set(err, -ENOMEM, "%s: out of memory", o->url);
    r->h = h;
    tkm_buf_init(&r->resp.body, o->max_body ? o->max_body : HTTP_DEFAULT_MAX_BODY);
    tkm_buf_init(&r->resp.headers, HTTP_MAX_HEADERS);
    r->url = strdup(o->url);
    r->easy = curl_easy_init();
    if (!r->url || !r->easy) {
        rc = tkm_err_set(err, -ENOMEM, "%s: out of memory", o->url);
        goto fail;
    }
    r->resp.url = r->url;
    r->data_cb = o->data_cb;
    r->done_cb = o->done_cb;
    r->data = o->data;
    CURL *e = r->easy;
    curl_easy_setopt(e, CURLOPT_URL, r->url);
    curl_easy_setopt(e, CURLOPT_PRIVATE, (char *)r);
    curl_easy_setopt(e, CURLOPT_ERRORBUFFER, r->errbuf);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(e, CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_2TLS);
    /* Wait for a connection that may multiplex: only over TLS, where ALPN
     * can give HTTP/2. On plain http (HTTP/1.1 only here) curl would hold a
     * second transfer to the same host until the first one ends. */
    curl_easy_setopt(e, CURLOPT_PIPEWAIT, strncasecmp(o->url, "https://", 8) == 0 ? 1L : 0L);
    curl_easy_setopt(e, CURLOPT_USERAGENT, h->user_agent);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, write_cb);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, r);
    curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, header_cb);
    curl_easy_setopt(e, CURLOPT_HEADERDATA, r);
    apply_limits(r, o);
    if ((rc = apply_method_body(r, o)) || (rc = apply_headers(r, o))) {
        tkm_err_set(err, rc, "%s: out of memory", o->url);
        goto fail;
    }
    if ((rc = apply_tls(r, o->tls, err)))
        goto fail;
    if (o->resolve && *o->resolve) {
        if (!(r->resolve = curl_slist_append(NULL, o->resolve))) {
            rc = tkm_err_set(err, -ENOMEM, "%s: out of memory", o->url);
            goto fail;
        }
        curl_easy_setopt(e, CURLOPT_RESOLVE, r->resolve);
    }
    CURLMcode mc = curl_multi_add_handle(h->multi, e);
    if (mc != CURLM_OK) {
        rc = tkm_err_set(err, -EIO, "%s: %s", o->url, curl_multi_strerror(mc));
        goto fail;
    }
    r->next = h->reqs;
    if (h->reqs)
        h->reqs->prev = r;
    h->reqs = r;
    h->inflight++;
    if (out)
        *out = r;
    return 0;
fail:
    req_free(r);
    return rc;
}

void tkm_http_cancel(struct tkm_http_req *req)
{
    if (!req || req->cancelled)
        return;
    req->cancelled = 1;
    uv_timer_start(&req->h->deferred, on_deferred, 0, 0);
}

void tkm_http_close(struct tkm_http *h, void (*closed_cb)(void *data), void *data)
{
    if (!h || TKM_BUG(h->closing)) /* a second close would wait forever */
        return;
    h->closing = 1;
    h->closed_cb = closed_cb;
    h->closed_data = data;
    for (struct tkm_http_req *r = h->reqs; r; r = r->next)
        r->cancelled = 1;
    uv_timer_start(&h->deferred, on_deferred, 0, 0);
}

size_t tkm_http_inflight(const struct tkm_http *h)
{
    return h ? h->inflight : 0;
}

uv_loop_t *tkm_http_loop(const struct tkm_http *h)
{
    return h->loop;
}

int tkm_http_resp_header(const struct tkm_http_resp *resp, const char *name, char *out, size_t n)
{
    size_t nl = strlen(name);
    const char *p = resp->headers.data, *end = p + resp->headers.len;
    const char *val = NULL;
    size_t vlen = 0;
    while (p < end) {
        const char *eol = memchr(p, '\n', (size_t)(end - p));
        const char *le = eol ? eol : end;
        if ((size_t)(le - p) > nl && strncasecmp(p, name, nl) == 0 && p[nl] == ':') {
            const char *v = p + nl + 1, *ve = le;
            while (v < ve && (*v == ' ' || *v == '\t'))
                v++;
            while (ve > v && (ve[-1] == '\r' || ve[-1] == ' ' || ve[-1] == '\t'))
                ve--;
            val = v;
            vlen = (size_t)(ve - v);
        }
        p = eol ? eol + 1 : end;
    }
    if (!val)
        return -ENOENT;
    if (n) {
        size_t c = vlen < n - 1 ? vlen : n - 1;
        memcpy(out, val, c);
        out[c] = '\0';
    }
    return vlen > (size_t)0x7fffffff ? 0x7fffffff : (int)vlen;
}

long tkm_http_retry_after(const struct tkm_http_resp *resp, long max_s)
{
    char v[128];
    if (tkm_http_resp_header(resp, "Retry-After", v, sizeof v) < 0 || !v[0])
        return -1;
    int64_t secs;
    if (tkm_parse_i64(v, 0, INT64_MAX, &secs) == 0)
        return secs > max_s ? max_s : (long)secs;
    time_t when = curl_getdate(v, NULL);
    if (when == (time_t)-1)
        return -1;
    time_t now = time(NULL);
    if (when <= now)
        return 0;
    return (long)(when - now) > max_s ? max_s : (long)(when - now);
}

/* ---- responses ----------------------------------------------------------- */

void tkm_http_resp_init(struct tkm_http_resp *resp)
{
    memset(resp, 0, sizeof *resp);
    tkm_buf_init(&resp->body, HTTP_DEFAULT_MAX_BODY);
    tkm_buf_init(&resp->headers, HTTP_MAX_HEADERS);
}

void tkm_http_resp_release(struct tkm_http_resp *resp)
{
    if (!resp)
        return;
    tkm_buf_release(&resp->body);
    tkm_buf_release(&resp->headers);
    tkm_http_resp_init(resp);
}
