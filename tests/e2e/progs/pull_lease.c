/*
 * e2e_pull_lease - a Lease renewed on time while slow image pulls run on the
 * same libuv loop (the daemons' shape: one loop, one http client, one
 * registry session, k8sclient's lease elector beside the pulls).
 *
 * Usage: e2e_pull_lease --kubeconfig FILE --namespace NS --name LEASE
 *          --upstream HOST:PORT --image REPO:TAG --out DIR
 *          [--pulls N] [--rate BYTES_PER_S] [--retry-ms N]
 *          [--digest D --key PUB [--other-key PUB]]
 *
 * A throttling proxy (a thread of its own, blocking sockets, outside the
 * loop under test) relays every registry response from --upstream at
 * --rate bytes/s per connection. Once the elector leads, N pull jobs of
 * 127.0.0.1:<proxy>/REPO:TAG into DIR/pull-<i> start on one session. The
 * program records, on the loop, every successful renewal (a 10 ms probe of
 * the elector's counters) and the loop's lag (a 20 ms timer), and prints
 * With --digest and keys, signature searches (tkm_sig_job_verify) of D
 * run on the same session beside the pulls ("verify": [{rc, info}] in the
 * order they finished; info is the key id or the error).
 * One JSON line when all jobs have reported:
 *   {"pulls_ok":N,"digests":[...],"pull_ms":..,"renewals_during":..,
 *    "max_renew_gap_ms":..,"max_loop_lag_ms":..,"lost":..,"pool_size":..,"verify":[..]}
 * Exit 0 when it could measure (the script judges the numbers), 1 otherwise.
 */
#include <arpa/inet.h>
#include <getopt.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>

#include <tkm/http.h>
#include <tkm/log.h>
#include <tkm/oci/ref.h>
#include <tkm/oci/session.h>
#include <tkm/trust/sigjob.h>
#include <tkm/util.h>
#include <k8s/client.h>
#include <k8s/config.h>
#include <k8s/lease.h>

#define MAX_PULLS 16

/* ---- the throttling proxy (its own threads) ------------------------------- */

struct proxy {
    int fd, port;
    struct sockaddr_in up;
    uint64_t rate; /* bytes per second, per connection */
};

struct pconn {
    struct proxy *p;
    int c;
};

static int write_all(int fd, const char *b, size_t n)
{
    while (n) {
        ssize_t w = write(fd, b, n);
        if (w <= 0)
            return -1;
        b += w;
        n -= (size_t)w;
    }
    return 0;
}

static void *proxy_conn(void *arg)
{
    struct pconn *pc = arg;
    char head[16384], buf[65536];
    size_t n = 0;
    int u = -1;
    while (n < sizeof head - 64) { /* the request head (GET/HEAD: no body) */
        ssize_t r = read(pc->c, head + n, sizeof head - 64 - n);
        if (r <= 0)
            goto out;
        n += (size_t)r;
        head[n] = '\0';
        if (strstr(head, "\r\n\r\n"))
            break;
    }
    char *end = strstr(head, "\r\n\r\n");
    if (!end)
        goto out;
    /* one request per upstream connection, so the upstream closes after it */
    n = (size_t)(end - head) + 2;
    n += (size_t)snprintf(head + n, sizeof head - n, "Connection: close\r\n\r\n");
    if ((u = socket(AF_INET, SOCK_STREAM, 0)) < 0 ||
        connect(u, (struct sockaddr *)&pc->p->up, sizeof pc->p->up) != 0 ||
        write_all(u, head, n) != 0)
        goto out;
    size_t slice = (size_t)(pc->p->rate / 20); /* every 50 ms */
    if (slice == 0 || slice > sizeof buf)
        slice = sizeof buf;
    for (;;) {
        ssize_t r = read(u, buf, slice);
        if (r <= 0 || write_all(pc->c, buf, (size_t)r) != 0)
            break;
        struct timespec ts = {0, 50 * 1000000L};
        nanosleep(&ts, NULL);
    }
out:
    if (u >= 0)
        close(u);
    close(pc->c);
    free(pc);
    return NULL;
}

static void *proxy_accept(void *arg)
{
    struct proxy *p = arg;
    for (;;) {
        int c = accept(p->fd, NULL, NULL);
        if (c < 0)
            return NULL;
        struct pconn *pc = calloc(1, sizeof *pc);
        pthread_t th;
        if (!pc) {
            close(c);
            continue;
        }
        pc->p = p;
        pc->c = c;
        if (pthread_create(&th, NULL, proxy_conn, pc) != 0) {
            close(c);
            free(pc);
            continue;
        }
        pthread_detach(th);
    }
}

