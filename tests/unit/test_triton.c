/* Unit tests for lib/triton on the real Triton 3.6.0 caches in tests/fixtures. */
#include <sys/stat.h>
#include <unistd.h>

#include <tkm/triton/cache.h>

#include "test.h"

/* Untars fixture triton-cache/<tarball> into the test dir; returns <tmp>/<top>. */
static const char *untar(const char *tarball, const char *top)
{
    static char out[1024];
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "tar xzf '%s/triton-cache/%s' -C '%s'", tkm_test_fixtures(), tarball,
             tkm_test_tmpdir());
    ASSERT_EQ(system(cmd), 0);
    snprintf(out, sizeof out, "%s/%s", tkm_test_tmpdir(), top);
    return out;
}

static const struct tkm_triton_kernel *find_kernel(const struct tkm_triton_cache *c,
                                                   const char *name)
{
    for (size_t i = 0; i < c->n_kernels; i++)
        if (c->kernels[i].name && strcmp(c->kernels[i].name, name) == 0)
            return &c->kernels[i];
    return NULL;
}

TEST(scan_sm90_cache_metadata)
{
    struct tkm_triton_cache c;
    struct tkm_err e = {0};
    ASSERT_OK(tkm_triton_cache_scan(&c, untar("triton-3.6.0-cuda-sm90.tar.gz", "tcache"), &e));
    ASSERT_EQ(c.n_kernels, 4);
    ASSERT_EQ(c.n_dirs, 8); /* 4 kernels + 3 launchers + cuda_utils */
    ASSERT_UEQ(c.size_bytes, 758102);
    const struct tkm_triton_kernel *k = find_kernel(&c, "add_kernel");
    ASSERT_NOT_NULL(k);
    ASSERT_STREQ(k->dir, "52YLWQSH5NKVBZHLAIWFDCXR4CYJL53TKUIEQ5AYQ4DTYQ45LZYQ");
    ASSERT_STREQ(k->json_name, "add_kernel.json");
    ASSERT_STREQ(k->hash, "eeb0bb4247eb5550e4eb022c518af1e0b095f773551048741887073c439d5e71");
    ASSERT_STREQ(k->target.backend, "cuda");
    ASSERT_STREQ(k->target.arch, "90");
    ASSERT_EQ(k->arch_is_int, 1);
    ASSERT_EQ(k->target.warp_size, 32);
    ASSERT_STREQ(k->triton_version, "3.6.0");
    ASSERT_EQ(k->num_warps, 4);
    ASSERT_EQ(k->num_stages, 3);
    ASSERT_EQ(k->num_ctas, 1);
    ASSERT_EQ(k->meta_ptx_version, -1); /* null in 3.6 */
    ASSERT_EQ(k->ptx.major, 8);
    ASSERT_EQ(k->ptx.minor, 7);
    ASSERT_STREQ(k->ptx_target, "sm_90a");
    ASSERT_STREQ(k->binary_arch, "90"); /* cubin ELF ABI 7, e_flags 0x5a0d5a */
    ASSERT_STREQ(k->group_name, "__grp__add_kernel.json");
    ASSERT_EQ(json_object_size(k->env), 0);
    /* unknown fields are kept */
    ASSERT_STREQ(json_string_value(json_object_get(k->meta, "instrumentation_mode")), "");
    ASSERT_UEQ(k->size_bytes, 6936 + 3220 + 744 + 4098 + 1107 + 6892 + 2814 + 5554);
    ASSERT_EQ(c.summary.n_targets, 1);
    ASSERT_EQ(c.summary.targets[0].kernels, 4);
    ASSERT_EQ(c.summary.targets[0].ptx_max.major, 8);
    ASSERT_EQ(c.summary.targets[0].ptx_max.minor, 7);
    ASSERT_EQ(c.summary.targets[0].arch_specific, 1);
    char *label = NULL;
    ASSERT_OK(tkm_triton_summary_label(&c.summary, &label, &e));
    ASSERT_STREQ(label, "{\"targets\":[{\"backend\":\"cuda\",\"arch\":\"90\",\"warp_size\":32}],"
                        "\"triton_versions\":[\"3.6.0\"],\"ptx_versions\":[\"8.7\"]}");
    free(label);
    tkm_triton_cache_release(&c);
}

