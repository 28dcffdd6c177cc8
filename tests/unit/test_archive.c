/*
 * Unit tests for lib/archive: a malicious-archive corpus built here, byte by
 * byte (reliability.md checklist 9-15), and the real Triton fixtures compared
 * with what `tar -xzf` makes of them.
 */
#include <dirent.h>
#include <sys/stat.h>
#include <sys/xattr.h>

#include <tkm/archive.h>
#include <tkm/buf.h>

#include "test.h"
#include "tarbuild.h"

/* The parent directory (tkm_test_tmpdir) holds only the blob afterwards. */
static void assert_only_blob(const char *dir)
{
    DIR *d = opendir(dir);
    ASSERT_NOT_NULL(d);
    struct dirent *de;
    int n = 0;
    while ((de = readdir(d))) {
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
            continue;
        if (strcmp(de->d_name, "blob") != 0)
            tkm_test_fail(__FILE__, __LINE__, "unexpected %s/%s after a rejection", dir,
                          de->d_name);
        n++;
    }
    closedir(d);
    ASSERT_EQ(n, 1);
}

static int extract_buf(const struct tkm_buf *blob, const struct tkm_archive_opts *o,
                       struct tkm_archive_result *res, struct tkm_err *err)
{
    char bp[512], out[512];
    snprintf(bp, sizeof bp, "%s/blob", tkm_test_tmpdir());
    snprintf(out, sizeof out, "%s/out", tkm_test_tmpdir());
    tb_write(bp, blob->data, blob->len);
    return tkm_archive_extract_path(bp, out, o, res, err);
}

/* Extracts tar bytes with default options; expects a rejection whose message
 * contains `needle`, and nothing left beside the blob. */
static void expect_reject_opts(const struct tkm_buf *tar, const struct tkm_archive_opts *o,
                               const char *needle)
{
    struct tkm_err err = {0};
    int rc = extract_buf(tar, o, NULL, &err);
    if (rc >= 0)
        tkm_test_fail(__FILE__, __LINE__, "extraction succeeded, expected '%s'", needle);
    ASSERT_STRCONTAINS(err.msg, needle);
    assert_only_blob(tkm_test_tmpdir());
}

static void expect_reject(const struct tkm_buf *tar, const char *needle)
{
    struct tkm_archive_opts o;
    tkm_archive_opts_init(&o);
    o.fsync = 0;
    expect_reject_opts(tar, &o, needle);
}

static void outpath(char *p, size_t n, const char *rel)
{
    snprintf(p, n, "%s/out/%s", tkm_test_tmpdir(), rel);
}

TEST(small_tar_extracts_with_modes_normalised)
{
    struct tkm_buf t = TKM_BUF_INIT(1 << 20);
    tb_dir(&t, "io.triton.cache/");
    tb_file(&t, "io.triton.cache/K/k.json", "{\"hash\":1}", 10, 0600);
    tb_file(&t, "io.triton.cache/K/run.so", "ELF", 3, 0700);
    tb_end(&t);
    struct tkm_archive_opts o;
    tkm_archive_opts_init(&o);
    struct tkm_archive_result r;
    struct tkm_err err = {0};
    ASSERT_OK(extract_buf(&t, &o, &r, &err));
    ASSERT_EQ(r.entries, 3);
    ASSERT_EQ(r.files, 2);
    ASSERT_EQ(r.file_bytes, 13);
    ASSERT_EQ(r.tar_bytes, t.len);
    ASSERT_EQ(r.compression, TKM_COMPRESSION_NONE);
    ASSERT_STREQ(r.diff_id, r.blob_digest);
    char p[600];
    struct stat st;
    outpath(p, sizeof p, "io.triton.cache/K/k.json");
    ASSERT_OK(stat(p, &st));
    ASSERT_EQ(st.st_mode & 07777, 0644);
    outpath(p, sizeof p, "io.triton.cache/K/run.so");
    ASSERT_OK(stat(p, &st));
    ASSERT_EQ(st.st_mode & 07777, 0755);
    outpath(p, sizeof p, "io.triton.cache/K");
    ASSERT_OK(stat(p, &st));
    ASSERT_EQ(st.st_mode & 07777, 0755);
    tkm_buf_release(&t);
}

/* ---- checklist 9: path escapes ------------------------------------------- */

TEST(rejects_dotdot)
{
    struct tkm_buf t = TKM_BUF_INIT(1 << 20);
    tb_file(&t, "ok", "a", 1, 0644);
    tb_file(&t, "../x", "evil", 4, 0644);
    tb_end(&t);
    expect_reject(&t, "entry ../x: '..' components are not allowed");
    char p[600];
    snprintf(p, sizeof p, "%s/../x", tkm_test_tmpdir());
    ASSERT(access(p, F_OK) != 0);
    tkm_buf_release(&t);
}

