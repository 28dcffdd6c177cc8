/* test_oci_build.c - packing the real Triton 3.6.0 fixture into an image layout. */
#include <archive.h>
#include <archive_entry.h>
#include <jansson.h>
#include <sys/stat.h>
#include <unistd.h>

#include <tkm/buf.h>
#include <tkm/triton/build.h>
#include <tkm/oci/image.h>
#include <tkm/triton/extract.h>
#include <tkm/oci/layout.h>
#include <tkm/oci/manifest.h>

#include "test.h"

static void untar_fixture(const char *name, const char *dest)
{
    char cmd[2048];
    mkdir(dest, 0755);
    snprintf(cmd, sizeof cmd, "tar -xzf '%s/triton-cache/%s.tar.gz' -C '%s'", tkm_test_fixtures(),
             name, dest);
    ASSERT_EQ(system(cmd), 0);
}

/* The one top-level directory the fixture tarball unpacks to. */
static void cache_root(const char *dest, char *out, size_t n)
{
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "ls '%s'", dest);
    FILE *p = popen(cmd, "r");
    ASSERT_NOT_NULL(p);
    char line[256];
    ASSERT_NOT_NULL(fgets(line, sizeof line, p));
    pclose(p);
    line[strcspn(line, "\n")] = '\0';
    snprintf(out, n, "%s/%s", dest, line);
}