TEST(scan_binary_only_cache)
{
    struct tkm_triton_cache c;
    struct tkm_err e = {0};
    ASSERT_OK(
        tkm_triton_cache_scan(&c, untar("triton-3.6.0-cuda-sm90-binary-only.tar.gz", "tc2"), &e));
    ASSERT_EQ(c.n_kernels, 1);
    ASSERT_UEQ(c.size_bytes, 65940);
    ASSERT_STREQ(c.kernels[0].name, "k");
    ASSERT_EQ(c.kernels[0].ptx.major, -1); /* TRITON_STORE_BINARY_ONLY: no .ptx */
    ASSERT_STREQ(c.kernels[0].ptx_target, "");
    ASSERT_STREQ(c.kernels[0].binary_arch, "90");
    ASSERT_EQ(c.summary.n_ptx_versions, 0);
    ASSERT_EQ(c.summary.targets[0].ptx_max.major, -1);
    tkm_triton_cache_release(&c);
}

TEST(scan_inductor_cache)
{
    struct tkm_triton_cache c;
    struct tkm_err e = {0};
    ASSERT_OK(tkm_triton_cache_scan(
        &c, untar("triton-3.6.0-cuda-sm90-inductor-block.tar.gz", "tcache-inductor"), &e));
    ASSERT_EQ(c.n_kernels, 40);
    ASSERT_EQ(c.n_dirs, 41); /* + cuda_utils */
    ASSERT_UEQ(c.size_bytes, 4519135);
    for (size_t i = 0; i < c.n_kernels; i++) {
        ASSERT_STREQ(c.kernels[i].binary_arch, "90"); /* cubin ELF ABI 8, e_flags 0x09005a04 */
        ASSERT_EQ(c.kernels[i].ptx.major, 9);
        ASSERT_EQ(c.kernels[i].ptx.minor, 0);
        ASSERT_NOT_NULL(c.kernels[i].group_name);
        ASSERT(json_is_true(json_object_get(c.kernels[i].meta, "debug")));
    }
    const struct tkm_triton_kernel *k = find_kernel(&c, "triton_poi_fused_gelu_view_2");
    ASSERT_NOT_NULL(k);
    ASSERT_STREQ(k->hash, "e4335bbbc365126967a29987f9913f5eb24475d1267e68632760ea37a2400851");
    ASSERT_EQ(k->num_stages, 1);
    ASSERT_EQ(c.summary.n_targets, 1);
    ASSERT_EQ(c.summary.n_ptx_versions, 1);
    ASSERT_EQ(c.summary.ptx_versions[0].major, 9);
    tkm_triton_cache_release(&c);
}

TEST(scan_skips_tmp_pid_dirs_and_links)
{
    struct tkm_triton_cache c;
    struct tkm_err e = {0};
    char p[1200], cmd[2600];
    const char *root = untar("triton-3.6.0-cuda-sm90-binary-only.tar.gz", "tc2");
    /* a leftover write in progress at the root and inside a kernel dir */
    snprintf(cmd, sizeof cmd,
             "set -e; cd '%s'; mkdir -p tmp.pid_42_abc; cp T3H*/k.json tmp.pid_42_abc/; "
             "K=T3HOESPZX2ZV6EV5I5V3KCM6BTDSSR26M37T3PP33NTDXQCANMUA; mkdir $K/tmp.pid_7_x; "
             "cp $K/k.cubin $K/tmp.pid_7_x/; "
             "ln -s /etc/passwd T3HOESPZX2ZV6EV5I5V3KCM6BTDSSR26M37T3PP33NTDXQCANMUA/link.json",
             root);
    ASSERT_EQ(system(cmd), 0);
    ASSERT_OK(tkm_triton_cache_scan(&c, root, &e));
    ASSERT_EQ(c.n_kernels, 1);
    ASSERT_EQ(c.n_dirs, 3);
    ASSERT_UEQ(c.size_bytes, 65940);
    tkm_triton_cache_release(&c);
    snprintf(p, sizeof p, "%s/nope", root);
    ASSERT_EQ(tkm_triton_cache_scan(&c, p, &e), -ENOENT);
    ASSERT_STRCONTAINS(e.msg, "nope");
    ASSERT_STRCONTAINS(e.msg, "cannot open the cache directory");
}