static int proxy_start(struct proxy *p, const char *upstream)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof a;
    char host[64];
    uint64_t port;
    pthread_t th;
    const char *colon = strrchr(upstream, ':');
    if (!colon || (size_t)(colon - upstream) >= sizeof host ||
        tkm_parse_u64(colon + 1, 65535, &port) != 0)
        return -1;
    snprintf(host, sizeof host, "%.*s", (int)(colon - upstream), upstream);
    p->up.sin_family = AF_INET;
    p->up.sin_port = htons((uint16_t)port);
    if (inet_pton(AF_INET, strcmp(host, "localhost") == 0 ? "127.0.0.1" : host, &p->up.sin_addr) !=
        1)
        return -1;
    if ((p->fd = socket(AF_INET, SOCK_STREAM, 0)) < 0 ||
        bind(p->fd, (struct sockaddr *)&a, sizeof a) != 0 || listen(p->fd, 64) != 0 ||
        getsockname(p->fd, (struct sockaddr *)&a, &al) != 0)
        return -1;
    p->port = ntohs(a.sin_port);
    if (pthread_create(&th, NULL, proxy_accept, p) != 0)
        return -1;
    pthread_detach(th);
    return 0;
}

/* ---- the loop under test ------------------------------------------------- */

struct app {
    uv_loop_t *loop;
    struct k8s_client *c;
    struct k8s_lease *l;
    struct tkm_http *http;
    struct tkm_oci_session *ses;
    uv_timer_t probe, lag;
    struct tkm_oci_ref ref;
    const char *out;
    int pulls, started, done, ok, failed;
    char digests[MAX_PULLS][TKM_OCI_DIGEST_LEN + 1];
    uint64_t t_start, t_end; /* the pulls' span */
    uint64_t last_renewals, last_renew_ms, max_gap_ms, renewals_during;
    uint64_t lag_expect, max_lag_ms;
    int pool_size, rc;
    /* cosign verify jobs beside the pulls: [0] the signer's key, [1] another */
    const char *digest, *keys[2];
    int vrc[2], vdone;
    char vinfo[2][600];
};

static void pull_done(struct tkm_oci_job *job, int rc, struct tkm_oci_job_result *res,
                      const struct tkm_err *err, void *data)
{
    struct app *a = data;
    (void)job;
    if (rc == 0) {
        snprintf(a->digests[a->ok], sizeof a->digests[0], "%s", res->image.manifest.digest);
        a->ok++;
    } else {
        fprintf(stderr, "e2e_pull_lease: pull failed: %s\n", tkm_err_str(err));
        a->failed++;
    }
    if (++a->done == a->pulls)
        a->t_end = tkm_now_ms();
}

static void verify_done(struct tkm_oci_job *job, int rc, struct tkm_oci_job_result *res,
                        const struct tkm_err *err, void *data)
{
    struct app *a = data;
    const struct tkm_sig_result *cr = res->detail;
    int i = a->vdone++;
    (void)job;
    a->vrc[i] = rc;
    if (rc == 0)
        snprintf(a->vinfo[i], sizeof a->vinfo[i], "%s", cr->key_id);
    else
        snprintf(a->vinfo[i], sizeof a->vinfo[i], "%s", tkm_err_str(err));
    for (char *p = a->vinfo[i]; *p; p++)
        if (*p == '"' || *p == '\\')
            *p = '\'';
}

static void start_verify(struct app *a, int i)
{
    struct tkm_buf pem = TKM_BUF_INIT(1 << 16);
    struct tkm_err err = {0};
    FILE *f = fopen(a->keys[i], "r");
    char chunk[4096];
    size_t n;
    while (f && (n = fread(chunk, 1, sizeof chunk, f)) > 0)
        tkm_buf_append(&pem, chunk, n);
    if (f)
        fclose(f);
    /* slot order follows completion; remember which key each slot had */
    struct tkm_sig_key k = {.pem = pem.data, .len = pem.len};
    struct tkm_sig_policy pol = {.keys = &k, .nkeys = 1};
    if (tkm_sig_job_verify(a->ses, a->ref.repo, a->digest, &pol, verify_done, a, NULL, &err) != 0) {
        fprintf(stderr, "e2e_pull_lease: verify: %s\n", tkm_err_str(&err));
        a->vrc[a->vdone] = -1;
        a->vdone++;
    }
    tkm_buf_release(&pem);
}

