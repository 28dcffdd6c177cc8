/*
 * Unit tests for lib/archive: a malicious-archive corpus built here, byte by
 * byte (reliability.md checklist 9-15), and the real Triton fixtures compared
 * with what `tar -xzf` makes of them.
 */
#include <dirent.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <sys/xattr.h>

#include <tkm/archive.h>
#include <tkm/buf.h>

#include "sup_archive.h"
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
    return sup_extract_path(bp, out, o, res, err);
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
    int rc = sup_extract_path(fx, out, &o, &r, &err);
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
    ASSERT_OK(sup_extract_path(fx, out, &o, &rg, &err));
    snprintf(out, sizeof out, "%s/z", tkm_test_tmpdir());
    o.compression = TKM_COMPRESSION_ZSTD;
    if (sup_extract_path(zst, out, &o, &rz, &err) < 0)
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

/* ---- the issue "extraction leaves nothing behind": tightened promises ------- */

/* A PAX 'x' header whose body is given as raw bytes (may hold NULs). */
static void tb_pax_raw(struct tkm_buf *b, const char *body, size_t n)
{
    tb_header(b, "PaxHeaders/x", 'x', n, 0644, NULL);
    ASSERT_OK(tkm_buf_append(b, body, n));
    tb_pad(b);
}

TEST(rejects_nul_in_pax_path)
{
    struct tkm_buf t = TKM_BUF_INIT(1 << 20);
    /* "path=ok\0../../evil": a reader that stops at the NUL writes "ok". */
    static const char rec[] = "26 path=ok\0../../evil\n"; /* 22 bytes: fix the length */
    char body[64];
    size_t n = sizeof rec - 1;
    ASSERT_EQ(n, 22);
    memcpy(body, "22", 2);
    memcpy(body + 2, rec + 2, n - 2);
    tb_pax_raw(&t, body, n);
    tb_file(&t, "innocent", "evil", 4, 0644);
    tb_end(&t);
    expect_reject(&t, "path 'ok\\x00../../evil' contains a NUL byte at offset 2");
    /* linkpath too, and in a global header */
    static const char rec2[] = "26 linkpath=a\0/etc/x\n";
    memcpy(body, "21", 2);
    memcpy(body + 2, rec2 + 2, sizeof rec2 - 3);
    tkm_buf_reset(&t);
    tb_pax_raw(&t, body, sizeof rec2 - 1);
    tb_file(&t, "innocent", "x", 1, 0644);
    tb_end(&t);
    expect_reject(&t, "linkpath 'a\\x00/etc/x' contains a NUL byte");
    tkm_buf_release(&t);
}

TEST(rejects_nul_inside_gnu_long_name)
{
    struct tkm_buf t = TKM_BUF_INIT(1 << 20);
    static const char name[] = "ok\0../../evil"; /* + the terminating NUL: 14 bytes */
    tb_header(&t, "././@LongLink", 'L', sizeof name, 0644, NULL);
    ASSERT_OK(tkm_buf_append(&t, name, sizeof name));
    tb_pad(&t);
    tb_file(&t, "innocent", "evil", 4, 0644);
    tb_end(&t);
    expect_reject(&t, "GNU long name 'ok\\x00../../evil\\x00' contains a NUL byte at offset 2");
    tkm_buf_release(&t);
}

TEST(rejects_data_after_end_of_archive)
{
    struct tkm_buf t = TKM_BUF_INIT(1 << 20);
    tb_file(&t, "f", "data", 4, 0644);
    tb_end(&t);
    size_t end = t.len;
    /* zero padding to the 10240-byte record, and more zeros, are fine */
    static const char zero[10240];
    ASSERT_OK(tkm_buf_append(&t, zero, 10240 - end % 10240));
    ASSERT_OK(tkm_buf_append(&t, zero, 4096));
    struct tkm_archive_opts o;
    tkm_archive_opts_init(&o);
    o.fsync = 0;
    struct tkm_archive_result r;
    struct tkm_err err = {0};
    ASSERT_OK(extract_buf(&t, &o, &r, &err));
    ASSERT_EQ(r.files, 1);
    char out[512];
    snprintf(out, sizeof out, "%s/out", tkm_test_tmpdir());
    ASSERT_OK(tkm_rmtree_at(AT_FDCWD, out));
    /* a hidden entry after the marker (other readers go on reading) */
    t.len = end;
    tb_file(&t, "hidden", "evil", 4, 0644);
    tb_end(&t);
    char needle[120];
    snprintf(needle, sizeof needle, "data after the end-of-archive marker: byte 0x68 at offset %zu",
             end);
    expect_reject(&t, needle);
    /* one stray byte deep in the padding, also through gzip */
    t.len = end;
    ASSERT_OK(tkm_buf_append(&t, zero, 8000));
    t.data[end + 7000] = 1;
    struct tkm_buf gz = TKM_BUF_INIT(1 << 20);
    tb_gzip(&t, &gz);
    snprintf(needle, sizeof needle, "byte 0x01 at offset %zu", end + 7000);
    expect_reject(&gz, needle);
    /* the second block of the marker is not zero */
    t.len = end - 512;
    tb_file(&t, "after-one-zero-block", "x", 1, 0644);
    tb_end(&t);
    expect_reject(&t, "data after the end-of-archive marker");
    tkm_buf_release(&t);
    tkm_buf_release(&gz);
}

