/*
 * server.c - the unary gRPC server over a unix socket. See <tkm/grpc.h>.
 *
 * How it fits together:
 *   - a uv_pipe_t listener; every accepted connection (struct srv_conn) is
 *     checked with SO_PEERCRED, then gets an nghttp2 server session pumped by
 *     the shared tkm__h2conn (common.c);
 *   - every request stream gets a struct tkm_grpc_call, created when its
 *     HEADERS begin. Headers are checked when they end (method, content-type,
 *     registered path, grpc-timeout); the body is collected and the handler
 *     is called when the client half-closes;
 *   - a call has two owners: the stream (until nghttp2 closes it or the
 *     connection goes) and the handler (from dispatch until reply/fail). It is
 *     freed when both have let go, so a handler may answer after its client
 *     left, and the response bytes live as long as nghttp2 sends them;
 *   - one timer for every deadline: it fires at the earliest one and scans;
 *   - a connection cap (one over it is accepted and closed at once, counted)
 *     and an idle timer: a connection with no call open and no frame for
 *     idle_ms, at two scans in a row with no frame between, gets GOAWAY and
 *     is closed (two, so that a poll phase runs between them: after a
 *     stalled iteration, frames already waiting in the socket are read
 *     before the connection is judged idle).
 */
#include "grpc-int.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <tkm/log.h>

#define SRV_GRACE_MS      1000
#define SRV_MAX_PATH      1024
#define SRV_MAX_UIDS      64
#define SRV_DEFAULT_MD    0600
#define SRV_IDLE_TICK_MAX 30000 /* the idle scan runs every idle/4, at most this */
#define SRV_REFUSE_LOG_MS 10000 /* at most one warning about refusals this often */

struct method_reg {
    char *name;
    tkm_grpc_handler fn;
    void *data;
    struct method_reg *next;
};

struct srv_conn {
    struct tkm__h2conn h2; /* first */
    struct tkm_grpc_server *srv;
    struct srv_conn *prev, *next;
    struct tkm_grpc_call *calls; /* streams open on this connection */
    struct tkm_grpc_peer peer;
    uint64_t last_active; /* uv_now() of the last frame received or call closed */
    int refused;          /* over the cap: closing, not counted as served */
    uint64_t idle_mark;   /* last_active + 1 when an idle scan last found it idle */
};

struct tkm_grpc_call {
    struct srv_conn *conn; /* NULL once the stream is gone */
    struct tkm_grpc_call *prev, *next;
    int32_t stream_id;
    char *method;
    const struct method_reg *reg;
    size_t md_len; /* request metadata counted as "name\0value\0" pairs */
    struct tkm_buf body;
    const char *req;
    size_t req_len;
    struct tkm_grpc_peer peer;
    uint64_t deadline;
    int post, ct_ok, bad_timeout, md_full;
    int held;      /* the handler owns a reference */
    int finishing; /* inside reply/fail: no cancel callback any more */
    int answered;  /* a response was submitted (or the stream is gone) */
    int cancelled; /* cancel reported */
    tkm_grpc_cancel_cb cancel_cb;
    void *cancel_data;
    struct tkm_buf resp; /* framed response message */
    size_t resp_off;
};

struct tkm_grpc_server {
    uv_loop_t *loop;
    uv_pipe_t listener;
    uv_timer_t deadlines;
    uv_timer_t grace;
    uv_timer_t idle;
    char *path;
    uid_t uids[SRV_MAX_UIDS];
    size_t n_uids;
    size_t max_message;
    unsigned max_conns, n_served; /* the cap; connections served now */
    uint64_t idle_ms;
    uint64_t refused, refused_logged, idle_closed, refuse_log_at;
    nghttp2_session_callbacks *cbs;
    struct method_reg *methods;
    struct srv_conn *conns;
    int closing, grace_closing;
    unsigned open_handles;
    void (*closed_cb)(void *data);
    void *closed_data;
};

/* ---- calls ---------------------------------------------------------------- */

static void call_free(struct tkm_grpc_call *call)
{
    free(call->method);
    tkm_buf_release(&call->body);
    tkm_buf_release(&call->resp);
    free(call);
}

/* Frees the call once neither the stream nor the handler holds it. */
static void call_maybe_free(struct tkm_grpc_call *call)
{
    if (!call->conn && !call->held)
        call_free(call);
}

static void call_cancel(struct tkm_grpc_call *call)
{
    if (!call->held || call->cancelled || call->finishing)
        return;
    call->cancelled = 1;
    if (call->cancel_cb)
        call->cancel_cb(call, call->cancel_data);
}

