/*
 * api_status.c - drives lib/api (tkm.io/v1alpha1) against a real apiserver for
 * tests/e2e/api_status.sh: encodes a node status and a cache status, writes
 * them with server-side apply, reads them back through the typed decoders.
 *
 *   e2e_api_status node NS NODE NODE_UID   NS "-": the cluster kind
 *   e2e_api_status cache NS NAME           NS "-": the cluster kind; the object exists
 *
 * node: applies the node status object (ownerReferences: the Node) through
 * the main endpoint, then its status to /status (field manager tkm-agent),
 * then the identical body again. cache: applies the status to /status
 * (field manager tkm-controller) twice. Both then GET the object, decode it
 * and encode the decoded status again. Prints, one per line:
 *   rv1=<RV after the first status apply> rv2=<RV after the re-apply>
 *   roundtrip=identical|different
 *   decoded: <a few decoded fields>
 * Exits 0, 2 on an API error (the status on stdout), 1 on local errors.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <curl/curl.h>

#include <tkm/api/v1alpha1.h>
#include <tkm/buf.h>
#include <tkm/http.h>
#include <k8s/client.h>
#include <k8s/config.h>
#include "sup_k8s.h"

#define DIGEST "sha256:1111111111111111111111111111111111111111111111111111111111111111"

static int api_error(const char *what, int rc, const struct k8s_status *st)
{
    char line[2048];
    printf("ERROR %s rc=%d code=%ld: %s\n", what, rc, st->code,
           k8s_status_str(st, line, sizeof line));
    return 2;
}

/* Applies body (to sub or the main endpoint); *rv gets the RV (owned). */
static int apply(struct k8s_client *c, const struct k8s_resource *r, const char *ns, json_t *body,
                 const char *manager, const char *sub, char **rv)
{
    struct k8s_status st = K8S_STATUS_INIT;
    struct k8s_apply_opts o = {.field_manager = manager, .force = 1, .subresource = sub};
    json_t *out = NULL;
    int rc = sup_k8s_apply(c, r, ns, body, &o, &out, &st);
    if (rc == 0 && rv)
        *rv = strdup(k8s_obj_resource_version(out));
    json_decref(out);
    if (rc)
        rc = api_error(sub ? "apply status" : "apply", rc, &st);
    k8s_status_release(&st);
    return rc;
}

/* GETs name and returns its JSON bytes (owned) as an informer stores them. */
static char *get_raw(struct k8s_client *c, const struct k8s_resource *r, const char *ns,
                     const char *name)
{
    struct k8s_status st = K8S_STATUS_INIT;
    json_t *obj = NULL;
    char *s = NULL;
    if (sup_k8s_get(c, r, ns, name, NULL, &obj, &st) == 0)
        s = json_dumps(obj, JSON_COMPACT);
    else
        api_error("get", st.rc, &st);
    json_decref(obj);
    k8s_status_release(&st);
    return s;
}

static void fill_node(struct tkm_api_node_status *st, const char *node, char *now)
{
    static struct tkm_api_gpu gpus[2];
    static int32_t ids01[] = {0, 1}, ids2[] = {2};
    static struct tkm_api_gpu_group comp = {ids01, 2, "nvidia-h200", NULL, NULL};
    static struct tkm_api_gpu_group incomp = {ids2, 1, "amd-mi300x", "ArchMismatch",
                                              "the cache holds sm90 kernels; gfx942 found"};
    static struct tkm_api_pod_ref pod = {"ml", "trainer-0", "pod-uid-1", "csi-vol-1"};
    static struct tkm_api_node_cache caches[2];
    for (int i = 0; i < 2; i++)
        gpus[i] = (struct tkm_api_gpu){.id = i,
                                       .gpu_type = "nvidia-h200",
                                       .vendor = "nvidia",
                                       .product_name = "NVIDIA H200",
                                       .arch = "90",
                                       .compute_capability = "9.0",
                                       .warp_size = 32,
                                       .driver_version = "570.124.06",
                                       .cuda_driver_version = "12.8",
                                       .memory_bytes = 150754820096LL,
                                       .uuid = i ? "GPU-b" : "GPU-a",
                                       .pci_bus_id = i ? "0000:02:00.0" : "0000:01:00.0"};
    /* Given out of name order on purpose: the body is sorted. */
    caches[0] = (struct tkm_api_node_cache){.name = "zeta",
                                            .digest = DIGEST,
                                            .error = "signature does not verify",
                                            .last_updated = now};
    caches[1] = (struct tkm_api_node_cache){.name = "alpha",
                                            .digest = DIGEST,
                                            .verified = 1,
                                            .extracted = 1,
                                            .compatible = &comp,
                                            .n_compatible = 1,
                                            .incompatible = &incomp,
                                            .n_incompatible = 1,
                                            .pods = &pod,
                                            .n_pods = 1,
                                            .last_updated = now};
    *st = (struct tkm_api_node_status){.node_name = (char *)node,
                                       .gpus = gpus,
                                       .n_gpus = 2,
                                       .caches = caches,
                                       .n_caches = 2,
                                       .last_updated = now};
}

