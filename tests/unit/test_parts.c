/* test_parts.c - the torch.compile parts of a cache image (triton/parts.h) with
 * the real fixtures: an Inductor cache made on an H100 (torch 2.11.0+cu130,
 * Triton 3.6.0; tests/fixtures/inductor-cache/) and upstream MCV's vLLM example
 * (ROCm gfx90a; tests/fixtures/vllm-cache/). */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <tkm/archive.h>
#include <tkm/buf.h>
#include <tkm/fs.h>
#include <tkm/oci/image.h>
#include <tkm/oci/layout.h>
#include <tkm/oci/manifest.h>
#include <tkm/triton/build.h>
#include <tkm/triton/extract.h>
#include <tkm/triton/image.h>
#include <tkm/triton/parts.h>

#include "sup_archive.h"
#include "test.h"

/* Unpacks fixtures/<tarball> under the tmpdir; returns tmpdir/<top>. */
static const char *untar(const char *tarball, const char *top)
{
    static char out[4][1024];
    static int k;
    char cmd[3000];
    const char *t = tkm_test_tmpdir();
    snprintf(cmd, sizeof cmd, "tar -xzf '%s/%s' -C '%s'", tkm_test_fixtures(), tarball, t);
    ASSERT_EQ(system(cmd), 0);
    k = (k + 1) % 4;
    snprintf(out[k], sizeof out[k], "%s/%s", t, top);
    struct stat st;
    ASSERT_OK(stat(out[k], &st));
    return out[k];
}

#define INDUCTOR_FX "inductor-cache/torch-2.11.0-cu130-sm90-block.tar.gz"
#define VLLM_FX     "vllm-cache/mcv-vllm-example-rocm.tar.gz"
#define TRITON_FX   "triton-cache/triton-3.6.0-cuda-sm90.tar.gz"

TEST(inductor_scan_reads_the_facts_from_the_cache)
{
    struct tkm_inductor_info in;
    struct tkm_err e = {0};
    ASSERT_OK(tkm_inductor_scan(&in, untar(INDUCTOR_FX, "inductor-cache"), &e));
    ASSERT_UEQ(in.fxgraph, 2);
    ASSERT_UEQ(in.aotautograd, 1);
    ASSERT_UEQ(in.code_files, 20);
    ASSERT_UEQ(in.triton_kernels, 33);
    ASSERT(in.best_configs >= 1);
    ASSERT(in.size_bytes > 1000000);
    ASSERT_STREQ(in.facts.torch_version, "2.11.0+cu130");
    ASSERT_STREQ(in.facts.cuda_version, "13.0");
    ASSERT_STREQ(in.facts.triton_version, "3.6.0");
    ASSERT_STREQ(in.facts.backend, "cuda");
    ASSERT_STREQ(in.facts.arch, "90");
    ASSERT_EQ(in.facts.warp_size, 32);
    ASSERT_STREQ(in.facts.torch_from, "cache");
    ASSERT_STREQ(in.facts.cuda_from, "cache");
    ASSERT_STREQ(in.facts.triton_from, "cache");
    ASSERT_STREQ(in.facts.arch_from, "cache");
}

TEST(inductor_flags_fill_gaps_and_never_contradict)
{
    struct tkm_inductor_info in;
    struct tkm_err e = {0};
    ASSERT_OK(tkm_inductor_scan(&in, untar(INDUCTOR_FX, "inductor-cache"), &e));
    /* the cache says 2.11.0+cu130: a flag saying otherwise is refused */
    e = (struct tkm_err){0};
    ASSERT_EQ(tkm_inductor_facts_apply_flags(&in.facts, "2.10.0", NULL, NULL, NULL, &e), -EINVAL);
    ASSERT_STRCONTAINS(e.msg, "--torch-version 2.10.0 contradicts");
    ASSERT_STRCONTAINS(e.msg, "2.11.0+cu130");
    ASSERT_OK(tkm_inductor_facts_apply_flags(&in.facts, "2.11.0+cu130", "13.0", "3.6.0", "90", &e));
    ASSERT_STREQ(in.facts.torch_from, "cache");
    /* a cache that records nothing: the flags fill it, marked as flags */
    struct tkm_inductor_facts f;
    memset(&f, 0, sizeof f);
    ASSERT_OK(tkm_inductor_facts_apply_flags(&f, "2.9.1", "12.8", "3.5.0", "gfx942", &e));
    ASSERT_STREQ(f.backend, "hip");
    ASSERT_EQ(f.warp_size, 64);
    ASSERT_STREQ(f.arch, "gfx942");
    ASSERT_STREQ(f.arch_from, "flag");
    ASSERT_STREQ(f.torch_from, "flag");
}

