/* test_kubectl_tkm.c - kubectl-tkm's pure half (kubectl-tkm/, library tkmkt): the
 * state of a cache on a node, the matrix, its layout (node columns, GPU-type groups,
 * one line per type), width and colour handling, exceptions, the JSON / YAML documents,
 * and `check`'s judgement of node-reported GPU facts. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kt-int.h"
#include "test.h"

#define D1 "sha256:1111111111111111111111111111111111111111111111111111111111111111"
#define D2 "sha256:2222222222222222222222222222222222222222222222222222222222222222"

#define H200                                                                                       \
    "{\"id\":0,\"gpuType\":\"nvidia-h200\",\"vendor\":\"nvidia\",\"productName\":\"NVIDIA "        \
    "H200\",\"arch\":\"90\",\"computeCapability\":\"9.0\",\"warpSize\":32,\"cudaDriverVersion\":"  \
    "\"13.0\"}"
#define MI300X                                                                                     \
    "{\"id\":0,\"gpuType\":\"amd-mi300x\",\"vendor\":\"amd\",\"productName\":\"AMD Instinct "      \
    "MI300X\",\"arch\":\"gfx942\",\"warpSize\":64}"
#define E_EXTRACTED                                                                                \
    "{\"digest\":\"" D1                                                                            \
    "\",\"verified\":true,\"extracted\":true,\"compatibleGPUs\":[{\"ids\":[0],"                    \
    "\"gpuType\":\"nvidia-h200\"}]}"
#define E_INCOMPAT                                                                                 \
    "{\"digest\":\"" D1 "\",\"verified\":true,\"incompatibleGPUs\":[{\"ids\":[0],\"gpuType\":"     \
    "\"amd-mi300x\",\"reason\":\"BackendMismatch\",\"message\":\"backend mismatch: cache built "   \
    "for cuda, GPU 0 (AMD Instinct MI300X) is hip\"}]}"
/* E_INCOMPAT with the last failed Materialize */
#define E_INCOMPAT_FAILED                                                                          \
    "{\"digest\":\"" D1 "\",\"verified\":true,\"incompatibleGPUs\":[{\"ids\":[0],\"gpuType\":"     \
    "\"amd-mi300x\",\"reason\":\"BackendMismatch\",\"message\":\"backend mismatch: cache built "   \
    "for cuda, GPU 0 (AMD Instinct MI300X) is hip\"}],\"lastFailure\":{\"reason\":\"StoreFull\","  \
    "\"message\":\"StoreFull: cache ml/a needs 9 bytes\",\"time\":\"2026-11-27T18:00:00Z\"}}"
#define E_FAILED                                                                                   \
    "{\"digest\":\"" D1 "\",\"verified\":true,\"compatibleGPUs\":[{\"ids\":[0],\"gpuType\":"       \
    "\"nvidia-h200\"}],\"error\":\"ExtractFailed: no space left on device\"}"

static void add_cache(struct kt_world *w, const char *ns, const char *name, const char *digest)
{
    char js[1024];
    struct tkm_api_cache c;
    struct tkm_err err = {0};
    snprintf(
        js, sizeof js,
        "{\"apiVersion\":\"tkm.io/v1alpha1\",\"kind\":\"%s\",\"metadata\":{\"name\":\"%s\"%s%s%s},"
        "\"spec\":{\"cacheImage\":\"r.example.com/k/%s:v1\"},\"status\":{%s%s%s}}",
        ns ? "TritonKernelCache" : "TritonKernelCacheCluster", name, ns ? ",\"namespace\":\"" : "",
        ns ? ns : "", ns ? "\"" : "", name, digest ? "\"resolvedDigest\":\"" : "",
        digest ? digest : "", digest ? "\"" : "");
    if (tkm_api_cache_decode(js, strlen(js), &c, &err) != 0) {
        fprintf(stderr, "decode: %s\n", err.msg);
        abort();
    }
    if (kt_world_add_cache_take(w, &c) != 0)
        abort();
}

/* A node status in ns (NULL: the cluster kind) for node with one GPU and caches (a JSON object). */
static void add_status(struct kt_world *w, const char *ns, const char *node, const char *gpu,
                       const char *caches)
{
    char js[8192];
    struct tkm_api_nodestatus s;
    struct tkm_err err = {0};
    snprintf(
        js, sizeof js,
        "{\"apiVersion\":\"tkm.io/v1alpha1\",\"kind\":\"%s\",\"metadata\":{\"name\":\"%s\"%s%s%s},"
        "\"status\":{\"nodeName\":\"%s\",\"gpus\":[%s],\"caches\":%s}}",
        ns ? "TritonKernelCacheNodeStatus" : "TritonKernelCacheNodeStatusCluster", node,
        ns ? ",\"namespace\":\"" : "", ns ? ns : "", ns ? "\"" : "", node, gpu ? gpu : "", caches);
    if (tkm_api_nodestatus_decode(js, strlen(js), &s, &err) != 0) {
        fprintf(stderr, "decode: %s\n", err.msg);
        abort();
    }
    if (kt_world_add_status_take(w, &s) != 0)
        abort();
}

