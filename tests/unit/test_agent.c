/*
 * test_agent.c - tkm-agent's pure parts (agent/): flags, the node status entries
 * and bodies it writes, the CamelCase reasons of verdicts. The daemon itself is
 * tested end to end (tests/e2e/agent_*.sh).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <tkm/api/v1alpha1.h>
#include <tkm/buf.h>
#include <tkm/gpu/compat.h>
#include <tkm/metrics.h>

#include "test.h"
#include "agent.h"
#include "node_manifest.h"

static int parse(struct agent_opts *o, const char *const *args)
{
    char *argv[32];
    int argc = 0;
    argv[argc++] = (char *)"tkm-agent";
    for (; *args; args++)
        argv[argc++] = (char *)*args;
    argv[argc] = NULL;
    return agent_opts_parse(o, argc, argv);
}

TEST(flags_defaults)
{
    struct agent_opts o;
    unsetenv("POD_NAMESPACE");
    setenv("NODE_NAME", "gpu-1", 1);
    ASSERT_OK(parse(&o, (const char *[]){NULL}));
    ASSERT_STREQ(o.node_name, "gpu-1");
    ASSERT_STREQ(o.ns, "tkm-system");
    ASSERT_STREQ(o.store_dir, "/var/lib/tkm/store");
    ASSERT_STREQ(o.socket, "/var/run/tkm/agent/agent.sock");
    ASSERT_UEQ(o.store_budget, 10ULL << 30);
    ASSERT_UEQ(o.gc_grace_ms, 600000);
    ASSERT_STREQ(o.output, "json");
    ASSERT_UEQ(o.once_timeout_ms, 120000);
    setenv("POD_NAMESPACE", "ops", 1);
    ASSERT_OK(parse(&o, (const char *[]){"--node-name", "n2", "--store-budget", "512Mi",
                                         "--gc-grace", "30s", "-v", "2", "--no-nvml",
                                         "--metrics-bind-address", "0", NULL}));
    ASSERT_STREQ(o.node_name, "n2");
    ASSERT_STREQ(o.ns, "ops");
    ASSERT_UEQ(o.store_budget, 512ULL << 20);
    ASSERT_UEQ(o.gc_grace_ms, 30000);
    ASSERT_EQ(o.verbosity, 2);
    ASSERT_EQ(o.probe.no_nvml, 1);
    ASSERT_STREQ(o.metrics_addr, "0");
}

/* The DaemonSet (manifests/base/daemonset-node.yaml) passes the agent's --socket and
 * tkm-csi's --agent-socket; both must be the agent's built-in default, so a node run
 * without the flags (or a manifest edited without the code) still meets. */
TEST(socket_default_matches_manifest)
{
    struct agent_opts o;
    char agent_sock[512], csi_sock[512];
    setenv("NODE_NAME", "gpu-1", 1);
    ASSERT_OK(parse(&o, (const char *[]){NULL}));
    node_manifest_arg("tkm-agent", "--socket", agent_sock, sizeof agent_sock);
    node_manifest_arg("tkm-csi", "--agent-socket", csi_sock, sizeof csi_sock);
    ASSERT_STREQ(agent_sock, o.socket);
    ASSERT_STREQ(csi_sock, o.socket);
    ASSERT_STREQ(AGENT_DEFAULT_SOCKET, o.socket);
    /* and the store: tkm-csi mounts the agent's store paths at the same path */
    char store[512];
    node_manifest_arg("tkm-agent", "--store-dir", store, sizeof store);
    ASSERT_STREQ(store, o.store_dir);
}