/* Counts the entries under dir (recursively) into *(uint64_t *)ud[1]. */
struct seen {
    char dir[512];
    uint64_t max_entries_on_disk;
};

static uint64_t count_tree(const char *dir)
{
    char cmd[700];
    snprintf(cmd, sizeof cmd, "find '%s' -mindepth 1 | wc -l", dir);
    FILE *p = popen(cmd, "r");
    ASSERT_NOT_NULL(p);
    unsigned long long n = 0;
    ASSERT_EQ(fscanf(p, "%llu", &n), 1);
    pclose(p);
    return n;
}

static void watch_disk(void *ud, const struct tkm_archive_progress *p)
{
    struct seen *s = ud;
    (void)p;
    uint64_t n = count_tree(s->dir);
    if (n > s->max_entries_on_disk)
        s->max_entries_on_disk = n;
}

/* A tar far larger than the read-ahead of the screen, so entries are written
 * before the cap trips: what was written goes again. */
static void entries_tar(struct tkm_buf *t, int n)
{
    static char data[3000];
    memset(data, 'x', sizeof data);
    tb_dir(t, "d/");
    for (int i = 0; i < n; i++) {
        char name[32];
        snprintf(name, sizeof name, "d/e%04d/f", i);
        tb_file(t, name, data, sizeof data, 0644);
    }
    tb_end(t);
}

TEST(entry_cap_leaves_destination_empty)
{
    struct tkm_buf t = TKM_BUF_INIT(16 << 20);
    entries_tar(&t, 1001);
    struct tkm_archive_opts o;
    tkm_archive_opts_init(&o);
    o.fsync = 0;
    o.limits.max_entries = 1000;
    struct seen s = {{0}, 0};
    snprintf(s.dir, sizeof s.dir, "%s/dest", tkm_test_tmpdir());
    ASSERT_OK(mkdir(s.dir, 0700));
    o.progress = watch_disk;
    o.progress_ud = &s;
    char bp[512];
    snprintf(bp, sizeof bp, "%s/blob", tkm_test_tmpdir());
    tb_write(bp, t.data, t.len);
    int bfd = open(bp, O_RDONLY | O_CLOEXEC), dfd = open(s.dir, O_RDONLY | O_DIRECTORY);
    ASSERT(bfd >= 0 && dfd >= 0);
    struct tkm_err err = {0};
    ASSERT_EQ(tkm_archive_extract_fd(bfd, dfd, &o, NULL, &err), -EFBIG);
    ASSERT_STRCONTAINS(err.msg, "more than 1000 entries");
    ASSERT(s.max_entries_on_disk > 10); /* entries were on disk while it ran ... */
    ASSERT_EQ(count_tree(s.dir), 0);    /* ... and none is left */
    close(bfd);
    close(dfd);
    ASSERT_OK(rmdir(s.dir));
    /* through sup_extract_path: a destination that was empty is left empty (rmdir works) */
    o.progress = NULL;
    expect_reject_opts(&t, &o, "more than 1000 entries");
    tkm_buf_release(&t);
}