TEST(meta_env_vars_and_hip_target)
{
    char path[1200];
    size_t len;
    struct tkm_triton_kernel k;
    struct tkm_err e = {0};
    const char *root = untar("triton-3.6.0-cuda-sm90.tar.gz", "tcache");
    snprintf(path, sizeof path,
             "%s/52YLWQSH5NKVBZHLAIWFDCXR4CYJL53TKUIEQ5AYQ4DTYQ45LZYQ/add_kernel.json", root);
    char *text = tkm_test_slurp(path, &len);
    /* what Triton writes when TRITON_DISABLE_LINE_INFO=1 is set: a top-level key */
    char *edited = calloc(1, len + 64);
    snprintf(edited, len + 64, "{\"TRITON_DISABLE_LINE_INFO\": \"1\", %s", text + 1);
    ASSERT_OK(tkm_triton_meta_parse(&k, edited, strlen(edited), path, &e));
    ASSERT_EQ(json_object_size(k.env), 1);
    ASSERT_STREQ(json_string_value(json_object_get(k.env, "TRITON_DISABLE_LINE_INFO")), "1");
    ASSERT_STREQ(k.name, "add_kernel");
    tkm_triton_kernel_release(&k);
    free(edited);
    free(text);

    const char *hip = "{\"hash\":\"6088b9b2\",\"target\":{\"backend\":\"hip\",\"arch\":\"gfx90a\","
                      "\"warp_size\":64},\"num_warps\":4,\"num_stages\":2,\"arch\":\"gfx90a\","
                      "\"warp_size\":64,\"triton_version\":\"3.2.0\",\"waves_per_eu\":0}";
    ASSERT_OK(tkm_triton_meta_parse(&k, hip, strlen(hip), "hip.json", &e));
    ASSERT_STREQ(k.target.backend, "hip");
    ASSERT_STREQ(k.target.arch, "gfx90a");
    ASSERT_EQ(k.arch_is_int, 0);
    ASSERT_EQ(k.target.warp_size, 64);
    ASSERT_EQ(k.num_stages, 2);
    ASSERT_EQ(k.ptx.major, -1);
    tkm_triton_kernel_release(&k);
}

TEST(meta_rejects_bad_input_with_reasons)
{
    struct tkm_triton_kernel k;
    struct tkm_err e = {0};
    const char *old = "{\"hash\":\"ab\",\"num_warps\":4,\"constants\":{}}";
    ASSERT_EQ(tkm_triton_meta_parse(&k, old, strlen(old), "old.json", &e), -ENOTSUP);
    ASSERT_STRCONTAINS(e.msg, "old.json");
    ASSERT_STRCONTAINS(e.msg, "older than 3.0");
    tkm_err_clear(&e);
    const char *dup = "{\"hash\":\"ab\",\"hash\":\"cd\"}";
    ASSERT_EQ(tkm_triton_meta_parse(&k, dup, strlen(dup), "dup.json", &e), -EINVAL);
    ASSERT_STRCONTAINS(e.msg, "duplicate");
    tkm_err_clear(&e);
    const char *noarch = "{\"hash\":\"ab\",\"target\":{\"backend\":\"cuda\",\"arch\":[9],"
                         "\"warp_size\":32}}";
    ASSERT_EQ(tkm_triton_meta_parse(&k, noarch, strlen(noarch), "x.json", &e), -EINVAL);
    ASSERT_STRCONTAINS(e.msg, "target.arch");
    tkm_err_clear(&e);
    const char *nohash = "{\"configs_timings\":[]}";
    ASSERT_EQ(tkm_triton_meta_parse(&k, nohash, strlen(nohash), "autotune.json", &e), -ENOENT);
    ASSERT_EQ(e.code, 0);
    ASSERT_EQ(tkm_triton_meta_parse(&k, "{", 1, "trunc.json", &e), -EINVAL);
    ASSERT_STRCONTAINS(e.msg, "not valid JSON");
}

