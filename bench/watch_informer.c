/*
 * bench_watch_informer - the libk8sclient side of bench/run-watch.sh.
 *
 *   load     --ns NS --count N        create N TritonKernelCaches (64 in flight)
 *   informer --ns NS --expect N       time to sync an informer of N objects; RSS after
 *   watch    --ns NS --expect N       events/s of a watch from resourceVersion 0
 *                                     (the server sends N synthetic ADDEDs)
 *   decode   --file F --repeat R      events/s framing + decoding a captured watch
 *                                     stream into an informer store (no network)
 * Each mode prints one JSON line on stdout; errors go to stderr (exit 1).
 * KUBECONFIG (or --kubeconfig) selects the apiserver.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <uv.h>

#include <tkm/http.h>
#include <k8s/client.h>
#include <k8s/config.h>
#include <k8s/informer.h>
#include <k8s/watch.h>
#include <tkm/log.h>
#include <tkm/util.h>
#include <tkm/api/v1alpha1.h>

/* The store and decoder are private to libk8sclient; the bench includes them
 * from the source tree (k8sclient/) to measure decoding without a network. */
#include "../k8sclient/informer-int.h"
#include "../k8sclient/watch-int.h"

struct bench {
    uv_loop_t *loop;
    struct k8s_client *c;
    const char *ns, *kubeconfig, *file;
    long count, expect, repeat;
    long created, inflight, failed;
    uint64_t t0;
    struct k8s_informer *inf;
    struct k8s_watch *w;
    long events;
    int done;
};

static long rss_kb(void)
{
    char line[256];
    long kb = -1;
    FILE *f = fopen("/proc/self/status", "r");
    if (!f)
        return -1;
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "VmRSS:", 6) == 0) {
            int64_t v;
            char *p = line + 6, *e;
            while (*p == ' ' || *p == '\t')
                p++;
            e = strchr(p, ' ');
            if (e)
                *e = '\0';
            if (tkm_parse_i64(p, 0, INT64_MAX, &v) == 0)
                kb = (long)v;
        }
    }
    fclose(f);
    return kb;
}

