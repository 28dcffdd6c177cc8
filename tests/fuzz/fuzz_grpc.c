/*
 * fuzz_grpc - the gRPC server (lib/grpc) on arbitrary client bytes.
 *
 * One real tkm_grpc_server listens on a unix socket in a temporary directory
 * (created once, for the process). Each input is one connection: a blocking
 * connect, then the bytes are written through a uv_pipe_t on the server's own
 * loop, the write side is shut down, and the client reads (and discards)
 * whatever the server answers until it sees EOF. The loop runs until the
 * client has closed and the server has no connection left, so nothing
 * depends on timing: a request either reaches a handler and is answered at
 * once, or is cancelled when the server sees the client's EOF.
 *
 * Handlers: /test.Echo/Echo replies with the request, /test.Echo/Fail fails
 * with INVALID_ARGUMENT and a message that needs percent-encoding.
 * Checks: no crash, no leak (every call is freed when its connection goes),
 * and every connection closes.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>
#include <uv.h>

#include <tkm/grpc.h>
#include <tkm/log.h>

#define FZ_MAX_INPUT (64u * 1024)

struct fz {
    uv_loop_t loop;
    struct tkm_grpc_server *srv;
    char dir[64];
    char path[128];
};

struct cli {
    uv_pipe_t pipe;
    uv_write_t wreq;
    uv_shutdown_t sreq;
    int closed;
};

static struct fz *g_fz; /* the process's one server (libFuzzer has no main) */

/* Reads what a handler may read (every accessor must be safe on any
 * request that reached dispatch), then replies with the request. */
static void echo(struct tkm_grpc_call *call, void *data)
{
    size_t n = 0;
    const void *p = tkm_grpc_call_request(call, &n);
    (void)data;
    if (n > 0 && !p)
        abort();
    if (tkm_grpc_call_peer(call)->uid != geteuid())
        abort();
    (void)tkm_grpc_call_deadline(call);
    if (tkm_grpc_call_reply(call, p, n) < 0)
        abort();
}

static void fail(struct tkm_grpc_call *call, void *data)
{
    (void)data;
    if (tkm_grpc_call_fail(call, TKM_GRPC_INVALID_ARGUMENT, "no \xe2\x98\x83 100%\n") < 0)
        abort();
}

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    struct tkm_grpc_server_opts o = {0};
    struct tkm_err err = {0};
    struct fz *f = calloc(1, sizeof *f);
    (void)argc;
    (void)argv;
    if (!f)
        abort();
    tkm_log_init("fuzz_grpc", TKM_LOG_ERROR, 0);
    snprintf(f->dir, sizeof f->dir, "/tmp/fuzz_grpc.XXXXXX");
    if (!mkdtemp(f->dir) || uv_loop_init(&f->loop) != 0)
        abort();
    snprintf(f->path, sizeof f->path, "%s/s.sock", f->dir);
    o.socket_path = f->path;
    if (tkm_grpc_server_new(&f->loop, &o, &f->srv, &err) != 0 ||
        tkm_grpc_server_register(f->srv, "/test.Echo/Echo", echo, NULL, &err) != 0 ||
        tkm_grpc_server_register(f->srv, "/test.Echo/Fail", fail, NULL, &err) != 0)
        abort();
    g_fz = f;
    return 0;
}

static void cli_closed(uv_handle_t *h)
{
    ((struct cli *)h)->closed = 1;
}

static void cli_alloc(uv_handle_t *h, size_t hint, uv_buf_t *buf)
{
    static char sink[16384];
    (void)h;
    (void)hint;
    *buf = uv_buf_init(sink, sizeof sink);
}

static void cli_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
    (void)buf;
    if (nread < 0 && !uv_is_closing((uv_handle_t *)s))
        uv_close((uv_handle_t *)s, cli_closed);
}

static void cli_written(uv_write_t *req, int status)
{
    (void)req;
    (void)status; /* the server may have closed first: the read sees it */
}

static void cli_shut(uv_shutdown_t *req, int status)
{
    (void)req;
    (void)status;
}

static int cli_connect(const char *path)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        abort();
    memcpy(sa.sun_path, path, strlen(path) + 1);
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0)
        abort();
    return fd;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct fz *f = g_fz;
    struct cli c = {.closed = 0};
    uv_buf_t b = uv_buf_init((char *)data, (unsigned)size);
    int fd;
    if (size > FZ_MAX_INPUT)
        return 0;
    fd = cli_connect(f->path);
    if (uv_pipe_init(&f->loop, &c.pipe, 0) != 0 || uv_pipe_open(&c.pipe, fd) != 0)
        abort();
    if (uv_read_start((uv_stream_t *)&c.pipe, cli_alloc, cli_read) != 0)
        abort();
    if (size > 0 && uv_write(&c.wreq, (uv_stream_t *)&c.pipe, &b, 1, cli_written) != 0)
        abort();
    if (uv_shutdown(&c.sreq, (uv_stream_t *)&c.pipe, cli_shut) != 0)
        abort();
    /* The accept comes first (the connection is counted from then on). */
    while (!c.closed || tkm_grpc_server_connections(f->srv) != 0)
        uv_run(&f->loop, UV_RUN_ONCE);
    return 0;
}
