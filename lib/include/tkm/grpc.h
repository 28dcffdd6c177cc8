/*
 * grpc.h - a small unary gRPC server and client over unix domain sockets.
 *
 * One implementation for the agent's socket (tkm-agent serves, tkm-csi calls)
 * and for tkm-csi's own CSI and plugin-registration sockets (tkm-csi serves,
 * kubelet calls). HTTP/2 is nghttp2 (h2c with prior knowledge, as gRPC over a
 * unix socket always is); the transport is a uv_pipe_t on the caller's libuv
 * loop. Messages are raw bytes: the caller encodes and decodes them (protobuf-c
 * generated code), so this module knows no .proto. Only unary calls: one
 * request message, one response message. No compression (we never advertise a
 * grpc-encoding; a compressed request is UNIMPLEMENTED), no TLS (the socket's
 * mode and the SO_PEERCRED check are the access control).
 *
 * Threading: single-threaded. Every function runs on the loop's thread, and
 * every callback is called from that loop. tkm_grpc_server_new() and
 * tkm_grpc_client_new() set SIGPIPE to SIG_IGN when it is SIG_DFL (libuv
 * writes with write(2); a peer that hung up must be EPIPE, not a signal).
 *
 * Server lifecycle:
 *   tkm_grpc_server_new(loop, &opts, &srv, err)   bind + listen (no callback)
 *   tkm_grpc_server_register(srv, "/pkg.Svc/Method", handler, data, err)
 *   handler(call, data)                            for every request
 *   tkm_grpc_call_reply(call, ..) / _fail(call, ..)  now, or LATER from any callback
 *   tkm_grpc_server_close(srv, closed_cb, data)    calls in flight get UNAVAILABLE and
 *                                                  their cancel callback; closed_cb
 *                                                  runs when every handle has closed
 *
 * A call (struct tkm_grpc_call) is borrowed by the handler from the moment the
 * handler is called until it finishes the call with exactly one
 * tkm_grpc_call_reply() or tkm_grpc_call_fail(). That holds also after the
 * call was cancelled (client gone, deadline passed, server closing): the
 * cancel callback set with tkm_grpc_call_on_cancel() runs once, and the
 * reply/fail that follows only frees the call (a safe no-op, -ECANCELED). A
 * call may outlive its server: finishing it after closed_cb only frees it.
 *
 * Client lifecycle:
 *   tkm_grpc_client_new(loop, path, &cli, err)          no I/O yet
 *   tkm_grpc_client_call(cli, method, req, len, timeout_ms, cb, data, err)
 *   cb(code, message, resp, len, data)                  exactly once per started call
 *   tkm_grpc_client_close(cli, closed_cb, data)         calls in flight get CANCELLED
 * The client keeps one HTTP/2 connection, opened on the first call and again
 * on demand after it drops; calls made while it connects wait for it.
 *
 * Callback contract (libuv's): a function that takes a callback and fails
 * never calls it. A client cb is never called from inside
 * tkm_grpc_client_call/_close; a handler is never called from inside
 * tkm_grpc_server_register. The loop must run until closed_cb.
 *
 * Errors: functions return 0 or a negative errno-style code and fill err with
 * a sentence naming the socket path or method. gRPC outcomes are
 * enum tkm_grpc_code values with a message.
 *
 * Limits and defaults (see docs/grpc.md): max message 4 MiB each way, 100
 * concurrent streams per connection, 1024 connections, idle connections
 * closed after 5 min, 16 KiB of request metadata, socket mode 0600, parent
 * directory created 0700, peers allowed: uid 0 and our own uid.
 */
#ifndef TKM_GRPC_H
#define TKM_GRPC_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <uv.h>

#include <tkm/err.h>