TEST(flags_bad_values_refused)
{
    struct agent_opts o;
    setenv("NODE_NAME", "gpu-1", 1);
    ASSERT_EQ(parse(&o, (const char *[]){"--store-budget", "lots", NULL}), -EINVAL);
    ASSERT_EQ(parse(&o, (const char *[]){"--store-budget", "0", NULL}), -EINVAL);
    ASSERT_EQ(parse(&o, (const char *[]){"--gc-grace", "10 minutes", NULL}), -EINVAL);
    ASSERT_EQ(parse(&o, (const char *[]){"-v", "x", NULL}), -EINVAL);
    ASSERT_EQ(parse(&o, (const char *[]){"--once-timeout", "0s", NULL}), -EINVAL);
    ASSERT_EQ(parse(&o, (const char *[]){"--signature-floor", "enforce", NULL}), -EINVAL);
    ASSERT_OK(parse(&o, (const char *[]){"--signature-floor", "Disabled", NULL}));
    ASSERT_STREQ(o.signature_floor, "Disabled");
    ASSERT_EQ(parse(&o, (const char *[]){"--bogus", NULL}), -EINVAL);
    ASSERT_EQ(parse(&o, (const char *[]){"--socket", NULL}), -EINVAL);
    ASSERT_EQ(parse(&o, (const char *[]){"--image", "x", NULL}), -EINVAL);         /* no --once */
    ASSERT_EQ(parse(&o, (const char *[]){"--once", "-o", "xml", NULL}), -EINVAL);  /* format */
    ASSERT_EQ(parse(&o, (const char *[]){"--once", "--key", "k", NULL}), -EINVAL); /* no image */
    unsetenv("NODE_NAME");
    ASSERT_EQ(parse(&o, (const char *[]){NULL}), -EINVAL);
    ASSERT_OK(parse(&o, (const char *[]){"--once", "--image", "/x", NULL})); /* no node needed */
    ASSERT_EQ(parse(&o, (const char *[]){"--help", NULL}), 1);
}

/* The size and duration grammar (--store-budget, --gc-grace) is the daemons' one parser:
 * unit.daemon.durations, unit.daemon.sizes, unit.daemon.deprecated_spellings. */

static void gpu(struct tkm_gpu *g, int idx, const char *type, const char *backend, const char *arch,
                int warp)
{
    memset(g, 0, sizeof *g);
    g->index = idx;
    snprintf(g->gpu_type, sizeof g->gpu_type, "%s", type);
    snprintf(g->name, sizeof g->name, "GPU %s", type);
    snprintf(g->backend, sizeof g->backend, "%s", backend);
    snprintf(g->vendor, sizeof g->vendor, "%s", !strcmp(backend, "hip") ? "amd" : "nvidia");
    snprintf(g->arch, sizeof g->arch, "%s", arch);
    g->warp_size = warp;
    g->cc_major = -1;
    g->mig_mode = -1;
    g->usable = 1;
    g->cuda_driver_version = 13000;
    snprintf(g->cuda_version, sizeof g->cuda_version, "13.0");
}

/* An agent with four GPUs (two H200, an A100, an MI300X) and one judged cache. */
struct world {
    struct agent a;
    struct agent_cache ac;
    struct tkm_gpu g[4];
    struct tkm_api_gpu ag[4];
};

static void world(struct world *w)
{
    struct tkm_err e = {0};
    memset(w, 0, sizeof *w);
    gpu(&w->g[0], 0, "nvidia-h200", "cuda", "90", 32);
    gpu(&w->g[1], 1, "nvidia-h200", "cuda", "90", 32);
    gpu(&w->g[2], 2, "nvidia-a100", "cuda", "80", 32);
    gpu(&w->g[3], 3, "amd-mi300x", "hip", "gfx942", 64);
    w->a.gpus.gpus = w->g;
    w->a.gpus.n = 4;
    for (int i = 0; i < 4; i++) {
        w->ag[i].id = i;
        w->ag[i].gpu_type = w->g[i].gpu_type;
        w->ag[i].vendor = w->g[i].vendor;
    }
    w->a.api_gpus = w->ag;
    w->a.o.node_name = "node-1";
    w->ac.a = &w->a;
    w->ac.c.meta.name = (char *)"vadd";
    w->ac.c.meta.ns = (char *)"ml";
    w->ac.key = (char *)"ml/vadd";
    w->a.caches = &w->ac;
    ASSERT_OK(tkm_triton_summary_parse(
        &w->ac.summary, "{\"targets\":[{\"backend\":\"cuda\",\"arch\":\"90\",\"warp_size\":32}]}",
        &e));
    snprintf(w->ac.digest, sizeof w->ac.digest, "sha256:%064d", 7);
    w->ac.inspected = 1;
    w->ac.verified = 1;
    agent_cache_rejudge(&w->ac);
}

static void world_release(struct world *w)
{
    tkm_triton_summary_release(&w->ac.summary);
    agent_verdicts_release(&w->ac.verdicts);
}

