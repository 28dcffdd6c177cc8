/*
 * Unit tests for lib/store/state.c: the state database of the store
 * (reconcile, corrupt database, references, grace/budget GC, admission),
 * disk full during an extraction, and kill -9 at random points of ingests,
 * removals and SQLite writes. The entries are the real Triton 3.6.0 caches of
 * tests/fixtures/triton-cache, ingested through lib/store. Ingests and
 * removals run the loop forms the agent runs (tkm_store_state_ingest_start,
 * _remove_start), each to its end on a private loop.
 */
#include <dirent.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>

#include <tkm/archive.h>
#include <tkm/store.h>
#include <tkm/store/state.h>

#include "sup_archive.h"
#include "test.h"

#define NFIX 3
static const char *const fix_names[NFIX] = {
    "triton-3.6.0-cuda-sm90-binary-only.tar.gz",    /* 80 KiB of files */
    "triton-3.6.0-cuda-sm90.tar.gz",                /* 790 KiB */
    "triton-3.6.0-cuda-sm90-inductor-block.tar.gz", /* 5 MiB, 363 entries */
};

struct fix {
    char path[512];
    char digest[72];
    uint64_t bytes; /* file bytes once extracted (filled by ingest_all) */
};

static void fixture(int i, struct fix *f)
{
    unsigned char md[32], buf[65536];
    unsigned int mdlen = 0;
    char hex[65];
    snprintf(f->path, sizeof f->path, "%s/triton-cache/%s", tkm_test_fixtures(), fix_names[i]);
    FILE *fp = fopen(f->path, "rb");
    if (!fp)
        tkm_test_fail(__FILE__, __LINE__, "fixture %s missing", f->path);
    EVP_MD_CTX *c = EVP_MD_CTX_new();
    ASSERT(EVP_DigestInit_ex(c, EVP_sha256(), NULL) == 1);
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, fp)) > 0)
        ASSERT(EVP_DigestUpdate(c, buf, n) == 1);
    fclose(fp);
    ASSERT(EVP_DigestFinal_ex(c, md, &mdlen) == 1);
    EVP_MD_CTX_free(c);
    for (int k = 0; k < 32; k++)
        snprintf(hex + 2 * k, 3, "%02x", md[k]);
    snprintf(f->digest, sizeof f->digest, "sha256:%s", hex);
    f->bytes = 0;
}

static void fixtures(struct fix f[NFIX])
{
    for (int i = 0; i < NFIX; i++)
        fixture(i, &f[i]);
}

static void store_root(char *p, size_t n)
{
    snprintf(p, n, "%s/store", tkm_test_tmpdir());
}

static int count_dir(const char *path)
{
    DIR *d = opendir(path);
    if (!d)
        return -1;
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d)))
        if (strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
            n++;
    closedir(d);
    return n;
}

static int count_sub(const char *root, const char *sub)
{
    char p[700];
    snprintf(p, sizeof p, "%s/%s", root, sub);
    return count_dir(p);
}

static void open_both(const char *root, int64_t now, struct tkm_store **s,
                      struct tkm_store_state **st, struct tkm_store_state_report *rep)
{
    struct tkm_err err = {0};
    if (tkm_store_open(root, s, &err) < 0 || tkm_store_state_open(*s, now, st, rep, &err) < 0)
        tkm_test_fail(__FILE__, __LINE__, "open %s: %s", root, err.msg);
}

static void close_both(struct tkm_store *s, struct tkm_store_state *st)
{
    tkm_store_state_free(st);
    tkm_store_free(s);
}

static struct tkm_store_entry *find_entry(struct tkm_store_entry *v, size_t n, const char *dg)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(v[i].digest, dg) == 0)
            return &v[i];
    return NULL;
}

static void ref_of(struct tkm_store_ref *r, const char *vol, const char *dg)
{
    memset(r, 0, sizeof *r);
    r->volume_id = vol;
    r->digest = dg;
    r->pod_namespace = "ml";
    r->pod_name = "trainer-0";
    r->pod_uid = "6f1c1b2e-0000-4000-8000-000000000001";
    r->cache_namespace = "ml";
    r->cache_name = "llama-kernels";
}

static void acquire(struct tkm_store_state *st, const char *vol, const char *dg, int64_t now)
{
    struct tkm_store_ref r;
    struct tkm_err err = {0};
    ref_of(&r, vol, dg);
    if (tkm_store_state_acquire(st, &r, now, NULL, &err) < 0)
        tkm_test_fail(__FILE__, __LINE__, "acquire %s: %s", vol, err.msg);
}

/* ---- the agent's loop forms, each run to its end on a private loop ------- */

struct done {
    int rc;
    uint64_t freed;
    struct tkm_store_ingest_info info;
    struct tkm_err *err;
};

static void run_ingest_cb(int rc, const char *digest, const char *path,
                          const struct tkm_store_ingest_info *info, const struct tkm_err *err,
                          void *data)
{
    struct done *d = data;
    (void)digest;
    (void)path;
    d->rc = rc;
    d->info = *info;
    if (rc && d->err)
        *d->err = *err;
}

/* tkm_store_state_ingest_start: the extraction on the pool, the row (written
 * at time(NULL)) on the loop. */
static int run_ingest(struct tkm_store_state *st, const char *digest, const char *blob,
                      const struct tkm_archive_opts *o, const char *source,
                      struct tkm_store_ingest_info *info, struct tkm_err *err)
{
    uv_loop_t loop;
    struct done d = {.err = err};
    int rc = uv_loop_init(&loop);
    if (rc == 0 && (rc = tkm_store_state_ingest_start(&loop, st, digest, blob, o, source,
                                                      run_ingest_cb, &d, NULL, err)) == 0) {
        uv_run(&loop, UV_RUN_DEFAULT);
        rc = d.rc;
    }
    uv_loop_close(&loop);
    if (info)
        *info = d.info;
    return rc;
}

static void run_remove_cb(int rc, const char *digest, uint64_t freed, const struct tkm_err *err,
                          void *data)
{
    struct done *d = data;
    (void)digest;
    d->rc = rc;
    d->freed = freed;
    if (rc && d->err)
        *d->err = *err;
}

/* tkm_store_state_remove_start: marked at once (-EBUSY, -ENOENT), the tree
 * removed on the pool, the row deleted on the loop. */
static int run_remove(struct tkm_store_state *st, const char *digest, uint64_t *freed,
                      struct tkm_err *err)
{
    uv_loop_t loop;
    struct done d = {.err = err};
    int rc = uv_loop_init(&loop);
    if (rc == 0 &&
        (rc = tkm_store_state_remove_start(&loop, st, digest, run_remove_cb, &d, err)) == 0) {
        uv_run(&loop, UV_RUN_DEFAULT);
        rc = d.rc;
    }
    uv_loop_close(&loop);
    if (freed)
        *freed = rc == 0 ? d.freed : 0;
    return rc;
}

