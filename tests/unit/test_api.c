/* test_api.c - lib/api: tkm.io/v1alpha1 decoding (from the bytes the apiserver
 * and the informer store hold) and the server-side-apply status bodies. */
#include <tkm/api/policy.h>
#include <tkm/api/v1alpha1.h>
#include <tkm/buf.h>
#include <tkm/util.h>

#include "test.h"

#define DIGEST "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

/* A TritonKernelCache as the apiserver returns it (managedFields and all). */
static const char *const TKC_JSON =
    "{\"apiVersion\":\"tkm.io/v1alpha1\",\"kind\":\"TritonKernelCache\",\"metadata\":{"
    "\"name\":\"vector-add\",\"namespace\":\"ml\",\"uid\":\"u-1\",\"resourceVersion\":\"42\","
    "\"generation\":3,\"creationTimestamp\":\"2026-01-01T00:00:00Z\","
    "\"deletionTimestamp\":\"2026-01-02T00:00:00Z\",\"managedFields\":[{"
    "\"manager\":\"kubectl\",\"operation\":\"Apply\"}]},\"spec\":{\"cacheImage\":"
    "\"registry.example.com:5000/kernels/vector-add:v1\",\"mountPath\":\"/home/ml/.triton/cache\","
    "\"signaturePolicy\":{\"mode\":\"Enforce\",\"publicKeySecretRef\":{\"name\":\"sig\","
    "\"key\":\"cosign.pub\"},\"futureField\":{\"x\":1}},\"imagePullSecrets\":[{\"name\":\"a\"},"
    "{\"name\":\"b\"}]},\"status\":{\"observedGeneration\":3,\"resolvedDigest\":\"" DIGEST "\","
    "\"summary\":{\"entryCount\":7,\"cacheSizeBytes\":123456,\"targets\":[{\"backend\":\"cuda\","
    "\"arch\":\"90\",\"warpSize\":32,\"tritonVersion\":\"3.6.0\",\"ptxVersion\":\"8.7\"}]},"
    "\"counts\":{\"nodes\":4,\"compatible\":3,\"incompatible\":1,\"failed\":1,\"inUse\":2},"
    "\"failedNodes\":[{\"node\":\"n9\",\"reason\":\"PullFailed\",\"message\":\"timeout\"}],"
    "\"conditions\":[{\"type\":\"Verified\",\"status\":\"True\",\"observedGeneration\":3,"
    "\"lastTransitionTime\":\"2026-01-01T00:01:00Z\",\"reason\":\"SignatureValid\","
    "\"message\":\"ok\"},{\"type\":\"Ready\",\"status\":\"False\",\"observedGeneration\":2,"
    "\"lastTransitionTime\":\"2026-01-01T00:02:00Z\",\"reason\":\"Pending\",\"message\":\"\"}],"
    "\"lastUpdated\":\"2026-01-01T00:03:00Z\"}}";

TEST(cache_decode_reads_spec_status_and_ignores_unknown)
{
    struct tkm_api_cache c;
    struct tkm_err err = {0};
    ASSERT_OK(tkm_api_cache_decode(TKC_JSON, strlen(TKC_JSON), &c, &err));
    ASSERT_EQ(c.cluster, 0);
    ASSERT_STREQ(c.meta.name, "vector-add");
    ASSERT_STREQ(c.meta.ns, "ml");
    ASSERT_STREQ(c.meta.uid, "u-1");
    ASSERT_STREQ(c.meta.resource_version, "42");
    ASSERT_EQ(c.meta.generation, 3);
    ASSERT_STREQ(c.meta.deletion_timestamp, "2026-01-02T00:00:00Z");
    ASSERT_STREQ(c.spec.cache_image, "registry.example.com:5000/kernels/vector-add:v1");
    ASSERT_STREQ(c.spec.mount_path, "/home/ml/.triton/cache");
    ASSERT_EQ(c.spec.signature_policy.present, 1);
    ASSERT_EQ(c.spec.signature_policy.mode, TKM_API_SIG_ENFORCE);
    ASSERT_STREQ(c.spec.signature_policy.public_key_ref_name, "sig");
    ASSERT_STREQ(c.spec.signature_policy.public_key_ref_key, "cosign.pub");
    ASSERT_NULL(c.spec.signature_policy.public_key);
    ASSERT_UEQ(c.spec.n_image_pull_secrets, 2);
    ASSERT_STREQ(c.spec.image_pull_secrets[1], "b");
    ASSERT_STREQ(c.status.resolved_digest, DIGEST);
    ASSERT_EQ(c.status.observed_generation, 3);
    ASSERT_EQ(c.status.has_summary, 1);
    ASSERT_EQ(c.status.summary.entry_count, 7);
    ASSERT_EQ(c.status.summary.cache_size_bytes, 123456);
    ASSERT_UEQ(c.status.summary.n_targets, 1);
    ASSERT_STREQ(c.status.summary.targets[0].arch, "90");
    ASSERT_EQ(c.status.summary.targets[0].warp_size, 32);
    ASSERT_EQ(c.status.counts.in_use, 2);
    ASSERT_EQ(c.status.counts.incompatible, 1);
    ASSERT_UEQ(c.status.n_failed_nodes, 1);
    ASSERT_STREQ(c.status.failed_nodes[0].reason, "PullFailed");
    ASSERT_UEQ(c.status.n_conditions, 2);
    ASSERT_STREQ(c.status.conditions[0].type, "Verified");
    ASSERT_EQ(c.status.conditions[0].status, TKM_API_COND_TRUE);
    ASSERT_EQ(c.status.conditions[1].status, TKM_API_COND_FALSE);
    ASSERT_EQ(c.status.conditions[1].observed_generation, 2);
    ASSERT_STREQ(c.status.conditions[1].last_transition_time, "2026-01-01T00:02:00Z");
    ASSERT_STREQ(c.status.last_updated, "2026-01-01T00:03:00Z");
    tkm_api_cache_release(&c);
    tkm_api_cache_release(&c); /* a second release is harmless */

    /* The cluster kind, no status, policy absent. */
    const char *cl = "{\"apiVersion\":\"tkm.io/v1alpha1\",\"kind\":\"TritonKernelCacheCluster\","
                     "\"metadata\":{\"name\":\"c\"},\"spec\":{\"cacheImage\":\"r.io/x:1\"}}";
    ASSERT_OK(tkm_api_cache_decode(cl, strlen(cl), &c, &err));
    ASSERT_EQ(c.cluster, 1);
    ASSERT_NULL(c.meta.ns);
    ASSERT_EQ(c.spec.signature_policy.present, 0);
    ASSERT_EQ(c.status.has_summary, 0);
    ASSERT_UEQ(c.status.n_conditions, 0);
    tkm_api_cache_release(&c);
}

struct bad_case {
    const char *json;
    const char *msg;
};