TEST(group_parse_both_forms)
{
    struct tkm_triton_group g;
    struct tkm_err e = {0};
    char path[1200];
    size_t len;
    const char *root = untar("triton-3.6.0-cuda-sm90.tar.gz", "tcache");
    snprintf(path, sizeof path,
             "%s/52YLWQSH5NKVBZHLAIWFDCXR4CYJL53TKUIEQ5AYQ4DTYQ45LZYQ/__grp__add_kernel.json",
             root);
    char *text = tkm_test_slurp(path, &len);
    ASSERT_OK(tkm_triton_group_parse(&g, text, len, path, &e));
    ASSERT_EQ(g.is_list, 0);
    ASSERT_EQ(g.n, 7);
    ASSERT_STREQ(g.names[0], "add_kernel.source");
    ASSERT_STREQ(
        g.paths[0],
        "/tmp/tcache/52YLWQSH5NKVBZHLAIWFDCXR4CYJL53TKUIEQ5AYQ4DTYQ45LZYQ/add_kernel.source");
    tkm_triton_group_release(&g);
    free(text);
    const char *list = "{\"child_paths\": [\"k.cubin\", \"k.json\"]}";
    ASSERT_OK(tkm_triton_group_parse(&g, list, strlen(list), "list", &e));
    ASSERT_EQ(g.is_list, 1);
    ASSERT_EQ(g.n, 2);
    ASSERT_STREQ(g.names[1], "k.json");
    ASSERT_NULL(g.paths[1]);
    tkm_triton_group_release(&g);
    const char *evil = "{\"child_paths\": [\"../../etc/passwd\"]}";
    ASSERT_EQ(tkm_triton_group_parse(&g, evil, strlen(evil), "evil", &e), -EINVAL);
    ASSERT_STRCONTAINS(e.msg, "plain file name");
    tkm_err_clear(&e);
    const char *none = "{\"paths\": {}}";
    ASSERT_EQ(tkm_triton_group_parse(&g, none, strlen(none), "none", &e), -EINVAL);
    ASSERT_STRCONTAINS(e.msg, "child_paths");
}

/* Checks every group under root: dict form, every path under new_root and existing. */
static void check_groups(const char *root, const char *new_root, int must_exist, size_t *groups)
{
    char cmd[1200], line[2048];
    snprintf(cmd, sizeof cmd, "find '%s' -name '__grp__*.json' | sort", root);
    FILE *f = popen(cmd, "r");
    ASSERT_NOT_NULL(f);
    *groups = 0;
    while (fgets(line, sizeof line, f)) {
        struct tkm_triton_group g;
        struct tkm_err e = {0};
        size_t len;
        line[strcspn(line, "\n")] = '\0';
        char *text = tkm_test_slurp(line, &len);
        ASSERT_OK(tkm_triton_group_parse(&g, text, len, line, &e));
        ASSERT_EQ(g.is_list, 0);
        ASSERT(g.n > 0);
        for (size_t i = 0; i < g.n; i++) {
            struct stat st;
            ASSERT_EQ(strncmp(g.paths[i], new_root, strlen(new_root)), 0);
            ASSERT_EQ(g.paths[i][strlen(new_root)], '/');
            if (must_exist)
                ASSERT_OK(stat(g.paths[i], &st));
        }
        tkm_triton_group_release(&g);
        free(text);
        (*groups)++;
    }
    pclose(f);
}

TEST(rewrite_inductor_groups_to_new_root)
{
    struct tkm_triton_rewrite_stats st;
    struct tkm_err e = {0};
    size_t groups = 0;
    const char *root = untar("triton-3.6.0-cuda-sm90-inductor-block.tar.gz", "tcache-inductor");
    char rootcopy[1024];
    snprintf(rootcopy, sizeof rootcopy, "%s", root);
    /* before: every child points at /tmp/T, where the producer ran */
    check_groups(rootcopy, "/tmp/T", 0, &groups);
    ASSERT_EQ(groups, 40);
    ASSERT_OK(tkm_triton_groups_rewrite_to(rootcopy, rootcopy, rootcopy, &st, &e));
    ASSERT_EQ(st.groups, 40);
    ASSERT_EQ(st.missing_children, 0);
    ASSERT(st.children >= 40 * 4);
    check_groups(rootcopy, rootcopy, 1, &groups);
    ASSERT_EQ(groups, 40);
    /* to a mount path that does not exist here; trailing slash is dropped */
    ASSERT_OK(tkm_triton_groups_rewrite_to(rootcopy, rootcopy, "/mnt/triton-cache/", &st, &e));
    check_groups(rootcopy, "/mnt/triton-cache", 0, &groups);
    ASSERT_EQ(groups, 40);
    /* the scan still sees the same cache, and no temp file is left over */
    struct tkm_triton_cache c;
    ASSERT_OK(tkm_triton_cache_scan(&c, rootcopy, &e));
    ASSERT_EQ(c.n_kernels, 40);
    tkm_triton_cache_release(&c);
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "test -z \"$(find '%s' -name '*tkm-tmp*')\"", rootcopy);
    ASSERT_EQ(system(cmd), 0);
    ASSERT_EQ(tkm_triton_groups_rewrite_to(rootcopy, rootcopy, "relative/x", &st, &e), -EINVAL);
    ASSERT_STRCONTAINS(e.msg, "absolute");
}