/* Detaches the call from its stream (closed, or the connection is gone). */
static void call_detach(struct tkm_grpc_call *call)
{
    struct srv_conn *c = call->conn;
    if (!c)
        return;
    if (call->prev)
        call->prev->next = call->next;
    else
        c->calls = call->next;
    if (call->next)
        call->next->prev = call->prev;
    call->prev = call->next = NULL;
    call->conn = NULL;
    call->answered = 1;
    if (call->held)
        call_cancel(call); /* the handler frees it when it finishes, maybe inside the cb */
    else
        call_free(call);
}

static ssize_t resp_read(nghttp2_session *ng, int32_t sid, uint8_t *buf, size_t len,
                         uint32_t *flags, nghttp2_data_source *src, void *ud)
{
    struct tkm_grpc_call *call = src->ptr;
    size_t n = call->resp.len - call->resp_off;
    (void)ud;
    if (n > len)
        n = len;
    memcpy(buf, call->resp.data + call->resp_off, n);
    call->resp_off += n;
    if (call->resp_off == call->resp.len) {
        nghttp2_nv tr[] = {TKM__NV("grpc-status", "0", 1)};
        *flags |= NGHTTP2_DATA_FLAG_EOF | NGHTTP2_DATA_FLAG_NO_END_STREAM;
        if (nghttp2_submit_trailer(ng, sid, tr, 1) != 0)
            return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
    }
    return (ssize_t)n;
}

/* Submits the answer: with msg (framed in call->resp) status OK, else a
 * Trailers-Only response with http status, code and message. */
static int call_respond(struct tkm_grpc_call *call, int http, int code, const char *message)
{
    struct tkm_buf enc = TKM_BUF_INIT(8192);
    char st[8], cs[12];
    int rc, n = 3;
    if (!call->conn || call->answered)
        return -ECANCELED;
    call->answered = 1;
    snprintf(st, sizeof st, "%d", http);
    snprintf(cs, sizeof cs, "%d", code);
    nghttp2_nv nv[] = {TKM__NV(":status", st, strlen(st)),
                       TKM__NV("content-type", "application/grpc", 16),
                       TKM__NV("grpc-status", cs, strlen(cs)), TKM__NV("grpc-message", "", 0)};
    if (code == TKM_GRPC_OK) {
        nghttp2_data_provider prd = {.source.ptr = call, .read_callback = resp_read};
        rc = nghttp2_submit_response(call->conn->h2.ng, call->stream_id, nv, 2, &prd);
    } else {
        if (message && *message && tkm__grpc_pct_encode(message, &enc) == 0) {
            nv[3].value = (uint8_t *)enc.data;
            nv[3].valuelen = enc.len;
            n = 4;
        }
        rc = nghttp2_submit_response(call->conn->h2.ng, call->stream_id, nv, (size_t)n, NULL);
    }
    tkm_buf_release(&enc);
    if (rc != 0) {
        tkm_dbg("grpc: stream %d: respond: %s", call->stream_id, nghttp2_strerror(rc));
        return -EIO;
    }
    tkm__h2conn_flush(&call->conn->h2);
    return 0;
}

/* ---- public call API -------------------------------------------------- */

const void *tkm_grpc_call_request(const struct tkm_grpc_call *call, size_t *len)
{
    if (len)
        *len = call->req_len;
    return call->req ? call->req : "";
}

const struct tkm_grpc_peer *tkm_grpc_call_peer(const struct tkm_grpc_call *call)
{
    return &call->peer;
}

uint64_t tkm_grpc_call_deadline(const struct tkm_grpc_call *call)
{
    return call->deadline;
}

void tkm_grpc_call_on_cancel(struct tkm_grpc_call *call, tkm_grpc_cancel_cb cb, void *data)
{
    call->cancel_cb = cb;
    call->cancel_data = data;
}

static int call_finish(struct tkm_grpc_call *call, int rc)
{
    call->held = 0;
    call->cancel_cb = NULL;
    call_maybe_free(call);
    return rc;
}

int tkm_grpc_call_reply(struct tkm_grpc_call *call, const void *bytes, size_t len)
{
    unsigned char hdr[5];
    int rc;
    call->finishing = 1;
    if (call->cancelled || !call->conn || call->answered)
        return call_finish(call, -ECANCELED);
    if (len > call->conn->srv->max_message) {
        call_respond(call, 200, TKM_GRPC_RESOURCE_EXHAUSTED,
                     "response larger than the server's maximum message size");
        return call_finish(call, -E2BIG);
    }
    tkm__grpc_frame_prefix(hdr, len);
    rc = tkm_buf_append(&call->resp, hdr, 5);
    if (rc == 0 && len)
        rc = tkm_buf_append(&call->resp, bytes, len);
    if (rc < 0) {
        call_respond(call, 200, TKM_GRPC_RESOURCE_EXHAUSTED, "out of memory for the response");
        return call_finish(call, rc);
    }
    rc = call_respond(call, 200, TKM_GRPC_OK, NULL);
    return call_finish(call, rc);
}