TEST(rejects_dotdot_in_the_middle)
{
    struct tkm_buf t = TKM_BUF_INIT(1 << 20);
    tb_file(&t, "io.triton.cache/a/../../x", "evil", 4, 0644);
    tb_end(&t);
    expect_reject(&t, "entry io.triton.cache/a/../../x: '..'");
    tkm_buf_release(&t);
}

TEST(rejects_absolute)
{
    struct tkm_buf t = TKM_BUF_INIT(1 << 20);
    char name[128];
    snprintf(name, sizeof name, "/tmp/tkm-abs-escape-%d", (int)getpid());
    tb_file(&t, name, "evil", 4, 0644);
    tb_end(&t);
    char needle[200];
    snprintf(needle, sizeof needle, "entry %s: absolute paths are not allowed", name);
    expect_reject(&t, needle);
    ASSERT(access(name, F_OK) != 0);
    tkm_buf_release(&t);
}

TEST(rejects_etc_x)
{
    struct tkm_buf t = TKM_BUF_INIT(1 << 20);
    tb_file(&t, "/etc/x", "evil", 4, 0644);
    tb_end(&t);
    expect_reject(&t, "entry /etc/x: absolute");
    tkm_buf_release(&t);
}

TEST(rejects_pax_path_dotdot)
{
    struct tkm_buf t = TKM_BUF_INIT(1 << 20);
    const char *kv[] = {"path=../x"};
    tb_pax(&t, kv, 1);
    tb_file(&t, "innocent", "evil", 4, 0644);
    tb_end(&t);
    expect_reject(&t, "entry ../x: '..'");
    tkm_buf_release(&t);
}

TEST(rejects_gnu_longname_escape)
{
    struct tkm_buf t = TKM_BUF_INIT(1 << 20);
    char longname[400];
    int n = snprintf(longname, sizeof longname, "io.triton.cache/");
    for (int i = 0; i < 20; i++)
        n += snprintf(longname + n, sizeof longname - (size_t)n, "../");
    snprintf(longname + n, sizeof longname - (size_t)n, "tmp/tkm-longname-escape");
    tb_gnu_long(&t, 'L', longname);
    tb_file(&t, "short", "evil", 4, 0644);
    tb_end(&t);
    expect_reject(&t, "'..' components are not allowed");
    ASSERT(access("/tmp/tkm-longname-escape", F_OK) != 0);
    tkm_buf_release(&t);
}

TEST(rejects_empty_name_and_root_file)
{
    struct tkm_buf t = TKM_BUF_INIT(1 << 20);
    tb_file(&t, "", "x", 1, 0644);
    tb_end(&t);
    expect_reject(&t, "empty name");
    unlink("blob");
    tkm_buf_reset(&t);
    tb_file(&t, "./", "x", 1, 0644);
    tb_end(&t);
    expect_reject(&t, "entry ./: a regular file whose name ends in '/'");
    tkm_buf_reset(&t);
    tb_file(&t, ".", "x", 1, 0644);
    tb_end(&t);
    expect_reject(&t, "entry .: a file that resolves to the extraction root");
    tkm_buf_release(&t);
}

/* ---- checklist 10, 11: links ------------------------------------------------ */

TEST(rejects_symlink_then_write_through_it)
{
    struct tkm_buf t = TKM_BUF_INIT(1 << 20);
    char victim[512];
    snprintf(victim, sizeof victim, "%s/victim", tkm_test_tmpdir());
    ASSERT_OK(mkdir(victim, 0755));
    tb_header(&t, "a", '2', 0, 0777, victim);
    tb_file(&t, "a/cron", "* * * * * evil", 14, 0644);
    tb_end(&t);
    struct tkm_archive_opts o;
    tkm_archive_opts_init(&o);
    struct tkm_err err = {0};
    ASSERT(extract_buf(&t, &o, NULL, &err) < 0);
    ASSERT_STRCONTAINS(err.msg, "entry a: symbolic links are not allowed");
    char p[600];
    snprintf(p, sizeof p, "%s/cron", victim);
    ASSERT(access(p, F_OK) != 0);
    snprintf(p, sizeof p, "%s/out", tkm_test_tmpdir());
    ASSERT(access(p, F_OK) != 0);
    tkm_buf_release(&t);
}

TEST(rejects_symlink_to_etc)
{
    struct tkm_buf t = TKM_BUF_INIT(1 << 20);
    tb_header(&t, "a", '2', 0, 0777, "/etc");
    tb_file(&t, "a/cron", "evil", 4, 0644);
    tb_end(&t);
    expect_reject(&t, "entry a: symbolic links are not allowed (-> /etc)");
    tkm_buf_release(&t);
}

