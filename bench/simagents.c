/*
 * bench_simagents - simulated node agents for bench/controller.sh: real Node
 * objects (no kubelets) and the node status objects their agents would
 * write, on the local apiserver, so that a controller (tkm-controller or
 * GKM's operator) can be measured aggregating them.
 *
 *   setup --nodes N --ns NS --kind tkm|gkm   create Nodes sim-00000.. (label
 *         tkm.io/bench-sim=true; existing ones are kept) and, per node, the
 *         empty node status object in NS (tkm: TritonKernelCacheNodeStatus
 *         by server-side apply without subresource, ownerReferences to the
 *         Node, as tkm-agent creates it; gkm: GKMCacheNode with the label
 *         kubernetes.io/hostname, as GKM's agent creates it)
 *   write --nodes N --caches C --ns NS --kind tkm|gkm --digest D
 *         [--incompatible F] [--cache-prefix P] [--concurrency K] [--variants V]
 *         [--variant-digests D1,D2,D3]
 *         (prints max_request_ms too)
 *         one server-side apply on /status per node (field manager tkm-agent
 *         or gkm-agent, force), listing the caches P00000..P<C-1> at digest
 *         D: every cache compatible with the node's GPU, except on the first
 *         F (0..1) of the nodes, whose GPU is of another type (incompatible
 *         with every cache, reason ArchMismatch). At most K (default 32)
 *         requests in flight on one client. --variants V (1..3; tkm; default 0:
 *         entries without variants, as before issue 24): the image is an index
 *         of V variants (cuda sm90, sm80, sm100); compatible node i has the GPU
 *         of variant i % V and every entry names that variant (variants[]:
 *         its digest and the GPU id, as tkm-agent writes it), incompatible
 *         nodes report reason NoVariant (a mixed fleet: the controller
 *         aggregates status.variants and labels the Nodes).
 *         --variant-digests: the variants' image manifest digests in that
 *         order (sm90, sm80, sm100), those of the index D names (the
 *         controller counts a digest its index lacks as not caught up);
 *         default: made-up digests (for runs without a controller).
 *   pods  --count N --ns NS [--node NAME]   create N Pods bench-pod-00000..
 *         in NS (half bound to NAME, default sim-other, which no kubelet
 *         runs; half bound to no node: with no scheduler all stay Pending),
 *         each ~2 KiB like a real workload's (labels, env, resources)
 *   wait  --nodes N --caches C --ns NS --kind tkm|gkm [--timeout S (0: none)]
 *         watch the caches (one list + one watch) until every one of the C
 *         caches is Ready: tkm: condition Ready=True and counts.nodes >= N;
 *         gkm: counts.nodeCnt >= N and its (single) condition Extracted,
 *         Running or Error (GKM's settled states; Error once a node's extract
 *         failed, as on incompatible nodes). Progress on stderr every 5 s.
 *
 * Each mode prints one JSON line on stdout with wall-clock times in ms since
 * the epoch (write: first_write_ms, last_write_ms = when the last reply came
 * back; wait: all_ready_ms), so that the script can subtract across
 * processes. Errors go to stderr; exit 1 (wait: 1 on timeout too).
 * KUBECONFIG (or --kubeconfig) selects the apiserver.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <uv.h>

#include <tkm/api/v1alpha1.h>
#include <tkm/http.h>
#include <tkm/log.h>
#include <tkm/util.h>
#include <k8s/client.h>
#include <k8s/config.h>
#include <k8s/informer.h>

#define SIM_LABEL        "tkm.io/bench-sim"
#define SIM_VARIANTS_MAX 3
#define GKM_HOST_LABEL   "kubernetes.io/hostname"

static const struct k8s_resource res_gkmcaches = {"gkm.io", "v1alpha1", "gkmcaches", "GKMCache", 1};
static const struct k8s_resource res_gkmcachenodes = {"gkm.io", "v1alpha1", "gkmcachenodes",
                                                      "GKMCacheNode", 1};

struct sim {
    uv_loop_t *loop;
    struct k8s_client *c;
    const char *ns, *kubeconfig, *kind, *digest, *prefix, *other_node;
    int gkm;
    long nodes, caches, concurrency, timeout_s;
    double incompatible;
    char **uids; /* per node index, from the node list */
    /* request pump */
    long next, inflight, done, failed;
    struct sim_req *reqs; /* one per request index */
    int32_t gpu_ids[1];   /* the GPU ids every cache entry names: {0} */
    uint64_t max_req_ms;
    int phase; /* setup: 0 nodes, 1 status objects; write: 1 */
    const char *manager, *sub;
    /* shared per-variant cache lists (tkm) */
    struct tkm_api_node_cache *tc[SIM_VARIANTS_MAX + 1]; /* per variant, then incompatible */
    long variants;                                       /* --variants: 0 = none reported */
    char now[32];
    /* wait */
    struct k8s_informer *inf;
    long ready;
    char *bits; /* per cache index: 1 = Ready */
    uv_timer_t timer;
    uint64_t t_start;
    int finished;
};