int tkm_grpc_call_fail(struct tkm_grpc_call *call, int code, const char *message)
{
    int rc;
    call->finishing = 1;
    if (call->cancelled || !call->conn || call->answered)
        return call_finish(call, -ECANCELED);
    if (code <= 0 || code > TKM_GRPC_UNAUTHENTICATED)
        code = TKM_GRPC_UNKNOWN;
    rc = call_respond(call, 200, code, message);
    return call_finish(call, rc);
}

/* ---- deadlines ------------------------------------------------------------ */

static void deadlines_cb(uv_timer_t *t);

static void deadlines_arm(struct tkm_grpc_server *srv)
{
    uint64_t now = uv_now(srv->loop), next = 0;
    for (struct srv_conn *c = srv->conns; c; c = c->next)
        for (struct tkm_grpc_call *call = c->calls; call; call = call->next)
            if (call->deadline && !call->answered && (!next || call->deadline < next))
                next = call->deadline;
    if (srv->closing)
        return;
    if (!next)
        uv_timer_stop(&srv->deadlines);
    else
        uv_timer_start(&srv->deadlines, deadlines_cb, next > now ? next - now : 0, 0);
}

static void deadlines_cb(uv_timer_t *t)
{
    struct tkm_grpc_server *srv = t->data;
    uint64_t now = uv_now(srv->loop);
    for (struct srv_conn *c = srv->conns; c; c = c->next) {
        c->h2.hold++;
        for (struct tkm_grpc_call *call = c->calls; call; call = call->next) {
            if (!call->deadline || call->answered || call->deadline > now)
                continue;
            call_respond(call, 200, TKM_GRPC_DEADLINE_EXCEEDED, "deadline exceeded");
            call_cancel(call);
        }
        c->h2.hold--;
        tkm__h2conn_flush(&c->h2);
    }
    deadlines_arm(srv);
}

/* ---- nghttp2 callbacks ---------------------------------------------------- */

static int on_begin_headers(nghttp2_session *ng, const nghttp2_frame *f, void *ud)
{
    struct srv_conn *c = ud;
    struct tkm_grpc_call *call;
    if (f->hd.type != NGHTTP2_HEADERS || f->headers.cat != NGHTTP2_HCAT_REQUEST)
        return 0;
    call = calloc(1, sizeof *call);
    if (!call)
        return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
    call->conn = c;
    call->stream_id = f->hd.stream_id;
    call->peer = c->peer;
    tkm_buf_init(&call->body, c->srv->max_message + 5);
    tkm_buf_init(&call->resp, c->srv->max_message + 5);
    call->next = c->calls;
    if (c->calls)
        c->calls->prev = call;
    c->calls = call;
    nghttp2_session_set_stream_user_data(ng, f->hd.stream_id, call);
    return 0;
}

static int hdr_is(const uint8_t *name, size_t nl, const char *s)
{
    return nl == strlen(s) && memcmp(name, s, nl) == 0;
}

static int on_header(nghttp2_session *ng, const nghttp2_frame *f, const uint8_t *name, size_t nl,
                     const uint8_t *value, size_t vl, uint8_t flags, void *ud)
{
    struct tkm_grpc_call *call = nghttp2_session_get_stream_user_data(ng, f->hd.stream_id);
    (void)flags;
    (void)ud;
    if (!call || f->hd.type != NGHTTP2_HEADERS || f->headers.cat != NGHTTP2_HCAT_REQUEST)
        return 0;
    if (hdr_is(name, nl, ":path")) {
        free(call->method);
        call->method = vl < SRV_MAX_PATH ? strndup((const char *)value, vl) : NULL;
        if (vl < SRV_MAX_PATH && !call->method)
            return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
    } else if (hdr_is(name, nl, ":method")) {
        call->post = vl == 4 && memcmp(value, "POST", 4) == 0;
    } else if (hdr_is(name, nl, "content-type")) {
        call->ct_ok = tkm__grpc_content_type_ok((const char *)value, vl);
    } else if (hdr_is(name, nl, "grpc-timeout")) {
        uint64_t ms;
        if (tkm__grpc_timeout_parse((const char *)value, vl, &ms) < 0)
            call->bad_timeout = 1;
        else
            call->deadline = uv_now(call->conn->srv->loop) + (ms ? ms : 1);
    } else if (nl && name[0] != ':' && !call->md_full) {
        call->md_len += nl + vl + 2; /* not kept: no handler reads metadata */
        if (memchr(value, 0, vl) || call->md_len > TKM__GRPC_MAX_METADATA)
            call->md_full = 1;
    }
    return 0;
}