TEST(cache_decode_rejects_wrong_types_naming_the_field)
{
#define TKC_PRE "{\"apiVersion\":\"tkm.io/v1alpha1\",\"kind\":\"TritonKernelCache\","
#define MD      "\"metadata\":{\"name\":\"x\",\"namespace\":\"n\"},"
    static const struct bad_case bad[] = {
        {"[1]", "expected a JSON object"},
        {"{\"a\":1,\"a\":2}", "not JSON"},
        {TKC_PRE MD "\"spec\":{\"cacheImage\":7}}", "spec.cacheImage: expected a string"},
        {TKC_PRE MD "\"spec\":{\"cacheImage\":\"a\",\"whenIncompatible\":\"Skip\"}}",
         "spec.whenIncompatible: \"Skip\", expected Fail or Empty"},
        {TKC_PRE MD "\"spec\":{\"cacheImage\":\"a\"},\"status\":{\"variants\":[{\"warpSize\":"
                    "2048}]}}",
         "status.variants[0].warpSize: 2048 is out of range [0, 1024]"},
        {TKC_PRE MD "\"spec\":{\"cacheImage\":\"a\"},\"status\":{\"gpuTypesWithoutVariant\":"
                    "[1]}}",
         "status.gpuTypesWithoutVariant[0]: expected a string"},
        {TKC_PRE MD "\"spec\":{}}", "spec.cacheImage: missing"},
        {TKC_PRE MD "\"spec\":{\"cacheImage\":\"a\",\"signaturePolicy\":{\"mode\":\"Maybe\"}}}",
         "spec.signaturePolicy.mode: \"Maybe\""},
        {TKC_PRE MD "\"spec\":{\"cacheImage\":\"a\",\"signaturePolicy\":{\"publicKeySecretRef\":"
                    "{\"name\":3}}}}",
         "spec.signaturePolicy.publicKeySecretRef.name: expected a string, got an integer"},
        {TKC_PRE MD "\"spec\":{\"cacheImage\":\"a\",\"imagePullSecrets\":{}}}",
         "spec.imagePullSecrets: expected a list, got an object"},
        {TKC_PRE MD "\"spec\":{\"cacheImage\":\"a\"},\"status\":{\"counts\":{\"nodes\":\"4\"}}}",
         "status.counts.nodes: expected an integer, got a string"},
        {TKC_PRE MD "\"spec\":{\"cacheImage\":\"a\"},\"status\":{\"conditions\":[{\"type\":"
                    "\"Ready\",\"status\":\"Yes\"}]}}",
         "status.conditions[0].status: \"Yes\""},
        {TKC_PRE MD "\"spec\":{\"cacheImage\":\"a\"},\"status\":{\"summary\":{\"targets\":[{"
                    "\"warpSize\":1.5}]}}}",
         "status.summary.targets[0].warpSize: expected an integer, got a number with a fraction"},
        {"{\"apiVersion\":\"v1\",\"kind\":\"TritonKernelCache\"," MD "\"spec\":{}}",
         "apiVersion: \"v1\""},
        {"{\"apiVersion\":\"tkm.io/v1alpha1\",\"kind\":\"Pod\"," MD "\"spec\":{}}",
         "kind: \"Pod\""},
        {TKC_PRE "\"metadata\":{},\"spec\":{}}", "metadata.name: missing"},
        {TKC_PRE MD "\"spec\":{\"cacheImage\":\"a\",\"signaturePolicy\":{\"keyless\":{"
                    "\"trustedRoot\":{\"kind\":\"Pod\",\"name\":\"r\"}}}}}",
         "spec.signaturePolicy.keyless.trustedRoot.kind: \"Pod\", expected ConfigMap or Secret"},
        {TKC_PRE MD "\"spec\":{\"cacheImage\":\"a\",\"signaturePolicy\":{\"keyless\":{"
                    "\"trustedRoot\":{\"kind\":\"Secret\",\"name\":\"r\"},\"identities\":[{"
                    "\"issuer\":\"i\",\"subject\":\"s\",\"subjectRegExp\":\"x\"}]}}}}",
         "spec.signaturePolicy.keyless.identities[0]: needs exactly one of subject and "
         "subjectRegExp"},
    };
    for (size_t i = 0; i < TKM_ARRAY_SIZE(bad); i++) {
        struct tkm_api_cache c;
        struct tkm_err err = {0};
        ASSERT_EQ(tkm_api_cache_decode(bad[i].json, strlen(bad[i].json), &c, &err), -EPROTO);
        ASSERT_STRCONTAINS(err.msg, bad[i].msg);
        ASSERT_NULL(c.spec.cache_image);
        ASSERT_NULL(c.meta.name);
    }
}

TEST(cache_decode_root_hands_back_the_parsed_document)
{
    struct tkm_api_cache c;
    struct tkm_err err = {0};
    json_t *root = NULL;
    ASSERT_OK(tkm_api_cache_decode_root(TKC_JSON, strlen(TKC_JSON), &c, &root, &err));
    ASSERT_STREQ(c.meta.name, "vector-add");
    /* the document the struct came from, with what the struct does not carry */
    ASSERT_NOT_NULL(root);
    ASSERT_STREQ(json_string_value(json_object_get(json_object_get(root, "metadata"), "name")),
                 "vector-add");
    ASSERT_EQ(json_integer_value(json_object_get(
                  json_object_get(json_object_get(json_object_get(root, "spec"), "signaturePolicy"),
                                  "futureField"),
                  "x")),
              1);
    json_decref(root);
    tkm_api_cache_release(&c);
    /* a failure: nothing handed back, the field named */
    static const char bad[] = "{\"apiVersion\":\"tkm.io/v1alpha1\",\"kind\":\"TritonKernelCache\","
                              "\"metadata\":{\"name\":\"x\"},\"spec\":{\"cacheImage\":7}}";
    root = (json_t *)1;
    ASSERT_EQ(tkm_api_cache_decode_root(bad, strlen(bad), &c, &root, &err), -EPROTO);
    ASSERT_NULL(root);
    ASSERT_NULL(c.meta.name);
    ASSERT_STRCONTAINS(err.msg, "spec.cacheImage: expected a string");
    /* not JSON at all */
    root = (json_t *)1;
    ASSERT_EQ(tkm_api_cache_decode_root("{", 1, &c, &root, &err), -EPROTO);
    ASSERT_NULL(root);
}

static void cond(struct tkm_api_condition *c, const char *type, enum tkm_api_cond_status st,
                 const char *reason)
{
    c->type = (char *)type;
    c->status = st;
    c->observed_generation = 3;
    c->last_transition_time = (char *)"2026-01-01T00:00:00Z";
    c->reason = (char *)reason;
    c->message = (char *)"m";
}

TEST(cache_status_apply_round_trip_and_is_deterministic)
{
    struct tkm_api_target tg = {(char *)"cuda", (char *)"90", (char *)"3.6.0", (char *)"8.7", 32};
    struct tkm_api_failed_node fn = {(char *)"n1", (char *)"PullFailed", (char *)"x"};
    struct tkm_api_condition cs[2];
    cond(&cs[0], "Verified", TKM_API_COND_TRUE, "SignatureValid");
    cond(&cs[1], "Ready", TKM_API_COND_UNKNOWN, "Pending");
    struct tkm_api_cache_status st = {.observed_generation = 3,
                                      .resolved_digest = (char *)DIGEST,
                                      .has_summary = 1,
                                      .summary = {7, 100, &tg, 1},
                                      .has_counts = 1,
                                      .counts = {2, 1, 1, 1, 0},
                                      .failed_nodes = &fn,
                                      .n_failed_nodes = 1,
                                      .conditions = cs,
                                      .n_conditions = 2,
                                      .last_updated = (char *)"2026-01-01T00:05:00Z"};
    json_t *o = NULL, *o2 = NULL;
    struct tkm_err err = {0};
    struct tkm_buf a = TKM_BUF_INIT(1 << 20), b = TKM_BUF_INIT(1 << 20);
    ASSERT_OK(tkm_api_cache_status_apply(&st, "vector-add", "ml", &o, &err));
    ASSERT_OK(tkm_api_dump(o, &a));
    const char *head = "{\"apiVersion\":\"tkm.io/v1alpha1\",\"kind\":\"TritonKernelCache\","
                       "\"metadata\":{\"name\":\"vector-add\",\"namespace\":\"ml\"},\"status\":{";
    ASSERT(strncmp(a.data, head, strlen(head)) == 0);
    ASSERT(strstr(a.data, "resourceVersion") == NULL);
    ASSERT(strstr(a.data, "\"spec\"") == NULL);
    ASSERT_STRCONTAINS(a.data, "\"status\":\"Unknown\"");
    /* Decode what was encoded (the apply body has no spec: add one). */
    json_object_set_new(o, "spec", json_pack("{s:s}", "cacheImage", "r.io/x:1"));
    char *s = json_dumps(o, JSON_COMPACT);
    struct tkm_api_cache c;
    ASSERT_OK(tkm_api_cache_decode(s, strlen(s), &c, &err));
    free(s);
    ASSERT_STREQ(c.status.resolved_digest, DIGEST);
    ASSERT_EQ(c.status.counts.nodes, 2);
    ASSERT_STREQ(c.status.summary.targets[0].ptx_version, "8.7");
    ASSERT_EQ(c.status.conditions[1].status, TKM_API_COND_UNKNOWN);
    ASSERT_STREQ(c.status.failed_nodes[0].node, "n1");
    /* Re-encoding the decoded status gives the same bytes. */
    ASSERT_OK(tkm_api_cache_status_apply(&c.status, "vector-add", "ml", &o2, &err));
    ASSERT_OK(tkm_api_dump(o2, &b));
    ASSERT_STREQ(a.data, b.data);
    tkm_api_cache_release(&c);
    json_decref(o);
    json_decref(o2);
    /* Cluster kind: no namespace. A condition without a reason is refused. */
    ASSERT_OK(tkm_api_cache_status_apply(&st, "c", NULL, &o, &err));
    ASSERT_STREQ(json_string_value(json_object_get(o, "kind")), "TritonKernelCacheCluster");
    ASSERT_NULL(json_object_get(json_object_get(o, "metadata"), "namespace"));
    json_decref(o);
    cs[1].reason = NULL;
    ASSERT_EQ(tkm_api_cache_status_apply(&st, "c", NULL, &o, &err), -EINVAL);
    ASSERT_NULL(o);
    ASSERT_STRCONTAINS(err.msg, "status.conditions[1]");
    tkm_buf_release(&a);
    tkm_buf_release(&b);
}

