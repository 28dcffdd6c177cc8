/*
 * driver.c - bench/ctrl_index.sh's driver: tkm-controller's node status
 * index (ctrl_nodes.c + ctrl_agg.c) at N nodes x 1000 caches (2 namespaces
 * of N objects listing 500 caches each, a tenth of the entries incompatible
 * with one shared reason). The script compiles it twice, against the
 * current index and against the one of a baseline commit (the API it uses
 * is the same in both), and runs the two alternately.
 *
 * Prints one line: entries, heap bytes per entry (mallinfo2, malloc's
 * overhead included), CPU ms per object upsert while filling, per event
 * (one entry changed; JSON decoding included), and per ctrl_agg_build of a
 * cache (the walk over its entries).
 */
#include <errno.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <tkm/buf.h>

#include "ctrl-int.h"

#define DA "sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"

static double cpu_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

/* Object k of namespace g; flip: cache-001 not extracted (one entry differs). */
static int obj_json(struct tkm_buf *b, int g, int k, int flip)
{
    tkm_buf_reset(b);
    tkm_buf_printf(
        b,
        "{\"apiVersion\":\"tkm.io/v1alpha1\",\"kind\":\"TritonKernelCacheNodeStatus\","
        "\"metadata\":{\"name\":\"node-%05d\",\"namespace\":\"ns%d\",\"uid\":\"u-%d-%d\","
        "\"resourceVersion\":\"%d\"},\"status\":{\"nodeName\":\"node-%05d\",\"caches\":{",
        k, g, g, k, rand(), k);
    for (int c = 0; c < 500; c++) {
        if (c % 10 == 0)
            tkm_buf_printf(b,
                           "%s\"cache-%03d\":{\"digest\":\"%s\",\"incompatibleGPUs\":[{\"ids\":[0],"
                           "\"gpuType\":\"nvidia-a100\",\"reason\":\"ArchMismatch\",\"message\":"
                           "\"sm_80\"}]}",
                           c ? "," : "", c, DA);
        else
            tkm_buf_printf(b,
                           "%s\"cache-%03d\":{\"digest\":\"%s\",\"verified\":true,\"extracted\":%s,"
                           "\"compatibleGPUs\":[{\"ids\":[0,1],\"gpuType\":\"nvidia-h200\"}]}",
                           c ? "," : "", c, DA, c == 1 && flip ? "false" : "true");
    }
    tkm_buf_puts(b, "}}}");
    return b->data ? 0 : -ENOMEM;
}

static int upsert(struct ctrl_nodes *n, struct tkm_buf *b, int g, int k, int flip, double *ms)
{
    if (obj_json(b, g, k, flip) < 0)
        return -ENOMEM;
    double t0 = cpu_ms();
    int rc = ctrl_nodes_upsert(n, 0, b->data, b->len, 0);
    *ms += cpu_ms() - t0;
    return rc;
}

int main(int argc, char **argv)
{
    long nodes = argc > 1 ? strtol(argv[1], NULL, 10) : 1000;
    long events = argc > 2 ? strtol(argv[2], NULL, 10) : 300;
    struct ctrl_nodes n;
    struct tkm_buf b = TKM_BUF_INIT(1 << 20);
    double fill = 0, ev = 0, agg = 0;
    int rc = 1;
    if (nodes < 1 || nodes > 100000 || events < 0) {
        fprintf(stderr, "usage: %s [NODES [EVENTS]]\n", argv[0]);
        return 2;
    }
    srand(1);
    ctrl_nodes_init(&n);
    malloc_trim(0);
    struct mallinfo2 m0 = mallinfo2();
    for (int g = 0; g < 2; g++)
        for (int k = 0; k < nodes; k++)
            if (upsert(&n, &b, g, k, 0, &fill) < 0)
                goto out;
    malloc_trim(0);
    struct mallinfo2 m1 = mallinfo2();
    double heap = (double)(m1.uordblks - m0.uordblks);
    for (long i = 0; i < events; i++) {
        double back = 0;
        int g = rand() % 2, k = rand() % (int)nodes;
        if (upsert(&n, &b, g, k, 1, &ev) < 0 || upsert(&n, &b, g, k, 0, &back) < 0)
            goto out;
    }
    struct ctrl_verdict v = {.verified = TKM_API_COND_TRUE,
                             .reason = "SignatureVerified",
                             .message = "ok",
                             .usable = 1,
                             .digest = DA};
    for (int g = 0; g < 2; g++)
        for (int c = 0; c < 500; c++) {
            char key[64];
            struct tkm_api_cache_status st = {0};
            snprintf(key, sizeof key, "ns%d/cache-%03d", g, c);
            double t0 = cpu_ms();
            int r = ctrl_agg_build(ctrl_nodes_cache(&n, key, 0), &v, 1, NULL, 0,
                                   "2026-01-01T00:00:00Z", &st);
            agg += cpu_ms() - t0;
            if (r < 0 || st.counts.nodes != nodes) {
                fprintf(stderr, "%s: %d nodes, want %ld\n", key, st.counts.nodes, nodes);
                tkm_api_cache_status_release(&st);
                goto out;
            }
            tkm_api_cache_status_release(&st);
        }
    printf("entries=%zu bytes_per_entry=%.2f fill_ms_per_obj=%.3f event_ms=%.3f agg_ms=%.4f\n",
           n.n_entries, heap / (double)n.n_entries, fill / (double)(2 * nodes),
           events ? ev / (double)events : 0.0, agg / 1000.0);
    rc = 0;
out:
    tkm_buf_release(&b);
    ctrl_nodes_release(&n);
    return rc;
}