/* The request headers are complete: answer what cannot be served now. */
static void request_headers_done(struct tkm_grpc_call *call)
{
    struct tkm_grpc_server *srv = call->conn->srv;
    if (!call->post) {
        call_respond(call, 405, TKM_GRPC_INTERNAL, "gRPC requires the POST method");
        return;
    }
    if (!call->ct_ok) {
        call_respond(call, 415, TKM_GRPC_INTERNAL,
                     "invalid gRPC request content-type (want application/grpc)");
        return;
    }
    if (call->md_full) {
        call_respond(call, 200, TKM_GRPC_RESOURCE_EXHAUSTED, "request metadata too large");
        return;
    }
    if (call->bad_timeout) {
        call_respond(call, 200, TKM_GRPC_INTERNAL, "malformed grpc-timeout header");
        return;
    }
    for (const struct method_reg *r = srv->methods; r && call->method; r = r->next)
        if (strcmp(r->name, call->method) == 0)
            call->reg = r;
    if (!call->reg) {
        struct tkm_buf m = TKM_BUF_INIT(SRV_MAX_PATH + 64);
        tkm_buf_printf(&m, "unknown method %s", call->method ? call->method : "(none)");
        call_respond(call, 200, TKM_GRPC_UNIMPLEMENTED, m.data);
        tkm_buf_release(&m);
        return;
    }
    if (call->deadline)
        deadlines_arm(srv);
}

static void request_dispatch(struct tkm_grpc_call *call)
{
    const char *why = NULL;
    int code;
    if (call->answered)
        return;
    code = tkm__grpc_unframe(&call->body, call->conn->srv->max_message, &call->req, &call->req_len,
                             &why);
    if (code != TKM_GRPC_OK) {
        call_respond(call, 200, code, why);
        return;
    }
    call->held = 1;
    call->reg->fn(call, call->reg->data);
}

static int on_frame_recv(nghttp2_session *ng, const nghttp2_frame *f, void *ud)
{
    struct tkm_grpc_call *call = nghttp2_session_get_stream_user_data(ng, f->hd.stream_id);
    struct srv_conn *c = ud;
    c->last_active = uv_now(c->srv->loop);
    if (!call || (f->hd.type != NGHTTP2_HEADERS && f->hd.type != NGHTTP2_DATA))
        return 0;
    if (f->hd.type == NGHTTP2_HEADERS && f->headers.cat == NGHTTP2_HCAT_REQUEST)
        request_headers_done(call);
    if ((f->hd.flags & NGHTTP2_FLAG_END_STREAM) && call->conn)
        request_dispatch(call);
    return 0;
}

static int on_data_chunk(nghttp2_session *ng, uint8_t flags, int32_t sid, const uint8_t *data,
                         size_t len, void *ud)
{
    struct tkm_grpc_call *call = nghttp2_session_get_stream_user_data(ng, sid);
    const unsigned char *p;
    (void)flags;
    (void)ud;
    if (!call || call->answered)
        return 0; /* answered early (error): the rest of the body is dropped */
    if (tkm_buf_append(&call->body, data, len) < 0) {
        call_respond(call, 200, TKM_GRPC_RESOURCE_EXHAUSTED,
                     "request larger than the server's maximum message size");
        return 0;
    }
    p = (const unsigned char *)call->body.data;
    if (call->body.len >= 5) {
        uint64_t n = ((uint64_t)p[1] << 24) | ((uint64_t)p[2] << 16) | ((uint64_t)p[3] << 8) | p[4];
        if (n > call->conn->srv->max_message)
            call_respond(call, 200, TKM_GRPC_RESOURCE_EXHAUSTED,
                         "request larger than the server's maximum message size");
    }
    return 0;
}

static int on_stream_close(nghttp2_session *ng, int32_t sid, uint32_t code, void *ud)
{
    struct tkm_grpc_call *call = nghttp2_session_get_stream_user_data(ng, sid);
    struct srv_conn *c = ud;
    (void)code;
    c->last_active = uv_now(c->srv->loop); /* idle from the end of its last call */
    if (call)
        call_detach(call);
    return 0;
}

