/*
 * nodestatus_decode.c - CPU per node status watch event, the way
 * tkm-controller reads one (issue 11): a 100-entry TritonKernelCacheNodeStatus
 * exactly as kube-apiserver sends it (tests/fixtures/nodestatus/, written by
 * bench/simagents.c; ~50 KiB with managedFields), wrapped in a MODIFIED
 * event. Side by side, in microseconds per object (median of the rounds),
 * with the ratio to the baseline, json_loadb of the object alone (CPU time
 * of the thread, so a loaded machine does not inflate the numbers):
 *   json_loadb          the object parsed by jansson, nothing else (baseline)
 *   nodestatus_decode   tkm_api_nodestatus_decode (tree + strdup'ed struct)
 *   event_decode        k8s__event_decode: the whole event as a tree (today)
 *   event_decode_raw    k8s__event_decode_raw (the watch's raw_only)
 *   nodestatus_scan     tkm_api_nodestatus_scan (no tree; callback per entry)
 *   today               event_decode + nodestatus_decode (what the controller
 *                       does per event before this change)
 *   raw_only + decode   event_decode_raw + nodestatus_decode (this branch)
 *   raw_only + scan     event_decode_raw + nodestatus_scan (once ctrl_nodes.c
 *                       uses the scanner)
 * Every round runs the variants in a rotated order, so a loaded machine
 * slows them alike.
 *
 * Usage: bench_nodestatus_decode [ITERATIONS [ROUNDS [FILE]]]
 *   defaults 200 and 7; FILE defaults to the fixture sim-00000.json
 *   (TKM_FIXTURES or the source tree).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <tkm/api/v1alpha1.h>
#include <tkm/util.h>

#include "../k8sclient/watch-int.h"

#define VARIANTS   8
#define ROUNDS_MAX 31

struct input {
    const char *obj, *ev;
    size_t obj_len, ev_len;
    struct k8s__rawdec rd;
    struct tkm_api_nsscan sc;
    size_t entries;
};

static double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static int count_entry(const struct tkm_api_nsscan_head *h, const struct tkm_api_nsscan_entry *e,
                       void *data)
{
    (void)h;
    (void)e;
    ((struct input *)data)->entries++;
    return 0;
}

static int v_loadb(struct input *in)
{
    json_t *j = json_loadb(in->obj, in->obj_len, JSON_REJECT_DUPLICATES, NULL);
    json_decref(j);
    return j ? 0 : -1;
}

static int v_nsdecode(struct input *in)
{
    struct tkm_api_nodestatus d;
    int rc = tkm_api_nodestatus_decode(in->obj, in->obj_len, &d, NULL);
    in->entries += d.status.n_caches;
    tkm_api_nodestatus_release(&d);
    return rc;
}

static int v_event(struct input *in, int then)
{
    struct k8s_watch_event ev;
    json_t *root = NULL;
    int rc = k8s__event_decode(in->ev, in->ev_len, &ev, &root, NULL);
    if (rc == 0 && then) {
        struct tkm_api_nodestatus d;
        rc = tkm_api_nodestatus_decode(ev.raw, ev.raw_len, &d, NULL);
        in->entries += d.status.n_caches;
        tkm_api_nodestatus_release(&d);
    }
    json_decref(root);
    return rc;
}

/* then: 0 nothing, 1 nodestatus_decode, 2 nodestatus_scan */
static int v_event_raw(struct input *in, int then)
{
    struct k8s_watch_event ev;
    json_t *root = NULL;
    int rc = k8s__event_decode_raw(&in->rd, in->ev, in->ev_len, &ev, &root, NULL);
    if (rc == 0 && then == 1) {
        struct tkm_api_nodestatus d;
        rc = tkm_api_nodestatus_decode(ev.raw, ev.raw_len, &d, NULL);
        in->entries += d.status.n_caches;
        tkm_api_nodestatus_release(&d);
    } else if (rc == 0 && then == 2) {
        rc = tkm_api_nodestatus_scan(&in->sc, ev.raw, ev.raw_len, NULL, count_entry, in, NULL);
    }
    json_decref(root);
    return rc;
}

static int v_scan(struct input *in)
{
    return tkm_api_nodestatus_scan(&in->sc, in->obj, in->obj_len, NULL, count_entry, in, NULL);
}