/* What a reply callback gets: the request's index and start time. */
struct sim_req {
    struct sim *s;
    uint64_t t0;
};

static int64_t wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void node_name(char *out, size_t n, long i)
{
    snprintf(out, n, "sim-%05ld", i);
}

static int node_incompatible(const struct sim *s, long i)
{
    return (double)i < s->incompatible * (double)s->nodes;
}

/* ---- bodies ----------------------------------------------------------------- */

static json_t *node_body(long i)
{
    char name[32];
    node_name(name, sizeof name, i);
    return json_pack("{s:s, s:s, s:{s:s, s:{s:s}}}", "apiVersion", "v1", "kind", "Node", "metadata",
                     "name", name, "labels", SIM_LABEL, "true");
}

/* A Pod that never runs: bound to another node or to none. */
static json_t *pod_body(const struct sim *s, long i)
{
    char name[32], app[32];
    snprintf(name, sizeof name, "bench-pod-%05ld", i);
    snprintf(app, sizeof app, "app-%03ld", i % 100);
    json_t *p = json_pack(
        "{s:s, s:s, s:{s:s, s:{s:s, s:s, s:s}, s:{s:s}}, s:{s:[{s:s, s:s, s:[s, s], "
        "s:[{s:s, s:s}, {s:s, s:s}, {s:s, s:s}], s:{s:{s:s, s:s}, s:{s:s}}, "
        "s:[{s:s, s:s, s:b}]}], s:[{s:s, s:{s:s}}], s:i}}",
        "apiVersion", "v1", "kind", "Pod", "metadata", "name", name, "labels", "app", app, "tier",
        "inference", "tkm.io/bench", "true", "annotations", "bench.tkm.io/note",
        "a pod that no kubelet will ever run", "spec", "containers", "name", "server", "image",
        "127.0.0.1:9/bench/never:v1", "command", "/bin/server", "--port=8000", "env", "name",
        "MODEL", "value", "llama-3.1-8b-instruct", "name", "TRITON_CACHE_DIR", "value",
        "/home/ml/.triton/cache", "name", "LOG_LEVEL", "value", "info", "resources", "requests",
        "cpu", "100m", "memory", "128Mi", "limits", "memory", "256Mi", "volumeMounts", "name",
        "cache", "mountPath", "/home/ml/.triton/cache", "readOnly", 1, "volumes", "name", "cache",
        "emptyDir", "medium", "Memory", "terminationGracePeriodSeconds", 1);
    if (p && i % 2 == 0)
        json_object_set_new(json_object_get(p, "spec"), "nodeName", json_string(s->other_node));
    return p;
}

/* The variants of --variants: (GPU type, product, arch, compute capability, variant digest). */
static struct sim_variant {
    char *gpu_type, *product, *arch, *cc, *digest; /* literals (the API structs take char *) */
} sim_variants[SIM_VARIANTS_MAX] = {
    {"nvidia-h200", "NVIDIA H200", "90", "9.0",
     "sha256:9090909090909090909090909090909090909090909090909090909090909090"},
    {"nvidia-a100", "NVIDIA A100-SXM4-80GB", "80", "8.0",
     "sha256:8080808080808080808080808080808080808080808080808080808080808080"},
    {"nvidia-b200", "NVIDIA B200", "100", "10.0",
     "sha256:1001001001001001001001001001001001001001001001001001001001001001"},
};