TEST_TIMEOUT(build_fixture_is_deterministic_and_labelled, 60)
{
    char src[1024], cache[1200], l1[1024], l2[1024];
    struct tkm_triton_build_result r1, r2;
    struct tkm_err e = {0};
    snprintf(src, sizeof src, "%s/src", tkm_test_tmpdir());
    untar_fixture("triton-3.6.0-cuda-sm90", src);
    cache_root(src, cache, sizeof cache);
    /* a leftover Triton temp dir must not be packed */
    char tmpd[1400];
    snprintf(tmpd, sizeof tmpd,
             "%s/52YLWQSH5NKVBZHLAIWFDCXR4CYJL53TKUIEQ5AYQ4DTYQ45LZYQ/"
             "tmp.pid_1_abc",
             cache);
    ASSERT_EQ(mkdir(tmpd, 0755), 0);
    snprintf(l1, sizeof l1, "%s/l1", tkm_test_tmpdir());
    snprintf(l2, sizeof l2, "%s/l2", tkm_test_tmpdir());
    int rc = tkm_triton_build_cache_image(cache, l1, "v1", NULL, &r1, &e);
    if (rc)
        fprintf(stderr, "%s\n", e.msg);
    ASSERT_OK(rc);
    ASSERT_OK(tkm_triton_build_cache_image(cache, l2, "v1", NULL, &r2, &e));
    ASSERT_STREQ(r1.manifest.digest, r2.manifest.digest);
    ASSERT_STREQ(r1.layer.digest, r2.layer.digest);
    ASSERT_EQ(r1.entries, 4); /* add, softmax, 2x matmul: JSONs with a hash */
    ASSERT_EQ(r1.files, 36);

    /* layout index -> manifest -> config labels */
    struct tkm_oci_desc md;
    ASSERT_OK(tkm_oci_layout_find(l1, "v1", &md, &e));
    ASSERT_STREQ(md.digest, r1.manifest.digest);
    struct tkm_buf b = TKM_BUF_INIT(1 << 20);
    ASSERT_OK(tkm_oci_layout_read_blob(l1, &md, &b, &e));
    struct tkm_oci_manifest m;
    ASSERT_OK(tkm_oci_manifest_parse(&m, TKM_OCI_MT_MANIFEST, b.data, b.len, "layout", &e));
    ASSERT_EQ(m.n_descs, 1);
    ASSERT_STREQ(m.descs[0].media_type, TKM_OCI_MT_LAYER_GZIP);
    ASSERT_OK(tkm_oci_layout_read_blob(l1, &m.config, &b, &e));
    struct tkm_oci_config c;
    ASSERT_OK(tkm_oci_config_parse(&c, b.data, b.len, "config", &e));
    ASSERT_STREQ(tkm_oci_config_label(&c, "cache.triton.image/entry-count"), "4");
    ASSERT_STREQ(tkm_oci_config_label(&c, "cache.triton.image/cache-size-bytes"), "758102");
    ASSERT_STRCONTAINS(tkm_oci_config_label(&c, "cache.triton.image/summary"),
                       "{\"targets\":[{\"backend\":\"cuda\",\"arch\":\"90\",\"warp_size\":32}]");
    ASSERT_EQ(c.n_diff_ids, 1);
    ASSERT_STREQ(c.diff_ids[0], r1.diff_id);
    ASSERT_OK(tkm_oci_layout_verify_blob(l1, &m.descs[0], &e));

    /* the layer: sorted names under io.triton.cache/, no tmp dir, a manifest.json */
    char lp[1400];
    ASSERT_OK(tkm_oci_layout_blob_path(l1, m.descs[0].digest, lp, sizeof lp));
    struct archive *a = archive_read_new();
    archive_read_support_filter_gzip(a);
    archive_read_support_format_tar(a);
    ASSERT_EQ(archive_read_open_filename(a, lp, 65536), ARCHIVE_OK);
    struct archive_entry *ae;
    char prev[1024] = "";
    int files = 0, saw_manifest = 0;
    while (archive_read_next_header(a, &ae) == ARCHIVE_OK) {
        const char *p = archive_entry_pathname(ae);
        ASSERT(strcmp(prev, p) < 0);
        snprintf(prev, sizeof prev, "%s", p);
        ASSERT(strstr(p, "tmp.pid_") == NULL);
        ASSERT_EQ(archive_entry_mtime(ae), 0);
        ASSERT_EQ(archive_entry_uid(ae), 0);
        if (archive_entry_filetype(ae) == AE_IFREG) {
            ASSERT_EQ(archive_entry_perm(ae), 0644);
            files++;
        }
        if (strcmp(p, "io.triton.manifest/manifest.json") == 0) {
            char mj[8192];
            la_ssize_t n = archive_read_data(a, mj, sizeof mj - 1);
            ASSERT(n > 0);
            mj[n] = '\0';
            ASSERT_STRCONTAINS(mj, "{\"triton\":[{\"hash\":\"");
            ASSERT_STRCONTAINS(mj, "\"backend\":\"cuda\",\"arch\":90,\"warp_size\":32");
            saw_manifest = 1;
        }
    }
    archive_read_free(a);
    ASSERT_EQ(files, 37);
    ASSERT_EQ(saw_manifest, 1);
    tkm_oci_config_release(&c);
    tkm_oci_manifest_release(&m);
    tkm_buf_release(&b);
}

TEST(build_rejects_symlink_and_empty_dir)
{
    char cache[1024], layout[1024], link[1400];
    struct tkm_err e = {0};
    snprintf(cache, sizeof cache, "%s/empty", tkm_test_tmpdir());
    snprintf(layout, sizeof layout, "%s/out", tkm_test_tmpdir());
    ASSERT_EQ(mkdir(cache, 0755), 0);
    ASSERT_EQ(tkm_triton_build_cache_image(cache, layout, "v1", NULL, NULL, &e), -ENOENT);
    ASSERT_STRCONTAINS(e.msg, "holds no Triton kernel");
    char src[1024], root[1200];
    snprintf(src, sizeof src, "%s/src", tkm_test_tmpdir());
    untar_fixture("triton-3.6.0-cuda-sm90-binary-only", src);
    cache_root(src, root, sizeof root);
    snprintf(link, sizeof link, "%s/evil", root);
    ASSERT_EQ(symlink("/etc/passwd", link), 0);
    tkm_err_clear(&e);
    ASSERT_EQ(tkm_triton_build_cache_image(root, layout, "v1", NULL, NULL, &e), -EINVAL);
    ASSERT_STRCONTAINS(e.msg, "io.triton.cache/evil is a symbolic link");
}