TEST(rewrite_list_form_and_keeps_mode)
{
    struct tkm_triton_rewrite_stats st;
    struct tkm_err e = {0};
    char grp[1200], cmd[2600];
    size_t len;
    const char *root = untar("triton-3.6.0-cuda-sm90-binary-only.tar.gz", "tc2");
    snprintf(grp, sizeof grp,
             "%s/T3HOESPZX2ZV6EV5I5V3KCM6BTDSSR26M37T3PP33NTDXQCANMUA/__grp__k.json", root);
    snprintf(cmd, sizeof cmd,
             "printf '{\"child_paths\": [\"k.cubin\", \"k.json\", \"k.gone\"]}' > '%s' && "
             "chmod 0640 '%s'",
             grp, grp);
    ASSERT_EQ(system(cmd), 0);
    ASSERT_OK(tkm_triton_groups_rewrite_to(root, root, "/cache", &st, &e));
    ASSERT_EQ(st.groups, 1);
    ASSERT_EQ(st.children, 3);
    ASSERT_EQ(st.missing_children, 1);
    char *text = tkm_test_slurp(grp, &len);
    ASSERT_STREQ(text, "{\"child_paths\":{\"k.cubin\":\"/cache/"
                       "T3HOESPZX2ZV6EV5I5V3KCM6BTDSSR26M37T3PP33NTDXQCANMUA/k.cubin\",\"k.json\":"
                       "\"/cache/T3HOESPZX2ZV6EV5I5V3KCM6BTDSSR26M37T3PP33NTDXQCANMUA/k.json\","
                       "\"k.gone\":\"/cache/T3HOESPZX2ZV6EV5I5V3KCM6BTDSSR26M37T3PP33NTDXQCANMUA/"
                       "k.gone\"}}");
    free(text);
    struct stat sb;
    ASSERT_OK(stat(grp, &sb));
    ASSERT_EQ(sb.st_mode & 07777, 0640);
}

TEST(rewrite_to_separate_dir_leaves_cache_alone)
{
    struct tkm_triton_rewrite_stats st;
    struct tkm_err e = {0};
    size_t groups = 0;
    char src[1024], out[1200], cmd[3000];
    snprintf(src, sizeof src, "%s",
             untar("triton-3.6.0-cuda-sm90-inductor-block.tar.gz", "tcache-inductor"));
    snprintf(out, sizeof out, "%s/layer", tkm_test_tmpdir());
    snprintf(cmd, sizeof cmd, "cd '%s' && find . -type f -exec sha256sum {} + | sort > '%s/before'",
             src, tkm_test_tmpdir());
    ASSERT_EQ(system(cmd), 0);
    ASSERT_OK(tkm_triton_groups_rewrite_to(src, out, "/pods/p1/cache", &st, &e));
    ASSERT_EQ(st.groups, 40);
    ASSERT_EQ(st.missing_children, 0);
    /* the source is byte for byte what it was: groups still point at /tmp/T */
    snprintf(cmd, sizeof cmd,
             "cd '%s' && find . -type f -exec sha256sum {} + | sort | cmp - '%s/before'", src,
             tkm_test_tmpdir());
    ASSERT_EQ(system(cmd), 0);
    check_groups(src, "/tmp/T", 0, &groups);
    ASSERT_EQ(groups, 40);
    /* the output holds exactly the 40 group files, rewritten, nothing else */
    check_groups(out, "/pods/p1/cache", 0, &groups);
    ASSERT_EQ(groups, 40);
    snprintf(cmd, sizeof cmd,
             "test \"$(find '%s' -type f | wc -l)\" = 40 && "
             "test -z \"$(find '%s' -type f ! -name '__grp__*.json')\"",
             out, out);
    ASSERT_EQ(system(cmd), 0);
    /* every output dir is a kernel dir of the source */
    snprintf(cmd, sizeof cmd, "cd '%s' && for d in */; do test -d '%s'/\"$d\" || exit 1; done", out,
             src);
    ASSERT_EQ(system(cmd), 0);
    /* again into the same dir (it exists now): same result, no temp files */
    ASSERT_OK(tkm_triton_groups_rewrite_to(src, out, "/pods/p2/cache", &st, &e));
    check_groups(out, "/pods/p2/cache", 0, &groups);
    ASSERT_EQ(groups, 40);
    snprintf(cmd, sizeof cmd, "test -z \"$(find '%s' -name '*tkm-tmp*')\"", out);
    ASSERT_EQ(system(cmd), 0);
    /* out_dir over a file is refused with the path named */
    snprintf(cmd, sizeof cmd, "touch '%s/afile'", tkm_test_tmpdir());
    ASSERT_EQ(system(cmd), 0);
    snprintf(out, sizeof out, "%s/afile", tkm_test_tmpdir());
    ASSERT_EQ(tkm_triton_groups_rewrite_to(src, out, "/x", &st, &e), -ENOTDIR);
    ASSERT_STRCONTAINS(e.msg, "afile");
}