TEST(entry_groups_gpus_with_reasons)
{
    struct world w;
    struct tkm_api_node_cache e;
    world(&w);
    ASSERT_EQ(w.ac.verdicts.n, 4);
    ASSERT(agent_cache_usable(&w.ac));
    ASSERT_OK(agent_entry_build(&w.a, &w.ac, &e));
    ASSERT_STREQ(e.name, "vadd");
    ASSERT_EQ(e.verified, 1);
    ASSERT_EQ(e.n_compatible, 1); /* both H200s in one group */
    ASSERT_STREQ(e.compatible[0].gpu_type, "nvidia-h200");
    ASSERT_EQ(e.compatible[0].n_ids, 2);
    ASSERT_EQ(e.compatible[0].ids[1], 1);
    ASSERT_EQ(e.n_incompatible, 2);
    ASSERT_STREQ(e.incompatible[0].reason, "ArchMismatch");
    ASSERT_STRCONTAINS(e.incompatible[0].message, "cache built for sm90, GPU 2");
    ASSERT_STREQ(e.incompatible[1].reason, "BackendMismatch");
    ASSERT_NULL(e.error);
    agent_entry_release(&e);
    /* a failed signature under Enforce: not usable, the reason in error */
    snprintf(w.ac.reason, sizeof w.ac.reason, "KeyMismatch");
    snprintf(w.ac.message, sizeof w.ac.message, "signature does not verify with key sha256:ab");
    w.ac.verified = 0;
    ASSERT(!agent_cache_usable(&w.ac));
    ASSERT_OK(agent_entry_build(&w.a, &w.ac, &e));
    ASSERT_STREQ(e.error, "KeyMismatch: signature does not verify with key sha256:ab");
    agent_entry_release(&e);
    world_release(&w);
}

TEST(status_body_is_stable_and_owned)
{
    struct world w;
    struct tkm_api_node_status st;
    struct tkm_err e = {0};
    struct tkm_buf b1, b2;
    json_t *body = NULL;
    world(&w);
    tkm_buf_init(&b1, 1 << 20);
    tkm_buf_init(&b2, 1 << 20);
    for (int i = 0; i < 2; i++) {
        ASSERT_OK(agent_status_build(&w.a, "ml", NULL, &st));
        ASSERT_EQ(st.n_caches, 1);
        ASSERT_EQ(st.n_gpus, 4);
        ASSERT_OK(tkm_api_node_status_apply(&st, "ml", "uid-1", &body, &e));
        ASSERT_OK(tkm_api_dump(body, i ? &b2 : &b1));
        json_decref(body);
        agent_status_release(&st);
    }
    ASSERT_EQ(b1.len, b2.len); /* write only on change: an unchanged status is the same body */
    ASSERT_MEMEQ(b1.data, b2.data, b1.len);
    ASSERT_STRCONTAINS(b1.data, "\"ownerReferences\":[{\"apiVersion\":\"v1\",\"kind\":\"Node\"");
    ASSERT_STRCONTAINS(b1.data, "\"vadd\":{\"digest\":\"sha256:");
    /* the cluster kind holds no namespaced cache */
    ASSERT_OK(agent_status_build(&w.a, NULL, NULL, &st));
    ASSERT_EQ(st.n_caches, 0);
    agent_status_release(&st);
    tkm_buf_release(&b1);
    tkm_buf_release(&b2);
    world_release(&w);
}

/* A failed Materialize is the entry's lastFailure (reason, message, time) until it is
 * cleared; the body reads back through the one decoder. */