/* The small world: caches a and b in ml, c cluster; nodes n1 (H200), n2 (MI300X), n3 (H200). */
static void small_world(struct kt_world *w)
{
    kt_world_init(w);
    add_cache(w, "ml", "b", D1);
    add_cache(w, "ml", "a", D1);
    add_cache(w, NULL, "c", D2);
    add_status(w, "ml", "n3", H200, "{\"a\":" E_FAILED ",\"b\":" E_EXTRACTED "}");
    add_status(w, "ml", "n1", H200,
               "{\"a\":{\"digest\":\"" D1 "\",\"verified\":true,\"extracted\":true,"
               "\"compatibleGPUs\":[{\"ids\":[0],\"gpuType\":\"nvidia-h200\"}],\"pods\":[{"
               "\"namespace\":\"ml\",\"name\":\"p\",\"uid\":\"u\",\"volumeId\":\"v\"}]}}");
    add_status(w, "ml", "n2", MI300X, "{\"a\":" E_INCOMPAT_FAILED ",\"b\":" E_INCOMPAT "}");
    add_status(w, NULL, "n1", H200,
               "{\"c\":{\"digest\":\"" D1 "\",\"verified\":true,\"compatibleGPUs\":[{\"ids\":[0],"
               "\"gpuType\":\"nvidia-h200\"}]}}");
}

static char *render(const struct kt_matrix *m, size_t width, enum kt_by by, int color)
{
    struct tkm_buf b = TKM_BUF_INIT(1u << 26);
    struct kt_render_opts o = {.width = width, .by = by, .color = color};
    if (kt_render_status(m, &o, &b) != 0)
        abort();
    return tkm_buf_detach(&b, NULL);
}

TEST(state_of_every_state)
{
    char why[512];
    int32_t id0[] = {0};
    struct tkm_api_gpu_group ok = {.ids = id0, .n_ids = 1, .gpu_type = "nvidia-h200"};
    struct tkm_api_gpu_group bad = {.ids = id0,
                                    .n_ids = 1,
                                    .gpu_type = "nvidia-a100",
                                    .reason = "ArchMismatch",
                                    .message = "arch mismatch: sm90 vs sm80"};
    struct tkm_api_pod_ref pod = {.ns = "ml", .name = "p"};
    struct tkm_api_node_cache e = {
        .digest = D1, .verified = 1, .compatible = &ok, .n_compatible = 1};
    ASSERT_EQ(kt_state_of(NULL, D1, 0, why, sizeof why), KT_ABSENT);
    ASSERT_EQ(kt_state_of(&e, D1, 0, why, sizeof why), KT_READY);
    ASSERT_STREQ(why, "");
    e.extracted = 1;
    ASSERT_EQ(kt_state_of(&e, D1, 0, why, sizeof why), KT_EXTRACTED);
    e.pods = &pod;
    e.n_pods = 1;
    ASSERT_EQ(kt_state_of(&e, D1, 0, why, sizeof why), KT_IN_USE);
    ASSERT_EQ(kt_state_of(&e, D2, 0, why, sizeof why), KT_PENDING);
    ASSERT_STREQ(why, "the node reports sha256:111111111111, the cache is pinned at "
                      "sha256:222222222222");
    e.verified = 0;
    ASSERT_EQ(kt_state_of(&e, D1, 0, why, sizeof why), KT_UNVERIFIED);
    ASSERT_EQ(kt_state_of(&e, D1, 1, why, sizeof why), KT_IN_USE); /* policy Disabled */
    e.error = "Audit: NoSignature: none found";
    ASSERT_EQ(kt_state_of(&e, D1, 0, why, sizeof why), KT_IN_USE); /* Audit: usable */
    ASSERT_STREQ(why, "Audit: NoSignature: none found");
    e.error = "KeyMismatch: signed by another key";
    ASSERT_EQ(kt_state_of(&e, D1, 0, why, sizeof why), KT_UNVERIFIED);
    e.error = "ExtractFailed: disk full";
    ASSERT_EQ(kt_state_of(&e, D1, 0, why, sizeof why), KT_FAILED);
    ASSERT_STREQ(why, "ExtractFailed: disk full");
    struct tkm_api_node_cache i = {
        .digest = D1, .verified = 1, .incompatible = &bad, .n_incompatible = 1};
    ASSERT_EQ(kt_state_of(&i, D1, 0, why, sizeof why), KT_INCOMPATIBLE);
    ASSERT_STREQ(why, "ArchMismatch: arch mismatch: sm90 vs sm80");
    struct tkm_api_node_cache j = {.digest = D1, .verified = 1};
    ASSERT_EQ(kt_state_of(&j, D1, 0, why, sizeof why), KT_PENDING); /* not judged yet */
    ASSERT_EQ(kt_state_of(&j, NULL, 0, why, sizeof why), KT_PENDING);
}