/* Which cache list node i reports: its variant (0 without --variants), or s->variants
 * (at least 1) for an incompatible node. */
static int node_list(const struct sim *s, long i)
{
    long nv = s->variants ? s->variants : 1;
    return node_incompatible(s, i) ? (int)nv : (int)(i % nv);
}

/* The GPU a simulated node reports: an H200 (or its variant's GPU), or an MI300X on
 * incompatible ones. */
static void sim_gpu(struct tkm_api_gpu *g, int incompatible, int variant)
{
    struct sim_variant *v = &sim_variants[variant];
    *g = (struct tkm_api_gpu){.id = 0,
                              .gpu_type = incompatible ? "amd-mi300x" : v->gpu_type,
                              .vendor = incompatible ? "amd" : "nvidia",
                              .product_name = incompatible ? "AMD Instinct MI300X" : v->product,
                              .arch = incompatible ? "gfx942" : v->arch,
                              .compute_capability = incompatible ? NULL : v->cc,
                              .warp_size = incompatible ? 64 : 32,
                              .driver_version = "570.124.06",
                              .memory_bytes = 150754820096LL,
                              .uuid = "GPU-sim-0"};
}

/* tkm: the caches list v (node_list()), built once. */
static int tkm_caches(struct sim *s, int v)
{
    long nv = s->variants ? s->variants : 1;
    int incompat = v == (int)nv;
    if (s->tc[v])
        return 0;
    s->tc[v] = calloc((size_t)s->caches + 1, sizeof *s->tc[v]);
    if (!s->tc[v])
        return -ENOMEM;
    for (long j = 0; j < s->caches; j++) {
        struct tkm_api_node_cache *c = &s->tc[v][j];
        struct tkm_api_gpu_group *g = calloc(1, sizeof *g);
        struct tkm_api_variant_use *u = s->variants && !incompat ? calloc(1, sizeof *u) : NULL;
        char name[128];
        snprintf(name, sizeof name, "%s%05ld", s->prefix, j);
        c->name = strdup(name);
        if (!g || !c->name || (s->variants && !incompat && !u)) {
            free(g);
            free(u);
            return -ENOMEM;
        }
        *g = (struct tkm_api_gpu_group){.ids = s->gpu_ids, .n_ids = 1};
        c->digest = (char *)s->digest;
        c->verified = 1;
        c->last_updated = s->now;
        if (incompat) {
            g->gpu_type = "amd-mi300x";
            g->reason = s->variants ? "NoVariant" : "ArchMismatch";
            g->message = s->variants
                             ? "no variant for GPU 0 (hip gfx942 warp 64); the image has "
                               "cuda sm90, sm80, sm100"
                             : "the cache holds kernels for cuda arch 90; this GPU is gfx942";
            c->incompatible = g;
            c->n_incompatible = 1;
        } else {
            g->gpu_type = sim_variants[v].gpu_type;
            c->extracted = 1;
            c->compatible = g;
            c->n_compatible = 1;
        }
        if (u) {
            *u = (struct tkm_api_variant_use){
                .digest = sim_variants[v].digest, .gpu_ids = s->gpu_ids, .n_gpu_ids = 1};
            c->variants = u;
            c->n_variants = 1;
        }
    }
    return 0;
}

static void tkm_caches_free(struct sim *s)
{
    for (int v = 0; v <= SIM_VARIANTS_MAX; v++) {
        if (!s->tc[v])
            continue;
        for (long j = 0; j < s->caches; j++) {
            free(s->tc[v][j].name);
            free(s->tc[v][j].compatible);
            free(s->tc[v][j].incompatible);
            free(s->tc[v][j].variants);
        }
        free(s->tc[v]);
    }
}

