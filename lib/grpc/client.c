/*
 * client.c - the unary gRPC client over a unix socket. See <tkm/grpc.h>.
 *
 * How it fits together:
 *   - a call is always on exactly one list: the client's waiting list (no
 *     connection ready yet), its connection's list (a stream is open), or the
 *     client's done list (its outcome is set, its cb not yet called);
 *   - finished calls are delivered by the "deferred" timer (0 ms), so cb never
 *     runs inside tkm_grpc_client_call/_close nor inside nghttp2;
 *   - the client keeps one current connection (struct cli_conn); one that
 *     failed, closed or got GOAWAY stops being current, and the next call
 *     opens a new one. Old ones close on their own;
 *   - one timer enforces every call's deadline.
 */
#include "grpc-int.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tkm/log.h>
#include <tkm/util.h>

struct cli_conn {
    struct tkm__h2conn h2; /* first */
    struct tkm_grpc_client *cli;
    struct cli_conn *prev, *next;
    uv_connect_t creq;
    int ready;  /* connected, session started */
    int goaway; /* no new streams */
    struct tkm_grpc_client_call *calls;
};

struct tkm_grpc_client_call {
    struct tkm_grpc_client *cli;
    struct tkm_grpc_client_call **head; /* the list the call is on */
    struct tkm_grpc_client_call *prev, *next;
    struct cli_conn *conn; /* while a stream is open */
    int32_t stream_id;
    char *method;
    struct tkm_buf req; /* framed request */
    size_t req_off;
    struct tkm_buf resp;
    uint64_t deadline, timeout_ms;
    int http_status, grpc_status, too_big;
    struct tkm_buf gmsg; /* decoded grpc-message */
    int code;            /* the outcome, once done */
    struct tkm_buf msg;
    const char *out;
    size_t out_len;
    tkm_grpc_client_cb cb;
    void *data;
};

struct tkm_grpc_client {
    uv_loop_t *loop;
    char *path;
    nghttp2_session_callbacks *cbs;
    struct cli_conn *conns, *cur;
    struct tkm_grpc_client_call *waiting, *done;
    uv_timer_t timer, deferred;
    int closing, deferred_closed;
    unsigned open_handles;
    void (*closed_cb)(void *data);
    void *closed_data;
};

/* ---- call lists and outcomes ---------------------------------------------- */

static void list_add(struct tkm_grpc_client_call **head, struct tkm_grpc_client_call *call)
{
    call->head = head;
    call->prev = NULL;
    call->next = *head;
    if (*head)
        (*head)->prev = call;
    *head = call;
}

static void list_del(struct tkm_grpc_client_call *call)
{
    if (!call->head)
        return;
    if (call->prev)
        call->prev->next = call->next;
    else
        *call->head = call->next;
    if (call->next)
        call->next->prev = call->prev;
    call->head = NULL;
    call->prev = call->next = NULL;
}

static void call_free(struct tkm_grpc_client_call *call)
{
    free(call->method);
    tkm_buf_release(&call->req);
    tkm_buf_release(&call->resp);
    tkm_buf_release(&call->gmsg);
    tkm_buf_release(&call->msg);
    free(call);
}

static void deferred_cb(uv_timer_t *t);