TEST(rejects_hardlink_to_shadow)
{
    struct tkm_buf t = TKM_BUF_INIT(1 << 20);
    tb_header(&t, "shadow", '1', 0, 0644, "/etc/shadow");
    tb_end(&t);
    expect_reject(&t, "entry shadow: hard links are not allowed (link to /etc/shadow)");
    tkm_buf_release(&t);
}

TEST(rejects_hardlink_cwd_relative)
{
    struct tkm_buf t = TKM_BUF_INIT(1 << 20);
    tb_file(&t, "real", "data", 4, 0644);
    tb_header(&t, "alias", '1', 0, 0644, "blob"); /* a file in the process CWD */
    tb_end(&t);
    expect_reject(&t, "entry alias: hard links are not allowed (link to blob)");
    tkm_buf_release(&t);
}

TEST(rejects_pax_linkpath_symlink)
{
    struct tkm_buf t = TKM_BUF_INIT(1 << 20);
    const char *kv[] = {"linkpath=/etc/passwd"};
    tb_pax(&t, kv, 1);
    tb_header(&t, "pw", '2', 0, 0777, "harmless");
    tb_end(&t);
    expect_reject(&t, "entry pw: symbolic links are not allowed (-> /etc/passwd)");
    tkm_buf_release(&t);
}

/* ---- checklist 12: types, modes, xattrs -------------------------------------- */

TEST(rejects_device)
{
    struct tkm_buf t = TKM_BUF_INIT(1 << 20);
    tb_header(&t, "io.triton.cache/sda", '4', 0, 0600, NULL);
    tb_end(&t);
    expect_reject(&t, "entry io.triton.cache/sda: device nodes are not allowed");
    tkm_buf_reset(&t);
    tb_header(&t, "null", '3', 0, 0666, NULL);
    tb_end(&t);
    expect_reject(&t, "entry null: device nodes are not allowed");
    tkm_buf_release(&t);
}

TEST(rejects_fifo)
{
    struct tkm_buf t = TKM_BUF_INIT(1 << 20);
    tb_header(&t, "pipe", '6', 0, 0644, NULL);
    tb_end(&t);
    expect_reject(&t, "entry pipe: FIFOs are not allowed");
    tkm_buf_release(&t);
}

TEST(setuid_setgid_sticky_are_masked)
{
    struct tkm_buf t = TKM_BUF_INIT(1 << 20);
    tb_file(&t, "suid", "#!/bin/sh\n", 10, 06755);
    tb_file(&t, "sticky", "x", 1, 01666);
    tb_header(&t, "sdir/", '5', 0, 07777, NULL);
    tb_end(&t);
    struct tkm_archive_opts o;
    tkm_archive_opts_init(&o);
    struct tkm_err err = {0};
    ASSERT_OK(extract_buf(&t, &o, NULL, &err));
    char p[600];
    struct stat st;
    outpath(p, sizeof p, "suid");
    ASSERT_OK(stat(p, &st));
    ASSERT_EQ(st.st_mode & 07777, 0755);
    outpath(p, sizeof p, "sticky");
    ASSERT_OK(stat(p, &st));
    ASSERT_EQ(st.st_mode & 07777, 0644);
    outpath(p, sizeof p, "sdir");
    ASSERT_OK(stat(p, &st));
    ASSERT_EQ(st.st_mode & 07777, 0755);
    tkm_buf_release(&t);
}

TEST(xattr_security_capability_is_dropped)
{
    struct tkm_buf t = TKM_BUF_INIT(1 << 20);
    const char *kv[] = {"SCHILY.xattr.security.capability=\x01\x00\x00\x02\xff\xff",
                        "SCHILY.xattr.user.evil=1"};
    tb_pax(&t, kv, 2);
    tb_file(&t, "capfile", "ELF", 3, 0755);
    tb_end(&t);
    struct tkm_archive_opts o;
    tkm_archive_opts_init(&o);
    struct tkm_err err = {0};
    ASSERT_OK(extract_buf(&t, &o, NULL, &err));
    char p[600], val[64];
    outpath(p, sizeof p, "capfile");
    ASSERT_EQ(getxattr(p, "security.capability", val, sizeof val), -1);
    ASSERT_EQ(errno, ENODATA);
    ASSERT_EQ(listxattr(p, val, sizeof val), 0);
    tkm_buf_release(&t);
}

TEST(rejects_sparse)
{
    struct tkm_buf t = TKM_BUF_INIT(1 << 20);
    tb_header(&t, "holes", 'S', 0, 0644, NULL);
    tb_end(&t);
    expect_reject(&t, "entry holes: GNU sparse files are not allowed");
    tkm_buf_reset(&t);
    const char *kv[] = {"GNU.sparse.major=1", "GNU.sparse.minor=0"};
    tb_pax(&t, kv, 2);
    tb_file(&t, "holes2", "x", 1, 0644);
    tb_end(&t);
    expect_reject(&t, "sparse files are not allowed");
    tkm_buf_release(&t);
}