/* ---- connections ------------------------------------------------------- */

static void srv_handle_closed(struct tkm_grpc_server *srv);
static void srv_close_grace(struct tkm_grpc_server *srv);

static void conn_closed(struct tkm__h2conn *h2)
{
    struct srv_conn *c = (struct srv_conn *)h2;
    struct tkm_grpc_server *srv = c->srv;
    if (h2->ng)
        nghttp2_session_del(h2->ng);
    h2->ng = NULL;
    while (c->calls)
        call_detach(c->calls);
    if (c->prev)
        c->prev->next = c->next;
    else
        srv->conns = c->next;
    if (c->next)
        c->next->prev = c->prev;
    if (!c->refused)
        srv->n_served--;
    free(c);
    srv_close_grace(srv);
    srv_handle_closed(srv);
}

static int peer_allowed(struct tkm_grpc_server *srv, struct srv_conn *c)
{
    struct ucred uc;
    socklen_t l = sizeof uc;
    uv_os_fd_t fd;
    if (uv_fileno((uv_handle_t *)&c->h2.pipe, &fd) < 0 ||
        getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &uc, &l) < 0) {
        tkm_warn("grpc: %s: cannot read the peer's credentials (SO_PEERCRED): %s", srv->path,
                 strerror(errno));
        return 0;
    }
    c->peer.pid = uc.pid;
    c->peer.uid = uc.uid;
    c->peer.gid = uc.gid;
    for (size_t i = 0; i < srv->n_uids; i++)
        if (srv->uids[i] == uc.uid)
            return 1;
    tkm_warn("grpc: %s: refused a connection from uid %u (pid %d): uid not allowed", srv->path,
             (unsigned)uc.uid, (int)uc.pid);
    return 0;
}

static int conn_session(struct tkm_grpc_server *srv, struct srv_conn *c)
{
    nghttp2_settings_entry iv[] = {
        {NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, TKM_GRPC_DEFAULT_MAX_STREAMS},
        {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, TKM__GRPC_WINDOW},
        {NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, 2 * TKM__GRPC_MAX_METADATA},
    };
    int rc = nghttp2_session_server_new(&c->h2.ng, srv->cbs, c);
    if (rc != 0)
        return -ENOMEM;
    rc = nghttp2_submit_settings(c->h2.ng, NGHTTP2_FLAG_NONE, iv, 3);
    if (rc == 0)
        rc = nghttp2_session_set_local_window_size(c->h2.ng, NGHTTP2_FLAG_NONE, 0,
                                                   4 * TKM__GRPC_WINDOW);
    return rc == 0 ? 0 : -EIO;
}

/* Over the cap: counted, and a warning at most every SRV_REFUSE_LOG_MS. */
static void conn_refuse(struct tkm_grpc_server *srv, struct srv_conn *c)
{
    uint64_t now = uv_now(srv->loop);
    c->refused = 1;
    srv->refused++;
    if (srv->refuse_log_at && now < srv->refuse_log_at + SRV_REFUSE_LOG_MS)
        return;
    tkm_warn("grpc: %s: refused %llu connection(s): %u are open, the most allowed "
             "(max connections)",
             srv->path, (unsigned long long)(srv->refused - srv->refused_logged), srv->n_served);
    srv->refused_logged = srv->refused;
    srv->refuse_log_at = now;
}

/* Closes the connections that have had no call and no frame for idle_ms at
 * this scan and the one before, and no frame between: GOAWAY, then closed
 * once it is written. A single scan is not enough: timers run before the
 * poll phase, so after an iteration stalled for idle_ms (a starved or
 * throttled process), a request already in the socket is not read yet. */
static void idle_cb(uv_timer_t *t)
{
    struct tkm_grpc_server *srv = t->data;
    uint64_t now = uv_now(srv->loop);
    for (struct srv_conn *c = srv->conns; c; c = c->next) {
        if (c->calls || c->refused || c->h2.closing || c->h2.drain_close || !c->h2.ng ||
            now - c->last_active < srv->idle_ms)
            continue;
        if (c->idle_mark != c->last_active + 1) { /* judged again after a poll phase */
            c->idle_mark = c->last_active + 1;
            continue;
        }
        srv->idle_closed++;
        tkm_dbg("grpc: %s: closing a connection idle for %llu ms (pid %d)", srv->path,
                (unsigned long long)(now - c->last_active), (int)c->peer.pid);
        nghttp2_submit_goaway(c->h2.ng, NGHTTP2_FLAG_NONE,
                              nghttp2_session_get_last_proc_stream_id(c->h2.ng), NGHTTP2_NO_ERROR,
                              NULL, 0);
        tkm__h2conn_drain(&c->h2);
    }
}