TEST(matrix_orders_rows_and_columns_and_fills_cells)
{
    struct kt_world w;
    struct kt_matrix m;
    small_world(&w);
    ASSERT_OK(kt_matrix_build(&w, &m));
    ASSERT_UEQ(m.n_nodes, 3);
    ASSERT_STREQ(m.nodes[0].name, "n1");
    ASSERT_STREQ(m.nodes[2].name, "n3");
    ASSERT_STREQ(m.nodes[1].gpu_type, "amd-mi300x");
    ASSERT_STREQ(m.nodes[1].gpu_label, "MI300X");
    ASSERT_UEQ(m.n_rows, 3);
    ASSERT_STREQ(m.rows[0].cache->meta.name, "a"); /* namespaced by name, then cluster */
    ASSERT_STREQ(m.rows[1].cache->meta.name, "b");
    ASSERT_STREQ(m.rows[2].cache->meta.name, "c");
    ASSERT_EQ(m.rows[0].cells[0].state, KT_IN_USE);
    ASSERT_EQ(m.rows[0].cells[1].state, KT_INCOMPATIBLE);
    ASSERT_EQ(m.rows[0].cells[2].state, KT_FAILED);
    ASSERT_EQ(m.rows[1].cells[0].state, KT_ABSENT);
    ASSERT_EQ(m.rows[1].cells[2].state, KT_EXTRACTED);
    /* the cluster cache reads only the cluster kind's objects: pinned at D2, n1 reports D1 */
    ASSERT_EQ(m.rows[2].cells[0].state, KT_PENDING);
    ASSERT_EQ(m.rows[2].cells[2].state, KT_ABSENT);
    ASSERT_UEQ(m.rows[0].counts[KT_IN_USE], 1);
    ASSERT_EQ(m.rows[0].pods, 1);
    kt_matrix_release(&m);
    kt_world_release(&w);
}

TEST(matrix_by_node_when_it_fits)
{
    struct kt_world w;
    struct kt_matrix m;
    small_world(&w);
    ASSERT_OK(kt_matrix_build(&w, &m));
    char *s = render(&m, 80, KT_BY_AUTO, 0);
    const char *want = "CACHE    n1           n2             n3\n"
                       "tkc/a    in use (1)   incompatible   failed\n"
                       "tkc/b    -            incompatible   extracted\n"
                       "tkcc/c   pending      -              -\n"
                       "\n"
                       "Not ready:\n";
    ASSERT_EQ(strncmp(s, want, strlen(want)), 0);
    ASSERT_STRCONTAINS(s, "  tkc/a on n2: incompatible: BackendMismatch: backend mismatch");
    ASSERT_STRCONTAINS(s, "  tkc/a on n3: failed: ExtractFailed: no space left on device\n");
    ASSERT_STRCONTAINS(s, "  tkcc/c on n1: pending: the node reports sha256:111111111111");
    ASSERT(!strchr(s, '\033'));
    free(s);
    kt_matrix_release(&m);
    kt_world_release(&w);
}

TEST(too_narrow_groups_by_gpu_type_then_one_line_per_type)
{
    struct kt_world w;
    struct kt_matrix m;
    small_world(&w);
    ASSERT_OK(kt_matrix_build(&w, &m));
    /* the node table is 46 columns wide here, the groups 52: at 45 one line per type */
    char *s = render(&m, 45, KT_BY_AUTO, 0);
    ASSERT_STRCONTAINS(s, "CACHE    GPU TYPE   NODES   STATE\n"
                          "tkc/a    H200       2       1 in use, 1 failed\n"
                          "         MI300X     1       incompatible\n"
                          "tkc/b    H200       2       1 extracted, 1 unreported\n");
    free(s);
    s = render(&m, 46, KT_BY_AUTO, 0);
    ASSERT_STRCONTAINS(s, "CACHE    n1           n2             n3\n");
    free(s);
    s = render(&m, 0, KT_BY_GPU_TYPE, 0); /* forced */
    const char *want = "CACHE    H200 ×2                     MI300X ×1\n"
                       "tkc/a    1 in use, 1 failed          incompatible\n"
                       "tkc/b    1 extracted, 1 unreported   incompatible\n"
                       "tkcc/c   1 pending, 1 unreported     -\n";
    ASSERT_EQ(strncmp(s, want, strlen(want)), 0);
    ASSERT_STRCONTAINS(s, "Not ready, by GPU type:\n  tkc/a  MI300X ×1: incompatible: "
                          "BackendMismatch");
    ASSERT_STRCONTAINS(s, "Exceptions (nodes unlike the rest of their GPU type):\n"
                          "  tkc/a  n3 (H200): failed: ExtractFailed: no space left on device\n"
                          "  tkc/b  n1 (H200): unreported: the node reports nothing for this "
                          "cache\n");
    free(s);
    s = render(&m, 10, KT_BY_NODE, 0); /* forced: never grouped */
    ASSERT_STRCONTAINS(s, "CACHE    n1 ");
    free(s);
    kt_matrix_release(&m);
    kt_world_release(&w);
}

TEST(colour_only_when_asked_and_control_characters_cleaned)
{
    struct kt_world w;
    struct kt_matrix m;
    kt_world_init(&w);
    add_cache(&w, "ml", "a", D1);
    add_status(&w, "ml", "n1", H200,
               "{\"a\":{\"digest\":\"" D1 "\",\"verified\":true,\"compatibleGPUs\":[{\"ids\":[0],"
               "\"gpuType\":\"nvidia-h200\"}],\"error\":\"ExtractFailed: \\u001b[2Jboom\"}}");
    ASSERT_OK(kt_matrix_build(&w, &m));
    char *s = render(&m, 80, KT_BY_AUTO, 1);
    ASSERT_STRCONTAINS(s, "\033[1;31mfailed\033[0m");
    ASSERT_STRCONTAINS(s, "ExtractFailed: ?[2Jboom");
    ASSERT(!strstr(s, "\033[2J"));
    free(s);
    s = render(&m, 80, KT_BY_AUTO, 0);
    ASSERT(!strchr(s, '\033'));
    free(s);
    kt_matrix_release(&m);
    kt_world_release(&w);
}