TEST(ptx_header_parse)
{
    struct tkm_ptx_version v;
    char t[32];
    const char *ptx =
        "//\n// Generated by LLVM NVPTX Back-End\n//\n\n.version 8.7\n.target sm_90a\n"
        ".address_size 64\n";
    ASSERT_OK(tkm_ptx_header_parse(ptx, strlen(ptx), &v, t, sizeof t));
    ASSERT_EQ(v.major, 8);
    ASSERT_EQ(v.minor, 7);
    ASSERT_STREQ(t, "sm_90a");
    const char *p2 = ".version 9.0\n.target sm_80, debug\n";
    ASSERT_OK(tkm_ptx_header_parse(p2, strlen(p2), &v, t, sizeof t));
    ASSERT_EQ(v.major, 9);
    ASSERT_EQ(v.minor, 0);
    ASSERT_STREQ(t, "sm_80");
    ASSERT_EQ(tkm_ptx_header_parse(".target sm_80\n", 14, &v, t, sizeof t), -EINVAL);
    ASSERT_EQ(tkm_ptx_header_parse(".version x.y\n", 13, &v, t, sizeof t), -EINVAL);
    char b[16];
    ASSERT_STREQ(tkm_ptx_version_str((struct tkm_ptx_version){8, 7}, b, sizeof b), "8.7");
    ASSERT(tkm_ptx_version_cmp((struct tkm_ptx_version){8, 7}, (struct tkm_ptx_version){9, 0}) < 0);
}

TEST(elf_arch_cubin_and_hsaco)
{
    unsigned char h[64] = {0x7f, 'E', 'L', 'F', 2, 1, 1, 0x33, 7};
    char be[16], arch[32];
    h[18] = 190; /* EM_CUDA, ABI 7: e_flags 0x5a0d5a */
    h[48] = 0x5a, h[49] = 0x0d, h[50] = 0x5a;
    ASSERT_OK(tkm_elf_gpu_arch(h, sizeof h, be, arch, sizeof arch));
    ASSERT_STREQ(be, "cuda");
    ASSERT_STREQ(arch, "90");
    h[8] = 8; /* ABI 8: e_flags 0x09005004 -> sm_80 */
    h[48] = 0x04, h[49] = 0x50, h[50] = 0x00, h[51] = 0x09;
    ASSERT_OK(tkm_elf_gpu_arch(h, sizeof h, be, arch, sizeof arch));
    ASSERT_STREQ(arch, "80");
    h[18] = 224; /* EM_AMDGPU: e_flags & 0xff = 0x3f -> gfx90a (xnack bits above) */
    h[48] = 0x3f, h[49] = 0x03, h[50] = 0, h[51] = 0;
    ASSERT_OK(tkm_elf_gpu_arch(h, sizeof h, be, arch, sizeof arch));
    ASSERT_STREQ(be, "hip");
    ASSERT_STREQ(arch, "gfx90a");
    h[48] = 0x4c;
    ASSERT_OK(tkm_elf_gpu_arch(h, sizeof h, be, arch, sizeof arch));
    ASSERT_STREQ(arch, "gfx942");
    h[48] = 0x01;
    ASSERT_EQ(tkm_elf_gpu_arch(h, sizeof h, be, arch, sizeof arch), -ENOTSUP);
    ASSERT_EQ(tkm_elf_gpu_arch((const unsigned char *)"not an elf", 10, be, arch, sizeof arch),
              -EINVAL);
}