static const char *const NS_JSON =
    "{\"apiVersion\":\"tkm.io/v1alpha1\",\"kind\":\"TritonKernelCacheNodeStatus\",\"metadata\":{"
    "\"name\":\"node-1\",\"namespace\":\"ml\",\"resourceVersion\":\"9\",\"ownerReferences\":[{"
    "\"apiVersion\":\"v1\",\"kind\":\"Node\",\"name\":\"node-1\",\"uid\":\"n-uid\"}]},"
    "\"status\":{\"nodeName\":\"node-1\",\"gpuCount\":2,\"gpuTypes\":\"nvidia-h200\","
    "\"cacheCount\":2,\"gpus\":[{\"id\":0,\"gpuType\":\"nvidia-h200\",\"vendor\":\"nvidia\","
    "\"productName\":\"NVIDIA H200\",\"arch\":\"90\",\"computeCapability\":\"9.0\","
    "\"warpSize\":32,\"driverVersion\":\"570.1\",\"cudaDriverVersion\":\"12.8\","
    "\"memoryBytes\":150000000000,\"uuid\":\"GPU-1\",\"pciBusId\":\"0000:01:00.0\","
    "\"migMode\":false,\"newField\":true},{\"id\":1,\"gpuType\":\"nvidia-h200\"}],"
    "\"caches\":{\"zeta\":{\"digest\":\"" DIGEST "\",\"verified\":false,\"extracted\":false,"
    "\"error\":\"signature mismatch\"},\"alpha\":{\"digest\":\"" DIGEST "\",\"verified\":true,"
    "\"extracted\":true,\"compatibleGPUs\":[{\"ids\":[0,1],\"gpuType\":\"nvidia-h200\"}],"
    "\"incompatibleGPUs\":[{\"ids\":[2],\"gpuType\":\"amd-mi300x\",\"reason\":\"ArchMismatch\","
    "\"message\":\"gfx942 != 90\"}],\"pods\":[{\"namespace\":\"ml\",\"name\":\"p\",\"uid\":"
    "\"p-uid\",\"volumeId\":\"v1\"}],\"lastUpdated\":\"2026-01-01T00:00:00Z\"}},"
    "\"lastUpdated\":\"2026-01-01T00:00:09Z\"}}";

TEST(nodestatus_decode_and_round_trip)
{
    struct tkm_api_nodestatus n, n2;
    struct tkm_err err = {0};
    ASSERT_OK(tkm_api_nodestatus_decode(NS_JSON, strlen(NS_JSON), &n, &err));
    ASSERT_EQ(n.cluster, 0);
    ASSERT_STREQ(n.meta.name, "node-1");
    const struct tkm_api_node_status *st = &n.status;
    ASSERT_STREQ(st->node_name, "node-1");
    ASSERT_UEQ(st->n_gpus, 2);
    ASSERT_STREQ(st->gpus[0].product_name, "NVIDIA H200");
    ASSERT_EQ(st->gpus[0].memory_bytes, 150000000000LL);
    ASSERT_EQ(st->gpus[1].id, 1);
    ASSERT_UEQ(st->n_caches, 2);
    ASSERT_STREQ(st->caches[0].name, "alpha"); /* sorted by name */
    ASSERT_EQ(st->caches[0].verified, 1);
    ASSERT_UEQ(st->caches[0].compatible[0].n_ids, 2);
    ASSERT_EQ(st->caches[0].compatible[0].ids[1], 1);
    ASSERT_STREQ(st->caches[0].incompatible[0].reason, "ArchMismatch");
    ASSERT_STREQ(st->caches[0].pods[0].volume_id, "v1");
    ASSERT_STREQ(st->caches[1].error, "signature mismatch");
    ASSERT_STREQ(st->last_updated, "2026-01-01T00:00:09Z");

    json_t *o = NULL, *o2 = NULL;
    struct tkm_buf a = TKM_BUF_INIT(1 << 20), b = TKM_BUF_INIT(1 << 20);
    ASSERT_OK(tkm_api_node_status_apply(st, "ml", "n-uid", &o, &err));
    ASSERT_OK(tkm_api_dump(o, &a));
    ASSERT_STRCONTAINS(a.data, "\"ownerReferences\":[{\"apiVersion\":\"v1\",\"kind\":\"Node\","
                               "\"name\":\"node-1\",\"uid\":\"n-uid\"}]");
    ASSERT_STRCONTAINS(a.data, "\"gpuCount\":2,\"gpuTypes\":\"nvidia-h200\",\"cacheCount\":2");
    ASSERT_STRCONTAINS(a.data, "\"caches\":{\"alpha\":{");
    ASSERT(strstr(a.data, "\"alpha\"") < strstr(a.data, "\"zeta\""));
    ASSERT(strstr(a.data, "resourceVersion") == NULL);
    ASSERT(strstr(a.data, "newField") == NULL);
    char *s = json_dumps(o, JSON_COMPACT);
    ASSERT_OK(tkm_api_nodestatus_decode(s, strlen(s), &n2, &err));
    free(s);
    ASSERT_OK(tkm_api_node_status_apply(&n2.status, "ml", "n-uid", &o2, &err));
    ASSERT_OK(tkm_api_dump(o2, &b));
    ASSERT_STREQ(a.data, b.data);
    tkm_api_nodestatus_release(&n2);
    json_decref(o);
    json_decref(o2);

    /* Input order of caches does not matter: reversed gives the same bytes. */
    struct tkm_api_node_cache tmp = n.status.caches[0];
    n.status.caches[0] = n.status.caches[1];
    n.status.caches[1] = tmp;
    ASSERT_OK(tkm_api_node_status_apply(&n.status, "ml", "n-uid", &o, &err));
    tkm_buf_reset(&b);
    ASSERT_OK(tkm_api_dump(o, &b));
    ASSERT_STREQ(a.data, b.data);
    json_decref(o);
    /* A duplicate cache name, a missing owner uid. */
    free(n.status.caches[0].name);
    n.status.caches[0].name = strdup("alpha");
    ASSERT_EQ(tkm_api_node_status_apply(&n.status, "ml", "n-uid", &o, &err), -EINVAL);
    ASSERT_STRCONTAINS(err.msg, "\"alpha\" appears twice");
    tkm_err_clear(&err);
    ASSERT_EQ(tkm_api_node_status_apply(&n.status, NULL, NULL, &o, &err), -EINVAL);
    ASSERT_STRCONTAINS(err.msg, "uid");
    tkm_api_nodestatus_release(&n);
    tkm_buf_release(&a);
    tkm_buf_release(&b);
}

TEST(nodestatus_decode_rejects_bad_fields)
{
#define NS_PRE                                                                                     \
    "{\"apiVersion\":\"tkm.io/v1alpha1\",\"kind\":\"TritonKernelCacheNodeStatusCluster\","         \
    "\"metadata\":{\"name\":\"n\"},\"status\":"
    static const struct bad_case bad[] = {
        {NS_PRE "{\"gpus\":[{\"id\":\"0\"}]}}", "status.gpus[0].id: expected an integer"},
        {NS_PRE "{\"gpus\":[{\"gpuType\":\"x\"}]}}", "status.gpus[0].id: missing"},
        {NS_PRE "{\"gpus\":[{\"id\":0,\"migMode\":\"no\"}]}}",
         "status.gpus[0].migMode: expected a boolean"},
        {NS_PRE "{\"caches\":[]}}", "status.caches: expected an object, got a list"},
        {NS_PRE "{\"caches\":{\"a\":{\"verified\":1}}}}",
         "status.caches[\"a\"].verified: expected a boolean, got an integer"},
        {NS_PRE "{\"caches\":{\"a\":{\"compatibleGPUs\":[{\"ids\":[0,\"1\"]}]}}}}",
         "status.caches[\"a\"].compatibleGPUs[0].ids[1]: expected a GPU id"},
        {NS_PRE "{\"caches\":{\"a\":{\"pods\":[7]}}}}", "status.caches[\"a\"].pods[0]: expected"},
        {NS_PRE "{\"caches\":{\"a\":{\"incompatibleGPUs\":[{\"message\":false}]}}}}",
         "status.caches[\"a\"].incompatibleGPUs[0].message: expected a string"},
        {NS_PRE "{\"nodeName\":[]}}", "status.nodeName: expected a string, got a list"},
    };
    for (size_t i = 0; i < TKM_ARRAY_SIZE(bad); i++) {
        struct tkm_api_nodestatus n;
        struct tkm_err err = {0};
        ASSERT_EQ(tkm_api_nodestatus_decode(bad[i].json, strlen(bad[i].json), &n, &err), -EPROTO);
        ASSERT_STRCONTAINS(err.msg, bad[i].msg);
        ASSERT_STRCONTAINS(err.msg, "TritonKernelCacheNodeStatusCluster n");
        ASSERT_UEQ(n.status.n_gpus, 0);
        ASSERT_NULL(n.status.caches);
    }
}

