/*
 * csi_client.c - a small CSI client on lib/grpc for the tests and the
 * benchmark of tkm-csi: it sends what kubelet sends.
 *
 * Usage: e2e_csi_client SOCKET COMMAND ...
 *   info | caps | nodecaps | probe | reginfo
 *   publish VOL TARGET [--readonly] [--repeat N] [KEY=VALUE]...
 *       Ephemeral pod info is added unless given: pod.namespace=default,
 *       pod.name=pod-VOL, pod.uid=uid-VOL, ephemeral=true. --repeat sends N
 *       identical calls at once (all must succeed).
 *   unpublish VOL TARGET [--time]
 *       --time: "OK <ms> ms", the call's latency (bench/csi.sh)
 *   stats VOL PATH
 *   bench N DIR [KEY=VALUE]...
 *       Publishes N volumes (bench-<i>, pod p-<i>, target DIR/<i>) all at once,
 *       then unpublishes them all at once; prints per-call latency (p50, p95,
 *       max) and the wall time of each phase.
 * Prints "OK ..." or "<CODE NAME>: <message>" per call; exits 0 when every
 * call was OK, 1 otherwise, 2 on usage errors.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tkm/grpc.h>
#include <tkm/util.h>

#include "csi.pb-c.h"
#include "pluginregistration.pb-c.h"

#define MAX_KV 32

struct cl {
    uv_loop_t loop;
    struct tkm_grpc_client *cli;
    int failed;
    size_t left;
    uint64_t *lat; /* bench latencies, ms*1000 */
    size_t n_lat;
    const char *cmd;
    const char *sock;
    int timed; /* print the one call's latency */
};

struct one {
    struct cl *c;
    uint64_t t0;
};

static uint64_t now_us(void)
{
    return uv_hrtime() / 1000;
}

static void done(int code, const char *message, const void *resp, size_t len, void *data)
{
    struct one *o = data;
    struct cl *c = o->c;
    uint64_t us = now_us() - o->t0;
    if (c->lat)
        c->lat[c->n_lat++] = us;
    if (code != TKM_GRPC_OK) {
        c->failed = 1;
        printf("%s: %s\n", tkm_grpc_code_name(code), message);
    } else if (strcmp(c->cmd, "info") == 0) {
        Csi__V1__GetPluginInfoResponse *r =
            csi__v1__get_plugin_info_response__unpack(NULL, len, resp);
        printf("OK name=%s version=%s\n", r ? r->name : "?", r ? r->vendor_version : "?");
        if (r)
            csi__v1__get_plugin_info_response__free_unpacked(r, NULL);
    } else if (strcmp(c->cmd, "probe") == 0) {
        Csi__V1__ProbeResponse *r = csi__v1__probe_response__unpack(NULL, len, resp);
        printf("OK ready=%s\n", r && r->ready ? (r->ready->value ? "true" : "false") : "unset");
        if (r)
            csi__v1__probe_response__free_unpacked(r, NULL);
    } else if (strcmp(c->cmd, "stats") == 0) {
        Csi__V1__NodeGetVolumeStatsResponse *r =
            csi__v1__node_get_volume_stats_response__unpack(NULL, len, resp);
        printf("OK");
        for (size_t i = 0; r && i < r->n_usage; i++)
            printf(" %s:total=%lld,used=%lld,available=%lld",
                   r->usage[i]->unit == CSI__V1__VOLUME_USAGE__UNIT__BYTES ? "bytes" : "inodes",
                   (long long)r->usage[i]->total, (long long)r->usage[i]->used,
                   (long long)r->usage[i]->available);
        printf("\n");
        if (r)
            csi__v1__node_get_volume_stats_response__free_unpacked(r, NULL);
    } else if (strcmp(c->cmd, "nodecaps") == 0) {
        Csi__V1__NodeGetCapabilitiesResponse *r =
            csi__v1__node_get_capabilities_response__unpack(NULL, len, resp);
        printf("OK");
        for (size_t i = 0; r && i < r->n_capabilities; i++)
            if (r->capabilities[i]->rpc)
                printf(" rpc=%d", (int)r->capabilities[i]->rpc->type);
        printf("\n");
        if (r)
            csi__v1__node_get_capabilities_response__free_unpacked(r, NULL);
    } else if (strcmp(c->cmd, "reginfo") == 0) {
        Pluginregistration__PluginInfo *r =
            pluginregistration__plugin_info__unpack(NULL, len, resp);
        printf("OK type=%s name=%s endpoint=%s versions=%s\n", r ? r->type : "?", r ? r->name : "?",
               r ? r->endpoint : "?",
               r && r->n_supported_versions ? r->supported_versions[0] : "?");
        if (r)
            pluginregistration__plugin_info__free_unpacked(r, NULL);
    } else if (c->timed) {
        printf("OK %.3f ms\n", us / 1000.0);
    } else if (!c->lat) {
        printf("OK\n");
    }
    free(o);
    if (--c->left == 0)
        tkm_grpc_client_close(c->cli, NULL, NULL);
}

