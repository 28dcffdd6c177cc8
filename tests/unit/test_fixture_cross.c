/*
 * The cross-compiled fixture (issue 24): tests/fixtures/triton-3.6-sm80-cross is the kernels of
 * bench/gpu/triton_workload.py compiled on an H200 for sm80 with triton.compile(ASTSource,
 * target=GPUTarget("cuda", 80, 32)); tests/fixtures/triton-3.6-sm90-native the same launches
 * compiled and run for the H200's own target (bench/gpu/cross-compile.sh, the READMEs there).
 * tkm's own scanner must read the first as cuda/80/32 with sm_80 cubins (ELF e_flags), the
 * compatibility judge must give it to an A100 and not to an H200, and the two caches must share
 * no kernel directory (Triton's key includes the target: their union does not collide).
 * A missing fixture fails.
 */
#include <sys/stat.h>

#include <tkm/gpu/compat.h>
#include <tkm/triton/cache.h>

#include "test.h"

static const char *fixture(const char *name)
{
    static char path[2][1024];
    static int n;
    char *p = path[n++ % 2];
    struct stat st;
    snprintf(p, sizeof path[0], "%s/%s/cache", tkm_test_fixtures(), name);
    if (stat(p, &st) != 0 || !S_ISDIR(st.st_mode))
        fprintf(stderr, "fixture %s is missing\n", p);
    ASSERT_EQ(stat(p, &st), 0);
    ASSERT(S_ISDIR(st.st_mode));
    return p;
}

static void scan(struct tkm_triton_cache *c, const char *name)
{
    struct tkm_err e = {0};
    ASSERT_OK(tkm_triton_cache_scan(c, fixture(name), &e));
}

static struct tkm_gpu cuda_gpu(const char *name, int major, int minor)
{
    struct tkm_gpu g;
    memset(&g, 0, sizeof g);
    snprintf(g.vendor, sizeof g.vendor, "nvidia");
    snprintf(g.backend, sizeof g.backend, "cuda");
    snprintf(g.name, sizeof g.name, "%s", name);
    snprintf(g.arch, sizeof g.arch, "%d", major * 10 + minor);
    g.cc_major = major;
    g.cc_minor = minor;
    g.warp_size = 32;
    g.cuda_driver_version = 13000; /* the H200's driver 580.159.04 */
    g.mig_mode = -1;
    g.usable = 1;
    return g;
}

static size_t count_named(const struct tkm_triton_cache *c, const char *name)
{
    size_t n = 0;
    for (size_t i = 0; i < c->n_kernels; i++)
        n += c->kernels[i].name && strcmp(c->kernels[i].name, name) == 0;
    return n;
}

TEST(sm80_cross_is_cuda_80_with_sm80_cubins)
{
    struct tkm_triton_cache c;
    struct tkm_err e = {0};
    scan(&c, "triton-3.6-sm80-cross");
    ASSERT_EQ(c.n_kernels, 4);
    ASSERT_EQ(c.n_dirs, 4); /* triton.compile builds no launcher: kernels only */
    ASSERT_EQ(count_named(&c, "add_kernel"), 1);
    ASSERT_EQ(count_named(&c, "softmax_kernel"), 1);
    ASSERT_EQ(count_named(&c, "matmul_kernel"), 2);
    for (size_t i = 0; i < c.n_kernels; i++) {
        const struct tkm_triton_kernel *k = &c.kernels[i];
        ASSERT_STREQ(k->target.backend, "cuda");
        ASSERT_STREQ(k->target.arch, "80");
        ASSERT_EQ(k->arch_is_int, 1);
        ASSERT_EQ(k->target.warp_size, 32);
        ASSERT_STREQ(k->triton_version, "3.6.0");
        ASSERT_STREQ(k->ptx_target, "sm_80");
        ASSERT_EQ(k->ptx.major, 8);
        ASSERT_EQ(k->ptx.minor, 7);
        ASSERT_STREQ(k->binary_arch, "80"); /* cubin ELF ABI 7, e_flags 0x00500550 */
        ASSERT_NOT_NULL(k->group_name);
    }
    ASSERT_EQ(c.summary.n_targets, 1);
    ASSERT_EQ(c.summary.targets[0].kernels, 4);
    ASSERT_UEQ(c.summary.targets[0].binary_mismatch, 0);
    ASSERT_EQ(c.summary.targets[0].arch_specific, 0);
    char *label = NULL;
    ASSERT_OK(tkm_triton_summary_label(&c.summary, &label, &e));
    ASSERT_STREQ(label, "{\"targets\":[{\"backend\":\"cuda\",\"arch\":\"80\",\"warp_size\":32}],"
                        "\"triton_versions\":[\"3.6.0\"],\"ptx_versions\":[\"8.7\"]}");
    free(label);

    struct tkm_compat_verdict v;
    struct tkm_gpu a100 = cuda_gpu("NVIDIA A100-SXM4-80GB", 8, 0);
    tkm_compat_check(&c.summary, &a100, &v);
    ASSERT_EQ(v.compatible, 1);
    struct tkm_gpu h200 = cuda_gpu("NVIDIA H200", 9, 0);
    tkm_compat_check(&c.summary, &h200, &v);
    ASSERT_EQ(v.compatible, 0);
    ASSERT_STRCONTAINS(v.reason, "arch mismatch: cache built for sm80");
    tkm_triton_cache_release(&c);
}