/* Decodes raw, re-encodes its status, compares with body. */
static int node_check(const char *raw, const char *ns, const char *uid, const char *body)
{
    struct tkm_api_nodestatus n;
    struct tkm_err err = {0};
    struct tkm_buf b = TKM_BUF_INIT(1 << 20);
    json_t *again = NULL;
    if (tkm_api_nodestatus_decode(raw, strlen(raw), &n, &err)) {
        printf("decode failed: %s\n", err.msg);
        return 1;
    }
    int rc = tkm_api_node_status_apply(&n.status, ns, uid, &again, &err);
    if (rc == 0)
        rc = tkm_api_dump(again, &b);
    if (rc == 0) {
        printf("roundtrip=%s\n", strcmp(b.data, body) == 0 ? "identical" : "different");
        const struct tkm_api_node_cache *a = &n.status.caches[0];
        printf("decoded: cluster=%d node=%s gpus=%zu gpu1=%s caches=%zu first=%s verified=%d "
               "compatible=%d,%d incompatible=%s pod=%s zeta.error=%s\n",
               n.cluster, n.status.node_name, n.status.n_gpus, n.status.gpus[1].uuid,
               n.status.n_caches, a->name, a->verified, a->compatible[0].ids[0],
               a->compatible[0].ids[1], a->incompatible[0].reason, a->pods[0].name,
               n.status.caches[1].error);
        if (strcmp(b.data, body) != 0)
            printf("sent: %s\nread: %s\n", body, b.data);
    } else {
        printf("encode failed: %s\n", err.msg);
    }
    json_decref(again);
    tkm_buf_release(&b);
    tkm_api_nodestatus_release(&n);
    return rc ? 1 : 0;
}

static int cmd_node(struct k8s_client *c, const char *ns, const char *node, const char *uid)
{
    const struct k8s_resource *r = ns ? &tkm_api_res_tkcns : &tkm_api_res_tkcnsc;
    struct tkm_api_node_status st;
    struct tkm_buf body = TKM_BUF_INIT(1 << 20);
    struct tkm_err err = {0};
    char now[32], *rv1 = NULL, *rv2 = NULL, *raw = NULL;
    json_t *o = NULL;
    tkm_api_now(now, sizeof now);
    fill_node(&st, node, now);
    int rc = tkm_api_node_status_apply(&st, ns, uid, &o, &err);
    if (rc) {
        printf("encode failed: %s\n", err.msg);
        return 1;
    }
    tkm_api_dump(o, &body);
    if ((rc = apply(c, r, ns, o, "tkm-agent", NULL, NULL)) ||
        (rc = apply(c, r, ns, o, "tkm-agent", "status", &rv1)) ||
        (rc = apply(c, r, ns, o, "tkm-agent", "status", &rv2)))
        goto out;
    printf("rv1=%s rv2=%s\n", rv1, rv2);
    if (!(raw = get_raw(c, r, ns, node))) {
        rc = 2;
        goto out;
    }
    rc = node_check(raw, ns, uid, body.data);
out:
    free(rv1);
    free(rv2);
    free(raw);
    json_decref(o);
    tkm_buf_release(&body);
    return rc;
}