static json_t *tkm_status_body(struct sim *s, long i, int with_caches)
{
    char name[32];
    struct tkm_api_gpu gpu;
    struct tkm_err err = {0};
    json_t *body = NULL;
    int v = node_list(s, i);
    node_name(name, sizeof name, i);
    sim_gpu(&gpu, node_incompatible(s, i), node_incompatible(s, i) ? 0 : v);
    if (with_caches && tkm_caches(s, v) < 0)
        return NULL;
    struct tkm_api_node_status st = {.node_name = name,
                                     .gpus = &gpu,
                                     .n_gpus = 1,
                                     .caches = with_caches ? s->tc[v] : NULL,
                                     .n_caches = with_caches ? (size_t)s->caches : 0,
                                     .last_updated = s->now};
    if (tkm_api_node_status_apply(&st, s->ns, s->uids[i], &body, &err) < 0)
        fprintf(stderr, "bench_simagents: node %s: %s\n", name, err.msg);
    return body;
}

/* GKM's GKMCacheNode as its agent fills it: counts, the GPU list, and per
 * cache and digest the compatible GPU ids and the PVC's Extracted condition.
 * On an incompatible node GKM's extract Job fails its preflight check: the
 * PVC condition is Error and the node counts an error. */
static json_t *gkm_body(struct sim *s, long i, int with_caches)
{
    char name[32];
    int v = node_incompatible(s, i);
    node_name(name, sizeof name, i);
    json_t *o = json_pack("{s:s, s:s, s:{s:s, s:s, s:{s:s}}}", "apiVersion", "gkm.io/v1alpha1",
                          "kind", "GKMCacheNode", "metadata", "name", name, "namespace", s->ns,
                          "labels", GKM_HOST_LABEL, name);
    if (!o || !with_caches)
        return o;
    json_t *caches = json_object();
    json_t *st =
        json_pack("{s:s, s:{s:i, s:i, s:i, s:i, s:i, s:i, s:i}, s:[{s:s, s:s, s:[i]}], s:o}",
                  "nodeName", name, "counts", "nodeCnt", 1, "nodeInUseCnt", 0, "nodeNotInUseCnt",
                  !v, "nodeErrorCnt", v, "podRunningCnt", 0, "podDeletingCnt", 0, "podOutdatedCnt",
                  0, "gpus", "gpuType", v ? "amd-mi300x" : "nvidia-h200", "driverVersion",
                  "570.124.06", "ids", 0, "caches", caches);
    if (!st || json_object_set_new(o, "status", st) < 0) {
        json_decref(o);
        return NULL;
    }
    for (long j = 0; j < s->caches; j++) {
        char cname[128], pvc[160];
        snprintf(cname, sizeof cname, "%s%05ld", s->prefix, j);
        snprintf(pvc, sizeof pvc, "%s-%08lx", cname, (unsigned long)(i * 7919 + j) & 0xffffffffUL);
        json_t *cs = json_pack(
            "{s:{s:[i], s:s, s:{s:{s:s, s:s, s:[{s:s, s:s, s:s, s:s, s:s}]}}}}", s->digest,
            v ? "incompatibleGPUs" : "compatibleGPUs", 0, "lastUpdated", s->now, "pvcStatus", s->ns,
            "pvcName", pvc, "pvcOwner", "Agent", "conditions", "type", v ? "Error" : "Extracted",
            "status", "True", "reason", v ? "Error" : "Extracted", "message",
            v ? "GPU Kernel Cache extraction failed" : "GPU Kernel Cache extracted",
            "lastTransitionTime", s->now);
        if (!cs || json_object_set_new(caches, cname, cs) < 0) {
            json_decref(o);
            return NULL;
        }
    }
    return o;
}

/* ---- the request pump --------------------------------------------------------- */

static void pump(struct sim *s);

static void reply_cb(int rc, json_t *obj, const struct k8s_status *st, void *data)
{
    struct sim_req *q = data;
    struct sim *s = q->s;
    uint64_t ms = uv_now(s->loop) - q->t0;
    (void)obj;
    if (ms > s->max_req_ms)
        s->max_req_ms = ms;
    s->inflight--;
    s->done++;
    if (rc < 0 && !(s->phase != 1 && st->code == 409)) {
        char msg[512];
        if (s->failed++ < 5)
            fprintf(stderr, "bench_simagents: %s: %s%s\n",
                    s->phase == 1 ? "apply"
                    : s->phase    ? "create pod"
                                  : "create node",
                    k8s_status_str(st, msg, sizeof msg),
                    st->code == 404 ? " (run `bench_simagents setup` first)" : "");
    }
    if (s->done % 1000 == 0)
        fprintf(stderr, "bench_simagents: %ld/%ld requests done\n", s->done, s->nodes);
    pump(s);
}