TEST(control_characters_in_names_are_escaped)
{
    struct tkm_buf t = TKM_BUF_INIT(1 << 20);
    /* the screen's messages: a symlink whose name and target hold ESC and newlines */
    tb_header(&t, "a\x1b[31mred\nFAKE LOG LINE", '2', 0, 0777, "\x1b]0;title\x07");
    tb_end(&t);
    struct tkm_archive_opts o;
    tkm_archive_opts_init(&o);
    o.fsync = 0;
    struct tkm_err err = {0};
    ASSERT(extract_buf(&t, &o, NULL, &err) < 0);
    ASSERT_STRCONTAINS(err.msg, "entry a\\x1b[31mred\\nFAKE LOG LINE: symbolic links are not "
                                "allowed (-> \\x1b]0;title\\x07)");
    for (const char *p = err.msg; *p; p++)
        if ((unsigned char)*p < 0x20 || *p == 0x7f)
            tkm_test_fail(__FILE__, __LINE__, "raw control byte 0x%02x in: %s", *p, err.msg);
    assert_only_blob(tkm_test_tmpdir());
    /* the entry checks after libarchive: a control character in a file name */
    tkm_buf_reset(&t);
    tb_file(&t, "dir/x\ty\rz\x7f", "1", 1, 0644);
    tb_end(&t);
    expect_reject(&t, "entry dir/x\\ty\\rz\\x7f: control character 0x09 in the name");
    /* a PAX header's own name, and invalid UTF-8 / C1 controls in a PAX path */
    tkm_buf_reset(&t);
    const char *kv[] = {"path=\xc2\x9b"
                        "31m/\xff/x"};
    tb_pax(&t, kv, 1);
    tb_header(&t, "ignored", '3', 0, 0644, NULL);
    tb_end(&t);
    expect_reject(&t, "entry \\xc2\\x9b31m/\\xff/x: device nodes are not allowed");
    tkm_buf_release(&t);
}

static void expect_blob_size(const struct tkm_buf *blob, uint64_t size, int code,
                             const char *needle)
{
    struct tkm_archive_opts o;
    tkm_archive_opts_init(&o);
    o.fsync = 0;
    o.blob_size = size;
    struct tkm_err err = {0};
    ASSERT_EQ(extract_buf(blob, &o, NULL, &err), code);
    ASSERT_STRCONTAINS(err.msg, needle);
    assert_only_blob(tkm_test_tmpdir());
}

TEST(blob_size_must_match_the_descriptor)
{
    struct tkm_buf t = TKM_BUF_INIT(1 << 20), gz = TKM_BUF_INIT(1 << 20);
    tb_file(&t, "f", "data", 4, 0644);
    tb_end(&t);
    tb_gzip(&t, &gz);
    char needle[120];
    snprintf(needle, sizeof needle, "layer blob has %zu bytes, its descriptor says %zu", gz.len,
             gz.len - 1);
    expect_blob_size(&gz, gz.len - 1, -EFBIG, needle);
    snprintf(needle, sizeof needle, "layer blob has %zu bytes, its descriptor says %zu", gz.len,
             gz.len + 1);
    expect_blob_size(&gz, gz.len + 1, -EINVAL, needle);
    struct tkm_archive_opts o;
    tkm_archive_opts_init(&o);
    o.fsync = 0;
    o.blob_size = gz.len;
    ASSERT_OK(extract_buf(&gz, &o, NULL, NULL));
    tkm_buf_release(&t);
    tkm_buf_release(&gz);
}

TEST(blob_size_is_enforced_while_reading_a_pipe)
{
    struct tkm_buf t = TKM_BUF_INIT(1 << 20);
    char d[200000];
    for (size_t i = 0; i < sizeof d; i++)
        d[i] = (char)(i * 31 + i / 7);
    tb_file(&t, "f", d, sizeof d, 0644);
    tb_end(&t);
    int p[2];
    ASSERT_OK(pipe(p));
    pid_t pid = fork();
    ASSERT(pid >= 0);
    if (pid == 0) {
        close(p[0]);
        const char *c = t.data;
        size_t n = t.len;
        while (n > 0) {
            ssize_t w = write(p[1], c, n);
            if (w <= 0)
                _exit(0);
            c += w;
            n -= (size_t)w;
        }
        _exit(0);
    }
    close(p[1]);
    char dest[512];
    snprintf(dest, sizeof dest, "%s/dest", tkm_test_tmpdir());
    ASSERT_OK(mkdir(dest, 0700));
    int dfd = open(dest, O_RDONLY | O_DIRECTORY);
    struct tkm_archive_opts o;
    tkm_archive_opts_init(&o);
    o.fsync = 0;
    o.blob_size = 100000; /* the descriptor says less than the pipe carries */
    struct tkm_err err = {0};
    ASSERT_EQ(tkm_archive_extract_fd(p[0], dfd, &o, NULL, &err), -EFBIG);
    ASSERT_STRCONTAINS(err.msg, "larger than the 100000 bytes its descriptor says");
    ASSERT_EQ(count_tree(dest), 0);
    close(p[0]);
    close(dfd);
    waitpid(pid, NULL, 0);
    tkm_buf_release(&t);
}