TEST(last_failure_in_status)
{
    struct world w;
    struct tkm_api_node_status st;
    struct tkm_api_nodestatus back;
    struct tkm_err e = {0};
    struct tkm_buf b = TKM_BUF_INIT(1 << 20);
    json_t *body = NULL;
    world(&w);
    snprintf(w.ac.fail_reason, sizeof w.ac.fail_reason, "StoreFull");
    snprintf(w.ac.fail_message, sizeof w.ac.fail_message,
             "StoreFull: cache ml/vadd needs 864 bytes; 12 free \"quoted\"");
    snprintf(w.ac.fail_at, sizeof w.ac.fail_at, "2026-11-27T18:00:00Z");
    ASSERT(agent_cache_usable(&w.ac)); /* a failed pull does not make the cache unusable */
    ASSERT_OK(agent_status_build(&w.a, "ml", NULL, &st));
    ASSERT_OK(tkm_api_node_status_apply(&st, "ml", "uid-1", &body, &e));
    agent_status_release(&st);
    ASSERT_OK(tkm_api_dump(body, &b));
    json_decref(body);
    ASSERT_STRCONTAINS(b.data,
                       "\"lastFailure\":{\"reason\":\"StoreFull\",\"message\":"
                       "\"StoreFull: cache ml/vadd needs 864 bytes; 12 free \\\"quoted\\\"\","
                       "\"time\":\"2026-11-27T18:00:00Z\"}");
    ASSERT_OK(tkm_api_nodestatus_decode(b.data, b.len, &back, &e));
    ASSERT_EQ(back.status.n_caches, 1);
    ASSERT_STREQ(back.status.caches[0].fail_reason, "StoreFull");
    ASSERT_STRCONTAINS(back.status.caches[0].fail_message, "12 free \"quoted\"");
    ASSERT_STREQ(back.status.caches[0].fail_time, "2026-11-27T18:00:00Z");
    ASSERT_NULL(back.status.caches[0].error);
    tkm_api_nodestatus_release(&back);
    /* cleared (the next Materialize succeeded): the member goes */
    w.ac.fail_reason[0] = w.ac.fail_message[0] = w.ac.fail_at[0] = 0;
    tkm_buf_reset(&b);
    ASSERT_OK(agent_status_build(&w.a, "ml", NULL, &st));
    ASSERT_OK(tkm_api_node_status_apply(&st, "ml", "uid-1", &body, &e));
    agent_status_release(&st);
    ASSERT_OK(tkm_api_dump(body, &b));
    json_decref(body);
    ASSERT(!strstr(b.data, "lastFailure"));
    /* a reader refuses a lastFailure of the wrong shape, naming the field */
    const char *bad =
        "{\"apiVersion\":\"tkm.io/v1alpha1\",\"kind\":\"TritonKernelCacheNodeStatus\","
        "\"metadata\":{\"name\":\"n\",\"namespace\":\"ml\"},\"status\":{\"caches\":"
        "{\"vadd\":{\"lastFailure\":{\"reason\":7}}}}}";
    ASSERT_EQ(tkm_api_nodestatus_decode(bad, strlen(bad), &back, &e), -EPROTO);
    ASSERT_STRCONTAINS(tkm_err_str(&e), "lastFailure.reason: expected a string");
    tkm_buf_release(&b);
    world_release(&w);
}

TEST(compat_reasons_are_camel_case)
{
    ASSERT_STREQ(agent_compat_reason("arch mismatch: cache built for sm90, GPU 0 is sm80"),
                 "ArchMismatch");
    ASSERT_STREQ(agent_compat_reason("backend mismatch: ..."), "BackendMismatch");
    ASSERT_STREQ(agent_compat_reason("warp size mismatch: ..."), "WarpSizeMismatch");
    ASSERT_STREQ(agent_compat_reason("PTX too new for the driver on GPU 0"), "PTXTooNew");
    ASSERT_STREQ(agent_compat_reason("corrupt cache: 3 of the 4 kernels"), "CorruptCache");
    ASSERT_STREQ(agent_compat_reason("GPU 1 (x) cannot be used: driver not loaded"), "GPUUnusable");
    ASSERT_STREQ(agent_compat_reason("something new"), "Incompatible");
}

/* The Empty fallback: no GPU here fits for compatibility reasons only and the policy is
 * Empty (spec.whenIncompatible, else tkm-config, else the built-in default). */