TEST(inductor_scan_refuses_what_is_not_a_cache)
{
    struct tkm_inductor_info in;
    struct tkm_err e = {0};
    char d[1100], l[1200];
    snprintf(d, sizeof d, "%s/empty", tkm_test_tmpdir());
    ASSERT_OK(mkdir(d, 0755));
    e = (struct tkm_err){0};
    ASSERT_EQ(tkm_inductor_scan(&in, d, &e), -ENOENT);
    ASSERT_STRCONTAINS(e.msg, "TORCHINDUCTOR_CACHE_DIR");
    /* a Triton cache is not an Inductor cache */
    e = (struct tkm_err){0};
    ASSERT_EQ(tkm_inductor_scan(&in, untar(TRITON_FX, "tcache"), &e), -ENOENT);
    /* a symlink inside is refused, naming it */
    const char *root = untar(INDUCTOR_FX, "inductor-cache");
    snprintf(l, sizeof l, "%s/evil", root);
    ASSERT_OK(symlink("/etc/passwd", l));
    e = (struct tkm_err){0};
    ASSERT_EQ(tkm_inductor_scan(&in, root, &e), -EINVAL);
    ASSERT_STRCONTAINS(e.msg, "evil is a symbolic link");
}

TEST(inductor_summary_label_round_trips)
{
    struct tkm_inductor_info in, back;
    struct tkm_err e = {0};
    char *label = NULL;
    ASSERT_OK(tkm_inductor_scan(&in, untar(INDUCTOR_FX, "inductor-cache"), &e));
    ASSERT_OK(tkm_inductor_summary_label(&in, &label, &e));
    ASSERT_STRCONTAINS(label,
                       "\"targets\":[{\"arch\":\"90\",\"backend\":\"cuda\",\"warp_size\":32}]");
    ASSERT_OK(tkm_inductor_summary_parse(&back, label, &e));
    ASSERT_MEMEQ(&back.facts, &in.facts, sizeof in.facts);
    ASSERT_UEQ(back.fxgraph, 2);
    ASSERT_UEQ(back.triton_kernels, 33);
    free(label);
    e = (struct tkm_err){0};
    ASSERT_EQ(tkm_inductor_summary_parse(&back, "[1]", &e), -EINVAL);
    e = (struct tkm_err){0};
    ASSERT_EQ(tkm_inductor_summary_parse(&back, "{\"torch_version\":7}", &e), -EINVAL);
    ASSERT_STRCONTAINS(e.msg, "torch_version");
    e = (struct tkm_err){0};
    ASSERT_EQ(tkm_inductor_summary_parse(&back, "{\"a\":1,\"a\":2}", &e), -EINVAL);
}

static struct tkm_gpu h100(void)
{
    struct tkm_gpu g;
    memset(&g, 0, sizeof g);
    g.index = 0;
    g.usable = 1;
    snprintf(g.backend, sizeof g.backend, "cuda");
    snprintf(g.arch, sizeof g.arch, "90");
    g.warp_size = 32;
    snprintf(g.cuda_version, sizeof g.cuda_version, "13.0");
    snprintf(g.driver_version, sizeof g.driver_version, "580.159.04");
    return g;
}