/* 1000 nodes: 998 H200 (one failed, one in use), 2 MI300X: a few lines, not 1000 columns. */
TEST(thousand_nodes_fit_80_columns_with_exceptions)
{
    struct kt_world w;
    struct kt_matrix m;
    char node[32];
    kt_world_init(&w);
    add_cache(&w, "ml", "a", D1);
    for (int i = 0; i < 1000; i++) {
        snprintf(node, sizeof node, "gpu-%04d", i);
        add_status(&w, "ml", node, i < 2 ? MI300X : H200,
                   i < 2      ? "{\"a\":" E_INCOMPAT "}"
                   : i == 500 ? "{\"a\":" E_FAILED "}"
                              : "{\"a\":" E_EXTRACTED "}");
    }
    ASSERT_OK(kt_matrix_build(&w, &m));
    ASSERT_UEQ(m.n_nodes, 1000);
    char *s = render(&m, 80, KT_BY_AUTO, 0);
    ASSERT_STRCONTAINS(s, "CACHE   H200 ×998                 MI300X ×2\n"
                          "tkc/a   997 extracted, 1 failed   incompatible\n");
    ASSERT_STRCONTAINS(s, "  tkc/a  gpu-0500 (H200): failed: ExtractFailed");
    ASSERT_STRCONTAINS(s,
                       "  tkc/a  MI300X ×2: incompatible: BackendMismatch: backend mismatch: "
                       "cache built for cuda, GPU 0 (AMD Instinct MI300X) is hip (e.g. gpu-0000)");
    size_t lines = 0;
    for (const char *p = s; *p; p++)
        lines += *p == '\n';
    ASSERT(lines < 12);
    /* the table's lines fit */
    const char *nl = strchr(s, '\n');
    ASSERT(kt_text_width("CACHE   H200 ×998                 MI300X ×2") <= 80);
    ASSERT_NOT_NULL(nl);
    free(s);
    /* JSON counts */
    json_t *doc = kt_status_json(&m);
    ASSERT_NOT_NULL(doc);
    json_t *c0 = json_array_get(json_object_get(doc, "caches"), 0);
    ASSERT_EQ(json_integer_value(json_object_get(json_object_get(c0, "counts"), "extracted")), 997);
    ASSERT_EQ(json_integer_value(json_object_get(json_object_get(c0, "counts"), "failed")), 1);
    ASSERT_EQ(json_integer_value(json_object_get(json_object_get(c0, "counts"), "incompatible")),
              2);
    ASSERT_UEQ(json_array_size(json_object_get(c0, "nodes")), 1000);
    ASSERT_UEQ(json_array_size(json_object_get(doc, "nodes")), 1000);
    ASSERT_STREQ(json_string_value(json_object_get(
                     json_array_get(json_object_get(doc, "gpuTypes"), 0), "gpuType")),
                 "nvidia-h200");
    json_decref(doc);
    kt_matrix_release(&m);
    kt_world_release(&w);
}

TEST(exceptions_are_capped_unless_wide)
{
    struct kt_world w;
    struct kt_matrix m;
    struct tkm_buf b = TKM_BUF_INIT(1u << 24);
    char node[32];
    kt_world_init(&w);
    add_cache(&w, "ml", "a", D1);
    for (int i = 0; i < 100; i++) {
        snprintf(node, sizeof node, "gpu-%03d", i);
        add_status(&w, "ml", node, H200,
                   i < 30 ? "{\"a\":" E_FAILED "}" : "{\"a\":" E_EXTRACTED "}");
    }
    ASSERT_OK(kt_matrix_build(&w, &m));
    struct kt_render_opts o = {.width = 80};
    ASSERT_OK(kt_render_status(&m, &o, &b));
    ASSERT_STRCONTAINS(b.data, "  tkc/a  gpu-019 (H200): failed");
    ASSERT(!strstr(b.data, "gpu-020 (H200)"));
    ASSERT_STRCONTAINS(b.data, "  ... and 10 more (-o wide lists all");
    tkm_buf_reset(&b);
    o.wide = 1;
    o.width = 150;
    ASSERT_OK(kt_render_status(&m, &o, &b));
    ASSERT_STRCONTAINS(b.data, "gpu-029 (H200): failed");
    ASSERT(!strstr(b.data, "more ("));
    tkm_buf_release(&b);
    kt_matrix_release(&m);
    kt_world_release(&w);
}

TEST(width_and_labels)
{
    ASSERT_UEQ(kt_width_pick("120", 0), 120);
    ASSERT_UEQ(kt_width_pick("120", 200), 120); /* COLUMNS wins */
    ASSERT_UEQ(kt_width_pick("wide", 200), 200);
    ASSERT_UEQ(kt_width_pick("0", 0), 80);
    ASSERT_UEQ(kt_width_pick(NULL, 0), 80); /* piped */
    ASSERT_UEQ(kt_text_width("H200 ×998"), 9);
    ASSERT_UEQ(kt_text_width(""), 0);
    char l[96];
    kt_gpu_label("nvidia-h200", l, sizeof l);
    ASSERT_STREQ(l, "H200");
    kt_gpu_label("amd-mi300x", l, sizeof l);
    ASSERT_STREQ(l, "MI300X");
    kt_gpu_label("amd-mi300x+nvidia-h200", l, sizeof l);
    ASSERT_STREQ(l, "MI300X+H200");
    kt_gpu_label("none", l, sizeof l);
    ASSERT_STREQ(l, "NO GPU");
    kt_gpu_label("unknown", l, sizeof l);
    ASSERT_STREQ(l, "UNKNOWN");
}