static int cache_check(const char *raw, const char *ns, const char *name, const char *body)
{
    struct tkm_api_cache cc;
    struct tkm_err err = {0};
    struct tkm_buf b = TKM_BUF_INIT(1 << 20);
    json_t *again = NULL;
    if (tkm_api_cache_decode(raw, strlen(raw), &cc, &err)) {
        printf("decode failed: %s\n", err.msg);
        return 1;
    }
    int rc = tkm_api_cache_status_apply(&cc.status, name, ns, &again, &err);
    if (rc == 0)
        rc = tkm_api_dump(again, &b);
    if (rc == 0) {
        printf("roundtrip=%s\n", strcmp(b.data, body) == 0 ? "identical" : "different");
        printf("decoded: cluster=%d image=%s mode=%d keyref=%s digest=%s entries=%lld nodes=%d "
               "failed=%s conditions=%zu ready=%d gen=%lld\n",
               cc.cluster, cc.spec.cache_image, (int)cc.spec.signature_policy.mode,
               cc.spec.signature_policy.public_key_ref_name
                   ? cc.spec.signature_policy.public_key_ref_name
                   : "-",
               cc.status.resolved_digest, (long long)cc.status.summary.entry_count,
               cc.status.counts.nodes, cc.status.failed_nodes[0].node, cc.status.n_conditions,
               (int)cc.status.conditions[1].status, (long long)cc.meta.generation);
        if (strcmp(b.data, body) != 0)
            printf("sent: %s\nread: %s\n", body, b.data);
    } else {
        printf("encode failed: %s\n", err.msg);
    }
    json_decref(again);
    tkm_buf_release(&b);
    tkm_api_cache_release(&cc);
    return rc ? 1 : 0;
}

static int cmd_cache(struct k8s_client *c, const char *ns, const char *name)
{
    const struct k8s_resource *r = ns ? &tkm_api_res_tkc : &tkm_api_res_tkcc;
    char now[32], *rv1 = NULL, *rv2 = NULL, *raw = NULL;
    struct tkm_buf body = TKM_BUF_INIT(1 << 20);
    struct tkm_err err = {0};
    json_t *o = NULL;
    tkm_api_now(now, sizeof now);
    struct tkm_api_target tg = {"cuda", "90", "3.6.0", "8.7", 32};
    struct tkm_api_failed_node fn = {"node-9", "PullFailed", "registry timed out"};
    struct tkm_api_condition cs[2] = {
        {"Verified", TKM_API_COND_TRUE, 1, now, "SignatureValid", "cosign signature verified"},
        {"Ready", TKM_API_COND_FALSE, 1, now, "NodesPending", "1 of 3 nodes failed"},
    };
    struct tkm_api_cache_status st = {.observed_generation = 1,
                                      .resolved_digest = DIGEST,
                                      .has_summary = 1,
                                      .summary = {3, 1048576, &tg, 1},
                                      .has_counts = 1,
                                      .counts = {3, 2, 0, 1, 1},
                                      .failed_nodes = &fn,
                                      .n_failed_nodes = 1,
                                      .conditions = cs,
                                      .n_conditions = 2,
                                      .last_updated = now};
    int rc = tkm_api_cache_status_apply(&st, name, ns, &o, &err);
    if (rc) {
        printf("encode failed: %s\n", err.msg);
        return 1;
    }
    tkm_api_dump(o, &body);
    if ((rc = apply(c, r, ns, o, "tkm-controller", "status", &rv1)) ||
        (rc = apply(c, r, ns, o, "tkm-controller", "status", &rv2)))
        goto out;
    printf("rv1=%s rv2=%s\n", rv1, rv2);
    if (!(raw = get_raw(c, r, ns, name))) {
        rc = 2;
        goto out;
    }
    rc = cache_check(raw, ns, name, body.data);
out:
    free(rv1);
    free(rv2);
    free(raw);
    json_decref(o);
    tkm_buf_release(&body);
    return rc;
}

int main(int argc, char **argv)
{
    struct tkm_err err = {0};
    struct k8s_config cfg;
    struct k8s_client *c = NULL;
    uv_loop_t loop;
    int ret = 1;
    if (argc < 4 || (strcmp(argv[1], "node") == 0 && argc < 5)) {
        fprintf(stderr, "usage: e2e_api_status node NS NODE NODE_UID | cache NS NAME\n");
        return 1;
    }
    const char *ns = strcmp(argv[2], "-") == 0 ? NULL : argv[2];
    if (tkm_http_global_init(&err)) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    k8s_config_init(&cfg);
    uv_loop_init(&loop);
    if (k8s_config_load_default(&cfg, NULL, &err) || k8s_client_new(&loop, &cfg, NULL, &c, &err)) {
        fprintf(stderr, "client: %s\n", err.msg);
        goto out;
    }
    if (strcmp(argv[1], "node") == 0)
        ret = cmd_node(c, ns, argv[3], argv[4]);
    else if (strcmp(argv[1], "cache") == 0)
        ret = cmd_cache(c, ns, argv[3]);
    else
        fprintf(stderr, "unknown command %s\n", argv[1]);
out:
    k8s_config_release(&cfg);
    k8s_client_free(c);
    uv_run(&loop, UV_RUN_DEFAULT);
    uv_loop_close(&loop);
    curl_global_cleanup();
    return ret;
}