/* ---- checklist 13: whiteouts ------------------------------------------------ */

TEST(rejects_opaque_whiteout)
{
    struct tkm_buf t = TKM_BUF_INIT(1 << 20);
    tb_file(&t, "dir/.wh..wh..opq", "", 0, 0644);
    tb_end(&t);
    expect_reject(&t, "entry dir/.wh..wh..opq: whiteout entries (.wh.*) are not allowed");
    tkm_buf_release(&t);
}

TEST(rejects_whiteout_file)
{
    struct tkm_buf t = TKM_BUF_INIT(1 << 20);
    tb_file(&t, "io.triton.cache/.wh.x", "", 0, 0644);
    tb_end(&t);
    expect_reject(&t, "entry io.triton.cache/.wh.x: whiteout");
    tkm_buf_release(&t);
}

/* ---- checklist 14: bombs and bad sizes --------------------------------------- */

static void zeros_tar(struct tkm_buf *t, size_t n)
{
    char *z = calloc(1, n);
    ASSERT_NOT_NULL(z);
    tb_file(t, "zeros", z, n, 0644);
    tb_end(t);
    free(z);
}

TEST_TIMEOUT(rejects_gzip_bomb, 60)
{
    struct tkm_buf t = TKM_BUF_INIT(200 << 20), gz = TKM_BUF_INIT(200 << 20);
    zeros_tar(&t, 96 << 20);
    tb_gzip(&t, &gz);
    ASSERT(gz.len < (1 << 20)); /* ~1000:1 */
    expect_reject(&gz, "gzip stream expands more than 250:1");
    tkm_buf_release(&t);
    tkm_buf_release(&gz);
}

TEST_TIMEOUT(rejects_zstd_bomb, 60)
{
    struct tkm_buf t = TKM_BUF_INIT(200 << 20), zs = TKM_BUF_INIT(200 << 20);
    zeros_tar(&t, 96 << 20);
    tb_zstd(&t, &zs, 3);
    ASSERT(zs.len < (64 << 10));
    expect_reject(&zs, "zstd stream expands more than 250:1");
    tkm_buf_release(&t);
    tkm_buf_release(&zs);
}

TEST(rejects_total_bytes_over_cap)
{
    struct tkm_buf t = TKM_BUF_INIT(8 << 20), gz = TKM_BUF_INIT(8 << 20);
    zeros_tar(&t, 3 << 20);
    tb_gzip(&t, &gz);
    struct tkm_archive_opts o;
    tkm_archive_opts_init(&o);
    o.limits.max_total_bytes = 1 << 20;
    expect_reject_opts(&gz, &o, "layer expands past the 1048576-byte limit");
    tkm_buf_release(&t);
    tkm_buf_release(&gz);
}

TEST(rejects_zstd_window_over_cap)
{
    struct tkm_buf t = TKM_BUF_INIT(8 << 20), zs = TKM_BUF_INIT(8 << 20);
    char *rnd = malloc(4 << 20);
    ASSERT_NOT_NULL(rnd);
    for (size_t i = 0; i < (4u << 20); i++)
        rnd[i] = (char)(i * 2654435761u >> 13);
    tb_file(&t, "big", rnd, 4 << 20, 0644);
    tb_end(&t);
    free(rnd);
    ZSTD_CCtx *cc = ZSTD_createCCtx();
    ASSERT_NOT_NULL(cc);
    ASSERT(!ZSTD_isError(ZSTD_CCtx_setParameter(cc, ZSTD_c_windowLog, 23)));
    ASSERT_OK(tkm_buf_grow(&zs, ZSTD_compressBound(t.len)));
    size_t zn = ZSTD_compress2(cc, zs.data, ZSTD_compressBound(t.len), t.data, t.len);
    ASSERT(!ZSTD_isError(zn));
    zs.len = zn;
    ZSTD_freeCCtx(cc);
    struct tkm_archive_opts o;
    tkm_archive_opts_init(&o);
    o.limits.zstd_window_log_max = 20; /* 1 MiB window; the frame needs 4+ MiB */
    expect_reject_opts(&zs, &o, "zstd stream rejected near compressed byte");
    tkm_buf_release(&t);
    tkm_buf_release(&zs);
}

TEST(rejects_base256_size)
{
    struct tkm_buf t = TKM_BUF_INIT(1 << 20);
    unsigned char f[12] = {0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x10, 0};
    tb_header_raw(&t, "big256", '0', f, 0644, NULL);
    tb_end(&t);
    expect_reject(&t, "entry big256: base-256 (binary) size fields are not accepted");
    tkm_buf_release(&t);
}