static int call(struct cl *c, const char *method, const ProtobufCMessage *m)
{
    struct tkm_err err = {0};
    size_t n = m ? protobuf_c_message_get_packed_size(m) : 0;
    uint8_t *b = malloc(n ? n : 1);
    struct one *o = calloc(1, sizeof(*o));
    if (!b || !o) {
        free(b);
        free(o);
        return -ENOMEM;
    }
    if (m)
        protobuf_c_message_pack(m, b);
    o->c = c;
    o->t0 = now_us();
    c->left++;
    int rc = tkm_grpc_client_call(c->cli, method, b, n, 120000, done, o, &err);
    free(b);
    if (rc < 0) {
        c->left--;
        free(o);
        fprintf(stderr, "csi_client: %s\n", tkm_err_str(&err));
    }
    return rc;
}

/* Builds a publish request in q with entries in ents/pents (MAX_KV + 4). */
static void build_publish(Csi__V1__NodePublishVolumeRequest *q, Csi__V1__VolumeCapability *cap,
                          Csi__V1__VolumeCapability__MountVolume *mv,
                          Csi__V1__VolumeCapability__AccessMode *am,
                          Csi__V1__NodePublishVolumeRequest__VolumeContextEntry *ents,
                          Csi__V1__NodePublishVolumeRequest__VolumeContextEntry **pents, char *vol,
                          char *target, char **kv, size_t nkv, char defs[4][256])
{
    static const char *const keys[4] = {"csi.storage.k8s.io/pod.namespace",
                                        "csi.storage.k8s.io/pod.name", "csi.storage.k8s.io/pod.uid",
                                        "csi.storage.k8s.io/ephemeral"};
    size_t n = 0;
    csi__v1__node_publish_volume_request__init(q);
    csi__v1__volume_capability__init(cap);
    csi__v1__volume_capability__mount_volume__init(mv);
    csi__v1__volume_capability__access_mode__init(am);
    am->mode = CSI__V1__VOLUME_CAPABILITY__ACCESS_MODE__MODE__SINGLE_NODE_WRITER;
    cap->access_type_case = CSI__V1__VOLUME_CAPABILITY__ACCESS_TYPE_MOUNT;
    cap->mount = mv;
    cap->access_mode = am;
    q->volume_id = vol;
    q->target_path = target;
    q->volume_capability = cap;
    snprintf(defs[0], 256, "default");
    snprintf(defs[1], 256, "pod-%s", vol);
    snprintf(defs[2], 256, "uid-%s", vol);
    snprintf(defs[3], 256, "true");
    for (size_t k = 0; k < 4; k++) {
        int given = 0;
        for (size_t i = 0; i < nkv; i++)
            if (strncmp(kv[i], keys[k], strlen(keys[k])) == 0 && kv[i][strlen(keys[k])] == '=')
                given = 1;
        if (given)
            continue;
        csi__v1__node_publish_volume_request__volume_context_entry__init(&ents[n]);
        ents[n].key = (char *)keys[k];
        ents[n].value = defs[k];
        pents[n] = &ents[n];
        n++;
    }
    for (size_t i = 0; i < nkv; i++) {
        char *eq = strchr(kv[i], '=');
        csi__v1__node_publish_volume_request__volume_context_entry__init(&ents[n]);
        ents[n].key = kv[i];
        ents[n].value = eq ? eq + 1 : (char *)"";
        if (eq)
            *eq = '\0';
        pents[n] = &ents[n];
        n++;
    }
    q->n_volume_context = n;
    q->volume_context = pents;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static void report(const char *what, uint64_t *lat, size_t n, uint64_t wall_us)
{
    qsort(lat, n, sizeof(*lat), cmp_u64);
    printf("%s: %zu calls in %.1f ms wall; latency p50 %.1f ms, p95 %.1f ms, max %.1f ms\n", what,
           n, wall_us / 1000.0, lat[n / 2] / 1000.0,
           lat[(n * 95) / 100 < n ? (n * 95) / 100 : n - 1] / 1000.0, lat[n - 1] / 1000.0);
}

static int bench(struct cl *c, size_t n, const char *dir, char **kv, size_t nkv)
{
    Csi__V1__NodePublishVolumeRequest q;
    Csi__V1__VolumeCapability cap;
    Csi__V1__VolumeCapability__MountVolume mv;
    Csi__V1__VolumeCapability__AccessMode am;
    Csi__V1__NodePublishVolumeRequest__VolumeContextEntry ents[MAX_KV + 4], *pents[MAX_KV + 4];
    char defs[4][256], vol[64], target[512], pod[64];
    char podkv[80];
    char *kv2[MAX_KV + 1];
    uint64_t t0;
    c->lat = calloc(n, sizeof(*c->lat));
    if (!c->lat)
        return 1;
    for (int phase = 0; phase < 2; phase++) {
        c->n_lat = 0;
        t0 = now_us();
        for (size_t i = 0; i < n; i++) {
            snprintf(vol, sizeof(vol), "bench-%zu", i);
            snprintf(target, sizeof(target), "%s/%zu", dir, i);
            if (phase == 0) {
                snprintf(pod, sizeof(pod), "p-%zu", i);
                snprintf(podkv, sizeof(podkv), "csi.storage.k8s.io/pod.name=%s", pod);
                for (size_t k = 0; k < nkv; k++)
                    kv2[k] = strdup(kv[k]);
                kv2[nkv] = podkv;
                build_publish(&q, &cap, &mv, &am, ents, pents, vol, target, kv2, nkv + 1, defs);
                call(c, "/csi.v1.Node/NodePublishVolume", &q.base);
                for (size_t k = 0; k < nkv; k++)
                    free(kv2[k]);
            } else {
                Csi__V1__NodeUnpublishVolumeRequest u =
                    CSI__V1__NODE_UNPUBLISH_VOLUME_REQUEST__INIT;
                u.volume_id = vol;
                u.target_path = target;
                call(c, "/csi.v1.Node/NodeUnpublishVolume", &u.base);
            }
        }
        /* The client closes itself after the last answer; reopen for phase 2. */
        uv_run(&c->loop, UV_RUN_DEFAULT);
        report(phase == 0 ? "publish" : "unpublish", c->lat, c->n_lat, now_us() - t0);
        if (phase == 0) {
            struct tkm_err err = {0};
            if (c->failed || tkm_grpc_client_new(&c->loop, c->sock, &c->cli, &err) < 0)
                break;
        }
    }
    free(c->lat);
    return c->failed;
}

int main(int argc, char **argv)
{
    struct cl c;
    struct tkm_err err = {0};
    if (argc < 3) {
        fprintf(stderr, "usage: e2e_csi_client SOCKET info|caps|nodecaps|probe|reginfo|publish|"
                        "unpublish|stats|bench ...\n");
        return 2;
    }
    memset(&c, 0, sizeof(c));
    c.cmd = argv[2];
    c.sock = argv[1];
    uv_loop_init(&c.loop);
    if (tkm_grpc_client_new(&c.loop, argv[1], &c.cli, &err) < 0) {
        fprintf(stderr, "csi_client: %s\n", tkm_err_str(&err));
        return 2;
    }
    const char *cmd = argv[2];
    int rc = 0;
    if (strcmp(cmd, "info") == 0) {
        Csi__V1__GetPluginInfoRequest r = CSI__V1__GET_PLUGIN_INFO_REQUEST__INIT;
        rc = call(&c, "/csi.v1.Identity/GetPluginInfo", &r.base);
    } else if (strcmp(cmd, "caps") == 0) {
        Csi__V1__GetPluginCapabilitiesRequest r = CSI__V1__GET_PLUGIN_CAPABILITIES_REQUEST__INIT;
        rc = call(&c, "/csi.v1.Identity/GetPluginCapabilities", &r.base);
    } else if (strcmp(cmd, "nodecaps") == 0) {
        Csi__V1__NodeGetCapabilitiesRequest r = CSI__V1__NODE_GET_CAPABILITIES_REQUEST__INIT;
        rc = call(&c, "/csi.v1.Node/NodeGetCapabilities", &r.base);
    } else if (strcmp(cmd, "probe") == 0) {
        Csi__V1__ProbeRequest r = CSI__V1__PROBE_REQUEST__INIT;
        rc = call(&c, "/csi.v1.Identity/Probe", &r.base);
    } else if (strcmp(cmd, "reginfo") == 0) {
        Pluginregistration__InfoRequest r = PLUGINREGISTRATION__INFO_REQUEST__INIT;
        rc = call(&c, "/pluginregistration.Registration/GetInfo", &r.base);
    } else if (strcmp(cmd, "publish") == 0 && argc >= 5) {
        Csi__V1__NodePublishVolumeRequest q;
        Csi__V1__VolumeCapability cap;
        Csi__V1__VolumeCapability__MountVolume mv;
        Csi__V1__VolumeCapability__AccessMode am;
        Csi__V1__NodePublishVolumeRequest__VolumeContextEntry ents[MAX_KV + 4], *pents[MAX_KV + 4];
        char defs[4][256], *kv[MAX_KV];
        size_t nkv = 0;
        uint64_t repeat = 1;
        int ro = 0;
        for (int i = 5; i < argc; i++) {
            if (strcmp(argv[i], "--readonly") == 0)
                ro = 1;
            else if (strcmp(argv[i], "--repeat") == 0 && i + 1 < argc &&
                     tkm_parse_u64(argv[i + 1], 1000, &repeat) == 0)
                i++;
            else if (nkv < MAX_KV)
                kv[nkv++] = argv[i];
        }
        build_publish(&q, &cap, &mv, &am, ents, pents, argv[3], argv[4], kv, nkv, defs);
        q.readonly = ro;
        for (uint64_t i = 0; i < repeat && rc == 0; i++)
            rc = call(&c, "/csi.v1.Node/NodePublishVolume", &q.base);
    } else if (strcmp(cmd, "unpublish") == 0 &&
               (argc == 5 || (argc == 6 && strcmp(argv[5], "--time") == 0))) {
        Csi__V1__NodeUnpublishVolumeRequest r = CSI__V1__NODE_UNPUBLISH_VOLUME_REQUEST__INIT;
        c.timed = argc == 6;
        r.volume_id = argv[3];
        r.target_path = argv[4];
        rc = call(&c, "/csi.v1.Node/NodeUnpublishVolume", &r.base);
    } else if (strcmp(cmd, "stats") == 0 && argc == 5) {
        Csi__V1__NodeGetVolumeStatsRequest r = CSI__V1__NODE_GET_VOLUME_STATS_REQUEST__INIT;
        r.volume_id = argv[3];
        r.volume_path = argv[4];
        rc = call(&c, "/csi.v1.Node/NodeGetVolumeStats", &r.base);
    } else if (strcmp(cmd, "bench") == 0 && argc >= 5) {
        uint64_t n;
        if (tkm_parse_u64(argv[3], 100000, &n) < 0 || n == 0) {
            fprintf(stderr, "csi_client: bench N: 1..100000\n");
            return 2;
        }
        rc = bench(&c, (size_t)n, argv[4], argv + 5, (size_t)(argc - 5));
        uv_run(&c.loop, UV_RUN_DEFAULT);
        uv_loop_close(&c.loop);
        return rc ? 1 : 0;
    } else {
        fprintf(stderr, "csi_client: bad command or arguments: %s\n", cmd);
        tkm_grpc_client_close(c.cli, NULL, NULL);
        uv_run(&c.loop, UV_RUN_DEFAULT);
        return 2;
    }
    if (rc < 0 || c.left == 0)
        tkm_grpc_client_close(c.cli, NULL, NULL);
    uv_run(&c.loop, UV_RUN_DEFAULT);
    uv_loop_close(&c.loop);
    return c.failed || rc < 0 ? 1 : 0;
}