TEST(layout_detects_tampered_blob)
{
    char layout[1024], path[1400];
    struct tkm_err e = {0};
    struct tkm_oci_desc d = {0};
    snprintf(layout, sizeof layout, "%s/l", tkm_test_tmpdir());
    ASSERT_OK(tkm_oci_layout_init(layout, &e));
    ASSERT_OK(tkm_oci_layout_put_blob(layout, "hello", 5, d.digest, &e));
    d.size = 5;
    ASSERT_OK(tkm_oci_layout_verify_blob(layout, &d, &e));
    ASSERT_OK(tkm_oci_layout_blob_path(layout, d.digest, path, sizeof path));
    FILE *f = fopen(path, "w");
    ASSERT_NOT_NULL(f);
    fputs("jello", f);
    fclose(f);
    ASSERT_EQ(tkm_oci_layout_verify_blob(layout, &d, &e), -EBADMSG);
    ASSERT_STRCONTAINS(e.msg, d.digest);
    ASSERT_STRCONTAINS(e.msg, "digest mismatch");
}

TEST_TIMEOUT(extract_layout_round_trip_and_failure_leaves_nothing, 60)
{
    char src[1024], cache[1200], layout[1024], out[1024], cmd[4096];
    struct tkm_triton_build_result br;
    struct tkm_triton_extract_result xr;
    struct tkm_err e = {0};
    snprintf(src, sizeof src, "%s/src", tkm_test_tmpdir());
    untar_fixture("triton-3.6.0-cuda-sm90", src);
    cache_root(src, cache, sizeof cache);
    snprintf(layout, sizeof layout, "%s/l", tkm_test_tmpdir());
    snprintf(out, sizeof out, "%s/out", tkm_test_tmpdir());
    ASSERT_OK(tkm_triton_build_cache_image(cache, layout, "v1", NULL, &br, &e));
    int rc = tkm_triton_extract_layout_with(layout, "v1", out, "/tmp/tcache", NULL, &xr, &e);
    if (rc)
        fprintf(stderr, "%s\n", e.msg);
    ASSERT_OK(rc);
    ASSERT_EQ(xr.files, 36);
    ASSERT_UEQ(xr.file_bytes, 758102);
    ASSERT_UEQ(xr.label_bytes, 758102);
    ASSERT_EQ(xr.groups, 4);
    ASSERT_EQ(xr.missing_children, 0);
    ASSERT_STREQ(xr.layer, br.layer.digest);
    /* every file but the (re-serialised) group files is byte-identical */
    snprintf(cmd, sizeof cmd, "diff -r -x '__grp__*' '%s' '%s'", cache, out);
    ASSERT_EQ(system(cmd), 0);
    /* extracting again onto the same path is refused, the first tree untouched */
    tkm_err_clear(&e);
    ASSERT(tkm_triton_extract_layout_with(layout, "v1", out, NULL, NULL, &xr, &e) < 0);
    /* a corrupted layer: error names the digest; no output and no staging dir remain */
    char blob[1400], out2[1100];
    ASSERT_OK(tkm_oci_layout_blob_path(layout, br.layer.digest, blob, sizeof blob));
    FILE *f = fopen(blob, "r+");
    ASSERT_NOT_NULL(f);
    fseek(f, 2000, SEEK_SET);
    fputc('Z', f);
    fclose(f);
    snprintf(out2, sizeof out2, "%s/out2", tkm_test_tmpdir());
    tkm_err_clear(&e);
    ASSERT(tkm_triton_extract_layout_with(layout, "v1", out2, NULL, NULL, &xr, &e) < 0);
    ASSERT_EQ(access(out2, F_OK), -1);
    snprintf(cmd, sizeof cmd, "ls -a '%s' | grep -q staging", tkm_test_tmpdir());
    ASSERT(system(cmd) != 0);
    ASSERT_STRCONTAINS(e.msg, br.layer.digest);
}