TEST(resources_and_now)
{
    struct tkm_buf p = TKM_BUF_INIT(1024);
    ASSERT_OK(k8s_path(&p, &tkm_api_res_tkcns, "ml", "node-1", "status", NULL));
    ASSERT_STREQ(p.data, "/apis/tkm.io/v1alpha1/namespaces/ml/tritonkernelcachenodestatuses/"
                         "node-1/status");
    tkm_buf_reset(&p);
    ASSERT_OK(k8s_path(&p, &tkm_api_res_tkcnsc, "ignored", "node-1", NULL, NULL));
    ASSERT_STREQ(p.data, "/apis/tkm.io/v1alpha1/tritonkernelcachenodestatusclusters/node-1");
    ASSERT_STREQ(tkm_api_res_tkcc.kind, "TritonKernelCacheCluster");
    ASSERT_EQ(tkm_api_res_tkc.namespaced, 1);
    tkm_buf_release(&p);
    char now[32];
    tkm_api_now(now, sizeof now);
    ASSERT_UEQ(strlen(now), 20);
    ASSERT(now[4] == '-' && now[10] == 'T' && now[19] == 'Z');
}

TEST(signature_policy_keyless_decoded)
{
    static const char js[] =
        TKC_PRE MD "\"spec\":{\"cacheImage\":\"a\",\"signaturePolicy\":{\"mode\":\"Audit\","
                   "\"allowCrossRepository\":true,\"keyless\":{\"trustedRoot\":{\"kind\":"
                   "\"ConfigMap\",\"name\":\"root\",\"key\":\"tr.json\"},\"identities\":[{"
                   "\"issuer\":\"https://i\",\"subject\":\"me@example.com\"},{\"issuer\":"
                   "\"https://j\",\"subjectRegExp\":\"https://x/.*\"}]}}}}";
    struct tkm_api_cache c;
    struct tkm_err err = {0};
    ASSERT_EQ(tkm_api_cache_decode(js, strlen(js), &c, &err), 0);
    const struct tkm_api_signature_policy *p = &c.spec.signature_policy;
    ASSERT_EQ(p->mode, TKM_API_SIG_AUDIT);
    ASSERT_EQ(p->allow_cross_repository, 1);
    ASSERT_EQ(p->has_keyless, 1);
    ASSERT_STREQ(p->trusted_root_kind, "ConfigMap");
    ASSERT_STREQ(p->trusted_root_name, "root");
    ASSERT_STREQ(p->trusted_root_key, "tr.json");
    ASSERT_NULL(p->trusted_root_namespace);
    ASSERT_EQ(p->n_identities, 2);
    ASSERT_STREQ(p->identities[0].subject, "me@example.com");
    ASSERT_NULL(p->identities[0].subject_regexp);
    ASSERT_STREQ(p->identities[1].subject_regexp, "https://x/.*");
    tkm_api_cache_release(&c);
    tkm_api_cache_release(&c);
}

static int config_of(const char *data_json, struct tkm_api_config *cfg, struct tkm_err *err)
{
    json_t *cm =
        json_pack("{s:s, s:o}", "kind", "ConfigMap", "data", json_loads(data_json, 0, NULL));
    int rc = tkm_api_config_decode(cm, cfg, err);
    json_decref(cm);
    return rc;
}

TEST(config_decode_reads_every_key_and_defaults)
{
    struct tkm_api_config cfg;
    struct tkm_err err = {0};
    ASSERT_EQ(tkm_api_config_decode(NULL, &cfg, &err), 0);
    ASSERT_EQ(cfg.present, 0);
    ASSERT_EQ(cfg.mode, TKM_API_SIG_UNSET);
    ASSERT_EQ(config_of("{\"signatureMode\":\"Audit\",\"signaturePublicKeys\":\"PEM\","
                        "\"signatureTrustedRootRef\":\"Secret/root\",\"signatureIdentities\":"
                        "\"[{\\\"issuer\\\":\\\"https://i\\\",\\\"subject\\\":\\\"s\\\"}]\","
                        "\"signatureAllowCrossRepository\":\"true\",\"prefetch\":\"true\","
                        "\"pullDeadline\":\"1m30s\",\"somethingElse\":\"ignored\","
                        "\"prefetchSlots\":\"10\",\"prefetchGrantTimeout\":\"2m\"}",
                        &cfg, &err),
              0);
    ASSERT_EQ(cfg.present, 1);
    ASSERT_EQ(cfg.mode, TKM_API_SIG_AUDIT);
    ASSERT_STREQ(cfg.public_keys, "PEM");
    ASSERT_STREQ(cfg.trusted_root_kind, "Secret");
    ASSERT_STREQ(cfg.trusted_root_name, "root");
    ASSERT_STREQ(cfg.trusted_root_key, "trusted_root.json");
    ASSERT_EQ(cfg.n_identities, 1);
    ASSERT_STREQ(cfg.identities[0].issuer, "https://i");
    ASSERT_EQ(cfg.allow_cross_repository, 1);
    ASSERT_EQ(cfg.prefetch, 1);
    ASSERT_UEQ(cfg.pull_deadline_ms, 90000);
    ASSERT_UEQ(cfg.prefetch_slots, 10);
    ASSERT_UEQ(cfg.prefetch_grant_timeout_ms, 120000);
    tkm_api_config_release(&cfg);
    /* prefetchSlots is capped at 1000; absent keys are 0 (no limit, default timeout) */
    ASSERT_EQ(config_of("{\"prefetchSlots\":\"5000\"}", &cfg, &err), 0);
    ASSERT_UEQ(cfg.prefetch_slots, TKM_API_PREFETCH_SLOTS_MAX);
    ASSERT_UEQ(cfg.prefetch_grant_timeout_ms, 0);
    tkm_api_config_release(&cfg);
    ASSERT_EQ(config_of("{\"signatureTrustedRootRef\":\"ConfigMap/r/k.json\","
                        "\"signatureIdentities\":\"[{\\\"issuer\\\":\\\"i\\\","
                        "\\\"subjectRegExp\\\":\\\".*\\\"}]\"}",
                        &cfg, &err),
              0);
    ASSERT_STREQ(cfg.trusted_root_kind, "ConfigMap");
    ASSERT_STREQ(cfg.trusted_root_key, "k.json");
    ASSERT_UEQ(cfg.pull_deadline_ms, 0); /* absent: the daemons' --pull-deadline */
    tkm_api_config_release(&cfg);
}