/* Starts requests until K are in flight; stops the loop when all are done. */
static void pump(struct sim *s)
{
    while (s->inflight < s->concurrency && s->next < s->nodes && s->failed < 10) {
        long i = s->next++;
        struct sim_req *q = &s->reqs[i];
        json_t *body;
        int rc;
        uv_update_time(s->loop);
        *q = (struct sim_req){.s = s, .t0 = uv_now(s->loop)};
        if (s->phase == 0) {
            body = node_body(i);
            rc = body ? k8s_create_async(s->c, &k8s_res_nodes, NULL, body, reply_cb, q) : -ENOMEM;
        } else if (s->phase == 2) {
            body = pod_body(s, i);
            rc = body ? k8s_create_async(s->c, &k8s_res_pods, s->ns, body, reply_cb, q) : -ENOMEM;
        } else {
            struct k8s_apply_opts o = {
                .field_manager = s->manager, .force = 1, .subresource = s->sub};
            int with = s->sub != NULL;
            body = s->gkm ? gkm_body(s, i, with) : tkm_status_body(s, i, with);
            rc = body ? k8s_apply_async(s->c, s->gkm ? &res_gkmcachenodes : &tkm_api_res_tkcns,
                                        s->ns, body, &o, reply_cb, q)
                      : -ENOMEM;
        }
        json_decref(body);
        if (rc < 0) {
            fprintf(stderr, "bench_simagents: cannot start request %ld: %d\n", i, rc);
            s->failed++;
            s->done++;
            continue;
        }
        s->inflight++;
    }
    if (s->inflight == 0 && (s->next >= s->nodes || s->failed >= 10))
        uv_stop(s->loop);
}

static int run_pump(struct sim *s, int phase)
{
    s->phase = phase;
    s->next = s->done = s->inflight = 0;
    s->max_req_ms = 0;
    free(s->reqs);
    s->reqs = calloc((size_t)s->nodes, sizeof *s->reqs);
    if (!s->reqs)
        return -ENOMEM;
    pump(s);
    if (s->inflight)
        uv_run(s->loop, UV_RUN_DEFAULT);
    return s->failed ? -EIO : 0;
}

/* Fills s->uids from a list of the simulated Nodes. */
static int load_uids(struct sim *s)
{
    struct k8s_status st = K8S_STATUS_INIT;
    struct k8s_list_opts lo = {.label_selector = SIM_LABEL "=true"};
    json_t *list = NULL, *it;
    size_t k;
    int rc = k8s_list(s->c, &k8s_res_nodes, NULL, &lo, &list, &st);
    if (rc < 0) {
        char msg[512];
        fprintf(stderr, "bench_simagents: list nodes: %s\n", k8s_status_str(&st, msg, sizeof msg));
        goto out;
    }
    s->uids = calloc((size_t)s->nodes, sizeof *s->uids);
    rc = s->uids ? 0 : -ENOMEM;
    json_array_foreach(json_object_get(list, "items"), k, it)
    {
        const char *name =
            json_string_value(json_object_get(json_object_get(it, "metadata"), "name"));
        const char *uid =
            json_string_value(json_object_get(json_object_get(it, "metadata"), "uid"));
        int64_t i;
        if (rc || !name || !uid || strncmp(name, "sim-", 4) != 0 ||
            tkm_parse_i64(name + 4, 0, s->nodes - 1, &i) < 0)
            continue;
        s->uids[i] = strdup(uid);
    }
    for (long i = 0; rc == 0 && i < s->nodes; i++)
        if (!s->uids[i]) {
            fprintf(stderr, "bench_simagents: Node sim-%05ld does not exist (run setup first)\n",
                    i);
            rc = -ENOENT;
        }
out:
    json_decref(list);
    k8s_status_release(&st);
    return rc;
}

