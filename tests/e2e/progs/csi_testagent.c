/*
 * csi_testagent.c - a protocol-level STAND-IN for tkm-agent, for the tests of
 * the CSI driver alone (tests/e2e/csi_*.sh, csi-sanity, bench/csi.sh). It is
 * not the agent: it never talks to the apiserver or a registry, verifies
 * nothing and judges no GPU. It serves agent/agent.proto on lib/grpc (the
 * same implementation tkm-agent uses) and answers from a fixture store: a
 * real Triton cache extracted into a temp dir (--store). Every call is logged
 * on stdout as one line ("Materialize <vol> <ns>/<pod> <cache>", "Release
 * <vol> released|unknown", "Status") so a test can check what the driver did;
 * a Release with the scratch counts (ReleaseRequest.scratch) appends them:
 * " scratch triton=N fxgraph=N aotautograd=N vllm=N files=N bytes=N
 * truncated=0|1 names=a,b" (names escaped).
 *
 * Usage: e2e_csi_testagent --socket PATH --store DIR [--cache NAME[=MOUNTPATH]]...
 *          [--image REF]... [--fail NAME=CODE:MESSAGE]... [--not-ready]
 *          [--delay-ms N] [--node NAME]
 *   --cache NAME[=MOUNTPATH]  a declared cache (with its spec.mountPath hint)
 *   --image REF               an image some declared cache names (cacheImage)
 *   --fail NAME=CODE:MSG      Materialize of cacheName NAME fails with gRPC code
 *                             CODE (a number) and MSG: FAILED_PRECONDITION for a
 *                             cache not verified, and so on
 *   --not-ready               Status answers ready=false
 *   --delay-ms N              Materialize answers after N ms (concurrency tests)
 *   --store-for NAME=DIR      cacheName NAME answers store path DIR (a missing or
 *                             malformed store, to test the driver's failure paths);
 *                             given more than once for NAME: every DIR in store_paths
 *                             (a node whose GPUs use several variants), the first also
 *                             as store_path. Otherwise store_paths is [--store].
 *   --empty NAME=REASON       cacheName NAME answers empty = true (policy Empty, no
 *                             variant fits) with REASON and a message, store_path ""
 *                             (with --store-for NAME as well: both, as a broken agent)
 *   --parts NAME=P1,P2        cacheName NAME answers parts P1, P2 (default ["triton"])
 * Undeclared cacheName / cacheImage: PERMISSION_DENIED, as the agent does.
 * Ends on SIGINT/SIGTERM.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tkm/grpc.h>
#include <tkm/util.h>

#include "agent.pb-c.h"

#define MAX_ITEMS 32
#define MAX_REFS  4096

struct fail {
    char name[128];
    int code;
    const char *msg;
};

struct ta {
    uv_loop_t loop;
    uv_signal_t sigint, sigterm;
    struct tkm_grpc_server *srv;
    const char *store, *node;
    const char *caches[MAX_ITEMS], *hints[MAX_ITEMS];
    size_t n_caches;
    const char *images[MAX_ITEMS];
    size_t n_images;
    struct fail fails[MAX_ITEMS];
    size_t n_fails;
    const char *store_names[MAX_ITEMS], *store_dirs[MAX_ITEMS];
    size_t n_stores;
    const char *empty_names[MAX_ITEMS], *empty_reasons[MAX_ITEMS];
    size_t n_empty;
    const char *parts_names[MAX_ITEMS];
    char *parts[MAX_ITEMS][MAX_ITEMS];
    size_t n_parts[MAX_ITEMS], n_parts_names;
    int not_ready;
    uint64_t delay_ms;
    char *refs[MAX_REFS];
    size_t n_refs;
};

static const char *attr(const Tkm__Agent__V1__MaterializeRequest *r, const char *k)
{
    for (size_t i = 0; i < r->n_volume_attributes; i++)
        if (strcmp(r->volume_attributes[i]->key, k) == 0)
            return r->volume_attributes[i]->value;
    return NULL;
}

static int ref_find(struct ta *t, const char *vol)
{
    for (size_t i = 0; i < t->n_refs; i++)
        if (strcmp(t->refs[i], vol) == 0)
            return (int)i;
    return -1;
}

struct pending {
    uv_timer_t timer;
    struct tkm_grpc_call *call;
    uint8_t *buf;
    size_t len;
};

static void pending_closed(uv_handle_t *h)
{
    struct pending *p = h->data;
    free(p->buf);
    free(p);
}

static void pending_fire(uv_timer_t *tm)
{
    struct pending *p = tm->data;
    tkm_grpc_call_reply(p->call, p->buf, p->len);
    uv_close((uv_handle_t *)&p->timer, pending_closed);
}

static void answer(struct ta *t, struct tkm_grpc_call *call, Tkm__Agent__V1__MaterializeResponse *r)
{
    size_t n = tkm__agent__v1__materialize_response__get_packed_size(r);
    struct pending *p = calloc(1, sizeof(*p));
    if (!p || !(p->buf = malloc(n ? n : 1))) {
        free(p);
        tkm_grpc_call_fail(call, TKM_GRPC_INTERNAL, "out of memory");
        return;
    }
    tkm__agent__v1__materialize_response__pack(r, p->buf);
    p->len = n;
    p->call = call;
    if (t->delay_ms == 0) {
        tkm_grpc_call_reply(call, p->buf, n);
        free(p->buf);
        free(p);
        return;
    }
    uv_timer_init(&t->loop, &p->timer);
    p->timer.data = p;
    uv_timer_start(&p->timer, pending_fire, t->delay_ms, 0);
}

static void materialize(struct tkm_grpc_call *call, void *data)
{
    struct ta *t = data;
    size_t n;
    const void *b = tkm_grpc_call_request(call, &n);
    Tkm__Agent__V1__MaterializeRequest *q = tkm__agent__v1__materialize_request__unpack(NULL, n, b);
    Tkm__Agent__V1__MaterializeResponse r = TKM__AGENT__V1__MATERIALIZE_RESPONSE__INIT;
    char msg[512];
    const char *name, *image, *mp, *hint = NULL;
    size_t i;
    if (!q) {
        tkm_grpc_call_fail(call, TKM_GRPC_INVALID_ARGUMENT, "bad MaterializeRequest");
        return;
    }
    name = attr(q, "cacheName");
    image = attr(q, "cacheImage");
    mp = attr(q, "mountPath");
    printf("Materialize %s %s/%s %s\n", q->volume_id, q->pod_namespace, q->pod_name,
           name    ? name
           : image ? image
                   : "-");
    fflush(stdout);
    if (!q->volume_id[0] || !q->pod_namespace[0] || !q->pod_name[0] || !q->pod_uid[0]) {
        tkm_grpc_call_fail(call, TKM_GRPC_INVALID_ARGUMENT, "volume id and pod info are required");
        goto out;
    }
    for (i = 0; name && i < t->n_fails; i++)
        if (strcmp(t->fails[i].name, name) == 0) {
            tkm_grpc_call_fail(call, t->fails[i].code, t->fails[i].msg);
            goto out;
        }
    if (name) {
        for (i = 0; i < t->n_caches && strcmp(t->caches[i], name) != 0; i++)
            ;
        if (i == t->n_caches) {
            snprintf(msg, sizeof(msg),
                     "no TritonKernelCache \"%s\" in namespace %s and no "
                     "TritonKernelCacheCluster of that name",
                     name, q->pod_namespace);
            tkm_grpc_call_fail(call, TKM_GRPC_PERMISSION_DENIED, msg);
            goto out;
        }
        hint = t->hints[i];
    } else {
        for (i = 0; image && i < t->n_images && strcmp(t->images[i], image) != 0; i++)
            ;
        if (!image || i == t->n_images) {
            snprintf(msg, sizeof(msg),
                     "no cache in namespace %s or cluster-wide declares the image %s",
                     q->pod_namespace, image ? image : "(none)");
            tkm_grpc_call_fail(call, TKM_GRPC_PERMISSION_DENIED, msg);
            goto out;
        }
    }
    if (ref_find(t, q->volume_id) < 0 && t->n_refs < MAX_REFS)
        t->refs[t->n_refs++] = strdup(q->volume_id);
    char *stores[MAX_ITEMS], *triton[] = {(char *)"triton"};
    size_t n_stores = 0;
    for (i = 0; name && i < t->n_stores; i++)
        if (strcmp(t->store_names[i], name) == 0)
            stores[n_stores++] = (char *)t->store_dirs[i];
    r.parts = triton;
    r.n_parts = 1;
    for (i = 0; name && i < t->n_parts_names; i++)
        if (strcmp(t->parts_names[i], name) == 0) {
            r.parts = t->parts[i];
            r.n_parts = t->n_parts[i];
        }
    for (i = 0; name && i < t->n_empty; i++)
        if (strcmp(t->empty_names[i], name) == 0) {
            r.empty = 1;
            r.empty_reason = (char *)t->empty_reasons[i];
            snprintf(msg, sizeof(msg), "no variant of cache %s fits node %s (test agent)", name,
                     t->node);
            r.empty_message = msg;
        }
    if (!r.empty && n_stores == 0)
        stores[n_stores++] = (char *)t->store;
    r.store_path = n_stores ? stores[0] : (char *)"";
    r.store_paths = stores;
    r.n_store_paths = n_stores;
    r.target_arch = (char *)"90";
    r.mount_path = (char *)(mp ? mp : hint ? hint : "");
    r.cache_namespace = (char *)(name ? q->pod_namespace : "");
    r.cache_name = (char *)(name ? name : "by-image");
    r.digest = (char *)"sha256:0000000000000000000000000000000000000000000000000000000000000000";
    answer(t, call, &r);
out:
    tkm__agent__v1__materialize_request__free_unpacked(q, NULL);
}

static void release(struct tkm_grpc_call *call, void *data)
{
    struct ta *t = data;
    size_t n;
    const void *b = tkm_grpc_call_request(call, &n);
    Tkm__Agent__V1__ReleaseRequest *q = tkm__agent__v1__release_request__unpack(NULL, n, b);
    Tkm__Agent__V1__ReleaseResponse r = TKM__AGENT__V1__RELEASE_RESPONSE__INIT;
    uint8_t buf[16];
    if (!q) {
        tkm_grpc_call_fail(call, TKM_GRPC_INVALID_ARGUMENT, "bad ReleaseRequest");
        return;
    }
    int i = ref_find(t, q->volume_id);
    printf("Release %s %s", q->volume_id, i >= 0 ? "released" : "unknown");
    if (q->scratch) {
        /* What the driver counted in the pod's scratch layer (issue 25). */
        const Tkm__Agent__V1__ScratchCount *c = q->scratch;
        char esc[4 * 128 + 8];
        printf(" scratch triton=%u fxgraph=%u aotautograd=%u vllm=%u files=%llu bytes=%llu "
               "truncated=%d names=",
               c->triton_kernels, c->inductor_fxgraph, c->inductor_aotautograd, c->vllm_entries,
               (unsigned long long)c->files, (unsigned long long)c->bytes, (int)c->truncated);
        for (size_t k = 0; k < c->n_kernel_names; k++)
            printf("%s%s", k ? "," : "",
                   tkm_escape(c->kernel_names[k], strlen(c->kernel_names[k]), esc, sizeof esc));
    }
    printf("\n");
    fflush(stdout);
    if (i < 0) {
        tkm_grpc_call_fail(call, TKM_GRPC_NOT_FOUND, "volume not known");
    } else {
        free(t->refs[i]);
        t->refs[i] = t->refs[--t->n_refs];
        r.released = 1;
        tkm_grpc_call_reply(call, buf, tkm__agent__v1__release_response__pack(&r, buf));
    }
    tkm__agent__v1__release_request__free_unpacked(q, NULL);
}