static void on_closed(void *data)
{
    struct app *a = data;
    a->l = NULL;
    k8s_client_close(a->c, NULL, NULL);
}

static void finish(struct app *a)
{
    const struct k8s_lease_stats *st = k8s_lease_get_stats(a->l);
    printf("{\"pulls_ok\":%d,\"pulls_failed\":%d,\"digests\":[", a->ok, a->failed);
    for (int i = 0; i < a->ok; i++)
        printf("%s\"%s\"", i ? "," : "", a->digests[i]);
    printf("],\"pull_ms\":%" PRIu64 ",\"renewals_during\":%" PRIu64 ",\"max_renew_gap_ms\":%" PRIu64
           ",\"max_loop_lag_ms\":%" PRIu64 ",\"lost\":%" PRIu64 ",\"renewals\":%" PRIu64
           ",\"pool_size\":%d,\"verify\":[",
           a->t_end - a->t_start, a->renewals_during, a->max_gap_ms, a->max_lag_ms, st->lost,
           st->renewals, a->pool_size);
    for (int i = 0; i < a->vdone; i++)
        printf("%s{\"rc\":%d,\"info\":\"%s\"}", i ? "," : "", a->vrc[i], a->vinfo[i]);
    printf("]}\n");
    uv_close((uv_handle_t *)&a->probe, NULL);
    uv_close((uv_handle_t *)&a->lag, NULL);
    tkm_oci_session_close(a->ses, NULL, NULL);
    a->ses = NULL;
    tkm_http_close(a->http, NULL, NULL);
    k8s_lease_close(a->l, on_closed, a);
    a->rc = 0;
}

static void start_pulls(struct app *a)
{
    struct tkm_err err = {0};
    char dir[4096];
    a->t_start = a->last_renew_ms = tkm_now_ms();
    for (int i = 0; i < a->pulls; i++) {
        snprintf(dir, sizeof dir, "%s/pull-%d", a->out, i);
        if (tkm_oci_job_pull(a->ses, &a->ref, dir, "e2e", pull_done, a, NULL, &err) != 0) {
            fprintf(stderr, "e2e_pull_lease: %s\n", tkm_err_str(&err));
            a->failed++;
            a->done++;
        }
    }
    a->started = 1;
    for (int i = 0; i < 2 && a->digest; i++)
        if (a->keys[i])
            start_verify(a, i);
}

/* Every 10 ms: a renewal since the last probe? The gap between two is the
 * number that matters (renew deadline). */
static void on_probe(uv_timer_t *t)
{
    struct app *a = t->data;
    const struct k8s_lease_stats *st = k8s_lease_get_stats(a->l);
    uint64_t now = tkm_now_ms();
    if (!a->started) {
        if (k8s_lease_is_leader(a->l)) {
            a->last_renewals = st->renewals;
            start_pulls(a);
        }
        return;
    }
    if (st->renewals != a->last_renewals) {
        if (a->done < a->pulls) {
            uint64_t gap = now - a->last_renew_ms;
            a->max_gap_ms = gap > a->max_gap_ms ? gap : a->max_gap_ms;
            a->renewals_during += st->renewals - a->last_renewals;
        }
        a->last_renewals = st->renewals;
        a->last_renew_ms = now;
    }
    int verifies = (a->digest && a->keys[0]) + (a->digest && a->keys[1]);
    if (a->done == a->pulls && a->vdone == verifies) {
        uv_timer_stop(t);
        finish(a);
    }
}

static void on_lag(uv_timer_t *t)
{
    struct app *a = t->data;
    uint64_t now = uv_now(a->loop);
    if (a->lag_expect && now > a->lag_expect && a->started && a->done < a->pulls) {
        uint64_t lag = now - a->lag_expect;
        a->max_lag_ms = lag > a->max_lag_ms ? lag : a->max_lag_ms;
    }
    a->lag_expect = now + 20;
}

