/*
 * http.h - tkm's HTTP transport: libcurl's multi interface driven by a libuv loop.
 *
 * One struct tkm_http per loop (per process, normally) owns a curl multi
 * handle whose sockets are watched with uv_poll_t and whose timeouts run on a
 * uv_timer_t (the design of curl's docs/examples/multi-uv.c). Requests started
 * on it share its connection cache, so connections are reused and HTTP/2 is
 * negotiated (ALPN) and multiplexed when the server offers it. Nothing here
 * knows about Kubernetes or OCI: the Kubernetes client (k8sclient/) and the
 * registry client (lib/oci/) both sit on top.
 *
 * Lifecycle:
 *   tkm_http_new(loop, opts, &h, err)       bind a client to a loop
 *   tkm_http_start(h, &req_opts, &req, err)  start a request; done_cb runs later
 *   tkm_http_cancel(req)                     optional; done_cb then gets -ECANCELED
 *   tkm_http_close(h, closed_cb, data)       cancels what is in flight, closes the
 *                                            uv handles; the memory is freed from
 *                                            the last uv close callback, after
 *                                            which closed_cb runs
 * The loop must keep running until closed_cb has run.
 *
 * Callback contract:
 *   - If tkm_http_start() fails (returns < 0), no callback is ever called.
 *   - If it succeeds, done_cb is called exactly once, always from the loop
 *     (never from inside tkm_http_start or tkm_http_cancel).
 *   - data_cb (streaming requests) is called zero or more times before done_cb,
 *     with the body bytes as they arrive: any split, unrelated to HTTP/1.1
 *     chunks or HTTP/2 frames. It is called only for 2xx responses; the body of
 *     any other status is buffered in resp->body (capped by max_body) so the
 *     caller can decode the error (a Kubernetes Status, an OCI error list).
 *   - Inside a callback the caller may start new requests and may cancel any
 *     request, including the current one. It must not call tkm_http_close()
 *     from data_cb (return non-zero instead, then close from done_cb).
 *   - Single-threaded: every function runs on the loop's thread.
 *
 * Errors: functions return 0 or a negative errno-style code and, with a
 * non-NULL struct tkm_err, a sentence naming the URL. A finished request
 * reports its outcome in struct tkm_http_resp: code 0 means an HTTP response
 * arrived (any status, look at resp->status); a negative code is a transport
 * failure with resp->status 0 (or the status seen before the failure):
 *   -ETIMEDOUT      total timeout or idle (low-speed) limit hit, connect timeout;
 *                   resp->error says which ("timed out connecting ...", "timed
 *                   out: no complete response within N ms ...", "stalled: no
 *                   data for N s (B bytes received)")
 *   -ECONNREFUSED   nothing listens
 *   -ECONNRESET     the connection broke (reset, closed early, HTTP/2 stream error)
 *   -EHOSTUNREACH   name resolution or routing failed
 *   -EPROTO         TLS handshake or certificate verification failed
 *   -E2BIG          the body exceeded max_body
 *   -ECANCELED      tkm_http_cancel() or tkm_http_close()
 *   -EINTR          data_cb returned non-zero (its value is in resp->cb_rc)
 *   -ELOOP          more than 5 redirects
 *   -EINVAL         malformed URL or unsupported scheme
 *   -EIO            anything else (resp->error says what)
 *
 * TLS: peer and host verification are always on, unless a request sets
 * tls.insecure = 1 (the explicit insecure-skip-tls-verify of a kubeconfig).
 * CA, client certificate and key come from files or from PEM in memory.
 *
 * Redirects are not followed unless the request asks (registry blobs). curl
 * (>= 7.83) never forwards an Authorization header or credentials to a
 * different host, port or scheme; https may not be redirected to http.
 */
#ifndef TKM_HTTP_H
#define TKM_HTTP_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include <tkm/buf.h>
#include <tkm/err.h>

struct tkm_http;
struct tkm_http_req;

/* Client-wide settings; all optional (zero = default). Strings are copied. */
struct tkm_http_opts {
    const char *user_agent; /* default "tkm/<version>" */
};

/* TLS material for one request. Every pointer is borrowed for the duration
 * of tkm_http_start() only (it is copied). PEM in memory wins over a file. */
struct tkm_http_tls {
    const char *ca_file;
    const void *ca_pem;
    size_t ca_pem_len;
    const char *cert_file;
    const void *cert_pem;
    size_t cert_pem_len;
    const char *key_file;
    const void *key_pem;
    size_t key_pem_len;
    /* Verify the server certificate against this name instead of the URL's
     * host (kubeconfig tls-server-name). The connection still goes to the
     * URL's host and port (CURLOPT_CONNECT_TO). */
    const char *server_name;
    int insecure; /* 1: skip peer and host verification (explicit opt-in only) */
};

/* The outcome of a request, passed to done_cb. Owned by the request: valid
 * until done_cb returns. done_cb may take the body with tkm_buf_detach(). */
struct tkm_http_resp {
    int code;               /* 0: a response arrived; < 0: transport error (see above) */
    int cb_rc;              /* the non-zero value data_cb returned, else 0 */
    long status;            /* HTTP status, 0 when none arrived */
    long http_version;      /* 1 (HTTP/1.x) or 2 */
    struct tkm_buf body;    /* whole body (non-streaming, or non-2xx when streaming) */
    struct tkm_buf headers; /* the final response's header lines, "Name: value\r\n" each */
    const char *url;        /* the URL requested (borrowed from the request) */
    char error[512];        /* transport error sentence naming the URL, "" when code == 0 */
};