static void on_connection(uv_stream_t *l, int status)
{
    struct tkm_grpc_server *srv = l->data;
    struct srv_conn *c;
    if (status < 0) {
        tkm_warn("grpc: %s: accept: %s", srv->path, uv_strerror(status));
        return;
    }
    c = calloc(1, sizeof *c);
    if (!c || tkm__h2conn_init(&c->h2, srv->loop, conn_closed) < 0) {
        free(c); /* uv_pipe_init does not fail on a valid loop */
        return;
    }
    c->srv = srv;
    c->next = srv->conns;
    if (srv->conns)
        srv->conns->prev = c;
    srv->conns = c;
    srv->open_handles++;
    c->last_active = uv_now(srv->loop);
    if (srv->n_served >= srv->max_conns)
        conn_refuse(srv, c);
    else
        srv->n_served++;
    if (uv_accept(l, (uv_stream_t *)&c->h2.pipe) < 0 || c->refused || !peer_allowed(srv, c) ||
        conn_session(srv, c) < 0 || tkm__h2conn_start(&c->h2) < 0) {
        tkm__h2conn_close(&c->h2);
        return;
    }
    tkm__h2conn_flush(&c->h2);
}

/* ---- socket file ------------------------------------------------------- */

/* Creates the missing directories above path with mode 0700. */
static int make_parent(const char *path, struct tkm_err *err)
{
    char dir[sizeof(((struct sockaddr_un *)0)->sun_path)];
    struct stat st;
    char *slash;
    snprintf(dir, sizeof dir, "%s", path);
    slash = strrchr(dir, '/');
    if (!slash || slash == dir)
        return 0;
    *slash = '\0';
    if (stat(dir, &st) == 0)
        return S_ISDIR(st.st_mode) ? 0
                                   : tkm_err_set(err, -ENOTDIR, "grpc: %s: not a directory", dir);
    for (char *p = dir + 1;; p++) {
        if (*p != '/' && *p != '\0')
            continue;
        char c = *p;
        *p = '\0';
        if (mkdir(dir, 0700) < 0 && errno != EEXIST)
            return tkm_err_set(err, -errno, "grpc: cannot create directory %s: %s", dir,
                               strerror(errno));
        *p = c;
        if (!c)
            break;
    }
    return 0;
}

/* Removes path when it is a socket nobody listens on. */
static int remove_stale(const char *path, struct tkm_err *err)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    struct stat st;
    int fd, rc;
    if (lstat(path, &st) < 0)
        return errno == ENOENT ? 0
                               : tkm_err_set(err, -errno, "grpc: %s: %s", path, strerror(errno));
    if (!S_ISSOCK(st.st_mode))
        return tkm_err_set(err, -EEXIST, "grpc: %s exists and is not a socket; not removing it",
                           path);
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s", path);
    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return tkm_err_set(err, -errno, "grpc: socket: %s", strerror(errno));
    rc = connect(fd, (struct sockaddr *)&sa, sizeof sa);
    if (rc == 0 || errno == EAGAIN || errno == EINPROGRESS) {
        close(fd);
        return tkm_err_set(err, -EADDRINUSE, "grpc: %s: another process is serving this socket",
                           path);
    }
    close(fd);
    if (unlink(path) < 0 && errno != ENOENT)
        return tkm_err_set(err, -errno, "grpc: cannot remove the stale socket %s: %s", path,
                           strerror(errno));
    tkm_info("grpc: removed the stale socket %s", path);
    return 0;
}

/* Binds (umask 0177, then chmod to mode) and listens; returns the fd. */
static int srv_bind(const char *path, unsigned mode, struct tkm_err *err)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    mode_t old;
    int fd, rc = make_parent(path, err);
    if (rc == 0)
        rc = remove_stale(path, err);
    if (rc < 0)
        return rc;
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s", path);
    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return tkm_err_set(err, -errno, "grpc: socket: %s", strerror(errno));
    old = umask(0177);
    rc = bind(fd, (struct sockaddr *)&sa, sizeof sa);
    umask(old);
    if (rc < 0) {
        rc = tkm_err_set(err, -errno, "grpc: bind %s: %s", path, strerror(errno));
        goto out;
    }
    if (chmod(path, mode) < 0 || listen(fd, 128) < 0) {
        rc = tkm_err_set(err, -errno, "grpc: chmod/listen %s: %s", path, strerror(errno));
        unlink(path);
        goto out;
    }
    return fd;