TEST(empty_fallback_when_no_gpu_fits)
{
    struct world w;
    struct tkm_api_node_cache e;
    struct tkm_err err = {0};
    const char *reason = NULL, *parts[3];
    char msg[1024];
    int compat = -1;
    world(&w);
    w.ac.live = 1;
    /* an H200 fits: nothing to fall back from */
    ASSERT_EQ(agent_cache_fits(&w.a, &w.ac, &reason, &compat, msg, sizeof msg), 1);
    ASSERT(!agent_cache_serves_empty(&w.a, &w.ac));
    ASSERT_OK(agent_entry_build(&w.a, &w.ac, &e));
    ASSERT_NULL(e.fallback);
    agent_entry_release(&e);
    /* an sm70 cache: every GPU refused for its fit */
    tkm_triton_summary_release(&w.ac.summary);
    ASSERT_OK(tkm_triton_summary_parse(
        &w.ac.summary, "{\"targets\":[{\"backend\":\"cuda\",\"arch\":\"70\",\"warp_size\":32}]}",
        &err));
    agent_cache_rejudge(&w.ac);
    ASSERT_EQ(agent_cache_fits(&w.a, &w.ac, &reason, &compat, msg, sizeof msg), 0);
    ASSERT_STREQ(reason, "ArchMismatch");
    ASSERT_EQ(compat, 1);
    ASSERT_STRCONTAINS(msg, "ArchMismatch: no GPU on node node-1 can use cache ml/vadd: arch "
                            "mismatch: cache built for sm70, GPU 0");
    ASSERT_EQ(agent_cache_fallback(&w.a, &w.ac), TKM_API_FALLBACK_EMPTY); /* the default */
    ASSERT(agent_cache_serves_empty(&w.a, &w.ac));
    ASSERT_OK(agent_entry_build(&w.a, &w.ac, &e));
    ASSERT_STREQ(e.fallback, "Empty");
    ASSERT_EQ(e.n_compatible, 0);
    ASSERT_EQ(e.n_incompatible, 4); /* one group per refused GPU */
    agent_entry_release(&e);
    /* Fail: today's refusal, no fallback in the status */
    w.ac.c.spec.when_incompatible = TKM_API_FALLBACK_FAIL;
    ASSERT_EQ(agent_cache_fallback(&w.a, &w.ac), TKM_API_FALLBACK_FAIL);
    ASSERT(!agent_cache_serves_empty(&w.a, &w.ac));
    ASSERT_OK(agent_entry_build(&w.a, &w.ac, &e));
    ASSERT_NULL(e.fallback);
    agent_entry_release(&e);
    w.ac.c.spec.when_incompatible = TKM_API_FALLBACK_EMPTY;
    ASSERT(agent_cache_serves_empty(&w.a, &w.ac));
    /* an integrity reason on one GPU is never hidden by Empty */
    const char *codes[4] = {"VariantMismatch", NULL, NULL, NULL};
    w.ac.verdicts.code = codes;
    ASSERT_EQ(agent_cache_fits(&w.a, &w.ac, &reason, &compat, msg, sizeof msg), 0);
    ASSERT_STREQ(reason, "VariantMismatch");
    ASSERT_EQ(compat, 0);
    ASSERT(!agent_cache_serves_empty(&w.a, &w.ac));
    ASSERT_OK(agent_entry_build(&w.a, &w.ac, &e));
    ASSERT_STREQ(e.incompatible[0].reason, "VariantMismatch");
    agent_entry_release(&e);
    w.ac.verdicts.code = NULL;
    /* a signature failure (not usable) is never Empty */
    snprintf(w.ac.reason, sizeof w.ac.reason, "KeyMismatch");
    ASSERT(!agent_cache_serves_empty(&w.a, &w.ac));
    w.ac.reason[0] = 0;
    /* no GPU at all: NoGPU, a fit reason */
    w.a.gpus.n = 0;
    agent_cache_rejudge(&w.ac);
    ASSERT_EQ(agent_cache_fits(&w.a, &w.ac, &reason, &compat, msg, sizeof msg), 0);
    ASSERT_STREQ(reason, "NoGPU");
    ASSERT_EQ(compat, 1);
    ASSERT(agent_cache_serves_empty(&w.a, &w.ac));
    /* the parts an empty volume gets */
    ASSERT_EQ(agent_parts_names(0, parts), 1);
    ASSERT_STREQ(parts[0], "triton");
    ASSERT_EQ(agent_parts_names(TKM_PART_TRITON, parts), 1);
    ASSERT_EQ(agent_parts_names(TKM_PART_TRITON | TKM_PART_INDUCTOR | TKM_PART_VLLM, parts), 3);
    ASSERT_STREQ(parts[0], "inductor");
    ASSERT_STREQ(parts[1], "triton");
    ASSERT_STREQ(parts[2], "vllm");
    ASSERT_EQ(agent_parts_names(TKM_PART_VLLM, parts), 1);
    ASSERT_STREQ(parts[0], "vllm");
    world_release(&w);
}

/* ---- a variant index: the pick per GPU, the judge per variant, the layers used ---- */

#define VD(c)                                                                                      \
    "sha256:" c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c  \
        c c c c c c c c c c c c c c c c c c c c c c