TEST(summary_label_round_trip_and_dedup)
{
    struct tkm_triton_summary s;
    struct tkm_err e = {0};
    struct tkm_triton_kernel k[3];
    memset(k, 0, sizeof k);
    for (int i = 0; i < 3; i++)
        k[i].ptx.major = -1;
    snprintf(k[0].target.backend, 16, "cuda");
    snprintf(k[0].target.arch, 32, "90");
    k[0].target.warp_size = 32;
    k[0].ptx = (struct tkm_ptx_version){8, 7};
    k[1] = k[0];
    k[1].ptx = (struct tkm_ptx_version){9, 0};
    snprintf(k[2].target.backend, 16, "cuda");
    snprintf(k[2].target.arch, 32, "100");
    k[2].target.warp_size = 32;
    ASSERT_OK(tkm_triton_summary_build(&s, k, 3, &e));
    ASSERT_EQ(s.n_targets, 2);
    ASSERT_STREQ(s.targets[0].target.arch, "90"); /* numeric order: 90 before 100 */
    ASSERT_EQ(s.targets[0].kernels, 2);
    ASSERT_EQ(s.targets[0].ptx_max.major, 9);
    char *label;
    ASSERT_OK(tkm_triton_summary_label(&s, &label, &e));
    tkm_triton_summary_release(&s);
    ASSERT_STREQ(label, "{\"targets\":[{\"backend\":\"cuda\",\"arch\":\"90\",\"warp_size\":32},"
                        "{\"backend\":\"cuda\",\"arch\":\"100\",\"warp_size\":32}],"
                        "\"triton_versions\":[],\"ptx_versions\":[\"8.7\",\"9.0\"]}");
    ASSERT_OK(tkm_triton_summary_parse(&s, label, &e));
    free(label);
    ASSERT_EQ(s.n_targets, 2);
    ASSERT_EQ(s.targets[1].ptx_max.major, 9);
    tkm_triton_summary_release(&s);
    /* upstream MCV label (ROCm fixture in GKM): only targets */
    ASSERT_OK(tkm_triton_summary_parse(
        &s, "{\"targets\":[{\"backend\":\"hip\",\"arch\":\"gfx90a\",\"warp_size\":64}]}", &e));
    ASSERT_STREQ(s.targets[0].target.arch, "gfx90a");
    ASSERT_EQ(s.targets[0].ptx_max.major, -1);
    tkm_triton_summary_release(&s);
    ASSERT_EQ(tkm_triton_summary_parse(&s, "{\"targets\":[]}", &e), -EINVAL);
    ASSERT_STRCONTAINS(e.msg, "non-empty");
}

/* The one kernel-name grammar (tkm-csi's scratch count, the agent's Release, the
 * statuses' topKernels): [A-Za-z0-9_.-]{1,128}, by length, a NUL inside refused. */
TEST(kernel_name_grammar)
{
    char n[TKM_KERNEL_NAME_MAX + 2];
    memset(n, 'k', sizeof n);
    ASSERT_EQ(tkm_kernel_name_ok("a.b-c_D9", 8), 1);
    ASSERT_EQ(tkm_kernel_name_ok("add_kernel.json", 10), 1); /* a stem: the first len bytes */
    ASSERT_EQ(tkm_kernel_name_ok(n, TKM_KERNEL_NAME_MAX), 1);
    ASSERT_EQ(tkm_kernel_name_ok(n, TKM_KERNEL_NAME_MAX + 1), 0);
    ASSERT_EQ(tkm_kernel_name_ok("", 0), 0);
    ASSERT_EQ(tkm_kernel_name_ok(NULL, 3), 0);
    ASSERT_EQ(tkm_kernel_name_ok("a\0b", 3), 0);
    static const char *const bad[] = {"a/b", "bad name", "\x1b[31m", "ü", "a\"b", "a\nb"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        ASSERT_EQ(tkm_kernel_name_ok(bad[i], strlen(bad[i])), 0);
}