/* Sets the outcome, resets the stream if one is open, queues the cb. */
static void call_done(struct tkm_grpc_client_call *call, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void call_done(struct tkm_grpc_client_call *call, int code, const char *fmt, ...)
{
    struct tkm_grpc_client *cli = call->cli;
    va_list ap;
    if (call->head == &cli->done)
        return;
    list_del(call);
    if (call->conn && call->conn->h2.ng) {
        nghttp2_session_set_stream_user_data(call->conn->h2.ng, call->stream_id, NULL);
        nghttp2_submit_rst_stream(call->conn->h2.ng, NGHTTP2_FLAG_NONE, call->stream_id,
                                  NGHTTP2_CANCEL);
        tkm__h2conn_flush(&call->conn->h2);
    }
    call->conn = NULL;
    call->code = code;
    tkm_buf_reset(&call->msg);
    va_start(ap, fmt);
    if (tkm_buf_vprintf(&call->msg, fmt, ap) < 0)
        tkm_buf_reset(&call->msg);
    va_end(ap);
    list_add(&cli->done, call);
    if (!cli->deferred_closed)
        uv_timer_start(&cli->deferred, deferred_cb, 0, 0);
}

/* The gRPC code for a non-200 HTTP status (gRPC's HTTP-to-gRPC mapping). */
static int code_from_http(int status)
{
    static const int map[][2] = {{400, TKM_GRPC_INTERNAL},          {401, TKM_GRPC_UNAUTHENTICATED},
                                 {403, TKM_GRPC_PERMISSION_DENIED}, {404, TKM_GRPC_UNIMPLEMENTED},
                                 {429, TKM_GRPC_UNAVAILABLE},       {502, TKM_GRPC_UNAVAILABLE},
                                 {503, TKM_GRPC_UNAVAILABLE},       {504, TKM_GRPC_UNAVAILABLE}};
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
        if (map[i][0] == status)
            return map[i][1];
    return TKM_GRPC_UNKNOWN;
}

/* The gRPC code for an HTTP/2 RST_STREAM error code. */
static int code_from_h2(uint32_t e)
{
    static const int map[] = {[NGHTTP2_REFUSED_STREAM] = TKM_GRPC_UNAVAILABLE,
                              [NGHTTP2_CANCEL] = TKM_GRPC_CANCELLED,
                              [NGHTTP2_ENHANCE_YOUR_CALM] = TKM_GRPC_RESOURCE_EXHAUSTED,
                              [NGHTTP2_INADEQUATE_SECURITY] = TKM_GRPC_PERMISSION_DENIED};
    return e < sizeof map / sizeof map[0] && map[e] ? map[e] : TKM_GRPC_INTERNAL;
}

/* The stream ended (error_code from RST_STREAM, or 0): decide the outcome. */
static void call_stream_ended(struct tkm_grpc_client_call *call, uint32_t error_code)
{
    const char *path = call->cli->path, *why = NULL;
    call->conn = NULL; /* the stream is gone: nothing to reset */
    if (call->too_big) {
        call_done(call, TKM_GRPC_RESOURCE_EXHAUSTED,
                  "%s: response larger than the maximum message size (%u bytes)", call->method,
                  TKM_GRPC_DEFAULT_MAX_MESSAGE);
    } else if (call->grpc_status > 0) {
        call_done(call, call->grpc_status, "%s", call->gmsg.data);
    } else if (call->grpc_status == 0) {
        int code = tkm__grpc_unframe(&call->resp, TKM_GRPC_DEFAULT_MAX_MESSAGE, &call->out,
                                     &call->out_len, &why);
        if (code != TKM_GRPC_OK)
            call_done(call, code, "%s: bad response from unix:%s: %s", call->method, path, why);
        else
            call_done(call, TKM_GRPC_OK, "%s", "");
    } else if (call->http_status && call->http_status != 200) {
        call_done(call, code_from_http(call->http_status), "%s: HTTP status %d from unix:%s",
                  call->method, call->http_status, path);
    } else if (error_code) {
        call_done(call, code_from_h2(error_code), "%s: stream reset by unix:%s (HTTP/2 %s)",
                  call->method, path, nghttp2_http2_strerror(error_code));
    } else {
        call_done(call, TKM_GRPC_INTERNAL, "%s: unix:%s ended the call without a grpc-status",
                  call->method, path);
    }
}

/* ---- deadlines and delivery ------------------------------------------- */

static void timer_cb(uv_timer_t *t);

static uint64_t earliest(struct tkm_grpc_client_call *l, uint64_t next)
{
    for (; l; l = l->next)
        if (l->deadline && (!next || l->deadline < next))
            next = l->deadline;
    return next;
}

static void timer_arm(struct tkm_grpc_client *cli)
{
    uint64_t now = uv_now(cli->loop), next = earliest(cli->waiting, 0);
    if (cli->closing)
        return;
    for (struct cli_conn *c = cli->conns; c; c = c->next)
        next = earliest(c->calls, next);
    if (!next)
        uv_timer_stop(&cli->timer);
    else
        uv_timer_start(&cli->timer, timer_cb, next > now ? next - now : 0, 0);
}

static void expire(struct tkm_grpc_client_call *l, uint64_t now)
{
    struct tkm_grpc_client_call *next;
    for (; l; l = next) {
        next = l->next;
        if (l->deadline && l->deadline <= now)
            call_done(l, TKM_GRPC_DEADLINE_EXCEEDED,
                      "%s: deadline exceeded (%llu ms) waiting for unix:%s", l->method,
                      (unsigned long long)l->timeout_ms, l->cli->path);
    }
}

static void timer_cb(uv_timer_t *t)
{
    struct tkm_grpc_client *cli = t->data;
    uint64_t now = uv_now(cli->loop);
    expire(cli->waiting, now);
    for (struct cli_conn *c = cli->conns; c; c = c->next) {
        c->h2.hold++;
        expire(c->calls, now);
        c->h2.hold--;
        tkm__h2conn_flush(&c->h2);
    }
    timer_arm(cli);
}

static void cli_handle_closed(struct tkm_grpc_client *cli);

static void cli_uv_closed(uv_handle_t *h)
{
    cli_handle_closed(h->data);
}

static void deferred_cb(uv_timer_t *t)
{
    struct tkm_grpc_client *cli = t->data;
    struct tkm_grpc_client_call *call;
    while ((call = cli->done)) {
        list_del(call);
        call->cb(call->code, call->msg.data, call->code == TKM_GRPC_OK ? call->out : NULL,
                 call->code == TKM_GRPC_OK ? call->out_len : 0, call->data);
        call_free(call);
    }
    if (cli->closing && !cli->deferred_closed) {
        cli->deferred_closed = 1;
        uv_close((uv_handle_t *)&cli->deferred, cli_uv_closed);
        return;
    }
    timer_arm(cli); /* an idle client keeps no timer running */
}

/* ---- nghttp2 callbacks ---------------------------------------------------- */

static int on_header(nghttp2_session *ng, const nghttp2_frame *f, const uint8_t *name, size_t nl,
                     const uint8_t *value, size_t vl, uint8_t flags, void *ud)
{
    struct tkm_grpc_client_call *call = nghttp2_session_get_stream_user_data(ng, f->hd.stream_id);
    char num[16];
    (void)flags;
    (void)ud;
    if (!call || f->hd.type != NGHTTP2_HEADERS)
        return 0;
    if ((nl == 7 && memcmp(name, ":status", 7) == 0) ||
        (nl == 11 && memcmp(name, "grpc-status", 11) == 0)) {
        int64_t v = -1;
        snprintf(num, sizeof num, "%.*s", (int)(vl < 15 ? vl : 15), (const char *)value);
        if (tkm_parse_i64(num, 0, 999, &v) < 0)
            v = TKM_GRPC_UNKNOWN;
        if (name[0] == ':')
            call->http_status = (int)v;
        else
            call->grpc_status = v <= TKM_GRPC_UNAUTHENTICATED ? (int)v : TKM_GRPC_UNKNOWN;
    } else if (nl == 12 && memcmp(name, "grpc-message", 12) == 0) {
        tkm_buf_reset(&call->gmsg);
        if (tkm__grpc_pct_decode((const char *)value, vl, &call->gmsg) < 0)
            tkm_buf_reset(&call->gmsg);
    }
    return 0;
}

static int on_data_chunk(nghttp2_session *ng, uint8_t flags, int32_t sid, const uint8_t *data,
                         size_t len, void *ud)
{
    struct tkm_grpc_client_call *call = nghttp2_session_get_stream_user_data(ng, sid);
    (void)flags;
    (void)ud;
    if (!call || call->too_big)
        return 0;
    if (tkm_buf_append(&call->resp, data, len) < 0) {
        call->too_big = 1;
        nghttp2_submit_rst_stream(ng, NGHTTP2_FLAG_NONE, sid, NGHTTP2_CANCEL);
    }
    return 0;
}

static int on_stream_close(nghttp2_session *ng, int32_t sid, uint32_t code, void *ud)
{
    struct tkm_grpc_client_call *call = nghttp2_session_get_stream_user_data(ng, sid);
    (void)ud;
    if (call)
        call_stream_ended(call, code);
    return 0;
}

static int on_frame_recv(nghttp2_session *ng, const nghttp2_frame *f, void *ud)
{
    struct cli_conn *c = ud;
    (void)ng;
    if (f->hd.type == NGHTTP2_GOAWAY) {
        c->goaway = 1;
        if (c->cli->cur == c)
            c->cli->cur = NULL;
    }
    return 0;
}

/* The source is the stream's user data, not a pointer kept by nghttp2: a
 * call finished early (deadline, client closed) has none and sends nothing more. */
static ssize_t req_read(nghttp2_session *ng, int32_t sid, uint8_t *buf, size_t len, uint32_t *flags,
                        nghttp2_data_source *src, void *ud)
{
    struct tkm_grpc_client_call *call = nghttp2_session_get_stream_user_data(ng, sid);
    size_t n;
    (void)src;
    (void)ud;
    if (!call) {
        *flags |= NGHTTP2_DATA_FLAG_EOF;
        return 0;
    }
    n = call->req.len - call->req_off;
    if (n > len)
        n = len;
    memcpy(buf, call->req.data + call->req_off, n);
    call->req_off += n;
    if (call->req_off == call->req.len)
        *flags |= NGHTTP2_DATA_FLAG_EOF;
    return (ssize_t)n;
}

/* ---- streams and connections ------------------------------------------- */

static int call_submit(struct cli_conn *c, struct tkm_grpc_client_call *call)
{
    struct tkm_grpc_client *cli = c->cli;
    nghttp2_data_provider prd = {.source.ptr = c, .read_callback = req_read};
    nghttp2_nv nv[8];
    char tmo[24];
    size_t n = 0;
    int32_t sid;
    nv[n++] = (nghttp2_nv)TKM__NV(":method", "POST", 4);
    nv[n++] = (nghttp2_nv)TKM__NV(":scheme", "http", 4);
    nv[n++] = (nghttp2_nv)TKM__NV(":path", call->method, strlen(call->method));
    nv[n++] = (nghttp2_nv)TKM__NV(":authority", "localhost", 9);
    nv[n++] = (nghttp2_nv)TKM__NV("content-type", "application/grpc", 16);
    nv[n++] = (nghttp2_nv)TKM__NV("te", "trailers", 8);
    nv[n++] = (nghttp2_nv)TKM__NV("user-agent", "tkm-grpc/" TKM_VERSION,
                                  sizeof("tkm-grpc/" TKM_VERSION) - 1);
    if (call->deadline) {
        uint64_t now = uv_now(cli->loop);
        tkm__grpc_timeout_format(call->deadline > now ? call->deadline - now : 1, tmo, sizeof tmo);
        nv[n++] = (nghttp2_nv)TKM__NV("grpc-timeout", tmo, strlen(tmo));
    }
    sid = nghttp2_submit_request(c->h2.ng, NULL, nv, n, &prd, call);
    if (sid < 0) {
        c->goaway = 1; /* stream ids exhausted or GOAWAY: use a new connection */
        if (cli->cur == c)
            cli->cur = NULL;
        return sid;
    }
    call->stream_id = sid;
    call->conn = c;
    list_add(&c->calls, call);
    return 0;
}

static void submit_waiting(struct cli_conn *c)
{
    struct tkm_grpc_client *cli = c->cli;
    struct tkm_grpc_client_call *call;
    while ((call = cli->waiting)) {
        int rc;
        list_del(call);
        rc = call_submit(c, call);
        if (rc < 0)
            call_done(call, TKM_GRPC_UNAVAILABLE, "%s: cannot start a stream on unix:%s: %s",
                      call->method, cli->path, nghttp2_strerror(rc));
    }
    tkm__h2conn_flush(&c->h2);
}

static void conn_closed(struct tkm__h2conn *h2)
{
    struct cli_conn *c = (struct cli_conn *)h2;
    struct tkm_grpc_client *cli = c->cli;
    if (h2->ng)
        nghttp2_session_del(h2->ng);
    h2->ng = NULL;
    while (c->calls) {
        struct tkm_grpc_client_call *call = c->calls;
        call->conn = NULL;
        call_done(call, TKM_GRPC_UNAVAILABLE, "%s: connection to unix:%s lost", call->method,
                  cli->path);
    }
    if (cli->cur == c)
        cli->cur = NULL;
    if (c->prev)
        c->prev->next = c->next;
    else
        cli->conns = c->next;
    if (c->next)
        c->next->prev = c->prev;
    free(c);
    cli_handle_closed(cli);
}

static int conn_session(struct cli_conn *c)
{
    nghttp2_settings_entry iv[] = {
        {NGHTTP2_SETTINGS_ENABLE_PUSH, 0},
        {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, TKM__GRPC_WINDOW},
    };
    if (nghttp2_session_client_new(&c->h2.ng, c->cli->cbs, c) != 0)
        return -ENOMEM;
    if (nghttp2_submit_settings(c->h2.ng, NGHTTP2_FLAG_NONE, iv, 2) != 0 ||
        nghttp2_session_set_local_window_size(c->h2.ng, NGHTTP2_FLAG_NONE, 0,
                                              4 * TKM__GRPC_WINDOW) != 0)
        return -EIO;
    return 0;
}

static void connect_cb(uv_connect_t *req, int status)
{
    struct cli_conn *c = req->data;
    struct tkm_grpc_client *cli = c->cli;
    int rc = status;
    if (rc == 0 && !c->h2.closing) {
        rc = conn_session(c);
        if (rc == 0)
            rc = tkm__h2conn_start(&c->h2);
    }
    if (c->h2.closing)
        return;
    if (rc < 0) {
        struct tkm_grpc_client_call *call;
        while (cli->cur == c && (call = cli->waiting))
            call_done(call, TKM_GRPC_UNAVAILABLE, "%s: cannot connect to unix:%s: %s", call->method,
                      cli->path, status < 0 ? uv_strerror(status) : strerror(-rc));
        tkm__h2conn_close(&c->h2);
        if (cli->cur == c)
            cli->cur = NULL;
        return;
    }
    c->ready = 1;
    if (cli->cur == c)
        submit_waiting(c);
    else
        tkm__h2conn_flush(&c->h2);
}

/* Makes sure a current connection exists (connecting or ready). */
static int conn_ensure(struct tkm_grpc_client *cli)
{
    struct cli_conn *c;
    if (cli->cur && !cli->cur->goaway && !cli->cur->h2.closing)
        return 0;
    c = calloc(1, sizeof *c);
    if (!c)
        return -ENOMEM;
    tkm__h2conn_init(&c->h2, cli->loop, conn_closed);
    c->cli = cli;
    c->next = cli->conns;
    if (cli->conns)
        cli->conns->prev = c;
    cli->conns = c;
    cli->cur = c;
    cli->open_handles++;
    c->creq.data = c;
    uv_pipe_connect(&c->creq, &c->h2.pipe, cli->path, connect_cb);
    return 0;
}

/* ---- public API --------------------------------------------------------------- */

static void cli_free(struct tkm_grpc_client *cli)
{
    if (cli->cbs)
        nghttp2_session_callbacks_del(cli->cbs);
    free(cli->path);
    free(cli);
}

static void cli_handle_closed(struct tkm_grpc_client *cli)
{
    void (*cb)(void *);
    void *data;
    if (--cli->open_handles > 0)
        return;
    cb = cli->closed_cb;
    data = cli->closed_data;
    cli_free(cli);
    if (cb)
        cb(data);
}

int tkm_grpc_client_new(uv_loop_t *loop, const char *socket_path, struct tkm_grpc_client **out,
                        struct tkm_err *err)
{
    struct tkm_grpc_client *cli;
    *out = NULL;
    if (!socket_path || !*socket_path || strlen(socket_path) > 107)
        return tkm_err_set(err, -EINVAL, "grpc: client: socket path %s is empty or too long",
                           socket_path ? socket_path : "(null)");
    cli = calloc(1, sizeof *cli);
    if (!cli || !(cli->path = strdup(socket_path)) ||
        nghttp2_session_callbacks_new(&cli->cbs) != 0) {
        if (cli)
            cli_free(cli);
        return tkm_err_set(err, -ENOMEM, "grpc: out of memory");
    }
    tkm__grpc_ignore_sigpipe();
    nghttp2_session_callbacks_set_on_header_callback(cli->cbs, on_header);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cli->cbs, on_data_chunk);
    nghttp2_session_callbacks_set_on_stream_close_callback(cli->cbs, on_stream_close);
    nghttp2_session_callbacks_set_on_frame_recv_callback(cli->cbs, on_frame_recv);
    cli->loop = loop;
    uv_timer_init(loop, &cli->timer);
    uv_timer_init(loop, &cli->deferred);
    cli->timer.data = cli->deferred.data = cli;
    cli->open_handles = 2;
    *out = cli;
    return 0;
}