static const char *const VAR_IDX =
    "{\"schemaVersion\":2,\"mediaType\":\"application/vnd.oci.image.index.v1+json\","
    "\"manifests\":["
    "{\"mediaType\":\"application/vnd.oci.image.manifest.v1+json\",\"digest\":\"" VD(
        "a") "\",\"size\":500,\"platform\":{\"os\":\"linux\",\"architecture\":\"HOST\"},"
             "\"annotations\":"
             "{\"cache.triton.image/backend\":\"cuda\",\"cache.triton.image/arch\":\"90\","
             "\"cache.triton.image/warp-size\":\"32\",\"cache.triton.image/parts\":\"triton\"}},"
             "{\"mediaType\":\"application/vnd.oci.image.manifest.v1+json\",\"digest\":\"" VD(
                 "b") "\",\"size\":500,\"platform\":{\"os\":\"linux\",\"architecture\":\"HOST\"},"
                      "\"annotations\":"
                      "{\"cache.triton.image/backend\":\"cuda\",\"cache.triton.image/arch\":\"80\","
                      "\"cache.triton.image/warp-size\":\"32\",\"cache.triton.image/"
                      "parts\":\"triton\"}},"
                      "{\"mediaType\":\"application/"
                      "vnd.oci.image.manifest.v1+json\",\"digest\":\"" VD(
                          "c") "\",\"size\":500,\"platform\":{\"os\":\"linux\",\"architecture\":"
                               "\"OTHER\"},\"annotations\":"
                               "{\"cache.triton.image/backend\":\"hip\",\"cache.triton.image/"
                               "arch\":\"gfx942\","
                               "\"cache.triton.image/warp-size\":\"64\",\"cache.triton.image/"
                               "parts\":\"triton\"}}]}";

/* The world's cache becomes a variant index of sm90 and sm80 for this host's CPU and a
 * gfx942 one for another CPU; each variant inspected with a summary of its own target. */
static void world_variants(struct world *w)
{
    struct tkm_err e = {0};
    const char *host = tkm_oci_host_arch();
    const char *other = strcmp(host, "arm64") ? "arm64" : "amd64";
    char *idx = strdup(VAR_IDX), *p;
    ASSERT_NOT_NULL(idx);
    while ((p = strstr(idx, "HOST")) || (p = strstr(idx, "OTHER"))) {
        char buf[4096];
        int host_here = !strncmp(p, "HOST", 4);
        snprintf(buf, sizeof buf, "%.*s%s%s", (int)(p - idx), idx, host_here ? host : other,
                 p + (host_here ? 4 : 5));
        free(idx);
        idx = strdup(buf);
        ASSERT_NOT_NULL(idx);
    }
    ASSERT_OK(tkm_variants_parse(idx, strlen(idx), NULL, "test index", &w->ac.variants, &e));
    free(idx);
    ASSERT_EQ(w->ac.variants.n, 3);
    w->ac.vars = calloc(3, sizeof *w->ac.vars);
    ASSERT_NOT_NULL(w->ac.vars);
    static const char *const sums[] = {
        "{\"targets\":[{\"backend\":\"cuda\",\"arch\":\"90\",\"warp_size\":32}]}",
        "{\"targets\":[{\"backend\":\"cuda\",\"arch\":\"80\",\"warp_size\":32}]}",
        "{\"targets\":[{\"backend\":\"hip\",\"arch\":\"gfx942\",\"warp_size\":64}]}"};
    for (int i = 0; i < 3; i++) {
        struct agent_variant *av = &w->ac.vars[i];
        char layer[80];
        ASSERT_OK(tkm_triton_summary_parse(&av->summary, sums[i], &e));
        snprintf(layer, sizeof layer, "sha256:%064d", 100 + i);
        av->layer_digest = strdup(layer);
        av->state = 1;
        av->parts = TKM_PART_TRITON;
        av->cache_bytes = 1000 + (uint64_t)i;
    }
    tkm_triton_summary_release(&w->ac.summary);
    agent_cache_rejudge(&w->ac);
}