/* The agent's collection: the plan, then each removal (one that a
 * reference or another removal raced, -EBUSY/-ENOENT, is skipped). */
static int run_gc(struct tkm_store_state *st, int64_t now, int64_t grace_s, uint64_t budget,
                  size_t *removed, uint64_t *freed, struct tkm_err *err)
{
    char **plan = NULL;
    size_t n = 0, done = 0;
    uint64_t sum = 0;
    int rc = tkm_store_state_gc_plan(st, now, grace_s, budget, &plan, &n, NULL, NULL, err);
    for (size_t i = 0; rc == 0 && i < n; i++) {
        struct tkm_err e = {0};
        uint64_t b = 0;
        int r = run_remove(st, plan[i], &b, &e);
        if (r == 0) {
            done++;
            sum += b;
        } else if (r != -EBUSY && r != -ENOENT) {
            rc = tkm_err_set(err, r, "%s", e.msg);
        }
    }
    tkm_store_list_free(plan, n);
    if (removed)
        *removed = done;
    if (freed)
        *freed = sum;
    return rc;
}

/* last_used = now, through a reference taken and dropped at now (what a
 * volume's publish and unpublish do); -ENOENT when there is no usable entry. */
static int set_used(struct tkm_store_state *st, const char *digest, int64_t now,
                    struct tkm_err *err)
{
    struct tkm_store_ref r;
    ref_of(&r, "test-set-used", digest);
    int rc = tkm_store_state_acquire(st, &r, now, NULL, err);
    return rc ? rc : tkm_store_state_release(st, "test-set-used", now, err);
}

/* Ingests f and sets its last use to now. */
static void ingest(struct tkm_store_state *st, struct fix *f, int64_t now)
{
    struct tkm_err err = {0};
    struct tkm_store_ingest_info info;
    struct tkm_archive_opts o;
    tkm_archive_opts_init(&o);
    o.fsync = 0;
    if (run_ingest(st, f->digest, f->path, &o, "test/cache", &info, &err) < 0 ||
        set_used(st, f->digest, now, &err) < 0)
        tkm_test_fail(__FILE__, __LINE__, "ingest %s: %s", f->path, err.msg);
    if (!info.existed)
        f->bytes = info.archive.file_bytes;
}

static void tb_write_text(const char *path, const char *text)
{
    FILE *fp = fopen(path, "w");
    ASSERT_NOT_NULL(fp);
    ASSERT(fputs(text, fp) >= 0);
    ASSERT_OK(fclose(fp));
}

static void db_exec(const char *root, const char *sql)
{
    char p[700];
    sqlite3 *db = NULL;
    snprintf(p, sizeof p, "%s/state.db", root);
    ASSERT_EQ(sqlite3_open(p, &db), SQLITE_OK);
    char *msg = NULL;
    if (sqlite3_exec(db, sql, NULL, NULL, &msg) != SQLITE_OK)
        tkm_test_fail(__FILE__, __LINE__, "%s: %s", sql, msg);
    sqlite3_close(db);
}