out:
    close(fd);
    return rc;
}

/* ---- server lifecycle ------------------------------------------------------- */

static void srv_free(struct tkm_grpc_server *srv)
{
    while (srv->methods) {
        struct method_reg *r = srv->methods;
        srv->methods = r->next;
        free(r->name);
        free(r);
    }
    if (srv->cbs)
        nghttp2_session_callbacks_del(srv->cbs);
    free(srv->path);
    free(srv);
}

static void srv_handle_closed(struct tkm_grpc_server *srv)
{
    if (--srv->open_handles > 0)
        return;
    void (*cb)(void *) = srv->closed_cb;
    void *data = srv->closed_data;
    srv_free(srv);
    if (cb)
        cb(data);
}

static void srv_uv_closed(uv_handle_t *h)
{
    srv_handle_closed(h->data);
}

static void srv_close_grace(struct tkm_grpc_server *srv)
{
    if (!srv->closing || srv->conns || srv->grace_closing)
        return;
    srv->grace_closing = 1;
    uv_close((uv_handle_t *)&srv->grace, srv_uv_closed);
}

static int srv_callbacks(struct tkm_grpc_server *srv)
{
    if (nghttp2_session_callbacks_new(&srv->cbs) != 0)
        return -ENOMEM;
    nghttp2_session_callbacks_set_on_begin_headers_callback(srv->cbs, on_begin_headers);
    nghttp2_session_callbacks_set_on_header_callback(srv->cbs, on_header);
    nghttp2_session_callbacks_set_on_frame_recv_callback(srv->cbs, on_frame_recv);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(srv->cbs, on_data_chunk);
    nghttp2_session_callbacks_set_on_stream_close_callback(srv->cbs, on_stream_close);
    return 0;
}

static int srv_opts(struct tkm_grpc_server *srv, const struct tkm_grpc_server_opts *o,
                    struct tkm_err *err)
{
    if (!o || !o->socket_path || o->socket_path[0] != '/')
        return tkm_err_set(err, -EINVAL, "grpc: the server's socket path must be absolute");
    if (strlen(o->socket_path) >= sizeof(((struct sockaddr_un *)0)->sun_path))
        return tkm_err_set(err, -ENAMETOOLONG, "grpc: socket path %s is longer than 107 bytes",
                           o->socket_path);
    if (o->n_allowed_uids > SRV_MAX_UIDS || (o->n_allowed_uids && !o->allowed_uids))
        return tkm_err_set(err, -EINVAL, "grpc: %s: at most %d allowed uids", o->socket_path,
                           SRV_MAX_UIDS);
    if (o->socket_mode & ~0777u)
        return tkm_err_set(err, -EINVAL, "grpc: %s: socket mode %o is not a permission mode",
                           o->socket_path, o->socket_mode);
    srv->path = strdup(o->socket_path);
    if (!srv->path)
        return tkm_err_set(err, -ENOMEM, "grpc: out of memory");
    srv->max_message = o->max_message ? o->max_message : TKM_GRPC_DEFAULT_MAX_MESSAGE;
    srv->max_conns = o->max_connections ? o->max_connections : TKM_GRPC_DEFAULT_MAX_CONNS;
    srv->idle_ms = o->idle_timeout_ms ? o->idle_timeout_ms : TKM_GRPC_DEFAULT_IDLE_MS;
    if (o->n_allowed_uids) {
        memcpy(srv->uids, o->allowed_uids, o->n_allowed_uids * sizeof(uid_t));
        srv->n_uids = o->n_allowed_uids;
    } else {
        srv->uids[srv->n_uids++] = 0;
        if (geteuid() != 0)
            srv->uids[srv->n_uids++] = geteuid();
    }
    return 0;
}