TEST(inductor_compat_judges_each_gpu_with_a_reason)
{
    struct tkm_inductor_info in;
    struct tkm_err e = {0};
    char why[512];
    ASSERT_OK(tkm_inductor_scan(&in, untar(INDUCTOR_FX, "inductor-cache"), &e));
    struct tkm_gpu g = h100();
    e = (struct tkm_err){0};
    ASSERT_EQ(tkm_inductor_compat_check(&in.facts, &g, why, sizeof why), 1);
    ASSERT_STRCONTAINS(
        why, "compatible: Inductor part of torch 2.11.0+cu130 (CUDA 13.0, Triton 3.6.0) for sm90");
    snprintf(g.arch, sizeof g.arch, "80"); /* an A100 */
    e = (struct tkm_err){0};
    ASSERT_EQ(tkm_inductor_compat_check(&in.facts, &g, why, sizeof why), 0);
    ASSERT_STRCONTAINS(why, "arch mismatch: Inductor part built for sm90, GPU 0 is sm80");
    g = h100();
    snprintf(g.cuda_version, sizeof g.cuda_version, "12.8"); /* a 570 driver */
    e = (struct tkm_err){0};
    ASSERT_EQ(tkm_inductor_compat_check(&in.facts, &g, why, sizeof why), 0);
    ASSERT_STRCONTAINS(why, "built for CUDA 13.0");
    g = h100();
    g.cuda_version[0] = '\0';
    e = (struct tkm_err){0};
    ASSERT_EQ(tkm_inductor_compat_check(&in.facts, &g, why, sizeof why), 0);
    ASSERT_STRCONTAINS(why, "CUDA version is unknown");
    g = h100();
    snprintf(g.backend, sizeof g.backend, "hip");
    e = (struct tkm_err){0};
    ASSERT_EQ(tkm_inductor_compat_check(&in.facts, &g, why, sizeof why), 0);
    ASSERT_STRCONTAINS(why, "backend mismatch");
    g = h100();
    g.usable = 0;
    snprintf(g.reason, sizeof g.reason, "driver not loaded");
    e = (struct tkm_err){0};
    ASSERT_EQ(tkm_inductor_compat_check(&in.facts, &g, why, sizeof why), 0);
    ASSERT_STRCONTAINS(why, "driver not loaded");
    /* unknown facts fail closed */
    struct tkm_inductor_facts none;
    memset(&none, 0, sizeof none);
    g = h100();
    e = (struct tkm_err){0};
    ASSERT_EQ(tkm_inductor_compat_check(&none, &g, why, sizeof why), 0);
    ASSERT_STRCONTAINS(why, "no GPU arch");
}

TEST(vllm_scan_of_mcvs_example)
{
    struct tkm_vllm_info v;
    struct tkm_err e = {0};
    ASSERT_OK(tkm_vllm_scan(&v, untar(VLLM_FX, "vllm-cache"), &e));
    ASSERT_UEQ(v.entries, 1);
    ASSERT_STREQ(v.hashes, "d4ec7c2a7d");
    ASSERT_UEQ(v.files, 82);
    ASSERT_UEQ(v.size_bytes, 2255554);
    ASSERT(v.triton_kernels >= 1);
    ASSERT_STREQ(v.format, "triton");
    ASSERT_STREQ(v.summary,
                 "{\"targets\":[{\"backend\":\"hip\",\"arch\":\"gfx90a\",\"warp_size\":64}]}");
    tkm_vllm_info_release(&v);
    e = (struct tkm_err){0};
    ASSERT_EQ(tkm_vllm_scan(&v, untar(TRITON_FX, "tcache"), &e), -ENOENT);
    ASSERT_STRCONTAINS(e.msg, "VLLM_CACHE_ROOT");
    tkm_vllm_info_release(&v);
}

static char *file_text(const char *path)
{
    struct tkm_buf b = TKM_BUF_INIT(1u << 20);
    struct tkm_err e = {0};
    ASSERT_OK(tkm_read_file(path, 1u << 20, &b, "test file", &e));
    char *s = strdup(b.data);
    tkm_buf_release(&b);
    return s;
}