/* Issue 23: the floor under a namespaced cache's signature mode. */
TEST(signature_floor_default_is_the_cluster_mode)
{
    struct tkm_api_config cfg;
    struct tkm_err err = {0};
    ASSERT_EQ(tkm_api_config_floor(NULL), TKM_SIG_MODE_ENFORCE);
    ASSERT_EQ(tkm_api_config_decode(NULL, &cfg, &err), 0);
    ASSERT_EQ(tkm_api_config_floor(&cfg), TKM_SIG_MODE_ENFORCE);
    ASSERT_EQ(config_of("{\"signatureMode\":\"Audit\"}", &cfg, &err), 0);
    ASSERT_EQ(tkm_api_config_floor(&cfg), TKM_SIG_MODE_AUDIT);
    tkm_api_config_release(&cfg);
    ASSERT_EQ(config_of("{\"signatureFloor\":\"Disabled\"}", &cfg, &err), 0);
    ASSERT_EQ(cfg.floor, TKM_API_SIG_DISABLED);
    ASSERT_EQ(tkm_api_config_floor(&cfg), TKM_SIG_MODE_DISABLED);
    tkm_api_config_release(&cfg);
    ASSERT_EQ(config_of("{\"signatureMode\":\"Enforce\",\"signatureFloor\":\"Audit\"}", &cfg, &err),
              0);
    ASSERT_EQ(tkm_api_config_floor(&cfg), TKM_SIG_MODE_AUDIT);
    /* --signature-floor: only when tkm-config sets none (the ConfigMap wins) */
    tkm_api_config_floor_default(&cfg, "Disabled");
    ASSERT_EQ(tkm_api_config_floor(&cfg), TKM_SIG_MODE_AUDIT);
    tkm_api_config_release(&cfg);
    ASSERT_EQ(config_of("{\"signatureMode\":\"Enforce\"}", &cfg, &err), 0);
    tkm_api_config_floor_default(&cfg, NULL);
    ASSERT_EQ(tkm_api_config_floor(&cfg), TKM_SIG_MODE_ENFORCE);
    tkm_api_config_floor_default(&cfg, "Disabled");
    ASSERT_EQ(tkm_api_config_floor(&cfg), TKM_SIG_MODE_DISABLED);
    tkm_api_config_release(&cfg);
}

TEST(signature_floor_check_namespaced_stricter_never_weaker)
{
    static const enum tkm_sig_mode modes[] = {TKM_SIG_MODE_DISABLED, TKM_SIG_MODE_AUDIT,
                                              TKM_SIG_MODE_ENFORCE};
    for (size_t f = 0; f < TKM_ARRAY_SIZE(modes); f++)
        for (size_t m = 0; m < TKM_ARRAY_SIZE(modes); m++) {
            struct tkm_err err = {0};
            int rc = tkm_api_policy_floor_check(0, modes[m], modes[f], "tkm-system", &err);
            ASSERT_EQ(rc, m >= f ? 0 : -EPERM); /* stricter or equal: allowed */
            if (rc)
                ASSERT_STRCONTAINS(err.msg, "is weaker than the floor");
            /* the cluster-scoped kind is the admin's own: any mode */
            ASSERT_EQ(tkm_api_policy_floor_check(1, modes[m], modes[f], "tkm-system", &err), 0);
        }
    struct tkm_err err = {0};
    ASSERT_EQ(tkm_api_policy_floor_check(0, TKM_SIG_MODE_DISABLED, TKM_SIG_MODE_ENFORCE,
                                         "tkm-system", &err),
              -EPERM);
    ASSERT_STRCONTAINS(err.msg, "signature mode Disabled is weaker than the floor Enforce set for "
                                "namespaced caches by ConfigMap tkm-system/tkm-config");
}

/* The registry reach keys: kept as written, and the ConfigMap wins over the
 * daemon's flags key by key (docs/registry-reach.md). */
TEST(config_registry_reach_keys_and_flags)
{
    struct tkm_api_config cfg;
    struct tkm_err err = {0};
    struct tkm_reach_policy p;
    struct tkm_reach_host h;
    ASSERT_EQ(config_of("{\"registryAllow\":\"ghcr.io # ours\\n127.0.0.1:5000\","
                        "\"registryPlainHTTP\":\"127.0.0.1:5000\"}",
                        &cfg, &err),
              0);
    ASSERT_STREQ(cfg.registry_allow, "ghcr.io # ours\n127.0.0.1:5000");
    ASSERT_NULL(cfg.registry_private);
    ASSERT_STREQ(cfg.registry_plain_http, "127.0.0.1:5000");
    const struct tkm_reach_config flags = {
        .allow = "*", .private_hosts = "127.0.0.1:5000", .plain_http = "flag.example"};
    ASSERT_EQ(tkm_api_reach_policy(&cfg, &flags, &p, &err), 0);
    ASSERT_EQ(p.allow.n, 2);         /* the ConfigMap's, not the flag's "*" */
    ASSERT_EQ(p.private_hosts.n, 1); /* left out of the ConfigMap: the flag's */
    ASSERT_EQ(tkm_reach_host_parse("127.0.0.1:5000", 14, &h, NULL), 0);
    ASSERT_EQ(tkm_reach_list_match(&p.private_hosts, &h), 1);
    ASSERT_EQ(tkm_reach_list_match(&p.plain_http, &h), 1); /* the ConfigMap's */
    ASSERT_EQ(tkm_reach_host_parse("flag.example", 12, &h, NULL), 0);
    ASSERT_EQ(tkm_reach_list_match(&p.plain_http, &h), 0);
    tkm_reach_policy_release(&p);
    tkm_api_config_release(&cfg);
    /* no ConfigMap, no flags: the defaults (any name, no literal, nothing private) */
    ASSERT_EQ(tkm_api_reach_policy(NULL, NULL, &p, &err), 0);
    ASSERT_EQ(p.allow.n, 1);
    ASSERT_EQ(p.private_hosts.n, 0);
    tkm_reach_policy_release(&p);
    /* a bad flag is named */
    const struct tkm_reach_config bad = {.allow = "ghcr.io/org"};
    ASSERT_EQ(tkm_api_reach_policy(NULL, &bad, &p, &err), -EINVAL);
    ASSERT_STRCONTAINS(err.msg, "registryAllow: entry 1");
    tkm_reach_policy_release(&p);
}

TEST(config_decode_names_the_bad_key)
{
    static const struct bad_case bad[] = {
        {"{\"signatureMode\":\"enforce\"}", "signatureMode: \"enforce\" is not Enforce"},
        {"{\"prefetch\":\"yes\"}", "prefetch: \"yes\" is not \"true\" or \"false\""},
        {"{\"signatureTrustedRootRef\":\"Pod/x\"}", "is not ConfigMap/<name>[/<key>]"},
        {"{\"signatureTrustedRootRef\":\"Secret/\"}", "is not ConfigMap/<name>[/<key>]"},
        {"{\"signatureTrustedRootRef\":\"Secret/a/b/c\"}", "is not ConfigMap/<name>[/<key>]"},
        {"{\"signatureIdentities\":\"[{\\\"issuer\\\":\\\"i\\\"}]\",\"signatureTrustedRootRef\":"
         "\"Secret/r\"}",
         "needs exactly one of subject and subjectRegExp"},
        {"{\"signatureIdentities\":\"not json\"}", "signatureIdentities: not JSON"},
        {"{\"signatureTrustedRootRef\":\"Secret/r\"}", "go together"},
        {"{\"signatureMode\":7}", "signatureMode: expected a string"},
        {"{\"pullDeadline\":\"30\"}", "pullDeadline: \"30\" is not a duration above 0"},
        {"{\"pullDeadline\":\"0s\"}", "pullDeadline: \"0s\" is not a duration above 0"},
        {"{\"pullDeadline\":30}", "pullDeadline: expected a string"},
        {"{\"prefetchSlots\":\"-1\"}", "prefetchSlots: \"-1\" is not an integer from 0 to 1000"},
        {"{\"prefetchSlots\":\"\"}", "prefetchSlots: \"\" is not an integer"},
        {"{\"prefetchSlots\":\"10x\"}", "prefetchSlots: \"10x\" is not an integer"},
        {"{\"prefetchSlots\":10}", "prefetchSlots: expected a string"},
        {"{\"prefetchGrantTimeout\":\"0s\"}", "prefetchGrantTimeout: \"0s\" is not a duration"},
        {"{\"signatureFloor\":\"none\"}", "signatureFloor: \"none\" is not Enforce"},
        {"{\"signatureMode\":\"Audit\",\"signatureFloor\":\"Enforce\"}",
         "signatureFloor: Enforce is stricter than signatureMode Audit"},
        {"{\"signatureFloor\":\"Enforce\",\"signatureMode\":\"Disabled\"}",
         "signatureFloor: Enforce is stricter than signatureMode Disabled"},
        {"{\"registryAllow\":\"*foo.com\"}",
         "tkm-config: registryAllow: entry 1 \"*foo.com\" may use '*' only"},
        {"{\"registryAllow\":\" # nothing\"}", "registryAllow"},
        {"{\"registryPrivate\":\"https://ghcr.io\"}", "tkm-config: registryPrivate: entry 1"},
        {"{\"registryPlainHTTP\":\"a.*.com\"}", "tkm-config: registryPlainHTTP: entry 1"},
        {"{\"registryAllow\":[\"x\"]}", "registryAllow: expected a string"},
        {"{\"whenIncompatible\":\"empty\"}",
         "tkm-config whenIncompatible: \"empty\", expected Fail or Empty"},
        {"{\"whenIncompatible\":true}", "whenIncompatible: expected a string"},
    };
    for (size_t i = 0; i < TKM_ARRAY_SIZE(bad); i++) {
        struct tkm_api_config cfg;
        struct tkm_err err = {0};
        ASSERT_EQ(config_of(bad[i].json, &cfg, &err), -EINVAL);
        ASSERT_STRCONTAINS(err.msg, bad[i].msg);
        ASSERT_NULL(cfg.public_keys);
    }
}