static int run(struct input *in, int v)
{
    switch (v) {
    case 0:
        return v_loadb(in);
    case 1:
        return v_nsdecode(in);
    case 2:
        return v_event(in, 0);
    case 3:
        return v_event_raw(in, 0);
    case 4:
        return v_scan(in);
    case 5:
        return v_event(in, 1);
    case 6:
        return v_event_raw(in, 1);
    default:
        return v_event_raw(in, 2);
    }
}

static char *load(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    char *b = NULL;
    long n;
    if (!f)
        return NULL;
    if (fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) > 0 && fseek(f, 0, SEEK_SET) == 0 &&
        (b = malloc((size_t)n + 1)) && fread(b, 1, (size_t)n, f) == (size_t)n) {
        b[n] = '\0';
        *len = (size_t)n;
    } else {
        free(b);
        b = NULL;
    }
    fclose(f);
    return b;
}

int main(int argc, char **argv)
{
    static const char *const names[VARIANTS] = {"json_loadb (baseline)",
                                                "nodestatus_decode",
                                                "event_decode (tree)",
                                                "event_decode_raw",
                                                "nodestatus_scan",
                                                "today: event_decode + nodestatus_decode",
                                                "raw_only + nodestatus_decode",
                                                "raw_only + nodestatus_scan"};
    static double t[VARIANTS][ROUNDS_MAX];
    long iters = argc > 1 ? strtol(argv[1], NULL, 10) : 200;
    long rounds = argc > 2 ? strtol(argv[2], NULL, 10) : 7;
    char path[4096];
    const char *fx = getenv("TKM_FIXTURES");
    struct input in = {0};
    size_t len = 0;
    int rc = 1;
    if (iters < 1 || rounds < 1 || rounds > ROUNDS_MAX) {
        fprintf(stderr, "usage: %s [ITERATIONS >= 1 [ROUNDS 1..%d [FILE]]]\n", argv[0], ROUNDS_MAX);
        return 2;
    }
    if (argc > 3)
        snprintf(path, sizeof path, "%s", argv[3]);
    else
        snprintf(path, sizeof path, "%s/nodestatus/sim-00000.json",
                 fx && *fx ? fx : TKM_FIXTURES_DIR);
    char *obj = load(path, &len), *ev = NULL;
    if (!obj) {
        fprintf(stderr, "%s: cannot read %s\n", argv[0], path);
        return 1;
    }
    while (len && (obj[len - 1] == '\n' || obj[len - 1] == ' '))
        obj[--len] = '\0';
    size_t ev_len = len + 64;
    if (!(ev = malloc(ev_len + 1)))
        goto out;
    ev_len = (size_t)snprintf(ev, ev_len + 1, "{\"type\":\"MODIFIED\",\"object\":%s}", obj);
    in = (struct input){.obj = obj, .obj_len = len, .ev = ev, .ev_len = ev_len};
    k8s__rawdec_init(&in.rd);
    tkm_api_nsscan_init(&in.sc);
    for (int v = 0; v < VARIANTS; v++) {
        in.entries = 0;
        if (run(&in, v) != 0) {
            fprintf(stderr, "%s: %s refuses %s\n", argv[0], names[v], path);
            goto out;
        }
        if (v == 1 || v == 4)
            printf("%-40s %zu entries\n", names[v], in.entries);
    }
    for (long r = 0; r < rounds; r++) {
        for (int k = 0; k < VARIANTS; k++) {
            int v = (int)((k + r) % VARIANTS);
            double t0 = now_us();
            for (long i = 0; i < iters; i++)
                run(&in, v);
            t[v][r] = (now_us() - t0) / (double)iters;
        }
    }
    printf("object %s: %zu bytes, event %zu bytes; %ld iterations x %ld rounds (median)\n", path,
           len, ev_len, iters, rounds);
    printf("%-40s %12s %10s\n", "variant", "us/object", "ratio");
    double med[VARIANTS];
    for (int v = 0; v < VARIANTS; v++) {
        qsort(t[v], (size_t)rounds, sizeof t[v][0], cmp_d);
        med[v] = t[v][rounds / 2];
        printf("%-40s %12.1f %9.2fx\n", names[v], med[v], med[v] / med[0]);
    }
    printf("per event: today %.1f us, raw_only + decode %.1f us (%.2fx), raw_only + scan %.1f us "
           "(%.2fx)\n",
           med[5], med[6], med[6] / med[5], med[7], med[7] / med[5]);
    rc = 0;
out:
    k8s__rawdec_release(&in.rd);
    tkm_api_nsscan_release(&in.sc);
    free(obj);
    free(ev);
    return rc;
}