TEST(sm90_native_same_kernels_no_shared_kernel_dir)
{
    struct tkm_triton_cache n, x;
    scan(&n, "triton-3.6-sm90-native");
    scan(&x, "triton-3.6-sm80-cross");
    ASSERT_EQ(n.n_kernels, 4);
    ASSERT_EQ(n.n_dirs, 8); /* + 3 launchers + cuda_utils: it ran */
    for (size_t i = 0; i < n.n_kernels; i++) {
        ASSERT_STREQ(n.kernels[i].target.arch, "90");
        ASSERT_STREQ(n.kernels[i].binary_arch, "90");
        ASSERT_STREQ(n.kernels[i].ptx_target, "sm_90a");
    }
    ASSERT_EQ(n.summary.targets[0].arch_specific, 1);
    /* The same launches (name, warps, stages), never the same directory. */
    for (size_t i = 0; i < x.n_kernels; i++) {
        const struct tkm_triton_kernel *k = &x.kernels[i];
        int twin = 0;
        for (size_t j = 0; j < n.n_kernels; j++) {
            const struct tkm_triton_kernel *m = &n.kernels[j];
            ASSERT(strcmp(k->dir, m->dir) != 0);
            ASSERT(strcmp(k->hash, m->hash) != 0);
            twin += strcmp(k->name, m->name) == 0 && k->num_warps == m->num_warps &&
                    k->num_stages == m->num_stages;
        }
        ASSERT_EQ(twin, 1);
    }
    tkm_triton_cache_release(&x);
    tkm_triton_cache_release(&n);
}

TEST(sm80_cross_cubin_arch_is_read_from_elf)
{
    /* A copy whose add_kernel cubin claims sm_90 in its e_flags: the scan sees it. */
    char cmd[3072], cubin[1024];
    snprintf(cmd, sizeof cmd, "cp -r '%s' '%s/c'", fixture("triton-3.6-sm80-cross"),
             tkm_test_tmpdir());
    ASSERT_EQ(system(cmd), 0);
    struct tkm_triton_cache c;
    struct tkm_err e = {0};
    snprintf(cmd, sizeof cmd, "%s/c", tkm_test_tmpdir());
    ASSERT_OK(tkm_triton_cache_scan(&c, cmd, &e));
    const struct tkm_triton_kernel *k = NULL;
    for (size_t i = 0; i < c.n_kernels; i++)
        if (strcmp(c.kernels[i].name, "add_kernel") == 0)
            k = &c.kernels[i];
    ASSERT_NOT_NULL(k);
    snprintf(cubin, sizeof cubin, "%s/c/%s/add_kernel.cubin", tkm_test_tmpdir(), k->dir);
    tkm_triton_cache_release(&c);
    FILE *f = fopen(cubin, "r+b");
    ASSERT_NOT_NULL(f);
    unsigned char h[52];
    ASSERT_EQ(fread(h, 1, sizeof h, f), sizeof h);
    ASSERT_EQ(h[8], 7);     /* ELF ABI 7: SM in e_flags' low byte */
    ASSERT_EQ(h[48], 0x50); /* sm_80 */
    ASSERT_EQ(fseek(f, 48, SEEK_SET), 0);
    ASSERT_EQ(fputc(0x5a, f), 0x5a);
    ASSERT_EQ(fclose(f), 0);
    ASSERT_OK(tkm_triton_cache_scan(&c, cmd, &e));
    ASSERT_EQ(c.summary.n_targets, 1);
    ASSERT_UEQ(c.summary.targets[0].binary_mismatch, 1);
    size_t wrong = 0;
    for (size_t i = 0; i < c.n_kernels; i++)
        wrong += strcmp(c.kernels[i].binary_arch, "90") == 0;
    ASSERT_EQ(wrong, 1);
    tkm_triton_cache_release(&c);
}