/* Issue 24: spec.whenIncompatible, tkm-config whenIncompatible and the effective policy. */
TEST(when_incompatible_spec_config_and_effective)
{
    static const char *const tkc =
        "{\"apiVersion\":\"tkm.io/v1alpha1\",\"kind\":\"TritonKernelCache\",\"metadata\":{"
        "\"name\":\"x\",\"namespace\":\"n\"},\"spec\":{\"cacheImage\":\"a\","
        "\"whenIncompatible\":\"Fail\"}}";
    struct tkm_api_cache c;
    struct tkm_api_config cfg;
    struct tkm_err err = {0};
    ASSERT_OK(tkm_api_cache_decode(tkc, strlen(tkc), &c, &err));
    ASSERT_EQ(c.spec.when_incompatible, TKM_API_FALLBACK_FAIL);
    ASSERT_EQ(tkm_api_fallback_effective(&c.spec, NULL), TKM_API_FALLBACK_FAIL);
    ASSERT_OK(config_of("{\"whenIncompatible\":\"Empty\"}", &cfg, &err));
    ASSERT_EQ(cfg.when_incompatible, TKM_API_FALLBACK_EMPTY);
    /* the spec wins over tkm-config */
    ASSERT_EQ(tkm_api_fallback_effective(&c.spec, &cfg), TKM_API_FALLBACK_FAIL);
    c.spec.when_incompatible = TKM_API_FALLBACK_UNSET;
    ASSERT_EQ(tkm_api_fallback_effective(&c.spec, &cfg), TKM_API_FALLBACK_EMPTY);
    tkm_api_config_release(&cfg);
    ASSERT_OK(config_of("{\"whenIncompatible\":\"Fail\"}", &cfg, &err));
    ASSERT_EQ(tkm_api_fallback_effective(&c.spec, &cfg), TKM_API_FALLBACK_FAIL);
    tkm_api_config_release(&cfg);
    /* neither: Empty, the built-in default */
    ASSERT_EQ(tkm_api_fallback_effective(&c.spec, NULL), TKM_API_FALLBACK_EMPTY);
    ASSERT_EQ(tkm_api_fallback_effective(NULL, NULL), TKM_API_FALLBACK_EMPTY);
    ASSERT_STREQ(tkm_api_fallback_name(TKM_API_FALLBACK_FAIL), "Fail");
    ASSERT_STREQ(tkm_api_fallback_name(TKM_API_FALLBACK_UNSET), "Empty");
    tkm_api_cache_release(&c);
}

TEST(cache_status_variants_round_trip)
{
    struct tkm_api_variant_count v[2] = {
        {(char *)DIGEST, (char *)"linux/amd64", (char *)"cuda", (char *)"90", 32, 3, 24},
        {(char *)"sha256:ab", (char *)"linux/arm64", (char *)"cuda", (char *)"90a", 32, 1, 4}};
    char *types[] = {(char *)"nvidia-a100"};
    char *granted[] = {(char *)"node-a", (char *)"node-b"};
    struct tkm_api_cache_status st = {.prefetch = {1, 10, granted, 2, 7},
                                      .variants = v,
                                      .n_variants = 2,
                                      .gpu_types_without_variant = types,
                                      .n_gpu_types_without_variant = 1,
                                      .variant_summary = (char *)"cuda/90: 3 nodes",
                                      .node_label = (char *)"tkm.io/cache.ml.x"};
    json_t *o = NULL, *o2 = NULL;
    struct tkm_err err = {0};
    struct tkm_buf a = TKM_BUF_INIT(1 << 20), b = TKM_BUF_INIT(1 << 20);
    ASSERT_OK(tkm_api_cache_status_apply(&st, "x", "ml", &o, &err));
    ASSERT_OK(tkm_api_dump(o, &a));
    ASSERT_STRCONTAINS(a.data, "\"variants\":[{\"digest\":\"" DIGEST "\",\"platform\":"
                               "\"linux/amd64\",\"backend\":\"cuda\",\"arch\":\"90\","
                               "\"warpSize\":32,\"nodes\":3,\"gpus\":24}");
    ASSERT_STRCONTAINS(a.data, "\"gpuTypesWithoutVariant\":[\"nvidia-a100\"]");
    ASSERT_STRCONTAINS(a.data, "\"nodeLabel\":\"tkm.io/cache.ml.x\"");
    ASSERT_STRCONTAINS(
        a.data, "\"prefetch\":{\"slots\":10,\"granted\":[\"node-a\",\"node-b\"],\"waiting\":7}");
    json_object_set_new(o, "spec", json_pack("{s:s}", "cacheImage", "r.io/x:1"));
    char *s = json_dumps(o, JSON_COMPACT);
    struct tkm_api_cache c;
    ASSERT_OK(tkm_api_cache_decode(s, strlen(s), &c, &err));
    free(s);
    ASSERT_UEQ(c.status.n_variants, 2);
    ASSERT_STREQ(c.status.variants[1].arch, "90a");
    ASSERT_EQ(c.status.variants[0].gpus, 24);
    ASSERT_STREQ(c.status.gpu_types_without_variant[0], "nvidia-a100");
    ASSERT_STREQ(c.status.variant_summary, "cuda/90: 3 nodes");
    ASSERT_EQ(c.status.prefetch.present, 1);
    ASSERT_EQ(c.status.prefetch.slots, 10);
    ASSERT_EQ(c.status.prefetch.waiting, 7);
    ASSERT_EQ(tkm_api_prefetch_granted(&c.status.prefetch, "node-b"), 1);
    ASSERT_EQ(tkm_api_prefetch_granted(&c.status.prefetch, "node-c"), 0);
    ASSERT_OK(tkm_api_cache_status_apply(&c.status, "x", "ml", &o2, &err));
    ASSERT_OK(tkm_api_dump(o2, &b));
    ASSERT_STREQ(a.data, b.data);
    tkm_api_cache_release(&c);
    json_decref(o);
    json_decref(o2);
    /* none set: none written */
    struct tkm_api_cache_status none = {0};
    ASSERT_OK(tkm_api_cache_status_apply(&none, "x", "ml", &o, &err));
    ASSERT_NULL(json_object_get(json_object_get(o, "status"), "variants"));
    ASSERT_NULL(json_object_get(json_object_get(o, "status"), "nodeLabel"));
    ASSERT_NULL(json_object_get(json_object_get(o, "status"), "prefetch"));
    json_decref(o);
    tkm_buf_release(&a);
    tkm_buf_release(&b);
}