TEST(no_cache_and_no_node)
{
    struct kt_world w;
    struct kt_matrix m;
    kt_world_init(&w);
    ASSERT_OK(kt_matrix_build(&w, &m));
    char *s = render(&m, 80, KT_BY_AUTO, 0);
    ASSERT_STREQ(s, "No TritonKernelCache found.\n");
    free(s);
    kt_matrix_release(&m);
    add_cache(&w, "ml", "a", NULL);
    ASSERT_OK(kt_matrix_build(&w, &m));
    s = render(&m, 80, KT_BY_AUTO, 0);
    ASSERT_STRCONTAINS(s, "No node reports any of these caches yet");
    free(s);
    kt_matrix_release(&m);
    kt_world_release(&w);
}

TEST(why_chain_names_each_source)
{
    struct kt_world w;
    struct kt_matrix m;
    struct tkm_buf b = TKM_BUF_INIT(1u << 20);
    small_world(&w);
    ASSERT_OK(kt_matrix_build(&w, &m));
    ASSERT_OK(kt_render_why(&m, 0, 1, 0, &b)); /* tkc/a on n2 */
    ASSERT_STRCONTAINS(b.data, "tkc/a in namespace ml\n  tag         r.example.com/k/a:v1\n"
                               "              from TritonKernelCache ml/a spec.cacheImage\n");
    ASSERT_STRCONTAINS(b.data, "  GPU 0       AMD Instinct MI300X (amd-mi300x, arch gfx942): "
                               "incompatible: BackendMismatch: backend mismatch");
    ASSERT_STRCONTAINS(b.data, "from TritonKernelCacheNodeStatus ml/n2 "
                               "status.caches[\"a\"].incompatibleGPUs, status.gpus\n");
    ASSERT_STRCONTAINS(b.data, "  state       incompatible: BackendMismatch");
    ASSERT_STRCONTAINS(b.data, "  failure     StoreFull: cache ml/a needs 9 bytes at "
                               "2026-11-27T18:00:00Z\n");
    tkm_buf_reset(&b);
    ASSERT_OK(kt_render_why(&m, 0, (size_t)-1, 0, &b));
    ASSERT_STRCONTAINS(b.data, "nodes (3)\n  failed        1 (n3)\n  incompatible  1 (n2)\n"
                               "  in use        1 (n1)\n");
    json_t *doc = kt_why_json(&m, 0, 0);
    ASSERT_STREQ(json_string_value(json_object_get(doc, "nodeState")), "inUse");
    json_decref(doc);
    tkm_buf_release(&b);
    kt_matrix_release(&m);
    kt_world_release(&w);
}

TEST(check_judges_node_facts_like_the_agent)
{
    struct kt_world w;
    struct kt_matrix m;
    struct kt_check c;
    struct tkm_triton_summary s = {0};
    struct tkm_err err = {0};
    struct tkm_buf b = TKM_BUF_INIT(1u << 20);
    ASSERT_OK(tkm_triton_summary_parse(
        &s,
        "{\"targets\":[{\"backend\":\"cuda\",\"arch\":\"90\",\"warp_size\":32}],"
        "\"ptx_versions\":[\"8.7\"]}",
        &err));
    kt_world_init(&w);
    add_status(&w, "ml", "h200-new", H200, "{}");
    add_status(&w, "ml", "h200-old",
               "{\"id\":0,\"gpuType\":\"nvidia-h200\",\"vendor\":\"nvidia\",\"productName\":"
               "\"NVIDIA H200\",\"arch\":\"90\",\"warpSize\":32,\"cudaDriverVersion\":\"12.4\"}",
               "{}");
    add_status(&w, "ml", "mi300x", MI300X, "{}");
    add_status(&w, "ml", "nodriver",
               "{\"id\":0,\"gpuType\":\"nvidia-h200\",\"vendor\":\"nvidia\",\"productName\":"
               "\"NVIDIA H200\"}",
               "{}");
    add_status(&w, "ml", "nogpu", NULL, "{}");
    ASSERT_OK(kt_matrix_build(&w, &m));
    ASSERT_OK(kt_check_run(&m, &s, &c));
    ASSERT_UEQ(c.n_nodes, 5);
    ASSERT_UEQ(c.n_compatible, 1);
    ASSERT_EQ(c.nodes[0].compatible, 1);
    ASSERT_STRCONTAINS(c.nodes[0].v[0].reason, "driver supports 13.0");
    ASSERT_EQ(c.nodes[1].compatible, 0);
    ASSERT_STRCONTAINS(c.nodes[1].v[0].reason,
                       "PTX too new for the driver on GPU 0 (NVIDIA H200): "
                       "PTX ISA 8.7 needs CUDA 12.8+, driver supports 12.4");
    ASSERT_STRCONTAINS(c.nodes[2].v[0].reason, "backend mismatch: cache built for cuda");
    ASSERT_STRCONTAINS(c.nodes[3].v[0].reason, "cannot be used");
    ASSERT_UEQ(c.nodes[4].n_v, 0);
    struct kt_render_opts o = {.width = 80};
    ASSERT_OK(kt_render_check(&c, "r/x:v1", D1, &s, &o, &b));
    ASSERT_STRCONTAINS(b.data, "compatible     H200       1 (h200-new)");
    ASSERT_STRCONTAINS(b.data, "1 of 5 nodes could use it.\n");
    json_t *doc = kt_check_json(&c, "r/x:v1", D1, &s);
    ASSERT_EQ(json_integer_value(json_object_get(doc, "compatibleNodes")), 1);
    json_decref(doc);
    tkm_buf_release(&b);
    kt_check_release(&c);
    kt_matrix_release(&m);
    kt_world_release(&w);
    tkm_triton_summary_release(&s);
}