TEST(rejects_negative_size)
{
    struct tkm_buf t = TKM_BUF_INIT(1 << 20);
    unsigned char f[12];
    memset(f, 0xff, sizeof f); /* base-256 -1 */
    tb_header_raw(&t, "neg", '0', f, 0644, NULL);
    tb_end(&t);
    expect_reject(&t, "entry neg: base-256");
    tkm_buf_reset(&t);
    const char *kv[] = {"size=-5"};
    tb_pax(&t, kv, 1);
    tb_file(&t, "neg2", "x", 1, 0644);
    tb_end(&t);
    expect_reject(&t, "size '-5' is not a non-negative number");
    tkm_buf_release(&t);
}

TEST(rejects_malformed_size)
{
    struct tkm_buf t = TKM_BUF_INIT(1 << 20);
    tb_header_raw(&t, "junk", '0', (const unsigned char *)"00000000x12 ", 0644, NULL);
    tb_end(&t);
    expect_reject(&t, "entry junk: malformed size field");
    tkm_buf_release(&t);
}

TEST(rejects_huge_pax_header)
{
    struct tkm_buf t = TKM_BUF_INIT(8 << 20);
    char *v = malloc(2 << 20);
    ASSERT_NOT_NULL(v);
    memcpy(v, "comment=", 8);
    memset(v + 8, 'A', (2 << 20) - 9);
    v[(2 << 20) - 1] = '\0';
    const char *kv[] = {v};
    tb_pax(&t, kv, 1);
    tb_file(&t, "after", "x", 1, 0644);
    tb_end(&t);
    free(v);
    expect_reject(&t, "PAX header PaxHeaders/x: 2097160 bytes exceeds the 1048576-byte limit");
    tkm_buf_release(&t);
}

TEST(rejects_long_gnu_name_over_path_limit)
{
    struct tkm_buf t = TKM_BUF_INIT(1 << 20);
    char n[3000];
    memset(n, 'a', sizeof n - 1);
    n[sizeof n - 1] = '\0';
    tb_gnu_long(&t, 'L', n);
    tb_file(&t, "x", "x", 1, 0644);
    tb_end(&t);
    expect_reject(&t, "GNU long-name header ././@LongLink: 3000 bytes exceeds the 1025-byte limit");
    tkm_buf_release(&t);
}

TEST(rejects_too_many_entries)
{
    struct tkm_buf t = TKM_BUF_INIT(4 << 20);
    for (int i = 0; i < 1001; i++) {
        char n[32];
        snprintf(n, sizeof n, "f%04d", i);
        tb_file(&t, n, "", 0, 0644);
    }
    tb_end(&t);
    struct tkm_archive_opts o;
    tkm_archive_opts_init(&o);
    o.fsync = 0;
    o.limits.max_entries = 1000;
    expect_reject_opts(&t, &o, "entry f1000: more than 1000 entries");
    tkm_buf_release(&t);
}

TEST(rejects_depth_and_length)
{
    struct tkm_buf t = TKM_BUF_INIT(1 << 20);
    tb_file(&t, "a/b/c/d/e/f", "x", 1, 0644);
    tb_end(&t);
    struct tkm_archive_opts o;
    tkm_archive_opts_init(&o);
    o.limits.max_depth = 5;
    expect_reject_opts(&t, &o, "entry a/b/c/d/e/f: deeper than 5 components");
    tkm_archive_opts_init(&o);
    o.limits.max_path_len = 8;
    expect_reject_opts(&t, &o, "name of 11 bytes exceeds the 8-byte limit");
    tkm_buf_release(&t);
}

TEST(rejects_file_over_per_file_cap)
{
    struct tkm_buf t = TKM_BUF_INIT(1 << 20);
    char d[4096] = {0};
    tb_file(&t, "big", d, sizeof d, 0644);
    tb_end(&t);
    struct tkm_archive_opts o;
    tkm_archive_opts_init(&o);
    o.limits.max_file_bytes = 4095;
    expect_reject_opts(&t, &o, "entry big: 4096 bytes exceeds the 4095-byte per-file limit");
    tkm_buf_release(&t);
}

/* ---- integrity --------------------------------------------------------------- */

TEST(rejects_diff_id_mismatch)
{
    struct tkm_buf t = TKM_BUF_INIT(1 << 20), gz = TKM_BUF_INIT(1 << 20);
    tb_file(&t, "f", "data", 4, 0644);
    tb_end(&t);
    tb_gzip(&t, &gz);
    struct tkm_archive_opts o;
    tkm_archive_opts_init(&o);
    o.diff_id = "sha256:0000000000000000000000000000000000000000000000000000000000000000";
    expect_reject_opts(&gz, &o, "layer diff_id mismatch: uncompressed stream is sha256:");
    ASSERT_STRCONTAINS(o.diff_id, "sha256:0000");
    tkm_buf_release(&t);
    tkm_buf_release(&gz);
}

