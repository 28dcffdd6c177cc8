/*
 * test_extract_layout.c - the checks tkm_triton_extract_layout_with makes on an OCI
 * layout before it trusts the layer (issue "extraction leaves nothing
 * behind"): a blob whose size is not its descriptor's is refused as the
 * registry path refuses it; a config without rootfs.diff_ids is refused when
 * there is a layer. Built from the real Triton 3.6.0 fixture.
 */
#include <jansson.h>
#include <stdatomic.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <tkm/archive.h>
#include <tkm/buf.h>
#include <tkm/triton/build.h>
#include <tkm/triton/extract.h>
#include <tkm/oci/image.h>
#include <tkm/oci/layout.h>

#include "test.h"

/* Builds the sm90 fixture into tmpdir/l (tag v1). */
static void build_layout(char *layout, size_t n, struct tkm_triton_build_result *br)
{
    char cmd[2048], cache[1024];
    struct tkm_err e = {0};
    snprintf(cache, sizeof cache, "%s/src", tkm_test_tmpdir());
    mkdir(cache, 0755);
    snprintf(cmd, sizeof cmd, "tar -xzf '%s/triton-cache/triton-3.6.0-cuda-sm90.tar.gz' -C '%s'",
             tkm_test_fixtures(), cache);
    ASSERT_EQ(system(cmd), 0);
    snprintf(cache, sizeof cache, "%s/src/tcache", tkm_test_tmpdir());
    snprintf(layout, n, "%s/l", tkm_test_tmpdir());
    int rc = tkm_triton_build_cache_image(cache, layout, "v1", NULL, br, &e);
    if (rc)
        fprintf(stderr, "%s\n", e.msg);
    ASSERT_OK(rc);
}

/* Only the names given (and nothing named *staging*) are in dir. */
static void assert_dir_holds(const char *dir, const char *a, const char *b)
{
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "test \"$(ls -A '%s' | sort | tr '\\n' ' ')\" = '%s %s '", dir, a, b);
    if (system(cmd) != 0) {
        snprintf(cmd, sizeof cmd, "ls -A '%s' >&2", dir);
        ASSERT_EQ(system(cmd), 0);
        tkm_test_fail(__FILE__, __LINE__, "%s should hold only %s and %s", dir, a, b);
    }
}

static void append(const char *path, const char *s)
{
    FILE *f = fopen(path, "a");
    ASSERT_NOT_NULL(f);
    ASSERT(fputs(s, f) >= 0);
    ASSERT_OK(fclose(f));
}

TEST_TIMEOUT(layer_blob_larger_or_smaller_than_descriptor_is_refused, 60)
{
    char layout[1024], blob[1400], out[1100];
    struct tkm_triton_build_result br;
    struct tkm_triton_extract_result xr;
    struct tkm_err e = {0};
    build_layout(layout, sizeof layout, &br);
    ASSERT_OK(tkm_oci_layout_blob_path(layout, br.layer.digest, blob, sizeof blob));
    snprintf(out, sizeof out, "%s/out", tkm_test_tmpdir());
    /* bytes after the gzip stream: the size check answers first, before any read */
    append(blob, "trailing bytes the descriptor does not cover");
    ASSERT_EQ(tkm_triton_extract_layout_with(layout, "v1", out, NULL, NULL, &xr, &e), -EFBIG);
    char want[200];
    snprintf(want, sizeof want, "layer blob has %llu bytes, its descriptor says %llu",
             (unsigned long long)br.layer.size + 44, (unsigned long long)br.layer.size);
    ASSERT_STRCONTAINS(e.msg, want);
    ASSERT_STRCONTAINS(e.msg, br.layer.digest);
    assert_dir_holds(tkm_test_tmpdir(), "l", "src");
    /* a short blob */
    ASSERT_OK(truncate(blob, (off_t)br.layer.size - 10));
    tkm_err_clear(&e);
    ASSERT_EQ(tkm_triton_extract_layout_with(layout, "v1", out, NULL, NULL, &xr, &e), -EINVAL);
    snprintf(want, sizeof want, "layer blob has %llu bytes, its descriptor says %llu",
             (unsigned long long)br.layer.size - 10, (unsigned long long)br.layer.size);
    ASSERT_STRCONTAINS(e.msg, want);
    assert_dir_holds(tkm_test_tmpdir(), "l", "src");
}

/* Rewrites the config of tag v1 with fn applied to its JSON, as tag `tag`. */
static void retag_with_config(const char *layout, const struct tkm_triton_build_result *br,
                              void (*fn)(json_t *), const char *tag)
{
    struct tkm_buf b = TKM_BUF_INIT(1 << 20);
    struct tkm_err e = {0};
    char cdg[TKM_OCI_DIGEST_LEN + 1], mdg[TKM_OCI_DIGEST_LEN + 1];
    ASSERT_OK(tkm_oci_layout_read_blob(layout, &br->config, &b, &e));
    json_t *cfg = json_loadb(b.data, b.len, 0, NULL);
    ASSERT_NOT_NULL(cfg);
    fn(cfg);
    char *cs = json_dumps(cfg, JSON_COMPACT);
    ASSERT_OK(tkm_oci_layout_put_blob(layout, cs, strlen(cs), cdg, &e));
    tkm_buf_reset(&b);
    ASSERT_OK(tkm_oci_layout_read_blob(layout, &br->manifest, &b, &e));
    json_t *m = json_loadb(b.data, b.len, 0, NULL);
    ASSERT_NOT_NULL(m);
    json_t *c = json_object_get(m, "config");
    json_object_set_new(c, "digest", json_string(cdg));
    json_object_set_new(c, "size", json_integer((json_int_t)strlen(cs)));
    char *ms = json_dumps(m, JSON_COMPACT);
    ASSERT_OK(tkm_oci_layout_put_blob(layout, ms, strlen(ms), mdg, &e));
    struct tkm_oci_desc d = br->manifest;
    memcpy(d.digest, mdg, sizeof d.digest);
    d.size = strlen(ms);
    ASSERT_OK(tkm_oci_layout_add_manifest(layout, &d, tag, &e));
    free(cs);
    free(ms);
    json_decref(cfg);
    json_decref(m);
    tkm_buf_release(&b);
}