static void status(struct tkm_grpc_call *call, void *data)
{
    struct ta *t = data;
    Tkm__Agent__V1__StatusResponse r = TKM__AGENT__V1__STATUS_RESPONSE__INIT;
    uint8_t buf[512];
    r.ready = !t->not_ready;
    r.message = (char *)(t->not_ready ? "informers not synced (test agent --not-ready)"
                                      : "test agent ready");
    r.node_name = (char *)t->node;
    r.version = (char *)"test";
    printf("Status\n");
    fflush(stdout);
    tkm_grpc_call_reply(call, buf, tkm__agent__v1__status_response__pack(&r, buf));
}

static void on_signal(uv_signal_t *s, int signum)
{
    struct ta *t = s->data;
    (void)signum;
    uv_close((uv_handle_t *)&t->sigint, NULL);
    uv_close((uv_handle_t *)&t->sigterm, NULL);
    tkm_grpc_server_close(t->srv, NULL, NULL);
}

static int parse_args(struct ta *t, int argc, char **argv, const char **sock)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--not-ready") == 0) {
            t->not_ready = 1;
            continue;
        }
        if (!v)
            return -1;
        i++;
        if (strcmp(a, "--socket") == 0)
            *sock = v;
        else if (strcmp(a, "--store") == 0)
            t->store = v;
        else if (strcmp(a, "--node") == 0)
            t->node = v;
        else if (strcmp(a, "--cache") == 0 && t->n_caches < MAX_ITEMS) {
            char *eq = strchr(argv[i], '=');
            if (eq)
                *eq = '\0';
            t->hints[t->n_caches] = eq ? eq + 1 : NULL;
            t->caches[t->n_caches++] = argv[i];
        } else if (strcmp(a, "--store-for") == 0 && t->n_stores < MAX_ITEMS) {
            char *eq = strchr(argv[i], '=');
            if (!eq)
                return -1;
            *eq = '\0';
            t->store_names[t->n_stores] = argv[i];
            t->store_dirs[t->n_stores++] = eq + 1;
        } else if (strcmp(a, "--empty") == 0 && t->n_empty < MAX_ITEMS) {
            char *eq = strchr(argv[i], '=');
            if (!eq)
                return -1;
            *eq = '\0';
            t->empty_names[t->n_empty] = argv[i];
            t->empty_reasons[t->n_empty++] = eq + 1;
        } else if (strcmp(a, "--parts") == 0 && t->n_parts_names < MAX_ITEMS) {
            char *eq = strchr(argv[i], '='), *save = NULL;
            size_t k = t->n_parts_names++;
            if (!eq)
                return -1;
            *eq = '\0';
            t->parts_names[k] = argv[i];
            for (char *p = strtok_r(eq + 1, ",", &save); p && t->n_parts[k] < MAX_ITEMS;
                 p = strtok_r(NULL, ",", &save))
                t->parts[k][t->n_parts[k]++] = p;
        } else if (strcmp(a, "--image") == 0 && t->n_images < MAX_ITEMS)
            t->images[t->n_images++] = v;
        else if (strcmp(a, "--delay-ms") == 0) {
            if (tkm_parse_u64(v, 600000, &t->delay_ms) < 0)
                return -1;
        } else if (strcmp(a, "--fail") == 0 && t->n_fails < MAX_ITEMS) {
            struct fail *f = &t->fails[t->n_fails++];
            const char *eq = strchr(v, '='), *colon = eq ? strchr(eq, ':') : NULL;
            char num[8];
            int64_t code;
            if (!eq || !colon || (size_t)(eq - v) >= sizeof(f->name) ||
                (size_t)(colon - eq - 1) >= sizeof(num))
                return -1;
            snprintf(f->name, sizeof(f->name), "%.*s", (int)(eq - v), v);
            snprintf(num, sizeof(num), "%.*s", (int)(colon - eq - 1), eq + 1);
            if (tkm_parse_i64(num, 1, 16, &code) < 0)
                return -1;
            f->code = (int)code;
            f->msg = colon + 1;
        } else
            return -1;
    }
    return *sock && t->store ? 0 : -1;
}