/* A completed request. resp is borrowed (see above). */
typedef void (*tkm_http_done_cb)(struct tkm_http_req *req, struct tkm_http_resp *resp, void *data);
/* Body bytes of a 2xx streaming response (p borrowed for the call). Return 0
 * to go on, non-zero to stop: done_cb then gets code -EINTR and cb_rc. */
typedef int (*tkm_http_data_cb)(struct tkm_http_req *req, const char *p, size_t n, void *data);

/* One request. Every pointer is borrowed for the duration of tkm_http_start()
 * only: strings, headers, body and TLS material are copied. */
struct tkm_http_req_opts {
    const char *method;         /* default "GET" (or "POST" when body is set) */
    const char *url;            /* required: http:// or https:// */
    const char *const *headers; /* NULL-terminated "Name: value" lines, or NULL */
    const void *body;           /* request body, or NULL */
    size_t body_len;
    const struct tkm_http_tls *tls; /* or NULL: system CA store, no client cert */
    uint64_t timeout_ms;            /* whole request; 0 = no limit (watches) */
    /* Idle limit: abort (-ETIMEDOUT, "stalled") when no byte has moved for
     * this long (checked about every second). A trickle of a byte now and
     * then keeps a transfer going: bound it with timeout_ms. 0 = none.
     * Watches set it a little above their server timeout. */
    uint64_t idle_timeout_ms;
    /* Receive rate cap in bytes per second (CURLOPT_MAX_RECV_SPEED_LARGE);
     * 0 = none. */
    uint64_t max_recv_bps;
    size_t max_body;      /* cap for the buffered body; default 16 MiB */
    int follow_redirects; /* 1: follow up to 5 redirects */
    /* A CURLOPT_RESOLVE line "host:port:addr[,addr...]" (or NULL): curl
     * connects host:port to exactly these addresses, without asking DNS (the
     * addresses a registry reach decision checked; <tkm/reach.h>). */
    const char *resolve;
    /* 1: offer gzip/deflate and decode transparently (API responses). Never
     * for content-addressed downloads, whose digest covers the raw bytes. */
    int compressed;
    tkm_http_data_cb data_cb; /* non-NULL: stream 2xx bodies instead of buffering */
    tkm_http_done_cb done_cb; /* required */
    void *data;               /* passed to both callbacks */
};

/* Creates a client on loop (borrowed; must outlive the client). opts may be
 * NULL. *out is owned: end it with tkm_http_close(). curl_global_init() must
 * have been called once in main() (tkm_http_global_init() does it). */
int tkm_http_new(uv_loop_t *loop, const struct tkm_http_opts *opts, struct tkm_http **out,
                 struct tkm_err *err);

/* Starts a request. On success *out (optional) is a borrowed handle, valid
 * until done_cb returns, for tkm_http_cancel(). */
int tkm_http_start(struct tkm_http *h, const struct tkm_http_req_opts *o, struct tkm_http_req **out,
                   struct tkm_err *err);

/* Stops a request that has not completed; its done_cb runs from the loop with
 * code -ECANCELED. A no-op once done_cb has started. */
void tkm_http_cancel(struct tkm_http_req *req);

/* Cancels every request in flight (each done_cb gets -ECANCELED), then closes
 * the client's uv handles and connections. closed_cb (optional) runs once the
 * memory has been freed. h may be NULL (closed_cb is then not called). */
void tkm_http_close(struct tkm_http *h, void (*closed_cb)(void *data), void *data);

/* Number of requests in flight (tests, metrics). */
size_t tkm_http_inflight(const struct tkm_http *h);

/* The loop a client runs on (borrowed). */
uv_loop_t *tkm_http_loop(const struct tkm_http *h);

/* Last value of header name (case-insensitive) in the final response, copied
 * into out (NUL-terminated, truncated to n-1). Returns the value's full length,
 * or -ENOENT when absent. */
int tkm_http_resp_header(const struct tkm_http_resp *resp, const char *name, char *out, size_t n);

/* Seconds to wait from a Retry-After header (delta-seconds or HTTP-date),
 * clamped to [0, max_s]; -1 when the header is absent or unparsable. */
long tkm_http_retry_after(const struct tkm_http_resp *resp, long max_s);

/*
 * The libuv thread pool, sized on purpose. It is process-wide, created on
 * first use (uv_queue_work, uv_fs_*, uv_getaddrinfo) with UV_THREADPOOL_SIZE
 * threads (libuv's default is 4). What runs there in tkm: extraction and
 * full-file hashing (lib/oci jobs: at most TKM_OCI_POOL_JOBS per registry
 * session), the staged pull's rename, and k8sclient's exec credential
 * plugins. Registry transfers and lease renewals never do: they are on the
 * loop. TKM_THREADPOOL_SIZE leaves room for credential refreshes while two
 * sessions' worth of image work (4 items) keep threads busy.
 */
#define TKM_THREADPOOL_SIZE 8

/* Sets UV_THREADPOOL_SIZE to size (0: TKM_THREADPOOL_SIZE) unless the
 * environment already asks for at least that many. Call from main() before
 * the first loop, thread or uv call. Returns the size in effect (> 0), or
 * -EINVAL when size exceeds libuv's 1024 (err says so). */
int tkm_threadpool_init(unsigned size, struct tkm_err *err);

/* Calls curl_global_init() once; call from main() before any thread starts. */
int tkm_http_global_init(struct tkm_err *err);

/* A caller-owned response (a copy kept past done_cb): tkm_http_resp_init()
 * before use, tkm_http_resp_release() after. */
void tkm_http_resp_init(struct tkm_http_resp *resp);
void tkm_http_resp_release(struct tkm_http_resp *resp);

#endif
