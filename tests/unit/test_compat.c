/*
 * Unit tests for lib/gpu/compat: the compatibility matrix of the real sm90
 * Triton 3.6.0 caches (PTX ISA 8.7 and 9.0) against H200, A100, MI300X and
 * driver-less GPUs, with the reasons a person reads.
 */
#include <sys/wait.h>
#include <unistd.h>

#include <tkm/gpu/compat.h>

#include "test.h"

static void scan_fixture(struct tkm_triton_cache *c, const char *tarball, const char *top)
{
    char cmd[2048], root[1024];
    struct tkm_err e = {0};
    snprintf(cmd, sizeof cmd, "tar xzf '%s/triton-cache/%s' -C '%s'", tkm_test_fixtures(), tarball,
             tkm_test_tmpdir());
    ASSERT_EQ(system(cmd), 0);
    snprintf(root, sizeof root, "%s/%s", tkm_test_tmpdir(), top);
    ASSERT_OK(tkm_triton_cache_scan(c, root, &e));
}

static struct tkm_gpu nvidia(const char *name, int major, int minor, int cuda)
{
    struct tkm_gpu g;
    memset(&g, 0, sizeof g);
    g.index = 0;
    snprintf(g.vendor, sizeof g.vendor, "nvidia");
    snprintf(g.backend, sizeof g.backend, "cuda");
    snprintf(g.name, sizeof g.name, "%s", name);
    tkm_gpu_type_from_name(name, g.gpu_type, sizeof g.gpu_type);
    g.cc_major = major;
    g.cc_minor = minor;
    snprintf(g.arch, sizeof g.arch, "%d", major * 10 + minor);
    g.warp_size = 32;
    g.cuda_driver_version = cuda;
    g.mig_mode = -1;
    g.usable = 1;
    return g;
}

static struct tkm_gpu mi300x(void)
{
    struct tkm_gpu g;
    memset(&g, 0, sizeof g);
    g.index = 1;
    snprintf(g.vendor, sizeof g.vendor, "amd");
    snprintf(g.backend, sizeof g.backend, "hip");
    snprintf(g.name, sizeof g.name, "AMD Instinct MI300X");
    snprintf(g.arch, sizeof g.arch, "gfx942");
    g.warp_size = 64;
    g.cc_major = g.cc_minor = -1;
    g.usable = 1;
    return g;
}

TEST(sm90_cache_vs_h200_is_compatible)
{
    struct tkm_triton_cache c;
    struct tkm_compat_verdict v;
    scan_fixture(&c, "triton-3.6.0-cuda-sm90.tar.gz", "tcache");
    struct tkm_gpu g = nvidia("NVIDIA H200", 9, 0, 13000);
    tkm_compat_check(&c.summary, &g, &v);
    ASSERT_EQ(v.compatible, 1);
    ASSERT_EQ(v.target_index, 0);
    ASSERT_STREQ(v.reason, "compatible: cache target cuda sm90 warp 32 matches GPU 0 (NVIDIA "
                           "H200); PTX ISA 8.7 needs CUDA 12.8+, driver supports 13.0");
    json_t *j = tkm_compat_verdict_json(&c.summary, &g, &v);
    ASSERT_NOT_NULL(j);
    ASSERT(json_is_true(json_object_get(j, "compatible")));
    ASSERT_STREQ(json_string_value(json_object_get(json_object_get(j, "matchedTarget"), "arch")),
                 "90");
    ASSERT_STREQ(json_string_value(json_object_get(json_object_get(j, "gpu"), "gpuType")),
                 "nvidia-h200");
    json_decref(j);
    tkm_triton_cache_release(&c);
}

TEST(sm90_cache_vs_a100_is_arch_mismatch)
{
    struct tkm_triton_cache c;
    struct tkm_compat_verdict v;
    scan_fixture(&c, "triton-3.6.0-cuda-sm90.tar.gz", "tcache");
    struct tkm_gpu g = nvidia("NVIDIA A100-SXM4-80GB", 8, 0, 13000);
    g.index = 1;
    tkm_compat_check(&c.summary, &g, &v);
    ASSERT_EQ(v.compatible, 0);
    ASSERT_EQ(v.target_index, -1);
    ASSERT_STREQ(v.reason,
                 "arch mismatch: cache built for sm90, GPU 1 (NVIDIA A100-SXM4-80GB) is sm80");
    /* a newer GPU is no better: Triton keys on the exact compute capability */
    g = nvidia("NVIDIA B200", 10, 0, 13000);
    tkm_compat_check(&c.summary, &g, &v);
    ASSERT_EQ(v.compatible, 0);
    ASSERT_STRCONTAINS(v.reason, "is sm100");
    tkm_triton_cache_release(&c);
}