int tkm_grpc_server_new(uv_loop_t *loop, const struct tkm_grpc_server_opts *opts,
                        struct tkm_grpc_server **out, struct tkm_err *err)
{
    struct tkm_grpc_server *srv = calloc(1, sizeof *srv);
    int rc, fd;
    *out = NULL;
    if (!srv)
        return tkm_err_set(err, -ENOMEM, "grpc: out of memory");
    srv->loop = loop;
    tkm__grpc_ignore_sigpipe();
    rc = srv_opts(srv, opts, err);
    if (rc == 0 && srv_callbacks(srv) < 0)
        rc = tkm_err_set(err, -ENOMEM, "grpc: out of memory");
    if (rc < 0) {
        srv_free(srv);
        return rc;
    }
    fd = srv_bind(srv->path, opts->socket_mode ? opts->socket_mode : SRV_DEFAULT_MD, err);
    if (fd < 0) {
        srv_free(srv);
        return fd;
    }
    /* From here on the handles exist and are closed through the loop. */
    uv_pipe_init(loop, &srv->listener, 0);
    uv_timer_init(loop, &srv->deadlines);
    uv_timer_init(loop, &srv->grace);
    uv_timer_init(loop, &srv->idle);
    srv->listener.data = srv->deadlines.data = srv->grace.data = srv->idle.data = srv;
    srv->open_handles = 4;
    uint64_t tick = srv->idle_ms / 4 ? srv->idle_ms / 4 : 1;
    if (tick > SRV_IDLE_TICK_MAX)
        tick = SRV_IDLE_TICK_MAX;
    uv_timer_start(&srv->idle, idle_cb, tick, tick);
    rc = uv_pipe_open(&srv->listener, fd);
    if (rc < 0)
        close(fd);
    else
        rc = uv_listen((uv_stream_t *)&srv->listener, 128, on_connection);
    if (rc < 0) {
        /* Not seen in practice (the fd is a listening unix socket); the
         * handles then close on the loop's next turn. */
        tkm_err_set(err, rc, "grpc: listen %s: %s", srv->path, uv_strerror(rc));
        tkm_grpc_server_close(srv, NULL, NULL);
        return rc;
    }
    *out = srv;
    return 0;
}

int tkm_grpc_server_register(struct tkm_grpc_server *srv, const char *method,
                             tkm_grpc_handler handler, void *data, struct tkm_err *err)
{
    struct method_reg *r;
    if (!tkm__grpc_method_ok(method) || strlen(method) >= SRV_MAX_PATH || !handler)
        return tkm_err_set(err, -EINVAL,
                           "grpc: %s: method %s is not of the form /pkg.Service/Method", srv->path,
                           method ? method : "(null)");
    for (r = srv->methods; r; r = r->next)
        if (strcmp(r->name, method) == 0)
            return tkm_err_set(err, -EEXIST, "grpc: %s: method %s registered twice", srv->path,
                               method);
    r = calloc(1, sizeof *r);
    if (!r || !(r->name = strdup(method))) {
        free(r);
        return tkm_err_set(err, -ENOMEM, "grpc: out of memory");
    }
    r->fn = handler;
    r->data = data;
    r->next = srv->methods;
    srv->methods = r;
    return 0;
}

static void grace_cb(uv_timer_t *t)
{
    struct tkm_grpc_server *srv = t->data;
    for (struct srv_conn *c = srv->conns; c; c = c->next)
        tkm__h2conn_close(&c->h2);
}

void tkm_grpc_server_close(struct tkm_grpc_server *srv, void (*closed_cb)(void *data), void *data)
{
    if (!srv || srv->closing)
        return;
    srv->closing = 1;
    srv->closed_cb = closed_cb;
    srv->closed_data = data;
    uv_close((uv_handle_t *)&srv->listener, srv_uv_closed);
    uv_close((uv_handle_t *)&srv->deadlines, srv_uv_closed);
    uv_close((uv_handle_t *)&srv->idle, srv_uv_closed);
    unlink(srv->path);
    for (struct srv_conn *c = srv->conns; c; c = c->next) {
        if (!c->h2.ng || c->h2.closing) {
            tkm__h2conn_close(&c->h2);
            continue;
        }
        c->h2.hold++;
        for (struct tkm_grpc_call *call = c->calls; call; call = call->next) {
            call_respond(call, 200, TKM_GRPC_UNAVAILABLE, "server shutting down");
            call_cancel(call);
        }
        c->h2.hold--;
        nghttp2_submit_goaway(c->h2.ng, NGHTTP2_FLAG_NONE,
                              nghttp2_session_get_last_proc_stream_id(c->h2.ng), NGHTTP2_NO_ERROR,
                              NULL, 0);
        tkm__h2conn_drain(&c->h2);
    }
    if (srv->conns)
        uv_timer_start(&srv->grace, grace_cb, SRV_GRACE_MS, 0);
    srv_close_grace(srv);
}

uint64_t tkm_grpc_server_refused(const struct tkm_grpc_server *srv)
{
    return srv ? srv->refused : 0;
}

uint64_t tkm_grpc_server_idle_closed(const struct tkm_grpc_server *srv)
{
    return srv ? srv->idle_closed : 0;
}

size_t tkm_grpc_server_connections(const struct tkm_grpc_server *srv)
{
    size_t n = 0;
    for (const struct srv_conn *c = srv->conns; c; c = c->next)
        n++;
    return n;
}