TEST_TIMEOUT(build_inspect_extract_all_parts, 120)
{
    const char *tc = untar(TRITON_FX, "tcache"), *ic = untar(INDUCTOR_FX, "inductor-cache");
    const char *vc = untar(VLLM_FX, "vllm-cache");
    char layout[1100], dest[1100], p[1400];
    struct tkm_triton_build_opts o = {.inductor_dir = ic,
                                      .vllm_dir = vc,
                                      .vllm_root_env = "VLLM_CACHE_ROOT=/home/vllm/.cache/vllm"};
    struct tkm_triton_build_result r;
    struct tkm_err e = {0};
    snprintf(layout, sizeof layout, "%s/img", tkm_test_tmpdir());
    ASSERT_OK(tkm_triton_build_cache_image(tc, layout, "v1", &o, &r, &e));
    ASSERT_UEQ(r.inductor_entries, 3);
    ASSERT_UEQ(r.vllm_entries, 1);
    ASSERT_UEQ(r.vllm_bytes, 2255554);
    /* the config's labels: MCV's vLLM ones exactly, and the Inductor part's */
    struct tkm_oci_pull_result img;
    ASSERT_OK(tkm_oci_layout_load(layout, "v1", &img, &e));
    const struct tkm_oci_config *c = &img.config;
    e = (struct tkm_err){0};
    ASSERT_EQ(tkm_parts_from_config(c), TKM_PART_TRITON | TKM_PART_INDUCTOR | TKM_PART_VLLM);
    ASSERT_STREQ(tkm_oci_config_label(c, "cache.vllm.image/entry-count"), "1");
    ASSERT_STREQ(tkm_oci_config_label(c, "cache.vllm.image/cache-size-bytes"), "2255554");
    ASSERT_STREQ(tkm_oci_config_label(c, "cache.vllm.image/format"), "triton");
    ASSERT_STREQ(tkm_oci_config_label(c, "cache.vllm.image/summary"),
                 "{\"targets\":[{\"backend\":\"hip\",\"arch\":\"gfx90a\",\"warp_size\":64}]}");
    ASSERT_STREQ(tkm_oci_config_label(c, "io.kserve.km/cache-hash"), "d4ec7c2a7d");
    ASSERT_STREQ(tkm_oci_config_label(c, "io.kserve.km/cache-mount-subpath"),
                 "torch_compile_cache");
    ASSERT_STREQ(tkm_oci_config_label(c, "io.kserve.km/cache-root-env"),
                 "VLLM_CACHE_ROOT=/home/vllm/.cache/vllm");
    ASSERT_STREQ(tkm_oci_config_label(c, "io.kserve.km/cache-type"), "torch-compile");
    ASSERT_STREQ(tkm_oci_config_label(c, "io.kserve.km/framework"), "vllm");
    ASSERT_STREQ(tkm_oci_config_label(c, "cache.inductor.image/entry-count"), "3");
    ASSERT_STRCONTAINS(tkm_oci_config_label(c, "cache.inductor.image/summary"),
                       "\"torch_version\":\"2.11.0+cu130\"");
    ASSERT_STREQ(tkm_oci_config_label(c, "cache.triton.image/entry-count"), "4");
    tkm_oci_pull_result_release(&img);
    /* extracted for pods that see it at /mnt/c: triton/ inductor/ vllm/, every
     * part's group files pointing there, manifests left out */
    struct tkm_triton_extract_result x;
    snprintf(dest, sizeof dest, "%s/store", tkm_test_tmpdir());
    ASSERT_OK(tkm_triton_extract_layout_with(layout, "v1", dest, "/mnt/c", NULL, &x, &e));
    ASSERT_EQ(x.parts, TKM_PART_TRITON | TKM_PART_INDUCTOR | TKM_PART_VLLM);
    ASSERT_UEQ(x.file_bytes, x.label_bytes);
    ASSERT_UEQ(x.groups, 4 + 33 + 6);
    ASSERT_UEQ(x.missing_children, 0);
    e = (struct tkm_err){0};
    ASSERT_EQ(tkm_parts_is_root(dest), 1);
    struct stat st;
    snprintf(p, sizeof p, "%s/io.triton.manifest", dest);
    ASSERT_EQ(stat(p, &st), -1);
    snprintf(p, sizeof p, "%s/inductor/aotautograd", dest);
    ASSERT_OK(stat(p, &st));
    snprintf(
        p, sizeof p,
        "%s/vllm/torch_compile_cache/d4ec7c2a7d/rank_0_0/triton_cache/"
        "CLGERUUZRLHT73J2VAUCCDR5ZG34VIZXGHFLZH6HGZRILMOKHGQQ/__grp__triton_poi_fused_cat_1.json",
        dest);
    char *g = file_text(p);
    ASSERT_STRCONTAINS(g, "\"/mnt/c/vllm/torch_compile_cache/d4ec7c2a7d/rank_0_0/triton_cache/"
                          "CLGERUUZRLHT73J2VAUCCDR5ZG34VIZXGHFLZH6HGZRILMOKHGQQ/");
    free(g);
    /* the CSI's per-pod layer: the same rewrite into another tree, the store untouched */
    char out[1100];
    struct tkm_triton_rewrite_stats rs = {0};
    snprintf(out, sizeof out, "%s/pod-groups", tkm_test_tmpdir());
    ASSERT_OK(tkm_parts_groups_rewrite_to(dest, out, "/pod/cache/", &rs, &e));
    ASSERT_UEQ(rs.groups, 43);
    ASSERT_UEQ(rs.missing_children, 0);
    snprintf(p, sizeof p, "%s/inductor/triton/0", out);
    ASSERT_OK(stat(p, &st));
    snprintf(p, sizeof p, "%s/inductor/aotautograd", out);
    ASSERT_EQ(stat(p, &st), -1); /* only group files are mirrored */
}