TEST(sm90_cache_vs_mi300x_is_backend_mismatch)
{
    struct tkm_triton_cache c;
    struct tkm_compat_verdict v;
    scan_fixture(&c, "triton-3.6.0-cuda-sm90.tar.gz", "tcache");
    struct tkm_gpu g = mi300x();
    tkm_compat_check(&c.summary, &g, &v);
    ASSERT_EQ(v.compatible, 0);
    ASSERT_STREQ(v.reason,
                 "backend mismatch: cache built for cuda, GPU 1 (AMD Instinct MI300X) is hip");
    tkm_triton_cache_release(&c);
}

TEST(ptx_87_vs_cuda_124_driver)
{
    struct tkm_triton_cache c;
    struct tkm_compat_verdict v;
    scan_fixture(&c, "triton-3.6.0-cuda-sm90.tar.gz", "tcache");
    struct tkm_gpu g = nvidia("NVIDIA H100 80GB HBM3", 9, 0, 12040);
    tkm_compat_check(&c.summary, &g, &v);
    ASSERT_EQ(v.compatible, 0);
    ASSERT_STRCONTAINS(v.reason, "PTX ISA 8.7 needs CUDA 12.8+, driver supports 12.4");
    /* 12.8 exactly is enough */
    g.cuda_driver_version = 12080;
    tkm_compat_check(&c.summary, &g, &v);
    ASSERT_EQ(v.compatible, 1);
    /* unknown driver CUDA version: fail closed */
    g.cuda_driver_version = 0;
    tkm_compat_check(&c.summary, &g, &v);
    ASSERT_EQ(v.compatible, 0);
    ASSERT_STRCONTAINS(v.reason, "CUDA version is unknown");
    tkm_triton_cache_release(&c);
}

TEST(inductor_ptx_90_needs_cuda_13)
{
    struct tkm_triton_cache c;
    struct tkm_compat_verdict v;
    scan_fixture(&c, "triton-3.6.0-cuda-sm90-inductor-block.tar.gz", "tcache-inductor");
    struct tkm_gpu g = nvidia("NVIDIA H200", 9, 0, 12090);
    tkm_compat_check(&c.summary, &g, &v);
    ASSERT_EQ(v.compatible, 0);
    ASSERT_STRCONTAINS(v.reason, "PTX ISA 9.0 needs CUDA 13.0+, driver supports 12.9");
    g.cuda_driver_version = 13000;
    tkm_compat_check(&c.summary, &g, &v);
    ASSERT_EQ(v.compatible, 1);
    tkm_triton_cache_release(&c);
}

TEST(binary_only_cache_needs_no_ptx_check)
{
    struct tkm_triton_cache c;
    struct tkm_compat_verdict v;
    scan_fixture(&c, "triton-3.6.0-cuda-sm90-binary-only.tar.gz", "tc2");
    struct tkm_gpu g = nvidia("NVIDIA H200", 9, 0, 12040);
    tkm_compat_check(&c.summary, &g, &v);
    ASSERT_EQ(v.compatible, 1);
    ASSERT_STREQ(v.reason,
                 "compatible: cache target cuda sm90 warp 32 matches GPU 0 (NVIDIA H200)");
    tkm_triton_cache_release(&c);
}

TEST(hip_targets_warp_and_unusable_gpus)
{
    struct tkm_triton_summary s;
    struct tkm_compat_verdict v;
    struct tkm_err e = {0};
    ASSERT_OK(tkm_triton_summary_parse(
        &s,
        "{\"targets\":[{\"backend\":\"hip\",\"arch\":\"gfx942\",\"warp_size\":64},"
        "{\"backend\":\"hip\",\"arch\":\"gfx90a\",\"warp_size\":64}]}",
        &e));
    struct tkm_gpu g = mi300x();
    tkm_compat_check(&s, &g, &v);
    ASSERT_EQ(v.compatible, 1);
    ASSERT_EQ(v.target_index, 1); /* sorted: gfx90a, gfx942 */
    snprintf(g.arch, sizeof g.arch, "gfx950");
    tkm_compat_check(&s, &g, &v);
    ASSERT_STREQ(v.reason, "arch mismatch: cache built for gfx90a, gfx942, GPU 1 (AMD Instinct "
                           "MI300X) is gfx950");
    snprintf(g.arch, sizeof g.arch, "gfx942");
    g.warp_size = 32;
    tkm_compat_check(&s, &g, &v);
    ASSERT_EQ(v.compatible, 0);
    ASSERT_STRCONTAINS(v.reason, "warp size mismatch: cache built for warp 64");
    g.usable = 0;
    g.arch[0] = '\0';
    snprintf(g.reason, sizeof g.reason, "driver not loaded: no kernel driver is bound");
    tkm_compat_check(&s, &g, &v);
    ASSERT_EQ(v.compatible, 0);
    ASSERT_STRCONTAINS(v.reason, "cannot be used: driver not loaded");
    tkm_triton_summary_release(&s);
}