/* User + system CPU seconds of this process so far. */
static double cpu_s(void)
{
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) != 0)
        return -1;
    return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
           (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

/* ---- load ---------------------------------------------------------------- */

static void create_next(struct bench *b);

static void created_cb(int rc, json_t *obj, const struct k8s_status *st, void *data)
{
    struct bench *b = data;
    (void)obj;
    b->inflight--;
    if (rc < 0 && st->code != 409) {
        char msg[512];
        fprintf(stderr, "bench_watch_informer: create: %s\n", k8s_status_str(st, msg, sizeof msg));
        b->failed++;
    }
    create_next(b);
}

static void create_next(struct bench *b)
{
    char note[700];
    memset(note, 'n', sizeof note - 1);
    note[sizeof note - 1] = '\0';
    while (b->inflight < 64 && b->created < b->count && b->failed < 10) {
        char name[64], image[128];
        snprintf(name, sizeof name, "bench-%06ld", b->created);
        snprintf(image, sizeof image, "quay.io/tkm/cache-%06ld:v1", b->created);
        json_t *o =
            json_pack("{s:s, s:s, s:{s:s, s:{s:s, s:s}, s:{s:s}}, s:{s:s, s:s}}", "apiVersion",
                      "tkm.io/v1alpha1", "kind", "TritonKernelCache", "metadata", "name", name,
                      "labels", "app", "bench", "gpu", "h200", "annotations", "bench.tkm.io/note",
                      note, "spec", "cacheImage", image, "mountPath", "/var/cache/triton");
        if (!o || k8s_create_async(b->c, &tkm_api_res_tkc, b->ns, o, created_cb, b) < 0) {
            json_decref(o);
            b->failed++;
            break;
        }
        json_decref(o);
        b->created++;
        b->inflight++;
    }
    if (b->inflight == 0 && !b->done) {
        b->done = 1;
        uint64_t ms = tkm_now_ms() - b->t0;
        printf(
            "{\"client\":\"tkm\",\"mode\":\"load\",\"created\":%ld,\"failed\":%ld,\"ms\":%" PRIu64
            "}\n",
            b->created, b->failed, ms);
        k8s_client_close(b->c, NULL, NULL);
    }
}

/* ---- informer ------------------------------------------------------------ */

/* What a reconciler does with a cached object: parse its raw JSON once
 * (jansson, duplicates rejected) and read a spec field. */
static int parse_one(const struct k8s_obj *obj, void *data)
{
    long *parsed = data;
    json_t *root = NULL;
    struct tkm_err err = {0};
    if (k8s_obj_parse(obj, &root, &err) < 0) {
        fprintf(stderr, "bench_watch_informer: %s: %s\n", obj->key, tkm_err_str(&err));
        return -EPROTO;
    }
    const char *image =
        json_string_value(json_object_get(json_object_get(root, "spec"), "cacheImage"));
    if (image && *image)
        (*parsed)++;
    json_decref(root);
    return 0;
}

static void inf_synced(void *data)
{
    struct bench *b = data;
    uint64_t ms = tkm_now_ms() - b->t0;
    double cpu = cpu_s();
    size_t n = k8s_informer_count(b->inf);
    long parsed = 0;
    if ((long)n != b->expect) {
        fprintf(stderr, "bench_watch_informer: informer holds %zu objects, expected %ld\n", n,
                b->expect);
        b->failed = 1;
    }
    /* The store holds raw JSON: reading every object back out costs a parse. */
    uint64_t p0 = tkm_now_ms();
    if (k8s_informer_foreach(b->inf, parse_one, &parsed) != 0 || parsed != (long)n)
        b->failed = 1;
    uint64_t parse_ms = tkm_now_ms() - p0;
    double parse_cpu = cpu_s() - cpu;
    /* Let the loop settle as the Go side sleeps 2 s after sync. */
    uv_sleep(2000);
    printf("{\"client\":\"tkm\",\"mode\":\"informer\",\"objects\":%zu,\"sync_ms\":%" PRIu64
           ",\"sync_cpu_s\":%.3f,\"parse_ms\":%" PRIu64 ",\"parse_cpu_s\":%.3f,\"parsed\":%ld"
           ",\"rss_kb\":%ld,\"store_bytes\":%zu}\n",
           n, ms, cpu, parse_ms, parse_cpu, parsed, rss_kb(), k8s_informer_bytes(b->inf));
    k8s_informer_close(b->inf, NULL, NULL);
    k8s_client_close(b->c, NULL, NULL);
}

/* ---- watch --------------------------------------------------------------- */

static int w_event(const struct k8s_watch_event *ev, void *data)
{
    struct bench *b = data;
    (void)ev;
    if (++b->events < b->expect)
        return 0;
    uint64_t ms = tkm_now_ms() - b->t0;
    printf("{\"client\":\"tkm\",\"mode\":\"watch\",\"events\":%ld,\"ms\":%" PRIu64
           ",\"events_per_s\":%.0f,\"cpu_s\":%.3f,\"rss_kb\":%ld}\n",
           b->events, ms, ms ? (double)b->events * 1000.0 / (double)ms : 0.0, cpu_s(), rss_kb());
    k8s_watch_close(b->w, NULL, NULL);
    k8s_client_close(b->c, NULL, NULL);
    return 0;
}

/* ---- decode -------------------------------------------------------------- */

struct dec {
    struct k8s__store store;
    long events, bad;
};

static int dec_cb(const char *p, size_t n, void *data)
{
    struct dec *d = data;
    struct k8s_watch_event ev;
    json_t *root = NULL;
    struct k8s_obj *o = NULL;
    if (k8s__event_decode(p, n, &ev, &root, NULL) < 0) {
        d->bad++;
        return 0;
    }
    if (ev.type != K8S_WATCH_BOOKMARK && ev.type != K8S_WATCH_ERROR &&
        (k8s__obj_new(&ev, 0, &o) < 0 || k8s__store_put_take(&d->store, o, NULL) < 0))
        d->bad++;
    json_decref(root);
    d->events++;
    return 0;
}

static int decode_file(struct bench *b)
{
    struct tkm_buf data = TKM_BUF_INIT((size_t)1 << 31);
    char chunk[16384];
    long events = 0, bad = 0;
    FILE *f = fopen(b->file, "rb");
    if (!f) {
        fprintf(stderr, "bench_watch_informer: %s: %s\n", b->file, strerror(errno));
        return 1;
    }
    size_t n;
    while ((n = fread(chunk, 1, sizeof chunk, f)) > 0)
        if (tkm_buf_append(&data, chunk, n) < 0)
            break;
    fclose(f);
    uint64_t t0 = tkm_now_ms();
    double cpu0 = cpu_s();
    for (long r = 0; r < b->repeat; r++) {
        struct k8s__framer fr;
        struct dec d = {0};
        k8s__store_init(&d.store);
        k8s__framer_init(&fr, K8S__FRAME_STREAM, 8u << 20);
        /* Fed in 16 KiB pieces, as libcurl delivers a body. */
        for (size_t off = 0; off < data.len; off += sizeof chunk) {
            size_t take = data.len - off < sizeof chunk ? data.len - off : sizeof chunk;
            if (k8s__framer_feed(&fr, data.data + off, take, dec_cb, &d, NULL) < 0)
                break;
        }
        k8s__framer_release(&fr);
        k8s__store_release(&d.store);
        events += d.events;
        bad += d.bad;
    }
    uint64_t ms = tkm_now_ms() - t0;
    printf("{\"client\":\"tkm\",\"mode\":\"decode\",\"events\":%ld,\"bad\":%ld,\"ms\":%" PRIu64
           ",\"events_per_s\":%.0f,\"cpu_s\":%.3f,\"bytes\":%zu}\n",
           events, bad, ms, ms ? (double)events * 1000.0 / (double)ms : 0.0, cpu_s() - cpu0,
           data.len * (size_t)b->repeat);
    tkm_buf_release(&data);
    return bad ? 1 : 0;
}

/* ---- main ---------------------------------------------------------------- */

static int start_mode(struct bench *b, const char *mode, struct tkm_err *err)
{
    b->t0 = tkm_now_ms();
    if (strcmp(mode, "load") == 0) {
        create_next(b);
        return 0;
    }
    if (strcmp(mode, "informer") == 0) {
        struct k8s_informer_opts io = {0};
        io.watch.res = &tkm_api_res_tkc;
        io.watch.ns = b->ns;
        io.handler.on_synced = inf_synced;
        io.data = b;
        return k8s_informer_start(b->c, &io, &b->inf, err);
    }
    if (strcmp(mode, "watch") == 0) {
        struct k8s_watch_opts wo = {
            .res = &tkm_api_res_tkc, .ns = b->ns, .start_resource_version = "0"};
        static const struct k8s_watch_handler h = {.event = w_event};
        return k8s_watch_start(b->c, &wo, &h, b, &b->w, err);
    }
    return tkm_err_set(err, -EINVAL, "unknown mode %s (load, informer, watch, decode)", mode);
}

static int parse_long(const char *s, long *out)
{
    int64_t v;
    int rc = tkm_parse_i64(s, 0, 100000000, &v);
    if (rc == 0)
        *out = (long)v;
    return rc;
}

int main(int argc, char **argv)
{
    static const struct option lo[] = {{"ns", required_argument, NULL, 'n'},
                                       {"count", required_argument, NULL, 'c'},
                                       {"expect", required_argument, NULL, 'e'},
                                       {"kubeconfig", required_argument, NULL, 'k'},
                                       {"file", required_argument, NULL, 'f'},
                                       {"repeat", required_argument, NULL, 'r'},
                                       {NULL, 0, NULL, 0}};
    struct bench b = {.ns = "bench-watch", .count = 10000, .expect = 10000, .repeat = 1};
    struct k8s_config cfg;
    struct tkm_err err = {0};
    int opt, rc = 1;
    if (argc < 2) {
        fprintf(stderr, "usage: bench_watch_informer load|informer|watch|decode [options]\n");
        return 2;
    }
    const char *mode = argv[1];
    optind = 2;
    while ((opt = getopt_long(argc, argv, "", lo, NULL)) != -1) {
        int bad = 0;
        switch (opt) {
        case 'n':
            b.ns = optarg;
            break;
        case 'c':
            bad = parse_long(optarg, &b.count);
            break;
        case 'e':
            bad = parse_long(optarg, &b.expect);
            break;
        case 'r':
            bad = parse_long(optarg, &b.repeat);
            break;
        case 'k':
            b.kubeconfig = optarg;
            break;
        case 'f':
            b.file = optarg;
            break;
        default:
            return 2;
        }
        if (bad) {
            fprintf(stderr, "bench_watch_informer: bad number %s\n", optarg);
            return 2;
        }
    }
    tkm_log_init("bench_watch_informer", TKM_LOG_WARN, 0);
    if (strcmp(mode, "decode") == 0) {
        if (!b.file) {
            fprintf(stderr, "bench_watch_informer: decode needs --file\n");
            return 2;
        }
        return decode_file(&b);
    }
    k8s_config_init(&cfg);
    b.loop = uv_default_loop();
    if (tkm_http_global_init(&err) < 0 || k8s_config_load_default(&cfg, b.kubeconfig, &err) < 0 ||
        k8s_client_new(b.loop, &cfg, NULL, &b.c, &err) < 0)
        goto out;
    if (start_mode(&b, mode, &err) < 0) {
        k8s_client_free(b.c);
        goto out;
    }
    uv_run(b.loop, UV_RUN_DEFAULT);
    rc = b.failed ? 1 : 0;
out:
    if (err.code)
        fprintf(stderr, "bench_watch_informer: %s\n", tkm_err_str(&err));
    k8s_config_release(&cfg);
    uv_loop_close(b.loop);
    return rc;
}