int main(int argc, char **argv)
{
    static struct ta t; /* big (ref table); main's own, not shared */
    const char *sock = NULL;
    struct tkm_err err = {0};
    t.node = "test-node";
    if (parse_args(&t, argc, argv, &sock) < 0) {
        fprintf(stderr,
                "usage: e2e_csi_testagent --socket PATH --store DIR [--cache NAME[=HINT]]... "
                "[--image REF]... [--fail NAME=CODE:MSG]... [--not-ready] [--delay-ms N] "
                "[--store-for NAME=DIR]... [--empty NAME=REASON]... [--parts NAME=P1,P2]...\n");
        return 2;
    }
    struct tkm_grpc_server_opts o = {.socket_path = sock};
    uv_loop_init(&t.loop);
    if (tkm_grpc_server_new(&t.loop, &o, &t.srv, &err) < 0 ||
        tkm_grpc_server_register(t.srv, "/tkm.agent.v1.Agent/Materialize", materialize, &t, &err) <
            0 ||
        tkm_grpc_server_register(t.srv, "/tkm.agent.v1.Agent/Release", release, &t, &err) < 0 ||
        tkm_grpc_server_register(t.srv, "/tkm.agent.v1.Agent/Status", status, &t, &err) < 0) {
        fprintf(stderr, "csi_testagent: %s\n", tkm_err_str(&err));
        return 1;
    }
    uv_signal_init(&t.loop, &t.sigint);
    uv_signal_init(&t.loop, &t.sigterm);
    t.sigint.data = t.sigterm.data = &t;
    uv_signal_start(&t.sigint, on_signal, SIGINT);
    uv_signal_start(&t.sigterm, on_signal, SIGTERM);
    printf("Serving %s\n", sock);
    fflush(stdout);
    uv_run(&t.loop, UV_RUN_DEFAULT);
    uv_loop_close(&t.loop);
    for (size_t i = 0; i < t.n_refs; i++)
        free(t.refs[i]);
    return 0;
}