TEST(arch_specific_targets_and_ptx_table)
{
    struct tkm_triton_summary s;
    struct tkm_compat_verdict v;
    struct tkm_err e = {0};
    int maj, min;
    ASSERT_OK(tkm_triton_summary_parse(
        &s, "{\"targets\":[{\"backend\":\"cuda\",\"arch\":\"sm_90a\",\"warp_size\":32}]}", &e));
    struct tkm_gpu g = nvidia("NVIDIA H200", 9, 0, 13000);
    tkm_compat_check(&s, &g, &v);
    ASSERT_EQ(v.compatible, 1); /* "90a" is CC 9.0 */
    g = nvidia("NVIDIA RTX 5090", 12, 0, 13000);
    tkm_compat_check(&s, &g, &v);
    ASSERT_EQ(v.compatible, 0);
    tkm_triton_summary_release(&s);
    ASSERT_OK(tkm_compat_ptx_min_cuda((struct tkm_ptx_version){8, 6}, &maj, &min));
    ASSERT_EQ(maj * 10 + min, 127);
    ASSERT_OK(tkm_compat_ptx_min_cuda((struct tkm_ptx_version){7, 8}, &maj, &min));
    ASSERT_EQ(maj * 10 + min, 118);
    ASSERT_EQ(tkm_compat_ptx_min_cuda((struct tkm_ptx_version){9, 9}, &maj, &min), -ENOENT);
    ASSERT_OK(tkm_triton_summary_parse(&s,
                                       "{\"targets\":[{\"backend\":\"cuda\",\"arch\":\"90\","
                                       "\"warp_size\":32}],\"ptx_versions\":[\"9.9\"]}",
                                       &e));
    g = nvidia("NVIDIA H200", 9, 0, 13000);
    tkm_compat_check(&s, &g, &v);
    ASSERT_EQ(v.compatible, 0);
    ASSERT_STRCONTAINS(v.reason, "PTX ISA 9.9 is newer than tkm knows");
    tkm_triton_summary_release(&s);
}

/* <build>/cli/tkmctl, found from this test binary (<build>/tests/unit_compat). */
static void tkmctl_path(char *out, size_t size)
{
    char self[1024];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    ASSERT(n > 0);
    self[n] = '\0';
    *strrchr(self, '/') = '\0';
    *strrchr(self, '/') = '\0';
    snprintf(out, size, "%s/cli/tkmctl", self);
    ASSERT_OK(access(out, X_OK));
}

static int run_status(const char *cmd)
{
    int st = system(cmd);
    ASSERT(WIFEXITED(st));
    return WEXITSTATUS(st);
}