TEST(checks_blob_digest_and_diff_id)
{
    struct tkm_buf t = TKM_BUF_INIT(1 << 20), gz = TKM_BUF_INIT(1 << 20);
    tb_file(&t, "f", "data", 4, 0644);
    tb_end(&t);
    tb_gzip(&t, &gz);
    struct tkm_archive_opts o;
    tkm_archive_opts_init(&o);
    struct tkm_archive_result r;
    struct tkm_err err = {0};
    ASSERT_OK(extract_buf(&gz, &o, &r, &err));
    ASSERT_EQ(r.compression, TKM_COMPRESSION_GZIP);
    char diff[72], blob[72];
    memcpy(diff, r.diff_id, sizeof diff);
    memcpy(blob, r.blob_digest, sizeof blob);
    char out[512];
    snprintf(out, sizeof out, "%s/out", tkm_test_tmpdir());
    ASSERT_OK(tkm_rmtree_at(AT_FDCWD, out));
    o.diff_id = diff;
    o.blob_digest = blob;
    ASSERT_OK(extract_buf(&gz, &o, &r, &err));
    ASSERT_OK(tkm_rmtree_at(AT_FDCWD, out));
    blob[10] = blob[10] == 'a' ? 'b' : 'a';
    expect_reject_opts(&gz, &o, "layer blob digest mismatch");
    tkm_buf_release(&t);
    tkm_buf_release(&gz);
}

TEST(rejects_truncated_streams)
{
    struct tkm_buf t = TKM_BUF_INIT(1 << 20), gz = TKM_BUF_INIT(1 << 20),
                   zs = TKM_BUF_INIT(1 << 20);
    char d[20000];
    for (size_t i = 0; i < sizeof d; i++)
        d[i] = (char)(i * 7 + i / 13);
    tb_file(&t, "f", d, sizeof d, 0644);
    tb_end(&t);
    tb_gzip(&t, &gz);
    tb_zstd(&t, &zs, 3);
    gz.len -= 30;
    expect_reject(&gz, "gzip stream is truncated");
    zs.len -= 30;
    expect_reject(&zs, "zstd stream is truncated");
    t.len = 512 + 10000;
    expect_reject(&t, "runcated");
    tkm_buf_release(&t);
    tkm_buf_release(&gz);
    tkm_buf_release(&zs);
}

TEST(rejects_not_a_tar)
{
    struct tkm_buf t = TKM_BUF_INIT(1 << 20);
    for (int i = 0; i < 2048; i++)
        ASSERT_OK(tkm_buf_putc(&t, (char)('A' + i % 26)));
    expect_reject(&t, "bad checksum");
    tkm_buf_release(&t);
}

TEST(rejects_wrong_compression)
{
    struct tkm_buf t = TKM_BUF_INIT(1 << 20);
    tb_file(&t, "f", "data", 4, 0644);
    tb_end(&t);
    struct tkm_archive_opts o;
    tkm_archive_opts_init(&o);
    o.compression = TKM_COMPRESSION_GZIP;
    expect_reject_opts(&t, &o, "layer blob is none-compressed, but gzip was expected");
    tkm_buf_release(&t);
}

TEST(rejects_duplicate_and_file_over_dir)
{
    struct tkm_buf t = TKM_BUF_INIT(1 << 20);
    tb_file(&t, "d/f", "1", 1, 0644);
    tb_file(&t, "d/f", "2", 1, 0644);
    tb_end(&t);
    expect_reject(&t, "entry d/f: duplicate entry");
    tkm_buf_reset(&t);
    tb_file(&t, "d", "1", 1, 0644);
    tb_file(&t, "d/f", "2", 1, 0644);
    tb_end(&t);
    expect_reject(&t, "entry d/f: d is not a directory");
    tkm_buf_release(&t);
}

TEST(existing_destination_is_refused)
{
    struct tkm_buf t = TKM_BUF_INIT(1 << 20);
    tb_file(&t, "f", "1", 1, 0644);
    tb_end(&t);
    char out[512];
    snprintf(out, sizeof out, "%s/out", tkm_test_tmpdir());
    ASSERT_OK(mkdir(out, 0755));
    struct tkm_archive_opts o;
    tkm_archive_opts_init(&o);
    struct tkm_err err = {0};
    ASSERT_EQ(extract_buf(&t, &o, NULL, &err), -EEXIST);
    ASSERT_STRCONTAINS(err.msg, "already exists");
    tkm_buf_release(&t);
}

static void count_progress(void *ud, const struct tkm_archive_progress *p)
{
    uint64_t *last = ud;
    ASSERT(p->entries >= last[1]);
    last[0]++;
    last[1] = p->entries;
}

