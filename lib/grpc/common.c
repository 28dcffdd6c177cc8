/*
 * common.c - gRPC wire helpers and the HTTP/2 connection pump that the server
 * and the client share. See grpc-int.h.
 */
#include "grpc-int.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include <tkm/log.h>

static const char *const code_names[] = {
    "OK",
    "CANCELLED",
    "UNKNOWN",
    "INVALID_ARGUMENT",
    "DEADLINE_EXCEEDED",
    "NOT_FOUND",
    "ALREADY_EXISTS",
    "PERMISSION_DENIED",
    "RESOURCE_EXHAUSTED",
    "FAILED_PRECONDITION",
    "ABORTED",
    "OUT_OF_RANGE",
    "UNIMPLEMENTED",
    "INTERNAL",
    "UNAVAILABLE",
    "DATA_LOSS",
    "UNAUTHENTICATED",
};

const char *tkm_grpc_code_name(int code)
{
    if (code < 0 || code >= (int)(sizeof code_names / sizeof code_names[0]))
        return "UNKNOWN_CODE";
    return code_names[code];
}

void tkm__grpc_ignore_sigpipe(void)
{
    struct sigaction sa;
    if (sigaction(SIGPIPE, NULL, &sa) == 0 && sa.sa_handler == SIG_DFL)
        signal(SIGPIPE, SIG_IGN);
}

/* ---- wire helpers ------------------------------------------------------- */

int tkm__grpc_pct_encode(const char *in, struct tkm_buf *out)
{
    static const char hex[] = "0123456789ABCDEF";
    for (const unsigned char *p = (const unsigned char *)in; *p; p++) {
        int rc;
        if (*p >= 0x20 && *p <= 0x7e && *p != '%') {
            rc = tkm_buf_putc(out, (char)*p);
        } else {
            char e[3] = {'%', hex[*p >> 4], hex[*p & 15]};
            rc = tkm_buf_append(out, e, 3);
        }
        if (rc < 0)
            return rc;
    }
    return 0;
}