TEST_TIMEOUT(tkmctl_check_and_inspect_end_to_end, 60)
{
    char ctl[1024], cmd[8192], probe[1200];
    const char *t = tkm_test_tmpdir();
    tkmctl_path(ctl, sizeof ctl);
    /* the sm90 fixture, an sm80 copy (target.arch edited), the fake NVML (built by CMake)
     * reporting the H200 */
    snprintf(probe, sizeof probe, "%s/libnvidia-ml.so.1", TKM_FAKE_NVML_DIR);
    ASSERT_OK(access(probe, R_OK));
    snprintf(cmd, sizeof cmd,
             "set -e; cd '%s'; tar xzf '%s/triton-cache/triton-3.6.0-cuda-sm90.tar.gz'; "
             "cp -r tcache sm80; sed -i 's/\"arch\": 90,/\"arch\": 80,/' sm80/*/*.json; "
             "mkdir -p sys proc; "
             "printf 'driver=580.159.04\\ncuda=13000\\n[gpu]\\nname=NVIDIA H200\\ncc=9.0\\n"
             "busid=00000000:00:06.0\\npcidevid=0x233510de\\n' > nvml.conf",
             t, tkm_test_fixtures());
    ASSERT_EQ(run_status(cmd), 0);
    snprintf(probe, sizeof probe,
             "--sysfs-root sys --procfs-root proc --nvml-lib '%s/libnvidia-ml.so.1'",
             TKM_FAKE_NVML_DIR);
    snprintf(cmd, sizeof cmd,
             "cd '%s' && TKM_FAKE_NVML=nvml.conf '%s' check ./tcache -o json %s > sm90.json", t,
             ctl, probe);
    ASSERT_EQ(run_status(cmd), 0);
    snprintf(cmd, sizeof cmd, "cd '%s' && TKM_FAKE_NVML=nvml.conf '%s' check ./sm80 %s > sm80.txt",
             t, ctl, probe);
    ASSERT_EQ(run_status(cmd), 1);
    snprintf(cmd, sizeof cmd,
             "cd '%s' && grep -q 'arch mismatch: cache built for sm80, GPU 0 "
             "(NVIDIA H200) is sm90' sm80.txt",
             t);
    ASSERT_EQ(run_status(cmd), 0);
    snprintf(cmd, sizeof cmd, "cd '%s' && '%s' check --bogus 2>/dev/null", t, ctl);
    ASSERT_EQ(run_status(cmd), 2);
    snprintf(cmd, sizeof cmd, "cd '%s' && '%s' inspect ./tcache -o json > inspect.json", t, ctl);
    ASSERT_EQ(run_status(cmd), 0);
    /* the same cache as an image (tkmctl build): judged from its summary label */
    snprintf(cmd, sizeof cmd,
             "cd '%s' && '%s' build ./tcache --output lay --tag sm90 >/dev/null && "
             "TKM_FAKE_NVML=nvml.conf '%s' check --image-layout lay --tag sm90 -o json %s > "
             "img.json",
             t, ctl, ctl, probe);
    ASSERT_EQ(run_status(cmd), 0);
    snprintf(cmd, sizeof cmd,
             "cd '%s' && grep -q '\"source\": \"image\"' img.json && "
             "'%s' inspect --image-layout lay | grep -q 'cuda  arch 90'",
             t, ctl);
    ASSERT_EQ(run_status(cmd), 0);

    char p[1200];
    json_error_t je;
    snprintf(p, sizeof p, "%s/sm90.json", t);
    json_t *j = json_load_file(p, JSON_REJECT_DUPLICATES, &je);
    ASSERT_NOT_NULL(j);
    ASSERT(json_is_true(json_object_get(j, "compatible")));
    ASSERT_EQ(json_integer_value(json_object_get(json_object_get(j, "cache"), "entryCount")), 4);
    json_t *g = json_object_get(json_array_get(json_object_get(j, "results"), 0), "gpu");
    ASSERT_STREQ(json_string_value(json_object_get(g, "gpuType")), "nvidia-h200");
    json_decref(j);
    snprintf(p, sizeof p, "%s/inspect.json", t);
    j = json_load_file(p, JSON_REJECT_DUPLICATES, &je);
    ASSERT_NOT_NULL(j);
    ASSERT_EQ(json_integer_value(json_object_get(j, "cacheSizeBytes")), 758102);
    ASSERT_EQ(json_array_size(json_object_get(j, "kernels")), 4);
    ASSERT_STREQ(json_string_value(json_object_get(json_array_get(json_object_get(j, "kernels"), 0),
                                                   "ptxVersion")),
                 "8.7");
    json_decref(j);
}

TEST(edited_arch_with_foreign_binaries_is_refused)
{
    struct tkm_triton_cache c;
    struct tkm_compat_verdict v;
    char cmd[2048];
    /* the sm90 cache with target.arch rewritten to 80: the cubins are still sm_90 */
    snprintf(cmd, sizeof cmd,
             "cd '%s' && tar xzf '%s/triton-cache/triton-3.6.0-cuda-sm90.tar.gz' && "
             "sed -i 's/\"arch\": 90,/\"arch\": 80,/' tcache/*/*.json",
             tkm_test_tmpdir(), tkm_test_fixtures());
    ASSERT_EQ(system(cmd), 0);
    snprintf(cmd, sizeof cmd, "%s/tcache", tkm_test_tmpdir());
    struct tkm_err e = {0};
    ASSERT_OK(tkm_triton_cache_scan(&c, cmd, &e));
    ASSERT_STREQ(c.summary.targets[0].target.arch, "80");
    ASSERT_EQ(c.summary.targets[0].binary_mismatch, 4);
    struct tkm_gpu g = nvidia("NVIDIA A100-SXM4-80GB", 8, 0, 13000);
    tkm_compat_check(&c.summary, &g, &v);
    ASSERT_EQ(v.compatible, 0);
    ASSERT_STRCONTAINS(v.reason, "corrupt cache: 4 of the 4 kernels for cuda sm80");
    tkm_triton_cache_release(&c);
    /* the untouched cache has none */
    scan_fixture(&c, "triton-3.6.0-cuda-sm90-inductor-block.tar.gz", "tcache-inductor");
    ASSERT_EQ(c.summary.targets[0].binary_mismatch, 0);
    tkm_triton_cache_release(&c);
}