TEST(build_refuses_bad_parts_and_writes_nothing)
{
    const char *tc = untar(TRITON_FX, "tcache");
    char layout[1100];
    struct stat st;
    struct tkm_err e = {0};
    struct tkm_triton_build_opts o = {.inductor_dir = tc}; /* a Triton cache, not Inductor's */
    snprintf(layout, sizeof layout, "%s/img", tkm_test_tmpdir());
    e = (struct tkm_err){0};
    ASSERT_EQ(tkm_triton_build_cache_image(tc, layout, "v1", &o, NULL, &e), -ENOENT);
    ASSERT_STRCONTAINS(e.msg, "TORCHINDUCTOR_CACHE_DIR");
    ASSERT_EQ(stat(layout, &st), -1);
    struct tkm_triton_build_opts o2 = {.inductor_dir = untar(INDUCTOR_FX, "inductor-cache"),
                                       .torch_version = "2.4.0"};
    e = (struct tkm_err){0};
    ASSERT_EQ(tkm_triton_build_cache_image(tc, layout, "v1", &o2, NULL, &e), -EINVAL);
    ASSERT_STRCONTAINS(e.msg, "contradicts");
    ASSERT_EQ(stat(layout, &st), -1);
    struct tkm_triton_build_opts o3 = {.vllm_dir = tc};
    e = (struct tkm_err){0};
    ASSERT_EQ(tkm_triton_build_cache_image(tc, layout, "v1", &o3, NULL, &e), -ENOENT);
    ASSERT_STRCONTAINS(e.msg, "torch_compile_cache");
    ASSERT_EQ(stat(layout, &st), -1);
}

TEST_TIMEOUT(build_without_a_triton_part, 120)
{
    const char *ic = untar(INDUCTOR_FX, "inductor-cache"), *vc = untar(VLLM_FX, "vllm-cache");
    char layout[1100], empty[1100], dest[1100], p[1400];
    struct tkm_triton_build_result r;
    struct tkm_err e = {0};
    struct stat st;
    const char *kv[] = {"io.tkm.capture/gpu-type", "nvidia-h100", NULL};
    struct tkm_triton_build_opts o = {.inductor_dir = ic, .labels = kv, .variant = 1};
    snprintf(layout, sizeof layout, "%s/img", tkm_test_tmpdir());
    snprintf(empty, sizeof empty, "%s/empty", tkm_test_tmpdir());
    ASSERT_OK(mkdir(empty, 0755));
    /* Inductor's part alone, the Triton cache dir absent: its targets name the variant */
    ASSERT_OK(tkm_triton_build_cache_image(NULL, layout, "i", &o, &r, &e));
    ASSERT_UEQ(r.entries, 0);
    ASSERT_UEQ(r.inductor_entries, 3);
    ASSERT_STREQ(r.variant.backend, "cuda");
    ASSERT_STREQ(r.variant.arch, "90");
    ASSERT_STREQ(r.variant.parts, "inductor");
    struct tkm_triton_image im;
    o.variant = 0;
    ASSERT_OK(tkm_triton_build_cache_image(empty, layout, "i2", &o, &r, &e)); /* no kernel */
    ASSERT_OK(tkm_triton_image_load_layout(&im, layout, "i2", &e));
    ASSERT_EQ(tkm_parts_from_config(&im.config), TKM_PART_INDUCTOR);
    ASSERT_NULL(tkm_oci_config_label(&im.config, "cache.triton.image/summary"));
    ASSERT_STREQ(tkm_oci_config_label(&im.config, "io.tkm.capture/gpu-type"), "nvidia-h100");
    ASSERT_EQ(im.summary.n_targets, 1); /* from the Inductor summary */
    ASSERT_STREQ(im.summary.targets[0].target.arch, "90");
    ASSERT_STREQ(im.entry_count, "3");
    tkm_triton_image_release(&im);
    /* extracted: inductor/ only */
    struct tkm_triton_extract_result x;
    snprintf(dest, sizeof dest, "%s/store", tkm_test_tmpdir());
    ASSERT_OK(tkm_triton_extract_layout_with(layout, "i2", dest, "/mnt/c", NULL, &x, &e));
    ASSERT_EQ(x.parts, TKM_PART_INDUCTOR);
    snprintf(p, sizeof p, "%s/triton", dest);
    ASSERT_EQ(stat(p, &st), -1);
    /* vLLM's part alone: MCV's summary names its targets */
    struct tkm_triton_build_opts ov = {.vllm_dir = vc};
    ASSERT_OK(tkm_triton_build_cache_image(NULL, layout, "v", &ov, &r, &e));
    ASSERT_OK(tkm_triton_image_load_layout(&im, layout, "v", &e));
    ASSERT_EQ(tkm_parts_from_config(&im.config), TKM_PART_VLLM);
    ASSERT_STREQ(im.summary.targets[0].target.arch, "gfx90a");
    tkm_triton_image_release(&im);
    /* refusals: nothing at all; a label the build writes itself */
    e = (struct tkm_err){0};
    ASSERT_EQ(tkm_triton_build_cache_image(NULL, layout, "n", NULL, &r, &e), -EINVAL);
    ASSERT_STRCONTAINS(e.msg, "no cache to pack");
    e = (struct tkm_err){0};
    ASSERT_EQ(tkm_triton_build_cache_image(empty, layout, "n", NULL, &r, &e), -ENOENT);
    ASSERT_STRCONTAINS(e.msg, "holds no Triton kernel");
    const char *bad[] = {"cache.triton.image/entry-count", "9", NULL};
    struct tkm_triton_build_opts ob = {.inductor_dir = ic, .labels = bad};
    e = (struct tkm_err){0};
    ASSERT_EQ(tkm_triton_build_cache_image(NULL, layout, "n", &ob, &r, &e), -EINVAL);
    ASSERT_STRCONTAINS(e.msg, "written by the build itself");
}