/* The node status' variants and fallback: encoded, decoded, scanned. */
TEST(nodestatus_variants_round_trip_and_scan)
{
    int32_t ids0[] = {0, 1}, ids1[] = {2};
    struct tkm_api_variant_use vu[2] = {{(char *)DIGEST, ids0, 2}, {(char *)"sha256:bb", ids1, 1}};
    struct tkm_api_gpu_group inc = {NULL, 0, (char *)"amd-mi300x", (char *)"NoVariant",
                                    (char *)"m"};
    struct tkm_api_node_cache caches[2] = {{.name = (char *)"a",
                                            .digest = (char *)DIGEST,
                                            .variants = vu,
                                            .n_variants = 2,
                                            .incompatible = &inc,
                                            .n_incompatible = 1},
                                           {.name = (char *)"b",
                                            .fallback = (char *)"Empty",
                                            .prefetch = TKM_API_PREFETCH_WAITING,
                                            .incompatible = &inc,
                                            .n_incompatible = 1}};
    struct tkm_api_node_status st = {.node_name = (char *)"n1", .caches = caches, .n_caches = 2};
    struct tkm_api_nodestatus n;
    json_t *o = NULL, *o2 = NULL;
    struct tkm_err err = {0};
    struct tkm_buf a = TKM_BUF_INIT(1 << 20), b = TKM_BUF_INIT(1 << 20);
    ASSERT_OK(tkm_api_node_status_apply(&st, NULL, "uid", &o, &err));
    ASSERT_OK(tkm_api_dump(o, &a));
    /* a variant is its digest and GPU ids: the target is the index's */
    ASSERT_STRCONTAINS(a.data, "\"variants\":[{\"digest\":\"" DIGEST "\",\"gpuIds\":[0,1]},"
                               "{\"digest\":\"sha256:bb\",\"gpuIds\":[2]}]");
    ASSERT_STRCONTAINS(a.data, "\"fallback\":\"Empty\",\"prefetch\":\"Waiting\"");
    ASSERT_OK(tkm_api_nodestatus_decode(a.data, a.len, &n, &err));
    ASSERT_EQ(n.status.caches[0].prefetch, TKM_API_PREFETCH_NONE);
    ASSERT_EQ(n.status.caches[1].prefetch, TKM_API_PREFETCH_WAITING);
    ASSERT_UEQ(n.status.caches[0].n_variants, 2);
    ASSERT_STREQ(n.status.caches[0].variants[1].digest, "sha256:bb");
    ASSERT_EQ(n.status.caches[0].variants[1].gpu_ids[0], 2);
    ASSERT_EQ(n.status.caches[0].variants[0].gpu_ids[1], 1);
    ASSERT_NULL(n.status.caches[0].fallback);
    ASSERT_STREQ(n.status.caches[1].fallback, "Empty");
    ASSERT_OK(tkm_api_node_status_apply(&n.status, NULL, "uid", &o2, &err));
    ASSERT_OK(tkm_api_dump(o2, &b));
    ASSERT_STREQ(a.data, b.data);
    tkm_api_nodestatus_release(&n);
    /* an entry an older agent wrote (the target and GPU type in it): read, those ignored */
    static const char old[] =
        "{\"apiVersion\":\"tkm.io/v1alpha1\",\"kind\":\"TritonKernelCacheNodeStatus\","
        "\"metadata\":{\"name\":\"n\"},\"status\":{\"caches\":{\"c\":{\"variants\":[{\"digest\":"
        "\"sha256:cc\",\"platform\":\"linux/amd64\",\"backend\":\"cuda\",\"arch\":\"90\","
        "\"warpSize\":32,\"gpuType\":\"nvidia-h200\",\"gpuIds\":[3]}]}}}}";
    ASSERT_OK(tkm_api_nodestatus_decode(old, strlen(old), &n, &err));
    ASSERT_STREQ(n.status.caches[0].variants[0].digest, "sha256:cc");
    ASSERT_EQ(n.status.caches[0].variants[0].gpu_ids[0], 3);
    tkm_api_nodestatus_release(&n);
    json_decref(o);
    json_decref(o2);
    tkm_buf_release(&a);
    tkm_buf_release(&b);
}

TEST(nodestatus_variants_refused_naming_the_field)
{
#define NSV(x)                                                                                     \
    "{\"apiVersion\":\"tkm.io/v1alpha1\",\"kind\":\"TritonKernelCacheNodeStatus\",\"metadata\":"   \
    "{\"name\":\"n\",\"namespace\":\"ml\"},\"status\":{\"caches\":{\"c\":{" x "}}}}"
    static const struct bad_case bad[] = {
        {NSV("\"variants\":{}"), "status.caches[\"c\"].variants: expected a list, got an object"},
        {NSV("\"prefetch\":\"Granted\""),
         "status.caches[\"c\"].prefetch: \"Granted\", expected Waiting or Pulling"},
        {NSV("\"variants\":[1]"), "status.caches[\"c\"].variants[0]: expected an object"},
        {NSV("\"variants\":[{\"digest\":7}]"),
         "status.caches[\"c\"].variants[0].digest: expected a string, got an integer"},
        {NSV("\"variants\":[{\"digest\":\"sha256:aa\"},{\"gpuIds\":{}}]"),
         "status.caches[\"c\"].variants[1].gpuIds: expected a list, got an object"},
        {NSV("\"variants\":[{\"gpuIds\":[0,-1]}]"),
         "status.caches[\"c\"].variants[0].gpuIds[1]: expected a GPU id"},
        {NSV("\"variants\":[{\"digest\":\"sha256:"
             "0123456789012345678901234567890123456789012345678901234567890123456789"
             "0123456789012345678901234567890123456789012345678901234567\"}]"),
         "status.caches[\"c\"].variants[0].digest: longer than 128 bytes"},
        {NSV("\"fallback\":\"Fail\""), "status.caches[\"c\"].fallback: \"Fail\", expected Empty"},
        {NSV("\"fallback\":true"), "status.caches[\"c\"].fallback: expected a string"},
    };
    for (size_t i = 0; i < TKM_ARRAY_SIZE(bad); i++) {
        struct tkm_api_nodestatus n;
        struct tkm_err err = {0};
        ASSERT_EQ(tkm_api_nodestatus_decode(bad[i].json, strlen(bad[i].json), &n, &err), -EPROTO);
        ASSERT_STRCONTAINS(err.msg, bad[i].msg);
        ASSERT_NULL(n.status.caches);
    }
    /* 65 variants: more than the 64 allowed */
    struct tkm_buf j = TKM_BUF_INIT(1 << 20);
    ASSERT_OK(tkm_buf_puts(&j, "{\"apiVersion\":\"tkm.io/v1alpha1\",\"kind\":"
                               "\"TritonKernelCacheNodeStatus\",\"metadata\":{\"name\":\"n\"},"
                               "\"status\":{\"caches\":{\"c\":{\"variants\":["));
    for (int i = 0; i < 65; i++)
        ASSERT_OK(tkm_buf_puts(&j, i ? ",{}" : "{}"));
    ASSERT_OK(tkm_buf_puts(&j, "]}}}}"));
    struct tkm_api_nodestatus n;
    struct tkm_err err = {0};
    ASSERT_EQ(tkm_api_nodestatus_decode(j.data, j.len, &n, &err), -EPROTO);
    ASSERT_STRCONTAINS(err.msg, "variants: 65 entries, more than the 64 allowed");
    tkm_buf_release(&j);
}

TEST(node_label_keys_fit_the_label_rules)
{
    char k[TKM_API_NODE_LABEL_MAX];
    ASSERT_OK(tkm_api_node_label("ml", "vector-add", k, sizeof k));
    ASSERT_STREQ(k, "tkc.tkm.io/ml.vector-add");
    ASSERT_OK(tkm_api_node_label(NULL, "shared", k, sizeof k));
    ASSERT_STREQ(k, "tkcc.tkm.io/shared");
    ASSERT_OK(tkm_api_node_label("", "shared", k, sizeof k));
    ASSERT_STREQ(k, "tkcc.tkm.io/shared");
    /* 63 characters exactly: as is; 64: cut to 52, '-' and 10 hex of the SHA-256 */
    char name[300], want[80];
    memset(name, 'a', 60);
    name[60] = 0; /* "ml." + 60 = 63 */
    ASSERT_OK(tkm_api_node_label("ml", name, k, sizeof k));
    ASSERT_UEQ(strlen(k), strlen("tkc.tkm.io/") + 63);
    name[60] = 'b';
    name[61] = 0;
    ASSERT_OK(tkm_api_node_label("ml", name, k, sizeof k));
    ASSERT_UEQ(strlen(k), strlen("tkc.tkm.io/") + 63);
    snprintf(want, sizeof want, "tkc.tkm.io/ml.%.49s-", name);
    ASSERT(strncmp(k, want, strlen(want)) == 0);
    char k2[TKM_API_NODE_LABEL_MAX];
    name[60] = 'c'; /* another long name, the same first 52: another key */
    ASSERT_OK(tkm_api_node_label("ml", name, k2, sizeof k2));
    ASSERT(strcmp(k, k2) != 0);
    /* a 253-character name in a 63-character namespace */
    memset(name, 'x', 253);
    name[253] = 0;
    char ns[64];
    memset(ns, 'n', 63);
    ns[63] = 0;
    ASSERT_OK(tkm_api_node_label(ns, name, k, sizeof k));
    ASSERT_UEQ(strlen(k), strlen("tkc.tkm.io/") + 63);
    ASSERT_EQ(tkm_api_node_label("ml", "", k, sizeof k), -EINVAL);
    ASSERT_EQ(tkm_api_node_label("ml", "x", k, 10), -EINVAL);
}

/* compiles (issue 25) in a node status entry and in the cache status: encoded in a fixed
 * order, decoded, encoded again to the same bytes; absent when not present. */