/* gRPC status codes (grpc/doc/statuscodes.md). */
enum tkm_grpc_code {
    TKM_GRPC_OK = 0,
    TKM_GRPC_CANCELLED = 1,
    TKM_GRPC_UNKNOWN = 2,
    TKM_GRPC_INVALID_ARGUMENT = 3,
    TKM_GRPC_DEADLINE_EXCEEDED = 4,
    TKM_GRPC_NOT_FOUND = 5,
    TKM_GRPC_ALREADY_EXISTS = 6,
    TKM_GRPC_PERMISSION_DENIED = 7,
    TKM_GRPC_RESOURCE_EXHAUSTED = 8,
    TKM_GRPC_FAILED_PRECONDITION = 9,
    TKM_GRPC_ABORTED = 10,
    TKM_GRPC_OUT_OF_RANGE = 11,
    TKM_GRPC_UNIMPLEMENTED = 12,
    TKM_GRPC_INTERNAL = 13,
    TKM_GRPC_UNAVAILABLE = 14,
    TKM_GRPC_DATA_LOSS = 15,
    TKM_GRPC_UNAUTHENTICATED = 16,
};

/* "OK", "CANCELLED", ... "UNAUTHENTICATED"; "UNKNOWN_CODE" outside 0..16.
 * Static storage. */
const char *tkm_grpc_code_name(int code);

#define TKM_GRPC_DEFAULT_MAX_MESSAGE (4u * 1024 * 1024)
#define TKM_GRPC_DEFAULT_MAX_STREAMS 100u
#define TKM_GRPC_DEFAULT_MAX_CONNS   1024u
#define TKM_GRPC_DEFAULT_IDLE_MS     (5u * 60 * 1000)

/* ---- server ------------------------------------------------------------ */

struct tkm_grpc_server;
struct tkm_grpc_call;

/* The connecting process, from SO_PEERCRED at accept time. */
struct tkm_grpc_peer {
    pid_t pid;
    uid_t uid;
    gid_t gid;
};

/* Server settings. Every pointer is borrowed for tkm_grpc_server_new() only. */
struct tkm_grpc_server_opts {
    const char *socket_path; /* required; an absolute path shorter than 108 bytes */
    unsigned socket_mode;    /* default 0600 (0 = default) */
    /* Peers whose uid is not listed are disconnected at accept, before any
     * HTTP/2 (logged). NULL/0: uid 0 and the process's effective uid. */
    const uid_t *allowed_uids;
    size_t n_allowed_uids;
    size_t max_message; /* request and response; default 4 MiB */
    /* Connections served at once; one more is accepted and closed at once,
     * before any HTTP/2, and counted (tkm_grpc_server_refused). Default 1024. */
    unsigned max_connections;
    /* A connection with no call open and no frame received for this long
     * gets GOAWAY and is closed: checked every quarter of it (at most every
     * 30 s), and closed when two checks in a row find it idle: one to two
     * check intervals after this timeout has passed. Default 5 min. */
    uint64_t idle_timeout_ms;
};

/* A request for a registered method. call is borrowed until the handler
 * finishes it (see above); data is the pointer given at registration. */
typedef void (*tkm_grpc_handler)(struct tkm_grpc_call *call, void *data);
/* The call was cancelled (client reset or disconnected, deadline passed,
 * server closing). Called at most once; the handler must still finish the
 * call with reply or fail (which then only frees it). */
typedef void (*tkm_grpc_cancel_cb)(struct tkm_grpc_call *call, void *data);

/* Creates the parent directory 0700 when missing, removes a stale socket
 * file (only when it is a socket that nobody listens on: anything else at the
 * path is -EEXIST, a live server -EADDRINUSE), binds with umask 0177, chmods
 * to socket_mode and listens on loop (borrowed; must outlive the server).
 * *out is owned: end it with tkm_grpc_server_close(). On failure *out is
 * NULL and nothing needs closing (only if uv_listen() itself fails, after the
 * socket was bound, do its handles close on the loop's next run). */
int tkm_grpc_server_new(uv_loop_t *loop, const struct tkm_grpc_server_opts *opts,
                        struct tkm_grpc_server **out, struct tkm_err *err);

/* Registers handler for method ("/pkg.Service/Method", copied). -EEXIST if
 * already registered, -EINVAL for a name not of that form. Requests for
 * methods never registered get UNIMPLEMENTED. */
int tkm_grpc_server_register(struct tkm_grpc_server *srv, const char *method,
                             tkm_grpc_handler handler, void *data, struct tkm_err *err);

/* Stops listening, answers every call in flight with UNAVAILABLE (running
 * its cancel callback), sends GOAWAY, closes every connection (forcibly after
 * a 1 s grace), unlinks the socket file and frees the server. closed_cb
 * (optional) runs from the loop when every handle has closed. srv NULL: no-op
 * (closed_cb not called). */