static int hexval(unsigned char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

int tkm__grpc_pct_decode(const char *in, size_t n, struct tkm_buf *out)
{
    for (size_t i = 0; i < n; i++) {
        int hi = -1, lo = -1, rc;
        if (in[i] == '%' && i + 2 < n) {
            hi = hexval((unsigned char)in[i + 1]);
            lo = hexval((unsigned char)in[i + 2]);
        }
        if (hi >= 0 && lo >= 0) {
            rc = tkm_buf_putc(out, (char)(hi * 16 + lo));
            i += 2;
        } else {
            rc = tkm_buf_putc(out, in[i]);
        }
        if (rc < 0)
            return rc;
    }
    return 0;
}

int tkm__grpc_timeout_parse(const char *v, size_t n, uint64_t *ms)
{
    uint64_t x = 0;
    if (n < 2 || n > 9)
        return -EINVAL;
    for (size_t i = 0; i + 1 < n; i++) {
        if (v[i] < '0' || v[i] > '9')
            return -EINVAL;
        x = x * 10 + (uint64_t)(v[i] - '0');
    }
    switch (v[n - 1]) {
    case 'H':
        *ms = x * 3600000u;
        break;
    case 'M':
        *ms = x * 60000u;
        break;
    case 'S':
        *ms = x * 1000u;
        break;
    case 'm':
        *ms = x;
        break;
    case 'u':
        *ms = (x + 999u) / 1000u;
        break;
    case 'n':
        *ms = (x + 999999u) / 1000000u;
        break;
    default:
        return -EINVAL;
    }
    return 0;
}

void tkm__grpc_timeout_format(uint64_t ms, char *out, size_t n)
{
    /* At most 8 digits: milliseconds, else seconds, minutes, hours (rounded up). */
    if (ms < 100000000u)
        snprintf(out, n, "%llum", (unsigned long long)ms);
    else if (ms / 1000u < 100000000u)
        snprintf(out, n, "%lluS", (unsigned long long)((ms + 999u) / 1000u));
    else if (ms / 60000u < 100000000u)
        snprintf(out, n, "%lluM", (unsigned long long)((ms + 59999u) / 60000u));
    else
        snprintf(out, n, "99999999H");
}

int tkm__grpc_content_type_ok(const char *v, size_t n)
{
    static const char ct[] = "application/grpc";
    size_t l = sizeof ct - 1;
    if (n < l || strncasecmp(v, ct, l) != 0)
        return 0;
    return n == l || v[l] == '+' || v[l] == ';';
}

int tkm__grpc_method_ok(const char *m)
{
    const char *slash;
    if (!m || m[0] != '/' || m[1] == '/' || m[1] == '\0')
        return 0;
    slash = strchr(m + 1, '/');
    return slash && slash[1] != '\0' && !strchr(slash + 1, '/');
}

void tkm__grpc_frame_prefix(unsigned char hdr[5], size_t len)
{
    hdr[0] = 0;
    hdr[1] = (unsigned char)(len >> 24);
    hdr[2] = (unsigned char)(len >> 16);
    hdr[3] = (unsigned char)(len >> 8);
    hdr[4] = (unsigned char)len;
}

int tkm__grpc_unframe(const struct tkm_buf *body, size_t max, const char **msg, size_t *len,
                      const char **why)
{
    const unsigned char *p = (const unsigned char *)body->data;
    uint64_t n;
    if (body->len < 5) {
        *why = body->len ? "truncated message prefix" : "no message in a unary call";
        return TKM_GRPC_INTERNAL;
    }
    n = ((uint64_t)p[1] << 24) | ((uint64_t)p[2] << 16) | ((uint64_t)p[3] << 8) | p[4];
    if (p[0] == 1) {
        *why = "compressed messages are not supported (no grpc-encoding was advertised)";
        return TKM_GRPC_UNIMPLEMENTED;
    }
    if (p[0] != 0) {
        *why = "invalid compressed-flag byte in the message prefix";
        return TKM_GRPC_INTERNAL;
    }
    if (n > max) {
        *why = "message larger than the maximum message size";
        return TKM_GRPC_RESOURCE_EXHAUSTED;
    }
    if (body->len - 5 < n) {
        *why = "message shorter than its length prefix";
        return TKM_GRPC_INTERNAL;
    }
    if (body->len - 5 > n) {
        *why = "more than one message in a unary call";
        return TKM_GRPC_INTERNAL;
    }
    *msg = body->data + 5;
    *len = (size_t)n;
    return TKM_GRPC_OK;
}

/* ---- connection pump ---------------------------------------------------- */

static void conn_close_cb(uv_handle_t *h)
{
    struct tkm__h2conn *c = (struct tkm__h2conn *)h;
    tkm_buf_release(&c->wbuf);
    c->on_closed(c); /* may free c */
}

void tkm__h2conn_close(struct tkm__h2conn *c)
{
    if (c->closing)
        return;
    c->closing = 1;
    uv_close((uv_handle_t *)&c->pipe, conn_close_cb);
}

int tkm__h2conn_init(struct tkm__h2conn *c, uv_loop_t *loop,
                     void (*on_closed)(struct tkm__h2conn *c))
{
    c->on_closed = on_closed;
    tkm_buf_init(&c->wbuf, 64u * 1024 * 1024);
    return uv_pipe_init(loop, &c->pipe, 0);
}

static void write_cb(uv_write_t *req, int status)
{
    struct tkm__h2conn *c = req->data;
    c->writing = 0;
    tkm_buf_reset(&c->wbuf);
    if (status < 0) {
        tkm_dbg("grpc: write: %s", uv_strerror(status));
        tkm__h2conn_close(c);
        return;
    }
    tkm__h2conn_flush(c);
}

void tkm__h2conn_flush(struct tkm__h2conn *c)
{
    uv_buf_t b;
    int rc;
    /* no session yet (a connection still connecting, flushed by the client's
     * deadline timer) or none any more: nothing to send */
    if (c->writing || c->closing || c->hold || !c->ng)
        return;
    while (c->wbuf.len < 256u * 1024) {
        const uint8_t *p;
        ssize_t n = nghttp2_session_mem_send(c->ng, &p);
        if (n < 0) {
            tkm_dbg("grpc: nghttp2 send: %s", nghttp2_strerror((int)n));
            tkm__h2conn_close(c);
            return;
        }
        if (n == 0)
            break;
        if (tkm_buf_append(&c->wbuf, p, (size_t)n) < 0) {
            tkm__h2conn_close(c);
            return;
        }
    }
    if (c->wbuf.len == 0) {
        if (c->drain_close ||
            (!nghttp2_session_want_read(c->ng) && !nghttp2_session_want_write(c->ng)))
            tkm__h2conn_close(c);
        return;
    }
    b = uv_buf_init(c->wbuf.data, (unsigned)c->wbuf.len);
    c->wreq.data = c;
    rc = uv_write(&c->wreq, (uv_stream_t *)&c->pipe, &b, 1, write_cb);
    if (rc < 0) {
        tkm_dbg("grpc: write: %s", uv_strerror(rc));
        tkm__h2conn_close(c);
        return;
    }
    c->writing = 1;
}

void tkm__h2conn_drain(struct tkm__h2conn *c)
{
    c->drain_close = 1;
    if (!c->closing)
        uv_read_stop((uv_stream_t *)&c->pipe);
    tkm__h2conn_flush(c);
}

static void alloc_cb(uv_handle_t *h, size_t hint, uv_buf_t *buf)
{
    struct tkm__h2conn *c = (struct tkm__h2conn *)h;
    (void)hint;
    *buf = uv_buf_init(c->rbuf, sizeof c->rbuf);
}

static void read_cb(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
    struct tkm__h2conn *c = (struct tkm__h2conn *)s;
    ssize_t rc;
    if (nread == 0)
        return;
    if (nread < 0) {
        if (nread != UV_EOF)
            tkm_dbg("grpc: read: %s", uv_strerror((int)nread));
        tkm__h2conn_close(c);
        return;
    }
    c->hold++;
    rc = nghttp2_session_mem_recv(c->ng, (const uint8_t *)buf->base, (size_t)nread);
    c->hold--;
    if (c->closing)
        return;
    if (rc < 0) {
        /* A connection error: nghttp2 may have queued a GOAWAY; send it, then close. */
        tkm_dbg("grpc: HTTP/2 input rejected: %s", nghttp2_strerror((int)rc));
        tkm__h2conn_drain(c);
        return;
    }
    tkm__h2conn_flush(c);
}

int tkm__h2conn_start(struct tkm__h2conn *c)
{
    return uv_read_start((uv_stream_t *)&c->pipe, alloc_cb, read_cb);
}