TEST(compiles_round_trip_node_and_cache_status)
{
    struct tkm_api_kernel_count top[2] = {{(char *)"_attn_fwd", 4}, {(char *)"triton_red.0", 1}};
    struct tkm_api_compiles cc = {.present = 1,
                                  .pods_served = 10,
                                  .pods_compiled = 4,
                                  .triton_kernels = 12,
                                  .inductor_entries = 3,
                                  .vllm_entries = 1,
                                  .bytes = 4096,
                                  .top = top,
                                  .n_top = 2,
                                  .since = (char *)"2026-11-28T01:00:00Z"};
    struct tkm_api_node_cache caches[2] = {{.name = (char *)"a", .compiles = cc},
                                           {.name = (char *)"b"}};
    struct tkm_api_node_status st = {.node_name = (char *)"n1", .caches = caches, .n_caches = 2};
    const char *want = "\"compiles\":{\"podsServed\":10,\"podsCompiled\":4,\"tritonKernels\":12,"
                       "\"inductorEntries\":3,\"vllmEntries\":1,\"bytes\":4096,\"topKernels\":["
                       "{\"name\":\"_attn_fwd\",\"pods\":4},{\"name\":\"triton_red.0\",\"pods\":1}"
                       "],\"since\":\"2026-11-28T01:00:00Z\"}";
    struct tkm_api_nodestatus n;
    json_t *o = NULL, *o2 = NULL;
    struct tkm_err err = {0};
    struct tkm_buf a = TKM_BUF_INIT(1 << 20), b = TKM_BUF_INIT(1 << 20);
    ASSERT_OK(tkm_api_node_status_apply(&st, NULL, "uid", &o, &err));
    ASSERT_OK(tkm_api_dump(o, &a));
    ASSERT_STRCONTAINS(a.data, want);
    ASSERT_NULL(json_object_get(
        json_object_get(json_object_get(json_object_get(o, "status"), "caches"), "b"), "compiles"));
    ASSERT_OK(tkm_api_nodestatus_decode(a.data, a.len, &n, &err));
    ASSERT_EQ(n.status.caches[0].compiles.present, 1);
    ASSERT_EQ(n.status.caches[0].compiles.pods_compiled, 4);
    ASSERT_UEQ(n.status.caches[0].compiles.n_top, 2);
    ASSERT_STREQ(n.status.caches[0].compiles.top[1].name, "triton_red.0");
    ASSERT_EQ(n.status.caches[1].compiles.present, 0);
    ASSERT_OK(tkm_api_node_status_apply(&n.status, NULL, "uid", &o2, &err));
    ASSERT_OK(tkm_api_dump(o2, &b));
    ASSERT_STREQ(a.data, b.data);
    tkm_api_nodestatus_release(&n);
    json_decref(o);
    json_decref(o2);

    /* the cache status: nodes and hit too */
    struct tkm_api_cache_status cs = {.compiles = cc};
    cs.compiles.nodes = 2;
    cs.compiles.hit = (char *)"6/10";
    tkm_buf_reset(&a);
    tkm_buf_reset(&b);
    ASSERT_OK(tkm_api_cache_status_apply(&cs, "x", "ml", &o, &err));
    ASSERT_OK(tkm_api_dump(o, &a));
    ASSERT_STRCONTAINS(a.data, "\"compiles\":{\"nodes\":2,\"podsServed\":10,");
    ASSERT_STRCONTAINS(a.data, "\"since\":\"2026-11-28T01:00:00Z\",\"hit\":\"6/10\"}");
    json_object_set_new(o, "spec", json_pack("{s:s}", "cacheImage", "r.io/x:1"));
    char *s = json_dumps(o, JSON_COMPACT);
    struct tkm_api_cache c;
    ASSERT_OK(tkm_api_cache_decode(s, strlen(s), &c, &err));
    free(s);
    ASSERT_EQ(c.status.compiles.present, 1);
    ASSERT_EQ(c.status.compiles.nodes, 2);
    ASSERT_EQ(c.status.compiles.top[0].pods, 4);
    ASSERT_STREQ(c.status.compiles.hit, "6/10");
    ASSERT_OK(tkm_api_cache_status_apply(&c.status, "x", "ml", &o2, &err));
    ASSERT_OK(tkm_api_dump(o2, &b));
    ASSERT_STREQ(a.data, b.data);
    tkm_api_cache_release(&c);
    json_decref(o);
    json_decref(o2);
    struct tkm_api_cache_status none = {0};
    ASSERT_OK(tkm_api_cache_status_apply(&none, "x", "ml", &o, &err));
    ASSERT_NULL(json_object_get(json_object_get(o, "status"), "compiles"));
    json_decref(o);
    tkm_buf_release(&a);
    tkm_buf_release(&b);
}

TEST(cache_status_compiles_refused_naming_the_field)
{
#define TKCC(x)                                                                                    \
    "{\"apiVersion\":\"tkm.io/v1alpha1\",\"kind\":\"TritonKernelCache\",\"metadata\":"             \
    "{\"name\":\"x\",\"namespace\":\"ml\"},\"spec\":{\"cacheImage\":\"a\"},\"status\":{"           \
    "\"compiles\":" x "}}"
    static const struct bad_case bad[] = {
        {TKCC("[]"), "status.compiles: expected an object"},
        {TKCC("{\"podsServed\":-1}"), "status.compiles.podsServed: -1 is out of range"},
        {TKCC("{\"nodes\":2147483648}"), "status.compiles.nodes: 2147483648 is out of range"},
        {TKCC("{\"since\":\"now\"}"), "status.compiles.since: \"now\" is not an RFC 3339 time"},
        {TKCC("{\"topKernels\":[{\"name\":\"a/b\"}]}"),
         "status.compiles.topKernels[0].name: expected [A-Za-z0-9_.-]{1,128}"},
        {TKCC("{\"topKernels\":[{\"name\":\"\"}]}"),
         "status.compiles.topKernels[0].name: expected [A-Za-z0-9_.-]{1,128}"},
        {TKCC("{\"topKernels\":[{\"pods\":1}]}"), "status.compiles.topKernels[0].name"},
        {TKCC("{\"topKernels\":[{\"name\":\"k\",\"pods\":-2}]}"),
         "status.compiles.topKernels[0].pods: -2 is out of range"},
        {TKCC("{\"topKernels\":[{},{},{},{},{},{},{},{},{},{},{}]}"), "status.compiles.topKernels"},
        {TKCC("{},\"prefetch\":[]"), "status.prefetch: expected an object"},
        {TKCC("{},\"prefetch\":{\"slots\":1001}"), "status.prefetch.slots: 1001 is out of range"},
        {TKCC("{},\"prefetch\":{\"granted\":[1]}"),
         "status.prefetch.granted[0]: expected a string"},
        {TKCC("{},\"prefetch\":{\"waiting\":-1}"), "status.prefetch.waiting: -1 is out of range"},
    };
    for (size_t i = 0; i < TKM_ARRAY_SIZE(bad); i++) {
        struct tkm_api_cache c;
        struct tkm_err err = {0};
        ASSERT_EQ(tkm_api_cache_decode(bad[i].json, strlen(bad[i].json), &c, &err), -EPROTO);
        ASSERT_STRCONTAINS(err.msg, bad[i].msg);
        ASSERT_EQ(c.status.compiles.present, 0);
    }
    ASSERT_EQ(tkm_api_time_ok("2026-11-28T01:02:03Z"), 1);
    ASSERT_EQ(tkm_api_time_ok("2026-11-28T01:02:03.123-05:30"), 1);
    ASSERT_EQ(tkm_api_time_ok("2026-11-28T01:02:03."), 0);
    ASSERT_EQ(tkm_api_time_ok("2026-11-28T24:02:03Z"), 0);
    ASSERT_EQ(tkm_api_time_ok("2026-11-28T01:02:03Zx"), 0);
    /* the topKernels names the decoder takes are tkm_kernel_name_ok()'s */
    static const char ok[] = TKCC("{\"topKernels\":[{\"name\":\"a.b-c_D9\",\"pods\":1}]}");
    struct tkm_api_cache c;
    struct tkm_err err = {0};
    ASSERT_OK(tkm_api_cache_decode(ok, strlen(ok), &c, &err));
    ASSERT_STREQ(c.status.compiles.top[0].name, "a.b-c_D9");
    tkm_api_cache_release(&c);
}