/* ---- wait ---------------------------------------------------------------------- */

static const json_t *cond(const json_t *status, const char *type)
{
    size_t k;
    json_t *c;
    json_array_foreach(json_object_get(status, "conditions"), k, c)
    {
        const char *t = json_string_value(json_object_get(c, "type"));
        if (!type || (t && strcmp(t, type) == 0))
            return c;
    }
    return NULL;
}

static int obj_ready(const struct sim *s, const struct k8s_obj *obj)
{
    json_t *o = NULL;
    struct tkm_err err = {0};
    int ok = 0;
    if (strncmp(obj->name, s->prefix, strlen(s->prefix)) != 0 || k8s_obj_parse(obj, &o, &err) < 0)
        return 0;
    const json_t *st = json_object_get(o, "status");
    const json_t *counts = json_object_get(st, "counts");
    if (s->gkm) {
        const char *t = json_string_value(json_object_get(cond(st, NULL), "type"));
        ok = json_integer_value(json_object_get(counts, "nodeCnt")) >= s->nodes && t &&
             (strcmp(t, "Extracted") == 0 || strcmp(t, "Running") == 0 || strcmp(t, "Error") == 0);
    } else {
        const char *v = json_string_value(json_object_get(cond(st, "Ready"), "status"));
        ok = v && strcmp(v, "True") == 0 &&
             json_integer_value(json_object_get(counts, "nodes")) >= s->nodes;
    }
    json_decref(o);
    return ok;
}

/* Records obj's readiness in s->bits (one per cache index) and counts. */
static void note(struct sim *s, const struct k8s_obj *obj)
{
    int64_t j;
    size_t n = strlen(s->prefix);
    if (strncmp(obj->name, s->prefix, n) != 0 ||
        tkm_parse_i64(obj->name + n, 0, s->caches - 1, &j) < 0)
        return;
    char r = (char)obj_ready(s, obj);
    s->ready += r - s->bits[j];
    s->bits[j] = r;
}

static int note_cb(const struct k8s_obj *obj, void *data)
{
    note(data, obj);
    return 0;
}

static void check_done(struct sim *s)
{
    if (s->finished || s->ready < s->caches)
        return;
    s->finished = 1;
    printf("{\"mode\":\"wait\",\"kind\":\"%s\",\"ready\":%ld,\"all_ready_ms\":%" PRId64 "}\n",
           s->kind, s->ready, wall_ms());
    fflush(stdout);
    uv_stop(s->loop);
}

static void on_add(const struct k8s_obj *obj, void *data)
{
    struct sim *s = data;
    if (s->finished || !k8s_informer_has_synced(s->inf))
        return; /* the initial list is counted once, in on_synced */
    note(s, obj);
    check_done(s);
}

static void on_update(const struct k8s_obj *old, const struct k8s_obj *cur, void *data)
{
    (void)old;
    on_add(cur, data);
}

static void on_synced(void *data)
{
    struct sim *s = data;
    k8s_informer_foreach(s->inf, note_cb, s);
    check_done(s);
}

static void tick(uv_timer_t *t)
{
    struct sim *s = t->data;
    uint64_t el = (uv_now(s->loop) - s->t_start) / 1000;
    if (s->finished)
        return;
    fprintf(stderr, "bench_simagents: wait: %ld/%ld caches ready after %" PRIu64 " s\n", s->ready,
            s->caches, el);
    if (s->timeout_s > 0 && el >= (uint64_t)s->timeout_s) {
        printf("{\"mode\":\"wait\",\"kind\":\"%s\",\"ready\":%ld,\"timeout\":true}\n", s->kind,
               s->ready);
        fflush(stdout);
        s->finished = -1;
        uv_stop(s->loop);
    }
}