static void empty_diff_ids(json_t *cfg)
{
    json_object_set_new(json_object_get(cfg, "rootfs"), "diff_ids", json_array());
}

static void no_diff_ids(json_t *cfg)
{
    json_object_del(json_object_get(cfg, "rootfs"), "diff_ids");
}

TEST_TIMEOUT(config_without_diff_ids_is_refused, 60)
{
    char layout[1024], out[1100];
    struct tkm_triton_build_result br;
    struct tkm_triton_extract_result xr;
    struct tkm_err e = {0};
    build_layout(layout, sizeof layout, &br);
    snprintf(out, sizeof out, "%s/out", tkm_test_tmpdir());
    retag_with_config(layout, &br, empty_diff_ids, "empty");
    ASSERT_EQ(tkm_triton_extract_layout_with(layout, "empty", out, NULL, NULL, &xr, &e), -EINVAL);
    ASSERT_STRCONTAINS(e.msg, "lists 0 rootfs.diff_ids for 1 layer");
    assert_dir_holds(tkm_test_tmpdir(), "l", "src");
    retag_with_config(layout, &br, no_diff_ids, "absent");
    tkm_err_clear(&e);
    int rc = tkm_triton_extract_layout_with(layout, "absent", out, NULL, NULL, &xr, &e);
    ASSERT(rc < 0);
    ASSERT_STRCONTAINS(e.msg, "diff_ids");
    assert_dir_holds(tkm_test_tmpdir(), "l", "src");
    /* the untouched image still extracts */
    tkm_err_clear(&e);
    ASSERT_OK(tkm_triton_extract_layout_with(layout, "v1", out, NULL, NULL, &xr, &e));
    ASSERT_EQ(xr.files, 36);
}

TEST_TIMEOUT(limits_and_cancel_reach_the_layout_extraction, 60)
{
    char layout[1024], out[1100];
    struct tkm_triton_build_result br;
    struct tkm_triton_extract_result xr;
    struct tkm_err e = {0};
    build_layout(layout, sizeof layout, &br);
    snprintf(out, sizeof out, "%s/out", tkm_test_tmpdir());
    struct tkm_archive_opts base;
    tkm_archive_opts_init(&base);
    base.limits.max_file_bytes = 1000;
    ASSERT_EQ(tkm_triton_extract_layout_with(layout, "v1", out, NULL, &base, &xr, &e), -EFBIG);
    ASSERT_STRCONTAINS(e.msg, "exceeds the 1000-byte per-file limit");
    assert_dir_holds(tkm_test_tmpdir(), "l", "src");
    tkm_archive_opts_init(&base);
    atomic_int stop = 1;
    base.cancel = &stop;
    tkm_err_clear(&e);
    ASSERT_EQ(tkm_triton_extract_layout_with(layout, "v1", out, NULL, &base, &xr, &e), -ECANCELED);
    assert_dir_holds(tkm_test_tmpdir(), "l", "src");
}

TEST_TIMEOUT(existing_destination_is_refused, 60)
{
    char layout[1024], out[1100], cmd[1300];
    struct tkm_triton_build_result br;
    struct tkm_triton_extract_result xr;
    struct tkm_err e = {0};
    build_layout(layout, sizeof layout, &br);
    snprintf(out, sizeof out, "%s/out", tkm_test_tmpdir());
    ASSERT_OK(mkdir(out, 0755));
    ASSERT_EQ(tkm_triton_extract_layout_with(layout, "v1", out, NULL, NULL, &xr, &e), -EEXIST);
    ASSERT_STRCONTAINS(e.msg, "File exists");
    assert_dir_holds(tkm_test_tmpdir(), "l", "out src"); /* no staging directory left */
    snprintf(cmd, sizeof cmd, "test -z \"$(ls -A '%s')\"", out);
    ASSERT_EQ(system(cmd), 0); /* and the directory that was there is untouched */
}

TEST_TIMEOUT(a_dead_staging_dir_beside_the_destination_is_purged, 60)
{
    char layout[1024], out[1100], stale[1100];
    struct tkm_triton_build_result br;
    struct tkm_triton_extract_result xr;
    struct tkm_err e = {0};
    build_layout(layout, sizeof layout, &br);
    pid_t dead = fork();
    if (dead == 0)
        _exit(0);
    waitpid(dead, NULL, 0);
    snprintf(stale, sizeof stale, "%s/.tkm-staging-%d-1-0123456789ab", tkm_test_tmpdir(),
             (int)dead);
    ASSERT_OK(mkdir(stale, 0700));
    snprintf(out, sizeof out, "%s/out", tkm_test_tmpdir());
    ASSERT_OK(tkm_triton_extract_layout_with(layout, "v1", out, NULL, NULL, &xr, &e));
    ASSERT(access(stale, F_OK) != 0);
    assert_dir_holds(tkm_test_tmpdir(), "l", "out src");
}