TEST(yaml_quotes_what_would_read_back_as_another_type)
{
    struct tkm_buf b = TKM_BUF_INIT(1u << 16);
    json_t *d = json_pack("{s:s,s:s,s:s,s:i,s:b,s:n,s:[s,s]}", "kind", "CacheStatus", "t", "true",
                          "n", "123", "i", 5, "b", 1, "z", "l", "sha256:ab", "");
    ASSERT_OK(kt_yaml_dump(d, &b));
    ASSERT_STREQ(b.data,
                 "kind: CacheStatus\nt: \"true\"\n\"n\": \"123\"\ni: 5\nb: true\nz: null\nl:\n"
                 "- sha256:ab\n- \"\"\n");
    json_decref(d);
    tkm_buf_release(&b);
}

/* ---- issue 24: nodes grouped by variant, the schedule recipe ------------------------- */

/* a node names a variant by digest; its target is the one the cache status lists */
#define VAR90 "{\"digest\":\"sha256:9090909090909090aaaa\",\"gpuIds\":[0,1]}"
#define VAR80 "{\"digest\":\"sha256:8080808080808080bbbb\",\"gpuIds\":[0]}"
#define VAR70 "{\"digest\":\"sha256:7070707070707070cccc\",\"gpuIds\":[0]}"
#define E_VAR(v)                                                                                   \
    "{\"digest\":\"" D1                                                                            \
    "\",\"verified\":true,\"extracted\":true,\"compatibleGPUs\":[{\"ids\":[0],"                    \
    "\"gpuType\":\"x\"}],\"variants\":[" v "]}"
#define E_NOVAR                                                                                    \
    "{\"digest\":\"" D1 "\",\"verified\":true,\"fallback\":\"Empty\",\"incompatibleGPUs\":[{"      \
    "\"ids\":[0,1],\"gpuType\":\"amd-mi300x\",\"reason\":\"NoVariant\",\"message\":\"no variant "  \
    "for hip gfx942\"}]}"

/* status.variants[] of cache c: the controller's view of the index (digest, arch; cuda,
 * linux/amd64, warp 32). */
static void cache_variant(struct tkm_api_cache *c, const char *digest, const char *arch)
{
    struct tkm_api_variant_count *v =
        realloc(c->status.variants, (c->status.n_variants + 1) * sizeof *v);
    if (!v)
        abort();
    c->status.variants = v;
    v[c->status.n_variants++] = (struct tkm_api_variant_count){
        strdup(digest), strdup("linux/amd64"), strdup("cuda"), strdup(arch), 32, 1, 1};
}

static void variant_world(struct kt_world *w)
{
    kt_world_init(w);
    add_cache(w, "ml", "mix", D1);
    cache_variant(&w->caches[0], "sha256:8080808080808080bbbb", "80");
    cache_variant(&w->caches[0], "sha256:9090909090909090aaaa", "90");
    add_status(w, "ml", "h1", H200, "{\"mix\":" E_VAR(VAR90) "}");
    add_status(w, "ml", "h2", H200, "{\"mix\":" E_VAR(VAR90) "}");
    add_status(w, "ml", "a1", H200, "{\"mix\":" E_VAR(VAR80) "}");
    add_status(w, "ml", "m1", MI300X, "{\"mix\":" E_NOVAR "}");
    add_status(w, "ml", "old", H200, "{\"mix\":" E_EXTRACTED "}"); /* no variants reported */
    add_status(w, "ml", "z1", H200, "{\"mix\":" E_VAR(VAR70) "}"); /* one the status lacks */
}