TEST(variants_pick_per_gpu)
{
    struct world w;
    struct tkm_api_node_cache e;
    struct agent_layer L[TKM_VARIANTS_MAX];
    world(&w);
    w.ac.live = 1;
    world_variants(&w);
    /* the H200s use sm90, the A100 sm80, the MI300X has no variant for this CPU */
    ASSERT_EQ(w.ac.verdicts.n, 4);
    ASSERT_EQ(w.ac.verdicts.variant[0], 0);
    ASSERT_EQ(w.ac.verdicts.variant[1], 0);
    ASSERT_EQ(w.ac.verdicts.variant[2], 1);
    ASSERT_EQ(w.ac.verdicts.variant[3], -1);
    ASSERT(w.ac.verdicts.v[0].compatible && w.ac.verdicts.v[1].compatible &&
           w.ac.verdicts.v[2].compatible && !w.ac.verdicts.v[3].compatible);
    ASSERT_STREQ(agent_verdict_reason(&w.ac.verdicts, 3), "HostArchMismatch");
    ASSERT_STRCONTAINS(w.ac.verdicts.v[3].reason, "GPU 3");
    /* the layers the node uses: sm90's then sm80's, pulled through their own manifests */
    ASSERT_EQ(agent_cache_layers(&w.ac, L), 2);
    ASSERT_STREQ(L[0].manifest, VD("a"));
    ASSERT_STREQ(L[0].layer,
                 "sha256:0000000000000000000000000000000000000000000000000000000000000100");
    ASSERT_STREQ(L[1].manifest, VD("b"));
    ASSERT_EQ(L[1].cache_bytes, 1001);
    ASSERT_EQ(agent_cache_fallback(&w.a, &w.ac), TKM_API_FALLBACK_EMPTY);
    ASSERT(!agent_cache_serves_empty(&w.a, &w.ac));
    /* the node status: which variant each GPU group uses */
    ASSERT_OK(agent_entry_build(&w.a, &w.ac, &e));
    ASSERT_EQ(e.n_variants, 2);
    /* by digest only (the H200s, GPUs 0 and 1, on sm90's; the A100, GPU 2, on sm80's): the
     * target is the index's, the GPU type the node's gpus[] */
    ASSERT_STREQ(e.variants[0].digest, VD("a"));
    ASSERT_EQ(e.variants[0].n_gpu_ids, 2);
    ASSERT_EQ(e.variants[0].gpu_ids[0], 0);
    ASSERT_EQ(e.variants[0].gpu_ids[1], 1);
    ASSERT_STREQ(e.variants[1].digest, VD("b"));
    ASSERT_EQ(e.variants[1].n_gpu_ids, 1);
    ASSERT_EQ(e.variants[1].gpu_ids[0], 2);
    ASSERT_EQ(e.n_incompatible, 1);
    ASSERT_STREQ(e.incompatible[0].reason, "HostArchMismatch");
    ASSERT_NULL(e.fallback);
    agent_entry_release(&e);
    /* a variant whose layout differs from the lowest GPU's: VariantLayoutConflict */
    w.ac.vars[1].parts = TKM_PART_TRITON | TKM_PART_INDUCTOR;
    agent_cache_rejudge(&w.ac);
    ASSERT(!w.ac.verdicts.v[2].compatible);
    ASSERT_STREQ(agent_verdict_reason(&w.ac.verdicts, 2), "VariantLayoutConflict");
    ASSERT_STRCONTAINS(w.ac.verdicts.v[2].reason, "one layout per volume");
    ASSERT_EQ(agent_cache_layers(&w.ac, L), 1);
    w.ac.vars[1].parts = TKM_PART_TRITON;
    /* a variant that did not agree with its annotations: VariantMismatch, never Empty */
    w.ac.vars[0].state = -1;
    snprintf(w.ac.vars[0].reason, sizeof w.ac.vars[0].reason, "VariantMismatch");
    snprintf(w.ac.vars[0].message, sizeof w.ac.vars[0].message, "summary says sm80");
    agent_cache_rejudge(&w.ac);
    ASSERT_STREQ(agent_verdict_reason(&w.ac.verdicts, 0), "VariantMismatch");
    ASSERT_STREQ(w.ac.verdicts.v[0].reason, "summary says sm80");
    ASSERT_EQ(agent_cache_layers(&w.ac, L), 1); /* only the A100's sm80 */
    ASSERT_STREQ(L[0].manifest, VD("b"));
    /* a picked variant not inspected yet: judged again once it is */
    w.ac.vars[0].state = 0;
    struct agent_verdicts vs = {0};
    ASSERT_EQ(agent_variants_judge(&w.ac, &vs), 1);
    ASSERT_STREQ(agent_verdict_reason(&vs, 0), "VariantNotInspected");
    agent_verdicts_release(&vs);
    world_release(&w);
    agent_cache_variants_clear(&w.ac);
}