static int run_wait(struct sim *s)
{
    struct tkm_err err = {0};
    s->bits = calloc((size_t)s->caches + 1, 1);
    if (!s->bits)
        return -ENOMEM;
    struct k8s_informer_opts io = {
        .watch = {.res = s->gkm ? &res_gkmcaches : &tkm_api_res_tkc, .ns = s->ns},
        .handler = {.on_add = on_add, .on_update = on_update, .on_synced = on_synced},
        .data = s};
    if (k8s_informer_start(s->c, &io, &s->inf, &err) < 0) {
        fprintf(stderr, "bench_simagents: watch: %s\n", err.msg);
        return -EIO;
    }
    uv_timer_init(s->loop, &s->timer);
    s->timer.data = s;
    s->t_start = uv_now(s->loop);
    uv_timer_start(&s->timer, tick, 5000, 5000);
    uv_run(s->loop, UV_RUN_DEFAULT);
    uv_timer_stop(&s->timer);
    uv_close((uv_handle_t *)&s->timer, NULL);
    k8s_informer_close(s->inf, NULL, NULL);
    uv_run(s->loop, UV_RUN_NOWAIT);
    return s->finished == 1 ? 0 : -ETIMEDOUT;
}

/* ---- modes --------------------------------------------------------------------- */

static int run_setup(struct sim *s)
{
    int rc = run_pump(s, 0);
    if (rc == 0)
        rc = load_uids(s);
    if (rc == 0) {
        s->manager = s->gkm ? "gkm-agent" : "tkm-agent";
        s->sub = NULL; /* create the objects: status is ignored there */
        rc = run_pump(s, 1);
    }
    if (rc == 0)
        printf("{\"mode\":\"setup\",\"kind\":\"%s\",\"nodes\":%ld}\n", s->kind, s->nodes);
    return rc;
}

static int run_write(struct sim *s)
{
    int rc = load_uids(s);
    if (rc < 0)
        return rc;
    s->manager = s->gkm ? "gkm-agent" : "tkm-agent";
    s->sub = "status";
    /* Build the shared cache lists before the clock starts. */
    for (long v = 0; !s->gkm && v <= (s->variants ? s->variants : 1); v++)
        if (tkm_caches(s, (int)v) < 0)
            return -ENOMEM;
    int64_t t0 = wall_ms();
    rc = run_pump(s, 1);
    int64_t t1 = wall_ms();
    printf("{\"mode\":\"write\",\"kind\":\"%s\",\"nodes\":%ld,\"caches\":%ld,\"writes\":%ld,"
           "\"failed\":%ld,\"first_write_ms\":%" PRId64 ",\"last_write_ms\":%" PRId64
           ",\"write_s\":%.3f,\"max_request_ms\":%" PRIu64 "}\n",
           s->kind, s->nodes, s->caches, s->done, s->failed, t0, t1, (double)(t1 - t0) / 1000.0,
           s->max_req_ms);
    return rc;
}

static int run_pods(struct sim *s)
{
    int64_t t0 = wall_ms();
    int rc = run_pump(s, 2);
    printf("{\"mode\":\"pods\",\"count\":%ld,\"failed\":%ld,\"create_s\":%.3f}\n", s->nodes,
           s->failed, (double)(wall_ms() - t0) / 1000.0);
    return rc;
}

static int parse_opt(struct sim *s, int opt)
{
    int64_t v;
    char *end;
    switch (opt) {
    case 'N':
    case 'n':
    case 'c':
    case 'k':
    case 't':
        if (tkm_parse_i64(optarg, 0, 1000000, &v) < 0)
            return -EINVAL;
        *(opt == 'n' || opt == 'N' ? &s->nodes
          : opt == 'c'             ? &s->caches
          : opt == 'k'             ? &s->concurrency
                                   : &s->timeout_s) = (long)v;
        return 0;
    case 'V':
        if (tkm_parse_i64(optarg, 0, SIM_VARIANTS_MAX, &v) < 0)
            return -EINVAL;
        s->variants = (long)v;
        return 0;
    case 'D': /* --variant-digests D1,D2,D3: replaces the made-up ones, in order (optarg
                 lives as long as argv) */
        for (int i = 0; i < SIM_VARIANTS_MAX && optarg && *optarg; i++) {
            sim_variants[i].digest = optarg;
            if ((optarg = strchr(optarg, ',')))
                *optarg++ = '\0';
        }
        return 0;
    case 'i':
        s->incompatible = strtod(optarg, &end);
        return (*end || s->incompatible < 0 || s->incompatible > 1) ? -EINVAL : 0;
    case 's':
        s->ns = optarg;
        return 0;
    case 'K':
        s->kind = optarg;
        return 0;
    case 'd':
        s->digest = optarg;
        return 0;
    case 'p':
        s->prefix = optarg;
        return 0;
    case 'C':
        s->kubeconfig = optarg;
        return 0;
    case 'o':
        s->other_node = optarg;
        return 0;
    default:
        return -EINVAL;
    }
}