void tkm_grpc_server_close(struct tkm_grpc_server *srv, void (*closed_cb)(void *data), void *data);

/* Connections open now, refused ones until they have closed (metrics, tests). */
size_t tkm_grpc_server_connections(const struct tkm_grpc_server *srv);
/* Connections refused by max_connections since the server started (metrics). */
uint64_t tkm_grpc_server_refused(const struct tkm_grpc_server *srv);
/* Connections closed by idle_timeout_ms since the server started (metrics). */
uint64_t tkm_grpc_server_idle_closed(const struct tkm_grpc_server *srv);

/* Accessors; every result is borrowed from the call until it is finished. */
const void *tkm_grpc_call_request(const struct tkm_grpc_call *call, size_t *len);
const struct tkm_grpc_peer *tkm_grpc_call_peer(const struct tkm_grpc_call *call);
/* The deadline the client sent (grpc-timeout) in uv_now() milliseconds of the
 * loop, or 0 when it sent none. */
uint64_t tkm_grpc_call_deadline(const struct tkm_grpc_call *call);
/* Sets (replaces) the cancel callback. If the call is already cancelled it is
 * not called (the reply or fail that finishes it then returns -ECANCELED). */
void tkm_grpc_call_on_cancel(struct tkm_grpc_call *call, tkm_grpc_cancel_cb cb, void *data);

/* Finishes the call with status OK and one response message (bytes borrowed
 * for the call, copied). Returns 0; -ECANCELED when the call was cancelled
 * (nothing sent); -E2BIG when len exceeds max_message (the client then gets
 * RESOURCE_EXHAUSTED instead); -ENOMEM. The call is finished (freed) in
 * every case: never touch it again. */
int tkm_grpc_call_reply(struct tkm_grpc_call *call, const void *bytes, size_t len);
/* Finishes the call with a non-OK code and message (copied, may be NULL; sent
 * percent-encoded in grpc-message). code OK is turned into UNKNOWN. Returns
 * 0, -ECANCELED or -ENOMEM; the call is finished in every case. */
int tkm_grpc_call_fail(struct tkm_grpc_call *call, int code, const char *message);

/* ---- client ------------------------------------------------------------ */

/* Requests and responses are capped at TKM_GRPC_DEFAULT_MAX_MESSAGE; the
 * :authority sent is "localhost". */
struct tkm_grpc_client;

/* The outcome of a call. message is "" for OK, else a sentence (the
 * server's grpc-message, or ours naming the socket path); resp/len the
 * response message (OK only, else NULL/0). All borrowed for the callback. */
typedef void (*tkm_grpc_client_cb)(int code, const char *message, const void *resp, size_t len,
                                   void *data);

/* A client for the server at socket_path (copied). loop is borrowed and must
 * outlive the client. *out is owned: end it with tkm_grpc_client_close().
 * Connects lazily. */
int tkm_grpc_client_new(uv_loop_t *loop, const char *socket_path, struct tkm_grpc_client **out,
                        struct tkm_err *err);

/* Starts a unary call. method "/pkg.Service/Method"; req/len the encoded
 * request (copied); timeout_ms 0 = no deadline, else sent as grpc-timeout and
 * enforced here (DEADLINE_EXCEEDED); no request metadata is sent. On success
 * cb runs exactly once, from the loop. Errors: -EINVAL (method), -E2BIG (req
 * over the maximum message), -ESHUTDOWN (client closing), -ENOMEM. Connection failures are reported
 * through cb as UNAVAILABLE with a message naming the socket path. */
int tkm_grpc_client_call(struct tkm_grpc_client *cli, const char *method, const void *req,
                         size_t len, uint64_t timeout_ms, tkm_grpc_client_cb cb, void *data,
                         struct tkm_err *err);

/* Cancels every call (CANCELLED), closes the connection and frees the client;
 * closed_cb (optional) runs from the loop after the last handle closed and
 * after every call's cb. cli NULL: no-op. */
void tkm_grpc_client_close(struct tkm_grpc_client *cli, void (*closed_cb)(void *data), void *data);

#endif