/* One text result of sql on state.db (a separate connection). */
static void db_text(const char *root, const char *sql, char *out, size_t n)
{
    char p[700];
    sqlite3 *db = NULL;
    sqlite3_stmt *q = NULL;
    snprintf(p, sizeof p, "%s/state.db", root);
    ASSERT_EQ(sqlite3_open_v2(p, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    ASSERT_EQ(sqlite3_prepare_v2(db, sql, -1, &q, NULL), SQLITE_OK);
    int rc = sqlite3_step(q);
    snprintf(out, n, "%s", rc == SQLITE_ROW ? (const char *)sqlite3_column_text(q, 0) : "(none)");
    sqlite3_finalize(q);
    sqlite3_close(db);
}

TEST(reconcile_rows_without_trees_and_trees_without_rows)
{
    char root[512], p[800];
    struct fix f[NFIX];
    struct tkm_store *s = NULL;
    struct tkm_store_state *st = NULL;
    struct tkm_store_state_report rep;
    struct tkm_err err = {0};
    fixtures(f);
    store_root(root, sizeof root);
    open_both(root, 1000, &s, &st, &rep);
    ASSERT_EQ(rep.rebuilt + rep.adopted + rep.rows_dropped, 0);
    ingest(st, &f[0], 1000);
    ingest(st, &f[1], 1000);
    acquire(st, "vol-a", f[0].digest, 1001);
    acquire(st, "vol-b", f[0].digest, 1001);
    close_both(s, st);
    /* a row without its tree: the tree of f[0] goes behind the state's back */
    ASSERT_OK(tkm_store_open(root, &s, &err));
    ASSERT_OK(tkm_store_remove(s, f[0].digest, &err));
    /* a tree without a row: f[2] ingested without the state */
    struct tkm_store_ingest_info info;
    ASSERT_OK(sup_store_ingest(s, f[2].digest, f[2].path, NULL, NULL, &info, &err));
    f[2].bytes = info.archive.file_bytes;
    tkm_store_free(s);
    /* a removal of f[1] interrupted after its mark, and a half-made tree */
    db_exec(root, "UPDATE entries SET removing=1");
    snprintf(p, sizeof p, "%s/sha256/%s", root,
             "0123456789abcdef0123456789abcdef0123456789abcdef"
             "0123456789abcdef");
    ASSERT_OK(mkdir(p, 0755));
    /* a complete tree that cannot be walked (deeper than any archive may make) */
    const char *deep = "sha256:fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210";
    size_t off = (size_t)snprintf(p, sizeof p, "%s/sha256/%s", root, deep + 7);
    ASSERT_OK(mkdir(p, 0755));
    for (int i = 0; i < 70; i++) {
        off += (size_t)snprintf(p + off, sizeof p - off, "/d");
        ASSERT_OK(mkdir(p, 0755));
    }
    snprintf(p, sizeof p, "%s/sha256/%s.complete", root, deep + 7);
    tb_write_text(p, "{}");
    open_both(root, 5000, &s, &st, &rep);
    ASSERT_UEQ(rep.unreadable, 1);
    ASSERT_EQ(tkm_store_lookup(s, deep, NULL, NULL), -ENOENT);
    ASSERT_EQ(rep.rebuilt, 0);
    ASSERT_UEQ(rep.rows_dropped, 1);
    ASSERT_UEQ(rep.refs_dropped, 2);
    ASSERT_UEQ(rep.adopted, 1);
    ASSERT_UEQ(rep.adopted_bytes, f[2].bytes);
    ASSERT_UEQ(rep.unmarked, 1);
    struct tkm_store_entry *v = NULL;
    size_t n = 0;
    ASSERT_OK(tkm_store_state_entries(st, &v, &n, &err));
    ASSERT_EQ(n, 2);
    ASSERT_NULL(find_entry(v, n, f[0].digest));
    struct tkm_store_entry *e1 = find_entry(v, n, f[1].digest), *e2 = find_entry(v, n, f[2].digest);
    ASSERT_NOT_NULL(e1);
    ASSERT_NOT_NULL(e2);
    ASSERT_EQ(e1->removing, 0);
    ASSERT_UEQ(e1->bytes, f[1].bytes);
    ASSERT_STREQ(e1->source, "test/cache");
    ASSERT_EQ(e1->last_used, 1000);
    ASSERT_UEQ(e2->bytes, f[2].bytes); /* the walk counts what the extraction wrote */
    ASSERT(f[2].bytes > 4000000);
    ASSERT_EQ(e2->last_used, 5000);
    ASSERT_NULL(e2->source);
    tkm_store_state_entries_free(v, n);
    struct tkm_store_ref *refs = NULL;
    ASSERT_OK(tkm_store_state_refs(st, NULL, &refs, &n, &err));
    ASSERT_EQ(n, 0);
    tkm_store_state_refs_free(refs, n);
    ASSERT_EQ(count_sub(root, "sha256"), 4); /* two trees, two markers: the half-made one went */
    close_both(s, st);
    /* a second open finds nothing to do */
    open_both(root, 6000, &s, &st, &rep);
    ASSERT_EQ(rep.rows_dropped + rep.adopted + rep.unmarked, 0);
    close_both(s, st);
}

static void check_rebuilt(const char *root, struct fix f[NFIX])
{
    struct tkm_store *s = NULL;
    struct tkm_store_state *st = NULL;
    struct tkm_store_state_report rep;
    struct tkm_err err = {0};
    char ok[64];
    open_both(root, 7000, &s, &st, &rep);
    ASSERT_EQ(rep.rebuilt, 1);
    ASSERT_STRCONTAINS(rep.moved_to, "/state.db.corrupt-7000");
    ASSERT_OK(access(rep.moved_to, F_OK));
    ASSERT_UEQ(rep.adopted, 2);
    ASSERT_UEQ(rep.adopted_bytes, f[0].bytes + f[1].bytes);
    struct tkm_store_stats stats;
    ASSERT_OK(tkm_store_state_stats(st, &stats, &err));
    ASSERT_UEQ(stats.entries, 2);
    ASSERT_UEQ(stats.refs, 0);
    /* usable at once */
    acquire(st, "vol-a", f[0].digest, 7001);
    close_both(s, st);
    db_text(root, "PRAGMA integrity_check", ok, sizeof ok);
    ASSERT_STREQ(ok, "ok");
    db_text(root, "PRAGMA journal_mode", ok, sizeof ok);
    ASSERT_STREQ(ok, "wal");
}

static void make_two(const char *root, struct fix f[NFIX])
{
    struct tkm_store *s = NULL;
    struct tkm_store_state *st = NULL;
    open_both(root, 1000, &s, &st, NULL);
    ingest(st, &f[0], 1000);
    ingest(st, &f[1], 1000);
    acquire(st, "vol-a", f[0].digest, 1000);
    char vol[32];
    for (int i = 0; i < 200; i++) { /* a few pages of references */
        snprintf(vol, sizeof vol, "csi-%04d-%s", i, "padding-padding-padding-padding-padding");
        acquire(st, vol, f[1].digest, 1000);
    }
    close_both(s, st);
}

TEST(corrupt_state_db_is_moved_aside_and_rebuilt)
{
    char root[512], p[700];
    struct fix f[NFIX];
    fixtures(f);
    store_root(root, sizeof root);
    make_two(root, f);
    /* 1: not a database at all */
    snprintf(p, sizeof p, "%s/state.db", root);
    FILE *fp = fopen(p, "w");
    ASSERT_NOT_NULL(fp);
    for (int i = 0; i < 512; i++)
        fputs("this is not a database ", fp);
    fclose(fp);
    check_rebuilt(root, f);
    /* 2: a real database with a damaged page (quick_check fails) */
    ASSERT_OK(unlink(p));
    for (int i = 0; i < 2; i++) {
        char q[700];
        snprintf(q, sizeof q, "%s/sha256/%s.complete", root, f[i].digest + 7);
        ASSERT_OK(unlink(q));
    }
    make_two(root, f);
    struct stat sb;
    ASSERT_OK(stat(p, &sb));
    ASSERT(sb.st_size >= 4 * 4096);
    int fd = open(p, O_WRONLY);
    ASSERT(fd >= 0);
    unsigned char junk[4096];
    memset(junk, 0xa5, sizeof junk);
    ASSERT_EQ(pwrite(fd, junk, sizeof junk, 2 * 4096), (ssize_t)sizeof junk);
    close(fd);
    /* moved aside within the same second: the first one is kept */
    check_rebuilt(root, f);
    /* 3: a schema newer than this program knows */
    db_exec(root, "PRAGMA user_version=99");
    char ver[64];
    struct tkm_store *s = NULL;
    struct tkm_store_state *st = NULL;
    struct tkm_store_state_report rep;
    open_both(root, 8000, &s, &st, &rep);
    ASSERT_EQ(rep.rebuilt, 1);
    ASSERT_UEQ(rep.adopted, 2);
    close_both(s, st);
    db_text(root, "PRAGMA user_version", ver, sizeof ver);
    ASSERT_STREQ(ver, "1");
    char q[700];
    snprintf(q, sizeof q, "%s/state.db.corrupt-7000", root);
    ASSERT_OK(access(q, F_OK));
    snprintf(q, sizeof q, "%s/state.db.corrupt-7000.1", root);
    ASSERT_OK(access(q, F_OK));
}

TEST(acquire_release_idempotence_and_errors)
{
    char root[512];
    struct fix f[NFIX];
    struct tkm_store *s = NULL;
    struct tkm_store_state *st = NULL;
    struct tkm_err err = {0};
    struct tkm_store_ref r;
    int created = -1;
    fixtures(f);
    store_root(root, sizeof root);
    open_both(root, 100, &s, &st, NULL);
    ingest(st, &f[0], 100);
    ingest(st, &f[1], 100);
    ref_of(&r, "csi-1", f[0].digest);
    ASSERT_OK(tkm_store_state_acquire(st, &r, 200, &created, &err));
    ASSERT_EQ(created, 1);
    ASSERT_OK(tkm_store_state_acquire(st, &r, 300, &created, &err)); /* the same again */
    ASSERT_EQ(created, 0);
    struct tkm_store_ref *refs = NULL;
    size_t n = 0;
    ASSERT_OK(tkm_store_state_refs(st, f[0].digest, &refs, &n, &err));
    ASSERT_EQ(n, 1);
    ASSERT_STREQ(refs[0].volume_id, "csi-1");
    ASSERT_STREQ(refs[0].digest, f[0].digest);
    ASSERT_STREQ(refs[0].pod_namespace, "ml");
    ASSERT_STREQ(refs[0].pod_name, "trainer-0");
    ASSERT_STREQ(refs[0].pod_uid, "6f1c1b2e-0000-4000-8000-000000000001");
    ASSERT_STREQ(refs[0].cache_namespace, "ml");
    ASSERT_STREQ(refs[0].cache_name, "llama-kernels");
    ASSERT_EQ(refs[0].created, 200);
    tkm_store_state_refs_free(refs, n);
    /* the same volume id with another digest */
    ref_of(&r, "csi-1", f[1].digest);
    ASSERT_EQ(tkm_store_state_acquire(st, &r, 300, &created, &err), -EEXIST);
    ASSERT_STRCONTAINS(err.msg, "volume csi-1 already references");
    ASSERT_STRCONTAINS(err.msg, f[0].digest);
    ASSERT_STRCONTAINS(err.msg, f[1].digest);
    ASSERT_EQ(created, 0);
    /* a digest that is not in the store, a bad digest, no volume id */
    tkm_err_clear(&err);
    ref_of(&r, "csi-2", f[2].digest);
    ASSERT_EQ(tkm_store_state_acquire(st, &r, 300, NULL, &err), -ENOENT);
    ASSERT_STRCONTAINS(err.msg, "is not in the store");
    tkm_err_clear(&err);
    ref_of(&r, "csi-2", "sha256:../../etc");
    ASSERT_EQ(tkm_store_state_acquire(st, &r, 300, NULL, &err), -EINVAL);
    ASSERT_STRCONTAINS(err.msg, "is not a digest");
    tkm_err_clear(&err);
    ref_of(&r, "", f[0].digest);
    ASSERT_EQ(tkm_store_state_acquire(st, &r, 300, NULL, &err), -EINVAL);
    struct tkm_store_stats stats;
    ASSERT_OK(tkm_store_state_stats(st, &stats, &err));
    ASSERT_UEQ(stats.refs, 1);
    ASSERT_UEQ(stats.referenced, 1);
    ASSERT_UEQ(stats.referenced_bytes, f[0].bytes);
    ASSERT_UEQ(stats.entries, 2);
    ASSERT_UEQ(stats.bytes, f[0].bytes + f[1].bytes);
    /* last_used: acquire touched it at 300, release sets it to 400 */
    struct tkm_store_entry *v = NULL;
    ASSERT_OK(tkm_store_state_entries(st, &v, &n, &err));
    ASSERT_EQ(find_entry(v, n, f[0].digest)->last_used, 300);
    ASSERT_EQ(find_entry(v, n, f[0].digest)->refs, 1);
    ASSERT_EQ(find_entry(v, n, f[1].digest)->last_used, 100);
    tkm_store_state_entries_free(v, n);
    ASSERT_OK(tkm_store_state_release(st, "csi-1", 400, &err));
    tkm_err_clear(&err);
    ASSERT_EQ(tkm_store_state_release(st, "csi-1", 400, &err), -ENOENT);
    ASSERT_STRCONTAINS(err.msg, "volume csi-1 references nothing");
    ASSERT_OK(tkm_store_state_entries(st, &v, &n, &err));
    ASSERT_EQ(v[1].last_used, 400); /* LRU order: f[1] (100) first */
    ASSERT_STREQ(v[1].digest, f[0].digest);
    ASSERT_EQ(v[1].refs, 0);
    tkm_store_state_entries_free(v, n);
    /* a tree deleted behind the state's back: refused, and an ingest heals it */
    ASSERT_OK(tkm_store_remove(s, f[0].digest, &err));
    ref_of(&r, "csi-9", f[0].digest);
    tkm_err_clear(&err);
    ASSERT_EQ(tkm_store_state_acquire(st, &r, 450, NULL, &err), -ENOENT);
    ASSERT_STRCONTAINS(err.msg, "its tree is not complete");
    ingest(st, &f[0], 460);
    ASSERT_OK(tkm_store_state_acquire(st, &r, 470, &created, &err));
    ASSERT_EQ(created, 1);
    ASSERT_OK(tkm_store_state_release(st, "csi-9", 480, &err));
    /* the volume id is free again, for any digest */
    ref_of(&r, "csi-1", f[1].digest);
    ASSERT_OK(tkm_store_state_acquire(st, &r, 500, &created, &err));
    ASSERT_EQ(created, 1);
    tkm_err_clear(&err);
    ASSERT_EQ(set_used(st, f[2].digest, 500, &err), -ENOENT);
    /* a referenced entry cannot be removed; once released it can */
    tkm_err_clear(&err);
    ASSERT_EQ(run_remove(st, f[1].digest, NULL, &err), -EBUSY);
    ASSERT_STRCONTAINS(err.msg, "referenced by 1 volume");
    ASSERT_OK(tkm_store_lookup(s, f[1].digest, NULL, &err));
    ASSERT_OK(tkm_store_state_release(st, "csi-1", 600, &err));
    uint64_t freed = 0;
    ASSERT_OK(run_remove(st, f[1].digest, &freed, &err));
    ASSERT_UEQ(freed, f[1].bytes);
    ASSERT_EQ(tkm_store_lookup(s, f[1].digest, NULL, NULL), -ENOENT);
    ASSERT_EQ(run_remove(st, f[1].digest, NULL, NULL), -ENOENT);
    tkm_err_clear(&err);
    ASSERT_EQ(set_used(st, f[1].digest, 700, &err), -ENOENT); /* no entry left to use */
    close_both(s, st);
}

TEST(second_process_cannot_open_the_state)
{
    char root[512];
    struct tkm_store *s = NULL, *s2 = NULL;
    struct tkm_store_state *st = NULL, *st2 = NULL;
    struct tkm_err err = {0};
    store_root(root, sizeof root);
    open_both(root, 1, &s, &st, NULL);
    pid_t pid = fork();
    ASSERT(pid >= 0);
    if (pid == 0) {
        if (tkm_store_open(root, &s2, &err) < 0)
            _exit(2);
        int rc = tkm_store_state_open(s2, 1, &st2, NULL, &err);
        _exit(rc == -EBUSY && strstr(err.msg, "held by another process") ? 0 : 1);
    }
    int stt;
    ASSERT_EQ(waitpid(pid, &stt, 0), pid);
    ASSERT(WIFEXITED(stt) && WEXITSTATUS(stt) == 0);
    close_both(s, st);
    open_both(root, 1, &s, &st, NULL); /* free again once closed */
    close_both(s, st);
}

/* Sets up f[0..2] with last_used 100, 200, 300 and f[2] referenced. */
static void three(const char *root, struct fix f[NFIX], struct tkm_store **s,
                  struct tkm_store_state **st)
{
    open_both(root, 0, s, st, NULL);
    for (int i = 0; i < NFIX; i++)
        ingest(*st, &f[i], 100 * (i + 1));
    acquire(*st, "vol-c", f[2].digest, 300);
}

static void expect_plan(struct tkm_store_state *st, int64_t now, int64_t grace, uint64_t budget,
                        int over_want, const char *a, const char *b, const char *c)
{
    char **d = NULL;
    size_t n = 0;
    uint64_t freed = 0;
    int over = -1;
    struct tkm_err err = {0};
    const char *want[3] = {a, b, c};
    size_t nw = (a != NULL) + (b != NULL) + (c != NULL);
    ASSERT_OK(tkm_store_state_gc_plan(st, now, grace, budget, &d, &n, &freed, &over, &err));
    if (n != nw)
        tkm_test_fail(__FILE__, __LINE__, "plan(now %lld, grace %lld, budget %llu): %zu, not %zu",
                      (long long)now, (long long)grace, (unsigned long long)budget, n, nw);
    for (size_t i = 0; i < n; i++)
        ASSERT_STREQ(d[i], want[i]);
    ASSERT_EQ(over, over_want);
    tkm_store_list_free(d, n);
}

TEST(gc_plan_by_grace_and_by_budget_lru_first)
{
    char root[512];
    struct fix f[NFIX];
    struct tkm_store *s = NULL;
    struct tkm_store_state *st = NULL;
    fixtures(f);
    store_root(root, sizeof root);
    three(root, f, &s, &st);
    const char *A = f[0].digest, *B = f[1].digest, *C = f[2].digest;
    uint64_t a = f[0].bytes, b = f[1].bytes, c = f[2].bytes, total = a + b + c;
    ASSERT(a > 0 && b > 0 && c > 0);
    /* grace only: A idle 600 s at 700, B 500 s: only A with grace 600 */
    expect_plan(st, 700, 600, 0, 0, A, NULL, NULL);
    expect_plan(st, 800, 600, 0, 0, A, B, NULL);
    expect_plan(st, 599, 600, 0, 0, NULL, NULL, NULL);
    /* C is referenced: never, however idle */
    expect_plan(st, 100000, 600, 0, 0, A, B, NULL);
    /* budget: LRU first, even within grace */
    expect_plan(st, 300, 600, total, 0, NULL, NULL, NULL);
    expect_plan(st, 300, 600, total - 1, 0, A, NULL, NULL);
    expect_plan(st, 300, 600, total - a, 0, A, NULL, NULL);
    expect_plan(st, 300, 600, total - a - 1, 0, A, B, NULL);
    expect_plan(st, 300, 600, c, 0, A, B, NULL);
    /* only the referenced entry left and still over: over = 1, C stays */
    expect_plan(st, 300, 600, c - 1, 1, A, B, NULL);
    expect_plan(st, 300, 600, 1, 1, A, B, NULL);
    /* grace first, then budget: B idle at 750 with grace 500, A by budget is already in */
    expect_plan(st, 750, 500, total - a, 0, A, B, NULL);
    /* would_fit: only unreferenced entries may go */
    int fits = -1;
    uint64_t need = 1;
    struct tkm_err err = {0};
    ASSERT_OK(tkm_store_state_would_fit(st, 1000, 0, &fits, &need, &err));
    ASSERT_EQ(fits, 1);
    ASSERT_UEQ(need, 0);
    ASSERT_OK(tkm_store_state_would_fit(st, 1000, c + 1000, &fits, &need, &err));
    ASSERT_EQ(fits, 1);
    ASSERT_UEQ(need, a + b); /* A and B must go first */
    ASSERT_OK(tkm_store_state_would_fit(st, 1001, c + 1000, &fits, &need, &err));
    ASSERT_EQ(fits, 0);
    ASSERT_OK(tkm_store_state_would_fit(st, 10, total + 10, &fits, &need, &err));
    ASSERT_EQ(fits, 1);
    ASSERT_UEQ(need, 0);
    ASSERT_OK(tkm_store_state_would_fit(st, total + 11, total + 10, &fits, &need, &err));
    ASSERT_EQ(fits, 0);
    /* the collection itself: budget c + b: A goes (LRU), B and the referenced C stay */
    size_t removed = 0;
    uint64_t freed = 0;
    ASSERT_OK(run_gc(st, 300, 600, c + b, &removed, &freed, &err));
    ASSERT_EQ(removed, 1);
    ASSERT_UEQ(freed, a);
    ASSERT_EQ(tkm_store_lookup(s, A, NULL, NULL), -ENOENT);
    ASSERT_OK(tkm_store_lookup(s, B, NULL, &err));
    /* then by grace: B, idle long enough; C stays even over budget */
    ASSERT_OK(run_gc(st, 100000, 600, 1, &removed, &freed, &err));
    ASSERT_EQ(removed, 1);
    ASSERT_UEQ(freed, b);
    ASSERT_EQ(tkm_store_lookup(s, B, NULL, NULL), -ENOENT);
    ASSERT_OK(tkm_store_lookup(s, C, NULL, &err));
    struct tkm_store_stats stats;
    ASSERT_OK(tkm_store_state_stats(st, &stats, &err));
    ASSERT_UEQ(stats.entries, 1);
    ASSERT_UEQ(stats.bytes, c);
    ASSERT_EQ(count_sub(root, "staging"), 0);
    close_both(s, st);
}

/* ---- the loop forms ------------------------------------------------------ */

struct loop_out {
    int calls, rc;
    char digest[72], path[700], msg[1024];
    uint64_t freed, files;
    int existed;
};

static void on_ingest(int rc, const char *digest, const char *path,
                      const struct tkm_store_ingest_info *info, const struct tkm_err *err,
                      void *data)
{
    struct loop_out *o = data;
    o->calls++;
    o->rc = rc;
    snprintf(o->digest, sizeof o->digest, "%s", digest);
    snprintf(o->path, sizeof o->path, "%s", path ? path : "");
    snprintf(o->msg, sizeof o->msg, "%s", rc ? err->msg : "");
    o->files = info->archive.files;
    o->existed = info->existed;
}

static void on_remove(int rc, const char *digest, uint64_t freed, const struct tkm_err *err,
                      void *data)
{
    struct loop_out *o = data;
    o->calls++;
    o->rc = rc;
    o->freed = freed;
    snprintf(o->digest, sizeof o->digest, "%s", digest);
    snprintf(o->msg, sizeof o->msg, "%s", rc ? err->msg : "");
}

TEST_TIMEOUT(ingest_and_remove_on_the_loop, 60)
{
    char root[512];
    struct fix f[NFIX];
    struct tkm_store *s = NULL;
    struct tkm_store_state *st = NULL;
    struct tkm_err err = {0};
    fixtures(f);
    store_root(root, sizeof root);
    open_both(root, 0, &s, &st, NULL);
    uv_loop_t loop;
    ASSERT_OK(uv_loop_init(&loop));
    struct loop_out o = {0};
    ASSERT_OK(tkm_store_state_ingest_start(&loop, st, f[1].digest, f[1].path, NULL, "ml/c",
                                           on_ingest, &o, NULL, &err));
    ASSERT_EQ(o.calls, 0);
    ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
    ASSERT_EQ(o.calls, 1);
    if (o.rc)
        tkm_test_fail(__FILE__, __LINE__, "%s", o.msg);
    ASSERT_STREQ(o.digest, f[1].digest);
    ASSERT_STRCONTAINS(o.path, f[1].digest + 7);
    ASSERT(o.files > 10);
    /* complete but without a row (ingested by lib/store alone): walked on the pool */
    struct tkm_store_ingest_info info;
    ASSERT_OK(sup_store_ingest(s, f[0].digest, f[0].path, NULL, NULL, &info, &err));
    memset(&o, 0, sizeof o);
    ASSERT_OK(tkm_store_state_ingest_start(&loop, st, f[0].digest, "/nonexistent", NULL, NULL,
                                           on_ingest, &o, NULL, &err));
    ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
    ASSERT_EQ(o.calls, 1);
    ASSERT_OK(o.rc);
    ASSERT_EQ(o.existed, 1);
    struct tkm_store_entry *v = NULL;
    size_t n = 0;
    ASSERT_OK(tkm_store_state_entries(st, &v, &n, &err));
    ASSERT_EQ(n, 2);
    ASSERT_UEQ(find_entry(v, n, f[0].digest)->bytes, info.archive.file_bytes);
    ASSERT_STREQ(find_entry(v, n, f[1].digest)->source, "ml/c");
    uint64_t b1 = find_entry(v, n, f[1].digest)->bytes;
    ASSERT(b1 > 0);
    tkm_store_state_entries_free(v, n);
    /* a failing ingest: cb with the error, no row */
    memset(&o, 0, sizeof o);
    ASSERT_OK(tkm_store_state_ingest_start(&loop, st, f[2].digest, f[1].path, NULL, NULL, on_ingest,
                                           &o, NULL, &err));
    ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
    ASSERT_EQ(o.rc, -EBADMSG);
    ASSERT_STRCONTAINS(o.msg, "digest mismatch");
    ASSERT_EQ(set_used(st, f[2].digest, 1, NULL), -ENOENT);
    /* removal: referenced -> -EBUSY from _start, cb never called */
    acquire(st, "vol", f[1].digest, 10);
    memset(&o, 0, sizeof o);
    ASSERT_EQ(tkm_store_state_remove_start(&loop, st, f[1].digest, on_remove, &o, &err), -EBUSY);
    ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
    ASSERT_EQ(o.calls, 0);
    ASSERT_OK(tkm_store_state_release(st, "vol", 11, &err));
    ASSERT_OK(tkm_store_state_remove_start(&loop, st, f[1].digest, on_remove, &o, &err));
    /* marked at once: no new reference while the tree goes */
    struct tkm_store_ref r;
    ref_of(&r, "vol2", f[1].digest);
    tkm_err_clear(&err);
    ASSERT_EQ(tkm_store_state_acquire(st, &r, 12, NULL, &err), -ENOENT);
    ASSERT_STRCONTAINS(err.msg, "being removed");
    ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
    ASSERT_EQ(o.calls, 1);
    ASSERT_OK(o.rc);
    ASSERT_UEQ(o.freed, b1);
    ASSERT_EQ(tkm_store_lookup(s, f[1].digest, NULL, NULL), -ENOENT);
    ASSERT_EQ(set_used(st, f[1].digest, 1, NULL), -ENOENT);
    /* cancelled mid-extraction: -ECANCELED, no row, no tree */
    memset(&o, 0, sizeof o);
    struct tkm_store_state_job *job = NULL;
    ASSERT_OK(tkm_store_state_ingest_start(&loop, st, f[2].digest, f[2].path, NULL, NULL, on_ingest,
                                           &o, &job, &err));
    ASSERT_NOT_NULL(job);
    tkm_store_state_job_cancel(job);
    ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
    ASSERT_EQ(o.calls, 1);
    ASSERT_EQ(o.rc, -ECANCELED);
    ASSERT_EQ(tkm_store_lookup(s, f[2].digest, NULL, NULL), -ENOENT);
    ASSERT_EQ(set_used(st, f[2].digest, 1, NULL), -ENOENT);
    ASSERT_EQ(count_sub(root, "staging"), 0);
    ASSERT_OK(uv_loop_close(&loop));
    close_both(s, st);
}

static void on_done(int rc, const struct tkm_err *err, void *data)
{
    struct loop_out *o = data;
    o->calls++;
    o->rc = rc;
    snprintf(o->msg, sizeof o->msg, "%s", rc ? err->msg : "");
}

TEST(wal_checkpoint_on_the_pool)
{
    char root[512];
    struct fix f[NFIX];
    struct tkm_store *s = NULL;
    struct tkm_store_state *st = NULL;
    struct tkm_err err = {0};
    fixtures(f);
    store_root(root, sizeof root);
    open_both(root, 0, &s, &st, NULL);
    ingest(st, &f[0], 1);
    for (int i = 0; i < 300; i++) {
        acquire(st, "vol", f[0].digest, 2 + i);
        ASSERT_OK(tkm_store_state_release(st, "vol", 2 + i, &err));
    }
    /* no autocheckpoint on the loop's connection: the WAL kept every commit */
    ASSERT(tkm_store_state_wal_frames(st) >= 600);
    uv_loop_t loop;
    struct loop_out o = {0};
    ASSERT_OK(uv_loop_init(&loop));
    ASSERT_OK(tkm_store_state_checkpoint_start(&loop, st, on_done, &o, &err));
    ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
    ASSERT_EQ(o.calls, 1);
    if (o.rc)
        tkm_test_fail(__FILE__, __LINE__, "%s", o.msg);
    ASSERT_OK(uv_loop_close(&loop));
    /* checkpointed: the next commit starts the WAL over */
    acquire(st, "vol", f[0].digest, 1000);
    ASSERT(tkm_store_state_wal_frames(st) < 10);
    close_both(s, st);
}

/* ---- disk full ----------------------------------------------------------- */

static void disk_full_body(const char *root, struct fix f[NFIX])
{
    struct tkm_store *s = NULL;
    struct tkm_store_state *st = NULL;
    struct tkm_err err = {0};
    open_both(root, 1, &s, &st, NULL);
    ingest(st, &f[0], 1); /* 80 KiB: fits */
    /* 5 MiB of files into 2 MiB */
    ASSERT_EQ(run_ingest(st, f[2].digest, f[2].path, NULL, NULL, NULL, &err), -ENOSPC);
    printf("# %s\n", err.msg);
    fflush(stdout);
    ASSERT_STRCONTAINS(err.msg, "No space left on device");
    ASSERT_STRCONTAINS(err.msg, f[2].digest);
    ASSERT_EQ(tkm_store_lookup(s, f[2].digest, NULL, NULL), -ENOENT);
    ASSERT_EQ(count_sub(root, "staging"), 0);
    ASSERT_EQ(count_sub(root, "sha256"), 2); /* f[0]'s tree and marker only */
    struct tkm_store_stats stats;
    ASSERT_OK(tkm_store_state_stats(st, &stats, &err));
    ASSERT_UEQ(stats.entries, 1);
    /* still usable: references, another ingest, a removal */
    acquire(st, "vol", f[0].digest, 3);
    ingest(st, &f[1], 4);
    ASSERT_OK(tkm_store_state_release(st, "vol", 5, &err));
    ASSERT_OK(run_remove(st, f[0].digest, NULL, &err));
    /* the disk full under a SQLite write: a clear error, the transaction rolled back */
    char filler[700];
    snprintf(filler, sizeof filler, "%s/filler", root);
    int fd = open(filler, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    ASSERT(fd >= 0);
    static const char zero[65536];
    while (write(fd, zero, sizeof zero) > 0)
        ;
    while (write(fd, zero, 512) > 0)
        ;
    close(fd);
    int rc = 0, n = 0, held = 0; /* held: the reference exists */
    struct tkm_store_ref r;
    ref_of(&r, "vol-x", f[1].digest);
    for (; n < 400 && rc == 0; n++) {
        tkm_err_clear(&err);
        rc = held ? tkm_store_state_release(st, "vol-x", 10 + n, &err)
                  : tkm_store_state_acquire(st, &r, 10 + n, NULL, &err);
        if (rc == 0)
            held = !held;
    }
    ASSERT_EQ(rc, -ENOSPC);
    printf("# after %d commits: %s\n", n - 1, err.msg);
    fflush(stdout);
    ASSERT_STRCONTAINS(err.msg, "database or disk is full");
    struct tkm_store_ref *refs = NULL;
    size_t nr = 0;
    ASSERT_OK(tkm_store_state_refs(st, NULL, &refs, &nr, &err));
    ASSERT_EQ(nr, held); /* the failed transaction left nothing */
    tkm_store_state_refs_free(refs, nr);
    ASSERT_OK(unlink(filler));
    if (!held)
        ASSERT_OK(tkm_store_state_acquire(st, &r, 500, NULL, &err));
    ASSERT_OK(tkm_store_state_release(st, "vol-x", 500, &err));
    close_both(s, st);
    /* and a reopen finds it consistent */
    struct tkm_store_state_report rep;
    open_both(root, 6, &s, &st, &rep);
    ASSERT_EQ(rep.rebuilt + rep.rows_dropped + rep.adopted, 0);
    ASSERT_OK(tkm_store_state_stats(st, &stats, &err));
    ASSERT_UEQ(stats.entries, 1);
    close_both(s, st);
    char ok[64];
    db_text(root, "PRAGMA integrity_check", ok, sizeof ok);
    ASSERT_STREQ(ok, "ok");
}

TEST_TIMEOUT(disk_full_during_extraction, 60)
{
    char root[512];
    struct fix f[NFIX];
    fixtures(f);
    store_root(root, sizeof root);
    ASSERT_OK(mkdir(root, 0755));
    if (mount("tkm-test", root, "tmpfs", 0, "size=2m,mode=0755") < 0)
        tkm_test_fail(__FILE__, __LINE__, "mount tmpfs on %s: %s (the test runs as root)", root,
                      strerror(errno));
    fflush(NULL);
    pid_t pid = fork(); /* the body in a child, so the umount always runs */
    ASSERT(pid >= 0);
    if (pid == 0) {
        disk_full_body(root, f);
        _exit(0);
    }
    int stt = 0;
    ASSERT_EQ(waitpid(pid, &stt, 0), pid);
    ASSERT_OK(umount2(root, MNT_DETACH));
    ASSERT(WIFEXITED(stt));
    ASSERT_EQ(WEXITSTATUS(stt), 0);
}

/* ---- kill -9 at random points -------------------------------------------- */

enum { PH_IDLE, PH_EXTRACT, PH_SQL, PH_REMOVE, PH_N };
static const char *const ph_name[PH_N] = {"other", "extraction", "sqlite write", "removal"};

struct shared {
    atomic_int phase;
    atomic_int ops;
};

static uint64_t rnd(uint64_t *x)
{
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    return *x;
}

static void on_progress(void *ud, const struct tkm_archive_progress *p)
{
    struct shared *sh = ud;
    (void)p;
    atomic_store(&sh->phase, PH_EXTRACT);
}

/* Expected failures of a random workload; anything else ends the child with
 * a code the parent reports. */
static void child_check(int rc, const struct tkm_err *err, int line)
{
    if (rc == 0 || rc == -ENOENT || rc == -EEXIST || rc == -EBUSY || rc == -EAGAIN)
        return;
    fprintf(stderr, "# child line %d: %d %s\n", line, rc, err->msg);
    _exit(20);
}

/* The workload: ingests (extractions), bursts of acquire/release, removals. */
static _Noreturn void chaos_child(const char *root, struct fix f[NFIX], struct shared *sh,
                                  uint64_t seed)
{
    struct tkm_store *s = NULL;
    struct tkm_store_state *st = NULL;
    struct tkm_err err = {0};
    struct tkm_archive_opts o;
    tkm_archive_opts_init(&o);
    o.fsync = 0; /* a kill -9 loses no page cache: fsync is about power loss */
    o.progress = on_progress;
    o.progress_ud = sh;
    atomic_store(&sh->phase, PH_SQL);
    if (tkm_store_open(root, &s, &err) < 0 || tkm_store_state_open(s, 1000, &st, NULL, &err) < 0) {
        fprintf(stderr, "# child open: %s\n", err.msg);
        _exit(21);
    }
    for (int64_t now = 1001;; now++) {
        uint64_t r = rnd(&seed) % 10;
        int k = (int)(rnd(&seed) % 4);
        struct fix *fx = &f[k == 3 ? 2 : k]; /* the 5 MiB one twice as often */
        tkm_err_clear(&err);
        if (r < 3) {
            atomic_store(&sh->phase, PH_IDLE);
            child_check(run_ingest(st, fx->digest, fx->path, &o, "chaos", NULL, &err), &err,
                        __LINE__);
        } else if (r < 7) {
            atomic_store(&sh->phase, PH_SQL);
            for (int i = 0; i < 40; i++) {
                char vol[32];
                struct tkm_store_ref ref;
                snprintf(vol, sizeof vol, "vol-%d", (int)(rnd(&seed) % 6));
                ref_of(&ref, vol, f[rnd(&seed) % NFIX].digest);
                tkm_err_clear(&err);
                child_check(rnd(&seed) % 2 ? tkm_store_state_acquire(st, &ref, now, NULL, &err)
                                           : tkm_store_state_release(st, vol, now, &err),
                            &err, __LINE__);
            }
        } else {
            /* drop the references of fx, then remove it (or collect all) */
            struct tkm_store_ref *refs = NULL;
            size_t n = 0;
            atomic_store(&sh->phase, PH_SQL);
            child_check(tkm_store_state_refs(st, fx->digest, &refs, &n, &err), &err, __LINE__);
            for (size_t i = 0; i < n; i++)
                child_check(tkm_store_state_release(st, refs[i].volume_id, now, &err), &err,
                            __LINE__);
            tkm_store_state_refs_free(refs, n);
            atomic_store(&sh->phase, PH_REMOVE);
            child_check(r == 9 ? run_gc(st, now, 0, 0, NULL, NULL, &err)
                               : run_remove(st, fx->digest, NULL, &err),
                        &err, __LINE__);
        }
        atomic_store(&sh->phase, PH_IDLE);
        atomic_fetch_add(&sh->ops, 1);
    }
}

/* Every invariant of a reopened store; returns the number of entries. */
static size_t check_invariants(const char *root, struct fix f[NFIX], int iter,
                               struct tkm_store_state_report *rep)
{
    struct tkm_store *s = NULL;
    struct tkm_store_state *st = NULL;
    struct tkm_err err = {0};
    char **have = NULL, ok[256];
    size_t nh = 0, n = 0, nr = 0;
    struct tkm_store_entry *v = NULL;
    struct tkm_store_ref *refs = NULL;
    open_both(root, 2000 + iter, &s, &st, rep);
    if (rep->rebuilt)
        tkm_test_fail(__FILE__, __LINE__, "iteration %d: state.db had to be rebuilt", iter);
    ASSERT_OK(tkm_store_list(s, &have, &nh, &err));
    ASSERT_OK(tkm_store_state_entries(st, &v, &n, &err));
    if (n != nh)
        tkm_test_fail(__FILE__, __LINE__, "iteration %d: %zu rows, %zu complete trees", iter, n,
                      nh);
    for (size_t i = 0; i < n; i++) {
        ASSERT_NOT_NULL(find_entry(v, n, have[i]));
        ASSERT_OK(tkm_store_lookup(s, v[i].digest, NULL, &err)); /* tree + marker */
        ASSERT_EQ(v[i].removing, 0);
        int known = 0;
        for (int k = 0; k < NFIX; k++)
            if (strcmp(v[i].digest, f[k].digest) == 0) {
                ASSERT_UEQ(v[i].bytes, f[k].bytes);
                known = 1;
            }
        ASSERT(known);
    }
    ASSERT_OK(tkm_store_state_refs(st, NULL, &refs, &nr, &err));
    for (size_t i = 0; i < nr; i++)
        ASSERT_NOT_NULL(find_entry(v, n, refs[i].digest));
    tkm_store_state_refs_free(refs, nr);
    tkm_store_state_entries_free(v, n);
    tkm_store_list_free(have, nh);
    ASSERT_EQ(count_sub(root, "staging"), 0);
    ASSERT_EQ(count_sub(root, "sha256"), (int)(2 * nh)); /* trees and markers, nothing else */
    close_both(s, st);
    db_text(root, "PRAGMA integrity_check", ok, sizeof ok);
    ASSERT_STREQ(ok, "ok");
    db_text(root, "SELECT COUNT(*) FROM pragma_foreign_key_check", ok, sizeof ok);
    ASSERT_STREQ(ok, "0");
    return nh;
}

static double mono(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

TEST_TIMEOUT(kill9_during_extraction_removal_and_sqlite_writes, 120)
{
    char root[512];
    struct fix f[NFIX];
    struct tkm_store *s = NULL;
    struct tkm_store_state *st = NULL;
    struct tkm_store_state_report rep;
    fixtures(f);
    store_root(root, sizeof root);
    /* the sizes every row must carry */
    open_both(root, 1, &s, &st, NULL);
    for (int i = 0; i < NFIX; i++)
        ingest(st, &f[i], 1);
    close_both(s, st);
    const char *sc = getenv("TKM_TEST_TIMEOUT_SCALE");
    double scale = sc && strtol(sc, NULL, 10) > 1 ? 3.0 : 1.0; /* valgrind */
    double budget = 12.0 * scale, t0 = mono();
    struct shared *sh =
        mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    ASSERT(sh != MAP_FAILED);
    uint64_t seed = 0x7e57c0ffee; /* fixed: the same kill schedule every run */
    int kills[PH_N] = {0}, iters = 0, missed = 0;
    uint64_t dropped = 0, adopted = 0, unmarked = 0, ops = 0;
    size_t present_min = NFIX, present_max = 0;
    for (; iters < 400 && mono() - t0 < budget; iters++) {
        int target = 1 + iters % 3; /* extraction, sqlite write, removal in turn */
        atomic_store(&sh->phase, PH_IDLE);
        atomic_store(&sh->ops, 0);
        fflush(NULL);
        pid_t pid = fork();
        ASSERT(pid >= 0);
        if (pid == 0)
            chaos_child(root, f, sh, 0x9e3779b97f4a7c15ull * (uint64_t)(iters + 1));
        /* wait for the phase we aim at (at most 3 s), then a random few ms */
        double w0 = mono();
        while (atomic_load(&sh->phase) != target && mono() - w0 < 3.0 * scale)
            usleep(100);
        struct timespec d = {0, (long)(rnd(&seed) % (target == PH_EXTRACT ? 8000 : 1500)) * 1000};
        nanosleep(&d, NULL);
        int ph = atomic_load(&sh->phase);
        ASSERT_OK(kill(pid, SIGKILL));
        int stt = 0;
        ASSERT_EQ(waitpid(pid, &stt, 0), pid);
        if (!WIFSIGNALED(stt))
            tkm_test_fail(__FILE__, __LINE__, "iteration %d: the child exited (%d) before the kill",
                          iters, WIFEXITED(stt) ? WEXITSTATUS(stt) : -1);
        if (ph != target)
            missed++;
        kills[ph]++;
        ops += (uint64_t)atomic_load(&sh->ops);
        size_t np = check_invariants(root, f, iters, &rep);
        dropped += rep.rows_dropped;
        adopted += rep.adopted;
        unmarked += rep.unmarked;
        present_min = np < present_min ? np : present_min;
        present_max = np > present_max ? np : present_max;
    }
    printf("# %d kills in %.1f s (%llu operations): %d in %s, %d in %s, %d in %s, %d in %s; %d off "
           "target; on reopen: %llu rows dropped, %llu trees adopted, %llu removals undone; "
           "%zu..%zu entries present\n",
           iters, mono() - t0, (unsigned long long)ops, kills[PH_EXTRACT], ph_name[PH_EXTRACT],
           kills[PH_SQL], ph_name[PH_SQL], kills[PH_REMOVE], ph_name[PH_REMOVE], kills[PH_IDLE],
           ph_name[PH_IDLE], missed, (unsigned long long)dropped, (unsigned long long)adopted,
           (unsigned long long)unmarked, present_min, present_max);
    ASSERT(iters >= 15);
    ASSERT(kills[PH_EXTRACT] >= 3);
    ASSERT(kills[PH_SQL] >= 3);
    ASSERT(kills[PH_REMOVE] >= 3);
    ASSERT(present_max > present_min); /* the workload did change the store */
    munmap(sh, sizeof *sh);
}