int tkm_grpc_client_call(struct tkm_grpc_client *cli, const char *method, const void *req,
                         size_t len, uint64_t timeout_ms, tkm_grpc_client_cb cb, void *data,
                         struct tkm_err *err)
{
    struct tkm_grpc_client_call *call = NULL;
    unsigned char hdr[5];
    int rc;
    if (cli->closing)
        return tkm_err_set(err, -ESHUTDOWN, "grpc: %s: the client is closing", cli->path);
    if (!cb || !tkm__grpc_method_ok(method))
        return tkm_err_set(err, -EINVAL, "grpc: method %s is not of the form /pkg.Service/Method",
                           method ? method : "(null)");
    if (len > TKM_GRPC_DEFAULT_MAX_MESSAGE)
        return tkm_err_set(err, -E2BIG, "grpc: %s: request of %zu bytes over the maximum of %u",
                           method, len, TKM_GRPC_DEFAULT_MAX_MESSAGE);
    call = calloc(1, sizeof *call);
    if (!call || !(call->method = strdup(method))) {
        rc = tkm_err_set(err, -ENOMEM, "grpc: out of memory");
        goto fail;
    }
    call->cli = cli;
    call->grpc_status = -1;
    call->cb = cb;
    call->data = data;
    tkm_buf_init(&call->req, len + 5);
    tkm_buf_init(&call->resp, TKM_GRPC_DEFAULT_MAX_MESSAGE + 5);
    tkm_buf_init(&call->gmsg, 8192);
    tkm_buf_init(&call->msg, 8192 + 512);
    tkm__grpc_frame_prefix(hdr, len);
    if (tkm_buf_append(&call->req, hdr, 5) < 0 || (len && tkm_buf_append(&call->req, req, len)) ||
        conn_ensure(cli) < 0) {
        rc = tkm_err_set(err, -ENOMEM, "grpc: out of memory");
        goto fail;
    }
    if (timeout_ms) {
        call->timeout_ms = timeout_ms;
        call->deadline = uv_now(cli->loop) + timeout_ms;
    }
    list_add(&cli->waiting, call);
    if (cli->cur->ready)
        submit_waiting(cli->cur);
    timer_arm(cli);
    return 0;
fail:
    if (call)
        call_free(call);
    return rc;
}

void tkm_grpc_client_close(struct tkm_grpc_client *cli, void (*closed_cb)(void *data), void *data)
{
    if (!cli || cli->closing)
        return;
    cli->closing = 1;
    cli->closed_cb = closed_cb;
    cli->closed_data = data;
    while (cli->waiting)
        call_done(cli->waiting, TKM_GRPC_CANCELLED, "%s: client closed", cli->waiting->method);
    for (struct cli_conn *c = cli->conns; c; c = c->next) {
        while (c->calls)
            call_done(c->calls, TKM_GRPC_CANCELLED, "%s: client closed", c->calls->method);
        tkm__h2conn_close(&c->h2);
    }
    uv_close((uv_handle_t *)&cli->timer, cli_uv_closed);
    uv_timer_start(&cli->deferred, deferred_cb, 0, 0);
}