int main(int argc, char **argv)
{
    static const struct option lo[] = {{"nodes", required_argument, NULL, 'n'},
                                       {"caches", required_argument, NULL, 'c'},
                                       {"concurrency", required_argument, NULL, 'k'},
                                       {"timeout", required_argument, NULL, 't'},
                                       {"incompatible", required_argument, NULL, 'i'},
                                       {"variants", required_argument, NULL, 'V'},
                                       {"variant-digests", required_argument, NULL, 'D'},
                                       {"ns", required_argument, NULL, 's'},
                                       {"kind", required_argument, NULL, 'K'},
                                       {"digest", required_argument, NULL, 'd'},
                                       {"cache-prefix", required_argument, NULL, 'p'},
                                       {"count", required_argument, NULL, 'N'},
                                       {"node", required_argument, NULL, 'o'},
                                       {"kubeconfig", required_argument, NULL, 'C'},
                                       {NULL, 0, NULL, 0}};
    struct sim s = {.ns = "bench-ctrl",
                    .kind = "tkm",
                    .prefix = "bench-",
                    .other_node = "sim-other",
                    .concurrency = 32,
                    .timeout_s = 300};
    struct k8s_config cfg;
    struct tkm_err err = {0};
    int opt, rc = 1;
    if (argc < 2) {
        fprintf(stderr,
                "usage: bench_simagents setup|write|wait [options] (see bench/simagents.c)\n");
        return 2;
    }
    const char *mode = argv[1];
    optind = 2;
    while ((opt = getopt_long(argc, argv, "", lo, NULL)) != -1)
        if (parse_opt(&s, opt) < 0) {
            fprintf(stderr, "bench_simagents: bad option value %s\n", optarg ? optarg : "");
            return 2;
        }
    s.gkm = strcmp(s.kind, "gkm") == 0;
    if ((!s.gkm && strcmp(s.kind, "tkm") != 0) || s.nodes < 1 || s.concurrency < 1 ||
        (strcmp(mode, "write") == 0 && (!s.digest || s.caches < 1))) {
        fprintf(stderr, "bench_simagents: need --kind tkm|gkm, --nodes >= 1, and for write "
                        "--caches >= 1 and --digest\n");
        return 2;
    }
    tkm_log_init("bench_simagents", TKM_LOG_WARN, 0);
    tkm_api_now(s.now, sizeof s.now);
    k8s_config_init(&cfg);
    s.loop = uv_default_loop();
    struct k8s_client_opts co = {.timeout_ms = 120000};
    if (tkm_http_global_init(&err) < 0 || k8s_config_load_default(&cfg, s.kubeconfig, &err) < 0 ||
        k8s_client_new(s.loop, &cfg, &co, &s.c, &err) < 0) {
        fprintf(stderr, "bench_simagents: %s\n", err.msg);
        goto out;
    }
    if (strcmp(mode, "setup") == 0)
        rc = run_setup(&s) < 0;
    else if (strcmp(mode, "write") == 0)
        rc = run_write(&s) < 0;
    else if (strcmp(mode, "pods") == 0)
        rc = run_pods(&s) < 0;
    else if (strcmp(mode, "wait") == 0)
        rc = run_wait(&s) < 0;
    else
        fprintf(stderr, "bench_simagents: unknown mode %s\n", mode);
out:
    k8s_client_free(s.c);
    k8s_config_release(&cfg);
    tkm_caches_free(&s);
    for (long i = 0; s.uids && i < s.nodes; i++)
        free(s.uids[i]);
    free(s.uids);
    free(s.bits);
    free(s.reqs);
    return rc;
}