TEST(cancel_and_progress)
{
    struct tkm_buf t = TKM_BUF_INIT(1 << 20);
    for (int i = 0; i < 200; i++) {
        char n[32];
        snprintf(n, sizeof n, "d/f%03d", i);
        tb_file(&t, n, n, strlen(n), 0644);
    }
    tb_end(&t);
    struct tkm_archive_opts o;
    tkm_archive_opts_init(&o);
    o.fsync = 0;
    uint64_t calls[2] = {0, 0};
    o.progress = count_progress;
    o.progress_ud = calls;
    struct tkm_err err = {0};
    ASSERT_OK(extract_buf(&t, &o, NULL, &err));
    ASSERT(calls[0] >= 3); /* every 64 entries and at the end */
    ASSERT_EQ(calls[1], 200);
    char out[512];
    snprintf(out, sizeof out, "%s/out", tkm_test_tmpdir());
    ASSERT_OK(tkm_rmtree_at(AT_FDCWD, out));
    atomic_int cancel = 1;
    o.cancel = &cancel;
    o.progress = NULL;
    expect_reject_opts(&t, &o, "extraction cancelled");
    tkm_buf_release(&t);
}

TEST(include_and_strip_filter)
{
    struct tkm_buf t = TKM_BUF_INIT(1 << 20);
    tb_dir(&t, "io.triton.cache/");
    tb_file(&t, "io.triton.cache/K/k.json", "{}", 2, 0644);
    tb_file(&t, "io.triton.manifest/manifest.json", "{}", 2, 0644);
    tb_file(&t, "etc/passwd", "x", 1, 0644);
    tb_end(&t);
    static const char *const inc[] = {"io.triton.cache/", "io.triton.manifest/", NULL};
    struct tkm_archive_opts o;
    tkm_archive_opts_init(&o);
    o.include = inc;
    struct tkm_archive_result r;
    struct tkm_err err = {0};
    ASSERT_OK(extract_buf(&t, &o, &r, &err));
    ASSERT_EQ(r.skipped, 1);
    ASSERT_EQ(r.files, 2);
    char p[600];
    outpath(p, sizeof p, "etc");
    ASSERT(access(p, F_OK) != 0);
    outpath(p, sizeof p, "io.triton.manifest/manifest.json");
    ASSERT_OK(access(p, F_OK));
    snprintf(p, sizeof p, "%s/out", tkm_test_tmpdir());
    ASSERT_OK(tkm_rmtree_at(AT_FDCWD, p));
    o.include = NULL;
    o.strip = "io.triton.cache/";
    ASSERT_OK(extract_buf(&t, &o, &r, &err));
    ASSERT_EQ(r.files, 1);
    ASSERT_EQ(r.skipped, 2);
    outpath(p, sizeof p, "K/k.json");
    ASSERT_OK(access(p, F_OK));
    tkm_buf_release(&t);
}

TEST(filtered_out_links_still_reject)
{
    struct tkm_buf t = TKM_BUF_INIT(1 << 20);
    tb_file(&t, "io.triton.cache/K/k.json", "{}", 2, 0644);
    tb_header(&t, "other/link", '2', 0, 0777, "/etc");
    tb_end(&t);
    static const char *const inc[] = {"io.triton.cache/", NULL};
    struct tkm_archive_opts o;
    tkm_archive_opts_init(&o);
    o.include = inc;
    expect_reject_opts(&t, &o, "entry other/link: symbolic links are not allowed");
    tkm_buf_release(&t);
}

/* ---- real fixtures -------------------------------------------------------------- */

static void fixture_roundtrip(const char *name)
{
    char fx[512], out[600], ref[600], cmd[2048];
    snprintf(fx, sizeof fx, "%s/triton-cache/%s", tkm_test_fixtures(), name);
    snprintf(out, sizeof out, "%s/out", tkm_test_tmpdir());
    snprintf(ref, sizeof ref, "%s/ref", tkm_test_tmpdir());
    ASSERT_OK(mkdir(ref, 0755));
    snprintf(cmd, sizeof cmd, "tar -xzf '%s' -C '%s'", fx, ref);
    ASSERT_OK(system(cmd));
    struct tkm_archive_opts o;
    tkm_archive_opts_init(&o);
    struct tkm_archive_result r;
    struct tkm_err err = {0};
    int rc = tkm_archive_extract_path(fx, out, &o, &r, &err);
    if (rc < 0)
        tkm_test_fail(__FILE__, __LINE__, "%s: %s", name, err.msg);
    snprintf(cmd, sizeof cmd, "diff -r '%s' '%s'", ref, out);
    ASSERT_OK(system(cmd));
    /* diff_id == sha256 of the gunzipped stream */
    snprintf(cmd, sizeof cmd, "gzip -dc '%s' | sha256sum | cut -c1-64 > '%s/sum'", fx,
             tkm_test_tmpdir());
    ASSERT_OK(system(cmd));
    char sump[600], sum[80] = {0};
    snprintf(sump, sizeof sump, "%s/sum", tkm_test_tmpdir());
    FILE *f = fopen(sump, "r");
    ASSERT_NOT_NULL(f);
    ASSERT_NOT_NULL(fgets(sum, sizeof sum, f));
    fclose(f);
    sum[64] = '\0';
    ASSERT_STREQ(r.diff_id + 7, sum);
    ASSERT(r.files > 0);
    ASSERT_EQ(r.compression, TKM_COMPRESSION_GZIP);
}