TEST(status_groups_nodes_by_variant)
{
    struct kt_world w;
    struct kt_matrix m;
    variant_world(&w);
    ASSERT_EQ(kt_matrix_build(&w, &m), 0);
    char *s = render(&m, 0, KT_BY_NODE, 0);
    ASSERT_STRCONTAINS(s, "\nBy variant:\n");
    /* most nodes first; digests shortened; the nodes named */
    const char *v90 = strstr(s, "cuda/90 linux/amd64 warp 32 (sha256:909090909090)");
    const char *v80 = strstr(s, "cuda/80 linux/amd64 warp 32 (sha256:808080808080)");
    const char *nv = strstr(s, "no variant: amd-mi300x (NoVariant)");
    ASSERT(v90 && v80 && nv && v90 < v80 && v80 < nv);
    ASSERT_STRCONTAINS(v90, ")   2       4      h1, h2\n");
    ASSERT_STRCONTAINS(v80, ")   1       1      a1\n");
    ASSERT_STRCONTAINS(nv, ")                  1       2      m1 (empty volume)\n");
    /* a digest the cache status does not list (yet): no target shown */
    const char *v70 = strstr(s, "?/? ? warp 0 (sha256:707070707070)");
    ASSERT(v70 && v90 < v70 && v70 < v80);
    ASSERT_STRCONTAINS(v70, "   1       1      z1\n");
    ASSERT_STRCONTAINS(s, "tkc/mix   cuda/90");
    ASSERT(strstr(s, "old") != NULL && strstr(strstr(s, "By variant:"), "old") == NULL);
    free(s);
    /* the document: per cache, variants with their nodes, and the GPU types without one */
    json_t *doc = kt_status_json(&m);
    ASSERT_NOT_NULL(doc);
    json_t *c = json_array_get(json_object_get(doc, "caches"), 0);
    json_t *vs = json_object_get(c, "variants"), *nvs = json_object_get(c, "withoutVariant");
    ASSERT_UEQ(json_array_size(vs), 3);
    ASSERT_STREQ(json_string_value(json_object_get(json_array_get(vs, 0), "arch")), "90");
    ASSERT_STREQ(json_string_value(json_object_get(json_array_get(vs, 0), "platform")),
                 "linux/amd64");
    ASSERT_EQ(json_integer_value(json_object_get(json_array_get(vs, 0), "warpSize")), 32);
    ASSERT(json_is_null(json_object_get(json_array_get(vs, 1), "arch"))); /* z1's: not listed */
    ASSERT_UEQ(json_array_size(json_object_get(json_array_get(vs, 0), "nodes")), 2);
    ASSERT_EQ(json_integer_value(json_object_get(json_array_get(vs, 0), "gpus")), 4);
    ASSERT_STREQ(json_string_value(json_object_get(json_array_get(nvs, 0), "gpuType")),
                 "amd-mi300x");
    ASSERT_EQ(json_integer_value(json_object_get(json_array_get(nvs, 0), "emptyVolumes")), 1);
    json_decref(doc);
    kt_matrix_release(&m);
    kt_world_release(&w);
    /* no node reports variants: no section, no members (the documents stay as they were) */
    small_world(&w);
    ASSERT_EQ(kt_matrix_build(&w, &m), 0);
    s = render(&m, 0, KT_BY_NODE, 0);
    ASSERT(strstr(s, "By variant") == NULL);
    free(s);
    doc = kt_status_json(&m);
    ASSERT_NULL(json_object_get(json_array_get(json_object_get(doc, "caches"), 0), "variants"));
    json_decref(doc);
    kt_matrix_release(&m);
    kt_world_release(&w);
}

TEST(schedule_prints_the_node_label_recipe)
{
    struct kt_world w;
    struct tkm_buf b = TKM_BUF_INIT(1u << 20);
    kt_world_init(&w);
    add_cache(&w, "ml", "mix", D1);
    add_cache(&w, NULL, "shared", D1);
    ASSERT_EQ(kt_render_schedule(&w.caches[0], &b), 0);
    ASSERT_STRCONTAINS(b.data, "nodeSelector:\n  tkc.tkm.io/ml.mix: \"true\"\n");
    ASSERT_STRCONTAINS(b.data, "        - key: tkc.tkm.io/ml.mix\n          operator: In\n"
                               "          values: [\"true\"]\n");
    ASSERT_STRCONTAINS(b.data, "names no nodeLabel yet"); /* the status has none */
    tkm_buf_reset(&b);
    ASSERT_EQ(kt_render_schedule(&w.caches[1], &b), 0);
    ASSERT_STRCONTAINS(b.data, "  tkcc.tkm.io/shared: \"true\"\n");
    /* the label the controller wrote wins (a long name's hashed key) */
    free(w.caches[0].status.node_label);
    w.caches[0].status.node_label = strdup("tkc.tkm.io/ml.x-0123456789");
    w.caches[0].status.has_counts = 1;
    w.caches[0].status.counts.compatible = 3;
    tkm_buf_reset(&b);
    ASSERT_EQ(kt_render_schedule(&w.caches[0], &b), 0);
    ASSERT_STRCONTAINS(b.data, "tkc.tkm.io/ml.x-0123456789=true (3 nodes at the last status)");
    ASSERT(strstr(b.data, "nodeLabel yet") == NULL);
    tkm_buf_release(&b);
    kt_world_release(&w);
}

/* ---- issue 25: the HIT column and why's kernels ----------------------------------------- */

/* Cache ml/a with status.compiles (JSON object text), and ml/b without. */
static void compiles_world(struct kt_world *w, const char *compiles)
{
    char js[4096];
    struct tkm_api_cache c;
    struct tkm_err err = {0};
    kt_world_init(w);
    snprintf(js, sizeof js,
             "{\"apiVersion\":\"tkm.io/v1alpha1\",\"kind\":\"TritonKernelCache\",\"metadata\":{"
             "\"name\":\"a\",\"namespace\":\"ml\"},\"spec\":{\"cacheImage\":\"r.example.com/k/a:"
             "v1\"},\"status\":{\"resolvedDigest\":\"" D1 "\",\"compiles\":%s}}",
             compiles);
    if (tkm_api_cache_decode(js, strlen(js), &c, &err) != 0) {
        fprintf(stderr, "decode: %s\n", err.msg);
        abort();
    }
    if (kt_world_add_cache_take(w, &c) != 0)
        abort();
    add_cache(w, "ml", "b", D1);
    add_status(w, "ml", "n1", H200,
               "{\"a\":{\"digest\":\"" D1 "\",\"verified\":true,\"extracted\":true,"
               "\"compatibleGPUs\":[{\"ids\":[0],\"gpuType\":\"nvidia-h200\"}],\"compiles\":{"
               "\"podsServed\":6,\"podsCompiled\":2,\"tritonKernels\":5,\"topKernels\":[{\"name\":"
               "\"_attn_fwd\",\"pods\":2}],\"since\":\"2026-11-28T01:00:00Z\"}},\"b\":" E_EXTRACTED
               "}");
}

