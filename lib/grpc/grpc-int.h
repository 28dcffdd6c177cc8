/*
 * grpc-int.h - what lib/grpc's server and client share: the gRPC wire helpers
 * and one HTTP/2 connection pump (a uv_pipe_t feeding an nghttp2 session).
 *
 * struct tkm__h2conn is embedded as the FIRST member of the server's and the
 * client's connection structs, so the uv handle, the nghttp2 user_data and
 * the owner's struct share one address. The owner creates the nghttp2
 * session (server or client callbacks) and frees it in on_closed, which runs
 * from the pipe's close callback: the struct may be freed there.
 */
#ifndef TKM_GRPC_INT_H
#define TKM_GRPC_INT_H

#include <nghttp2/nghttp2.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include <tkm/buf.h>
#include <tkm/grpc.h>

#define TKM__GRPC_MAX_METADATA (16u * 1024)
#define TKM__GRPC_WINDOW       (1u << 20)

struct tkm__h2conn {
    uv_pipe_t pipe; /* first: the handle's address is the conn's */
    nghttp2_session *ng;
    uv_write_t wreq;
    struct tkm_buf wbuf; /* bytes of the write in flight */
    int writing;
    int closing;     /* uv_close() called */
    int drain_close; /* close once what nghttp2 has queued is written */
    /* > 0: inside nghttp2_session_mem_recv, or a batch walking a call list
     * (sending could close streams and free their calls under the walk):
     * flush is a no-op now and the holder flushes afterwards. */
    int hold;
    void (*on_closed)(struct tkm__h2conn *c);
    char rbuf[16384];
};

/* uv_pipe_init on loop; the owner then connects/accepts and calls start. */
int tkm__h2conn_init(struct tkm__h2conn *c, uv_loop_t *loop,
                     void (*on_closed)(struct tkm__h2conn *c));
/* Starts reading: bytes go to nghttp2_session_mem_recv; errors close. */
int tkm__h2conn_start(struct tkm__h2conn *c);
/* Writes what nghttp2 has queued; closes when the session wants neither
 * reading nor writing, or when drain_close is set and all is written. */
void tkm__h2conn_flush(struct tkm__h2conn *c);
/* Closes now (idempotent); on_closed runs from the loop. */
void tkm__h2conn_close(struct tkm__h2conn *c);
/* Closes after the queued bytes are written (GOAWAY, final responses). */
void tkm__h2conn_drain(struct tkm__h2conn *c);

/* Sets SIGPIPE to SIG_IGN when it is SIG_DFL: libuv writes with write(2),
 * and a peer that hung up must be an EPIPE, not the end of the process. */
void tkm__grpc_ignore_sigpipe(void);

/* grpc-message encoding: bytes outside 0x20..0x7e and '%' become %XX. */
int tkm__grpc_pct_encode(const char *in, struct tkm_buf *out);
/* Decoding; a malformed %XX is kept as is (the spec's advice). */
int tkm__grpc_pct_decode(const char *in, size_t n, struct tkm_buf *out);
/* Parses a grpc-timeout value (1-8 digits + H M S m u n) into milliseconds,
 * rounding up; -EINVAL when malformed. */
int tkm__grpc_timeout_parse(const char *v, size_t n, uint64_t *ms);
/* Formats ms as a grpc-timeout value into out (at least 16 bytes). */
void tkm__grpc_timeout_format(uint64_t ms, char *out, size_t n);
/* 1 when a content-type names gRPC: "application/grpc" alone or followed by
 * '+' or ';'. */
int tkm__grpc_content_type_ok(const char *v, size_t n);
/* 1 for "/pkg.Service/Method": non-empty service and method, no third slash. */
int tkm__grpc_method_ok(const char *m);

/* Checks one length-prefixed message in body (what the stream carried):
 * returns TKM_GRPC_OK and sets *msg and *len, or a gRPC code with why (static
 * text): INTERNAL for framing errors, UNIMPLEMENTED for a compressed message,
 * RESOURCE_EXHAUSTED over max. */
int tkm__grpc_unframe(const struct tkm_buf *body, size_t max, const char **msg, size_t *len,
                      const char **why);
/* Writes the 5-byte prefix for len into hdr. */
void tkm__grpc_frame_prefix(unsigned char hdr[5], size_t len);

/* Name/value list for nghttp2 (names and values borrowed). */
#define TKM__NV(n, v, vl)                                                                          \
    {                                                                                              \
        (uint8_t *)(n), (uint8_t *)(v), sizeof(n) - 1, (vl), NGHTTP2_NV_FLAG_NONE                  \
    }

#endif