TEST(fixture_sm90_matches_tar)
{
    fixture_roundtrip("triton-3.6.0-cuda-sm90.tar.gz");
}

TEST(fixture_binary_only_matches_tar)
{
    fixture_roundtrip("triton-3.6.0-cuda-sm90-binary-only.tar.gz");
}

TEST_TIMEOUT(fixture_inductor_block_matches_tar, 60)
{
    fixture_roundtrip("triton-3.6.0-cuda-sm90-inductor-block.tar.gz");
}

TEST_TIMEOUT(fixture_as_zstd_same_diff_id, 60)
{
    char fx[512], zst[600], cmd[2048], out[600];
    snprintf(fx, sizeof fx, "%s/triton-cache/triton-3.6.0-cuda-sm90.tar.gz", tkm_test_fixtures());
    snprintf(zst, sizeof zst, "%s/fx.tar.zst", tkm_test_tmpdir());
    snprintf(cmd, sizeof cmd, "gzip -dc '%s' | zstd -q -19 -o '%s'", fx, zst);
    ASSERT_OK(system(cmd));
    struct tkm_archive_opts o;
    tkm_archive_opts_init(&o);
    struct tkm_archive_result rg, rz;
    struct tkm_err err = {0};
    snprintf(out, sizeof out, "%s/g", tkm_test_tmpdir());
    ASSERT_OK(tkm_archive_extract_path(fx, out, &o, &rg, &err));
    snprintf(out, sizeof out, "%s/z", tkm_test_tmpdir());
    o.compression = TKM_COMPRESSION_ZSTD;
    if (tkm_archive_extract_path(zst, out, &o, &rz, &err) < 0)
        tkm_test_fail(__FILE__, __LINE__, "%s", err.msg);
    ASSERT_EQ(rz.compression, TKM_COMPRESSION_ZSTD);
    ASSERT_STREQ(rg.diff_id, rz.diff_id);
    ASSERT_EQ(rg.files, rz.files);
    snprintf(cmd, sizeof cmd, "diff -r '%s/g' '%s/z'", tkm_test_tmpdir(), tkm_test_tmpdir());
    ASSERT_OK(system(cmd));
}

TEST(free_space_reserve)
{
    struct tkm_buf t = TKM_BUF_INIT(1 << 20);
    tb_file(&t, "io.triton.cache/K/k.cubin", "ELF", 3, 0644);
    tb_end(&t);
    struct tkm_archive_opts o;
    tkm_archive_opts_init(&o);
    o.limits.min_free_bytes = UINT64_MAX / 2; /* more than any filesystem has */
    expect_reject_opts(&t, &o, "entry io.triton.cache/K/k.cubin: the filesystem has ");
    o.limits.min_free_bytes = 4096; /* a reserve that is there */
    struct tkm_err err = {0};
    ASSERT_OK(extract_buf(&t, &o, NULL, &err));
    tkm_buf_release(&t);
}

TEST(gnu_tar_dot_slash_names)
{
    struct tkm_buf t = TKM_BUF_INIT(1 << 20);
    tb_dir(&t, "./");
    tb_dir(&t, "./io.triton.cache/");
    tb_file(&t, "./io.triton.cache/K/./k.json", "{}", 2, 0644);
    tb_file(&t, ".//io.triton.cache//K//k.cubin", "ELF", 3, 0644);
    tb_end(&t);
    static const char *const inc[] = {"io.triton.cache/", NULL};
    struct tkm_archive_opts o;
    tkm_archive_opts_init(&o);
    o.include = inc;
    struct tkm_archive_result r;
    struct tkm_err err = {0};
    ASSERT_OK(extract_buf(&t, &o, &r, &err));
    ASSERT_EQ(r.files, 2);
    ASSERT_EQ(r.skipped, 1); /* "./" is outside the filter */
    char p[600];
    outpath(p, sizeof p, "io.triton.cache/K/k.cubin");
    ASSERT_OK(access(p, R_OK));
    tkm_buf_release(&t);
}

TEST(rejects_endless_extended_headers)
{
    struct tkm_buf t = TKM_BUF_INIT(1 << 20);
    for (int i = 0; i < 17; i++) {
        const char *kv[] = {"comment=x"};
        tb_pax(&t, kv, 1);
    }
    tb_file(&t, "f", "x", 1, 0644);
    tb_end(&t);
    expect_reject(&t, "more than 16 extended headers in a row");
    tkm_buf_release(&t);
}