TEST(archive_rename_lays_prefixes_out)
{
    const char *tc = untar(TRITON_FX, "tcache");
    char layout[1100], blob[1400], dest[1100], p[1300];
    struct tkm_triton_build_result r;
    struct tkm_err e = {0};
    snprintf(layout, sizeof layout, "%s/img", tkm_test_tmpdir());
    ASSERT_OK(tkm_triton_build_cache_image(tc, layout, "v1", NULL, &r, &e));
    snprintf(blob, sizeof blob, "%s/blobs/sha256/%s", layout, r.layer.digest + 7);
    snprintf(dest, sizeof dest, "%s/x", tkm_test_tmpdir());
    struct tkm_archive_opts o;
    tkm_archive_opts_init(&o);
    o.rename = tkm_parts_rename_pairs();
    o.strip = "io.triton.cache/"; /* rename wins */
    struct tkm_archive_result ar;
    ASSERT_OK(sup_extract_path(blob, dest, &o, &ar, &e));
    struct stat st;
    snprintf(p, sizeof p, "%s/triton", dest);
    ASSERT_OK(stat(p, &st));
    ASSERT(S_ISDIR(st.st_mode));
    snprintf(p, sizeof p, "%s/io.triton.manifest", dest);
    ASSERT_EQ(stat(p, &st), -1); /* under no pair: skipped */
    ASSERT(ar.skipped >= 2);
    ASSERT_UEQ(ar.files, r.files);
}

/* Puts text as a blob of media type mt into the layout; fills d. */
static void put(const char *layout, const void *p, size_t n, const char *mt, struct tkm_oci_desc *d)
{
    struct tkm_err e = {0};
    memset(d, 0, sizeof *d);
    snprintf(d->media_type, sizeof d->media_type, "%s", mt);
    d->size = n;
    ASSERT_OK(tkm_oci_layout_put_blob(layout, p, n, d->digest, &e));
}

/* An image as upstream MCV makes it from a vLLM cache: one plain tar layer with
 * io.vllm.cache/ and io.vllm.manifest/, only the cache.vllm.image labels. */