static int setup(struct app *a, struct k8s_config *cfg, struct k8s_lease_opts *lo,
                 const char *kubeconfig, const char *image, struct proxy *p)
{
    struct tkm_err err = {0};
    char refs[1024];
    struct tkm_oci_registry_opts ro = {.anonymous = 1, .idle_timeout_ms = 30000};
    snprintf(refs, sizeof refs, "127.0.0.1:%d/%s", p->port, image);
    if (tkm_oci_ref_parse(&a->ref, refs, &err) != 0 || tkm_http_global_init(&err) != 0 ||
        k8s_config_load_default(cfg, kubeconfig, &err) != 0 ||
        k8s_client_new(a->loop, cfg, NULL, &a->c, &err) != 0 ||
        tkm_http_new(a->loop, NULL, &a->http, &err) != 0 ||
        tkm_oci_session_new(a->http, a->ref.host, &ro, &a->ses, &err) != 0 ||
        k8s_lease_start(a->c, lo, &a->l, &err) != 0) {
        fprintf(stderr, "e2e_pull_lease: %s\n", tkm_err_str(&err));
        return -1;
    }
    uv_timer_init(a->loop, &a->probe);
    uv_timer_init(a->loop, &a->lag);
    a->probe.data = a->lag.data = a;
    uv_timer_start(&a->probe, on_probe, 10, 10);
    uv_timer_start(&a->lag, on_lag, 20, 20);
    return 0;
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {{"kubeconfig", required_argument, NULL, 'k'},
                                         {"namespace", required_argument, NULL, 's'},
                                         {"name", required_argument, NULL, 'n'},
                                         {"upstream", required_argument, NULL, 'u'},
                                         {"image", required_argument, NULL, 'i'},
                                         {"out", required_argument, NULL, 'o'},
                                         {"pulls", required_argument, NULL, 'p'},
                                         {"rate", required_argument, NULL, 'r'},
                                         {"retry-ms", required_argument, NULL, 'T'},
                                         {"digest", required_argument, NULL, 'd'},
                                         {"key", required_argument, NULL, 'K'},
                                         {"other-key", required_argument, NULL, 'O'},
                                         {NULL, 0, NULL, 0}};
    struct app a = {.pulls = 4, .rc = 1};
    struct proxy p = {.rate = 128 * 1024};
    struct k8s_config cfg;
    struct k8s_lease_opts lo = {.identity = "e2e-pull-lease"};
    const char *kubeconfig = NULL, *upstream = NULL, *image = NULL;
    uint64_t v, retry = 500;
    struct tkm_err err = {0};
    int opt;
    /* first, before anything can start libuv's pool */
    if ((a.pool_size = tkm_threadpool_init(0, &err)) < 0) {
        fprintf(stderr, "e2e_pull_lease: %s\n", tkm_err_str(&err));
        return 1;
    }
    k8s_config_init(&cfg);
    while ((opt = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (opt) {
        case 'k':
            kubeconfig = optarg;
            break;
        case 's':
            lo.ns = optarg;
            break;
        case 'n':
            lo.name = optarg;
            break;
        case 'u':
            upstream = optarg;
            break;
        case 'i':
            image = optarg;
            break;
        case 'o':
            a.out = optarg;
            break;
        case 'p':
            if (tkm_parse_u64(optarg, MAX_PULLS, &v) != 0 || v == 0)
                return 2;
            a.pulls = (int)v;
            break;
        case 'r':
            if (tkm_parse_u64(optarg, UINT32_MAX, &p.rate) != 0 || p.rate < 1024)
                return 2;
            break;
        case 'd':
            a.digest = optarg;
            break;
        case 'K':
            a.keys[0] = optarg;
            break;
        case 'O':
            a.keys[1] = optarg;
            break;
        case 'T':
            if (tkm_parse_u64(optarg, 60000, &retry) != 0 || retry < 100)
                return 2;
            break;
        default:
            return 2;
        }
    }
    if (!lo.name || !upstream || !image || !a.out) {
        fprintf(stderr, "e2e_pull_lease: --name, --upstream, --image and --out are required\n");
        return 2;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    tkm_log_init("e2e_pull_lease", TKM_LOG_WARN, 0);
    lo.retry_period_ms = retry;
    lo.renew_deadline_ms = retry * 6;
    lo.lease_duration_ms = retry * 10;
    a.loop = uv_default_loop();
    if (proxy_start(&p, upstream) != 0) {
        fprintf(stderr, "e2e_pull_lease: cannot start the proxy for %s\n", upstream);
        goto out;
    }
    if (setup(&a, &cfg, &lo, kubeconfig, image, &p) != 0)
        goto out;
    uv_run(a.loop, UV_RUN_DEFAULT);
    if (uv_loop_close(a.loop) != 0)
        a.rc = 3;
out:
    k8s_config_release(&cfg);
    return a.rc;
}