#define CACHE_COMPILES                                                                             \
    "{\"nodes\":2,\"podsServed\":10,\"podsCompiled\":4,\"tritonKernels\":12,"                      \
    "\"inductorEntries\":1,\"vllmEntries\":0,\"bytes\":4096,\"topKernels\":[{\"name\":"            \
    "\"_attn_fwd\",\"pods\":3},{\"name\":\"triton_red_fused.0\",\"pods\":1}],\"since\":"           \
    "\"2026-11-28T00:30:00Z\",\"hit\":\"6/10\"}"

TEST(status_hit_column_and_why_names_the_kernels)
{
    struct kt_world w;
    struct kt_matrix m;
    struct tkm_buf b = TKM_BUF_INIT(1u << 20);
    compiles_world(&w, CACHE_COMPILES);
    ASSERT_EQ(kt_matrix_build(&w, &m), 0);
    char *s = render(&m, 0, KT_BY_NODE, 0);
    /* a HIT column after CACHE: served without compiling / served; "-" when none counted */
    ASSERT_STRCONTAINS(s, "CACHE   HIT    n1");
    ASSERT_STRCONTAINS(s, "tkc/a   6/10   extracted");
    ASSERT_STRCONTAINS(s, "tkc/b   -      extracted");
    free(s);
    s = render(&m, 0, KT_BY_GPU_TYPE, 0);
    ASSERT_STRCONTAINS(s, "tkc/a   6/10");
    free(s);
    /* -o json: the cache's compiles as in its status; none for b */
    json_t *doc = kt_status_json(&m);
    json_t *ca = json_object_get(json_array_get(json_object_get(doc, "caches"), 0), "compiles");
    ASSERT_EQ(json_integer_value(json_object_get(ca, "podsServed")), 10);
    ASSERT_STREQ(json_string_value(json_object_get(ca, "hit")), "6/10");
    ASSERT_NULL(json_object_get(json_array_get(json_object_get(doc, "caches"), 1), "compiles"));
    json_decref(doc);
    /* why CACHE: the step, the kernels with their pods, the advice */
    ASSERT_EQ(kt_render_why(&m, 0, (size_t)-1, 0, &b), 0);
    ASSERT_STRCONTAINS(b.data, "  compiles    4 of 10 pods served compiled beside the cache since "
                               "2026-11-28T00:30:00Z: 12 Triton kernels, 1 Inductor entry, 0 "
                               "vLLM entries, 4096 bytes\n"
                               "              from TritonKernelCache ml/a status.compiles\n");
    ASSERT_STRCONTAINS(b.data, "kernels pods keep compiling (pods that compiled each):\n"
                               "  _attn_fwd                                3\n"
                               "  triton_red_fused.0                       1\n");
    ASSERT_STRCONTAINS(b.data, "tkmctl capture (docs/capture.md)");
    /* why CACHE --node: the node's own counts and names */
    tkm_buf_reset(&b);
    ASSERT_EQ(kt_render_why(&m, 0, 0, 0, &b), 0);
    ASSERT_STRCONTAINS(b.data, "2 of 6 pods served compiled beside the cache on this node since "
                               "2026-11-28T01:00:00Z: 5 Triton kernels");
    ASSERT_STRCONTAINS(b.data, "most compiled: _attn_fwd (2)");
    doc = kt_why_json(&m, 0, (size_t)-1);
    ASSERT_STREQ(
        json_string_value(json_object_get(
            json_array_get(json_object_get(json_object_get(doc, "compiles"), "topKernels"), 1),
            "name")),
        "triton_red_fused.0");
    json_decref(doc);
    /* b: no compiles step, no member, no advice */
    tkm_buf_reset(&b);
    ASSERT_EQ(kt_render_why(&m, 1, (size_t)-1, 0, &b), 0);
    ASSERT(strstr(b.data, "compiles") == NULL && strstr(b.data, "tkmctl capture") == NULL);
    doc = kt_why_json(&m, 1, (size_t)-1);
    ASSERT_NULL(json_object_get(doc, "compiles"));
    json_decref(doc);
    kt_matrix_release(&m);
    kt_world_release(&w);
    /* every pod served hit the cache: no kernel list, no advice */
    compiles_world(&w, "{\"nodes\":1,\"podsServed\":3,\"podsCompiled\":0,\"hit\":\"3/3\"}");
    ASSERT_EQ(kt_matrix_build(&w, &m), 0);
    tkm_buf_reset(&b);
    ASSERT_EQ(kt_render_why(&m, 0, (size_t)-1, 0, &b), 0);
    ASSERT_STRCONTAINS(b.data, "0 of 3 pods served compiled beside the cache");
    ASSERT(strstr(b.data, "tkmctl capture") == NULL);
    s = render(&m, 0, KT_BY_NODE, 0);
    ASSERT_STRCONTAINS(s, "tkc/a   3/3");
    free(s);
    kt_matrix_release(&m);
    kt_world_release(&w);
    tkm_buf_release(&b);
}