TEST_TIMEOUT(reads_an_mcv_vllm_only_image, 60)
{
    const char *vc = untar(VLLM_FX, "vllm-cache");
    char d[1100], cmd[3000], layout[1100], dest[1100], p[1400];
    struct tkm_err e = {0};
    struct tkm_buf tar = TKM_BUF_INIT(16u << 20), cfg = TKM_BUF_INIT(1u << 20);
    struct tkm_oci_desc ld, cd, md;
    snprintf(d, sizeof d, "%s/ctx", tkm_test_tmpdir());
    snprintf(
        cmd, sizeof cmd,
        "mkdir -p '%s/io.vllm.manifest' && cp -r '%s' '%s/io.vllm.cache' && "
        "echo '{\"vllm\":[{\"vllmHash\":\"d4ec7c2a7d\"}]}' >'%s/io.vllm.manifest/manifest.json' && "
        "tar -C '%s' -cf '%s/layer.tar' io.vllm.cache io.vllm.manifest",
        d, vc, d, d, d, tkm_test_tmpdir());
    ASSERT_EQ(system(cmd), 0);
    snprintf(p, sizeof p, "%s/layer.tar", tkm_test_tmpdir());
    ASSERT_OK(tkm_read_file(p, 16u << 20, &tar, "layer", &e));
    snprintf(layout, sizeof layout, "%s/mcv", tkm_test_tmpdir());
    ASSERT_OK(tkm_oci_layout_init(layout, &e));
    put(layout, tar.data, tar.len, TKM_OCI_MT_LAYER_TAR, &ld);
    ASSERT_OK(tkm_buf_printf(
        &cfg,
        "{\"architecture\":\"amd64\",\"os\":\"linux\",\"config\":{\"Labels\":{"
        "\"cache.vllm.image/entry-count\":\"1\",\"cache.vllm.image/cache-size-bytes\":\"2255554\","
        "\"cache.vllm.image/format\":\"triton\",\"cache.vllm.image/summary\":"
        "\"{\\\"targets\\\":[{\\\"backend\\\":\\\"hip\\\",\\\"arch\\\":\\\"gfx90a\\\",\\\"warp_"
        "size\\\":64}]}\"}},\"rootfs\":{\"type\":\"layers\",\"diff_ids\":[\"%s\"]}}",
        ld.digest));
    put(layout, cfg.data, cfg.len, TKM_OCI_MT_CONFIG, &cd);
    tkm_buf_reset(&cfg);
    ASSERT_OK(tkm_buf_printf(&cfg,
                             "{\"schemaVersion\":2,\"mediaType\":\"%s\",\"config\":{\"mediaType\":"
                             "\"%s\",\"digest\":\"%s\",\"size\":%zu},\"layers\":[{\"mediaType\":"
                             "\"%s\",\"digest\":\"%s\",\"size\":%zu}]}",
                             TKM_OCI_MT_MANIFEST, TKM_OCI_MT_CONFIG, cd.digest, (size_t)cd.size,
                             TKM_OCI_MT_LAYER_TAR, ld.digest, (size_t)ld.size));
    put(layout, cfg.data, cfg.len, TKM_OCI_MT_MANIFEST, &md);
    ASSERT_OK(tkm_oci_layout_add_manifest(layout, &md, "mcv", &e));
    /* inspected through its vLLM labels */
    struct tkm_triton_image im;
    ASSERT_OK(tkm_triton_image_load_layout(&im, layout, "mcv", &e));
    ASSERT_EQ(tkm_parts_from_config(&im.config), TKM_PART_VLLM);
    ASSERT_UEQ(im.summary.n_targets, 1);
    ASSERT_STREQ(im.summary.targets[0].target.arch, "gfx90a");
    ASSERT_STREQ(im.entry_count, "1");
    tkm_triton_image_release(&im);
    /* extracted as <dest>/vllm, its Triton groups pointing where pods see it */
    struct tkm_triton_extract_result x;
    snprintf(dest, sizeof dest, "%s/store", tkm_test_tmpdir());
    ASSERT_OK(tkm_triton_extract_layout_with(layout, "mcv", dest, "/home/vllm", NULL, &x, &e));
    ASSERT_EQ(x.parts, TKM_PART_VLLM);
    ASSERT_UEQ(x.groups, 6);
    ASSERT_UEQ(x.file_bytes, 2255554);
    snprintf(
        p, sizeof p,
        "%s/vllm/torch_compile_cache/d4ec7c2a7d/rank_0_0/triton_cache/"
        "CLGERUUZRLHT73J2VAUCCDR5ZG34VIZXGHFLZH6HGZRILMOKHGQQ/__grp__triton_poi_fused_cat_1.json",
        dest);
    char *g = file_text(p);
    ASSERT_STRCONTAINS(g, "\"/home/vllm/vllm/torch_compile_cache/d4ec7c2a7d/");
    free(g);
    tkm_buf_release(&tar);
    tkm_buf_release(&cfg);
}