/* ---- staging directories ------------------------------------------------- */

static unsigned long long start_of(pid_t pid)
{
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    ASSERT_NOT_NULL(f);
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    char *p = strrchr(buf, ')');
    ASSERT_NOT_NULL(p);
    unsigned long long v = 0;
    /* state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime stime
     * cutime cstime priority nice threads itrealvalue starttime */
    ASSERT_EQ(sscanf(p + 2,
                     "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %*u %*u %*d %*d %*d %*d "
                     "%*d %*d %llu",
                     &v),
              1);
    return v;
}

static int exists_at(int dfd, const char *name)
{
    struct stat st;
    return fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0;
}

TEST(staging_names_are_attributable_and_purged_only_when_dead)
{
    int dfd = open(tkm_test_tmpdir(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    ASSERT(dfd >= 0);
    char mine[TKM_STAGING_NAME_MAX], want[64];
    struct tkm_err err = {0};
    int sfd = tkm_staging_create(dfd, mine, sizeof mine, &err);
    ASSERT(sfd >= 0);
    snprintf(want, sizeof want, ".tkm-staging-%d-%llu-", (int)getpid(), start_of(getpid()));
    ASSERT_EQ(strncmp(mine, want, strlen(want)), 0);
    ASSERT_EQ(strlen(mine), strlen(want) + 12);
    struct stat st;
    ASSERT_OK(fstatat(dfd, mine, &st, 0));
    ASSERT_EQ(st.st_mode & 0777, 0700);
    ASSERT_EQ(tkm_staging_live(dfd, mine), 1);
    /* a dead pid (a child that exited), the same pid with another start time
     * (pid reuse), a live child, a dead pid whose dir someone still flocks
     * (another PID namespace), and names that are not ours */
    pid_t dead = fork();
    if (dead == 0)
        _exit(0);
    ASSERT(dead > 0);
    waitpid(dead, NULL, 0);
    pid_t live = fork();
    if (live == 0) {
        pause();
        _exit(0);
    }
    ASSERT(live > 0);
    unsigned long long ls = start_of(live);
    char n_dead[96], n_reused[96], n_live[96], n_locked[96];
    snprintf(n_dead, sizeof n_dead, ".tkm-staging-%d-%llu-aaaa", (int)dead, ls);
    snprintf(n_reused, sizeof n_reused, ".tkm-staging-%d-%llu-bbbb", (int)live, ls + 1);
    snprintf(n_live, sizeof n_live, ".tkm-staging-%d-%llu-cccc", (int)live, ls);
    snprintf(n_locked, sizeof n_locked, ".tkm-staging-%d-%llu-dddd", (int)dead, ls);
    const char *all[] = {n_dead, n_reused, n_live, n_locked, ".tkm-staging-junk", ".x.staging-1"};
    for (size_t i = 0; i < 6; i++) {
        ASSERT_OK(mkdirat(dfd, all[i], 0700));
        int f = openat(dfd, all[i], O_RDONLY | O_DIRECTORY);
        ASSERT(f >= 0);
        ASSERT_OK(mkdirat(f, "sub", 0700));
        close(f);
    }
    int lk = openat(dfd, n_locked, O_RDONLY | O_DIRECTORY);
    ASSERT_OK(flock(lk, LOCK_EX));
    ASSERT_EQ(tkm_staging_live(dfd, n_dead), 0);
    ASSERT_EQ(tkm_staging_live(dfd, n_reused), 0);
    ASSERT_EQ(tkm_staging_live(dfd, ".x.staging-1"), -EINVAL);
    ASSERT_EQ(tkm_staging_purge(dfd, tkm_test_tmpdir()), 2);
    ASSERT(!exists_at(dfd, n_dead));
    ASSERT(!exists_at(dfd, n_reused));
    ASSERT(exists_at(dfd, n_live));
    ASSERT(exists_at(dfd, n_locked));
    ASSERT(exists_at(dfd, mine));
    ASSERT(exists_at(dfd, ".tkm-staging-junk"));
    ASSERT(exists_at(dfd, ".x.staging-1"));
    /* the lock goes, then the process: both are purged */
    close(lk);
    kill(live, SIGKILL);
    waitpid(live, NULL, 0);
    ASSERT_EQ(tkm_staging_purge(dfd, NULL), 2);
    ASSERT(!exists_at(dfd, n_live));
    ASSERT(!exists_at(dfd, n_locked));
    ASSERT(exists_at(dfd, mine)); /* ours, alive */
    close(sfd);
    close(dfd);
}