/* Only the A100 (sm80) and an index of sm90 alone: NoVariant, and the Empty fallback. */
TEST(variants_none_fits_empty)
{
    struct world w;
    struct tkm_api_node_cache e;
    struct agent_layer L[TKM_VARIANTS_MAX];
    world(&w);
    w.ac.live = 1;
    w.a.gpus.gpus = &w.g[2];
    w.a.gpus.n = 1;
    world_variants(&w);
    /* drop the sm80 variant from the set: the A100 has none */
    w.ac.variants.v[1] = w.ac.variants.v[2];
    struct agent_variant t = w.ac.vars[1];
    w.ac.vars[1] = w.ac.vars[2];
    w.ac.vars[2] = t;
    snprintf(w.ac.variants.v[2].arch, sizeof w.ac.variants.v[2].arch, "75");
    agent_cache_rejudge(&w.ac);
    ASSERT_STREQ(agent_verdict_reason(&w.ac.verdicts, 0), "NoVariant");
    ASSERT_EQ(agent_cache_layers(&w.ac, L), 0);
    ASSERT(agent_cache_serves_empty(&w.a, &w.ac));
    ASSERT_OK(agent_entry_build(&w.a, &w.ac, &e));
    ASSERT_STREQ(e.fallback, "Empty");
    ASSERT_EQ(e.n_variants, 0);
    ASSERT_STREQ(e.incompatible[0].reason, "NoVariant");
    agent_entry_release(&e);
    world_release(&w);
    agent_cache_variants_clear(&w.ac);
}

/* A cache no longer served (deleted): agent_forget_compiles, which the informer's delete
 * and being-deleted paths call, drops its compiles summary and every series labelled with
 * its key, in every pod namespace; another cache's series and summary stay. */
TEST(forget_compiles_drops_the_cache_series)
{
    struct agent a;
    struct tkm_err err = {0};
    struct tkm_buf out;
    uv_loop_t loop;
    struct agent_scratch s = {.present = 1, .triton_kernels = 3, .inductor_fxgraph = 1};
    memset(&a, 0, sizeof a);
    ASSERT_OK(uv_loop_init(&loop));
    a.loop = &loop;
    a.o.metrics_addr = a.o.health_addr = "0"; /* the registry, no server */
    ASSERT_OK(agent_metrics_start(&a, &err));
    agent_metrics_compiles(&a, "team-a", "ml/vadd", &s);
    agent_metrics_compiles(&a, "team-b", "ml/vadd", &s);
    agent_metrics_compiles(&a, "team-a", "ml/vadd2", &s);
    ASSERT_NOT_NULL(agent_compiles_get(&a.compiles, "ml/vadd", 1));
    ASSERT_NOT_NULL(agent_compiles_get(&a.compiles, "ml/vadd2", 1));
    tkm_buf_init(&out, 1 << 20);
    ASSERT_OK(tkm_metrics_write(a.metrics, &out));
    ASSERT_STRCONTAINS(out.data, "tkm_agent_pods_served_total{namespace=\"team-b\",cache=\"ml/"
                                 "vadd\"} 1\n");
    tkm_buf_release(&out);
    agent_forget_compiles(&a, "ml/vadd");
    tkm_buf_init(&out, 1 << 20);
    ASSERT_OK(tkm_metrics_write(a.metrics, &out));
    ASSERT_NULL(strstr(out.data, "cache=\"ml/vadd\""));
    ASSERT_STRCONTAINS(out.data, "tkm_agent_pods_served_total{namespace=\"team-a\",cache=\"ml/"
                                 "vadd2\"} 1\n");
    ASSERT_STRCONTAINS(out.data, "tkm_agent_pods_compiled_total{namespace=\"team-a\",cache=\"ml/"
                                 "vadd2\"} 1\n");
    ASSERT_STRCONTAINS(out.data, "tkm_agent_pod_compiles_total{namespace=\"team-a\",cache=\"ml/"
                                 "vadd2\",part=\"triton\"} 3\n");
    tkm_buf_release(&out);
    ASSERT_NULL(agent_compiles_get(&a.compiles, "ml/vadd", 0));
    ASSERT_NOT_NULL(agent_compiles_get(&a.compiles, "ml/vadd2", 0));
    agent_compiles_free_all(&a.compiles);
    agent_metrics_free(&a);
    ASSERT_OK(uv_loop_close(&loop));
}
