/*
 * store_state.c - latency of the store state's quick calls, which tkm-agent
 * makes on its loop thread: tkm_store_state_acquire and _release (one
 * transaction each, WAL, synchronous=NORMAL), side by side with a baseline
 * that runs the same statements in the same transactions on the same
 * database with synchronous=FULL (an fsync of the WAL per commit) and with
 * its statements prepared once (tkm prepares them per call). Rounds alternate
 * which side goes first. Prints p50, p99 and max per call in microseconds and
 * the p50 ratio.
 *
 * Usage: bench_store_state [WORKDIR [CALLS [ROUNDS]]]
 *   WORKDIR (default /var/tmp): where the store is made (use the disk the
 *   agent's store would live on; tmpfs hides the fsync cost); removed after.
 *   The entry is the fixture tests/fixtures/triton-cache/...-binary-only
 *   (TKM_FIXTURES or the source tree).
 */
#include <errno.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>

#include <tkm/archive.h>
#include <tkm/store.h>
#include <tkm/store/state.h>

#define ROUNDS_MAX 9

static double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

struct lat {
    double p50, p99, max;
};

static struct lat summarize(double *v, size_t n)
{
    struct lat l;
    qsort(v, n, sizeof *v, cmp_d);
    l.p50 = v[n / 2];
    l.p99 = v[n * 99 / 100];
    l.max = v[n - 1];
    return l;
}

static int file_digest(const char *path, char out[72])
{
    unsigned char md[32], buf[65536];
    unsigned int mdlen = 0;
    FILE *fp = fopen(path, "rb");
    if (!fp)
        return -errno;
    EVP_MD_CTX *c = EVP_MD_CTX_new();
    EVP_DigestInit_ex(c, EVP_sha256(), NULL);
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, fp)) > 0)
        EVP_DigestUpdate(c, buf, n);
    fclose(fp);
    EVP_DigestFinal_ex(c, md, &mdlen);
    EVP_MD_CTX_free(c);
    memcpy(out, "sha256:", 7);
    for (int k = 0; k < 32; k++)
        snprintf(out + 7 + 2 * k, 3, "%02x", md[k]);
    return 0;
}

struct ckpt_thread {
    struct tkm_store_state *st;
    atomic_int stop;
    int runs;
};

/* What the agent's thread pool does: a checkpoint when the WAL passed 1000
 * frames (looked at every 10 ms), concurrent with the loop's calls. */
static void *checkpointer(void *p)
{
    struct ckpt_thread *c = p;
    struct timespec ts = {0, 10 * 1000 * 1000};
    while (!atomic_load(&c->stop)) {
        if (tkm_store_state_wal_frames(c->st) >= 1000 &&
            tkm_store_state_checkpoint(c->st, NULL) == 0)
            c->runs++;
        nanosleep(&ts, NULL);
    }
    return NULL;
}

static void on_ingested(int rc, const char *digest, const char *path,
                        const struct tkm_store_ingest_info *info, const struct tkm_err *err,
                        void *data)
{
    struct tkm_err *out = data;
    (void)digest;
    (void)path;
    (void)info;
    if (rc)
        *out = *err;
    out->code = rc;
}

/* The entry, as tkm-agent ingests it (on a loop: the extraction on the pool). */
static int ingest(struct tkm_store_state *st, const char *digest, const char *blob,
                  struct tkm_err *err)
{
    uv_loop_t loop;
    int rc = uv_loop_init(&loop);
    if (rc == 0 && (rc = tkm_store_state_ingest_start(&loop, st, digest, blob, NULL, NULL,
                                                      on_ingested, err, NULL, err)) == 0) {
        uv_run(&loop, UV_RUN_DEFAULT);
        rc = err->code;
    }
    uv_loop_close(&loop);
    return rc;
}

/* tkm: the library's calls. acq/rel get n latencies each. */
static int side_tkm(struct tkm_store *s, const char *digest, size_t n, double *acq, double *rel)
{
    struct tkm_store_state *st = NULL;
    struct tkm_err err = {0};
    struct ckpt_thread c = {0};
    pthread_t th;
    char vol[64];
    int rc = tkm_store_state_open(s, time(NULL), &st, NULL, &err);
    c.st = st;
    atomic_init(&c.stop, 0);
    if (rc == 0 && pthread_create(&th, NULL, checkpointer, &c) != 0)
        rc = -1;
    for (size_t i = 0; rc == 0 && i < n; i++) {
        struct tkm_store_ref r = {.volume_id = vol,
                                  .digest = digest,
                                  .pod_namespace = "ml",
                                  .pod_name = "trainer-0",
                                  .pod_uid = "uid-0",
                                  .cache_namespace = "ml",
                                  .cache_name = "kernels"};
        snprintf(vol, sizeof vol, "csi-%zu", i);
        double t0 = now_us();
        rc = tkm_store_state_acquire(st, &r, time(NULL), NULL, &err);
        acq[i] = now_us() - t0;
    }
    for (size_t i = 0; rc == 0 && i < n; i++) {
        snprintf(vol, sizeof vol, "csi-%zu", i);
        double t0 = now_us();
        rc = tkm_store_state_release(st, vol, time(NULL), &err);
        rel[i] = now_us() - t0;
    }
    if (st) {
        atomic_store(&c.stop, 1);
        pthread_join(th, NULL);
    }
    if (rc < 0)
        fprintf(stderr, "tkm: %s\n", err.msg);
    else
        printf("  tkm side: %d checkpoints on a second thread\n", c.runs);
    tkm_store_state_free(st);
    return rc;
}

static int step_all(sqlite3_stmt **q, int nq, const char *vol, const char *digest, int64_t now)
{
    for (int k = 0; k < nq; k++) {
        sqlite3_reset(q[k]);
        for (int p = 1; p <= sqlite3_bind_parameter_count(q[k]); p++) {
            const char *name = sqlite3_bind_parameter_name(q[k], p);
            if (name && strcmp(name, ":v") == 0)
                sqlite3_bind_text(q[k], p, vol, -1, SQLITE_STATIC);
            else if (name && strcmp(name, ":d") == 0)
                sqlite3_bind_text(q[k], p, digest, -1, SQLITE_STATIC);
            else
                sqlite3_bind_int64(q[k], p, now);
        }
        int rc;
        while ((rc = sqlite3_step(q[k])) == SQLITE_ROW)
            ;
        if (rc != SQLITE_DONE)
            return -1;
    }
    return 0;
}

/* baseline: the same transactions, synchronous=FULL, prepared once. */
static int side_full(const char *dbpath, const char *digest, size_t n, double *acq, double *rel)
{
    static const char *const a_sql[] = {
        "BEGIN IMMEDIATE",
        "SELECT digest FROM refs WHERE volume_id=:v",
        "SELECT removing FROM entries WHERE digest=:d",
        "INSERT INTO refs VALUES(:v, :d, 'ml', 'trainer-0', 'uid-0', 'ml', 'kernels', :t)",
        "UPDATE entries SET last_used=:t WHERE digest=:d",
        "COMMIT"};
    static const char *const r_sql[] = {
        "BEGIN IMMEDIATE", "SELECT digest FROM refs WHERE volume_id=:v",
        "DELETE FROM refs WHERE volume_id=:v", "UPDATE entries SET last_used=:t WHERE digest=:d",
        "COMMIT"};
    sqlite3 *db = NULL;
    sqlite3_stmt *a[6] = {0}, *r[5] = {0};
    char vol[64];
    int rc = sqlite3_open(dbpath, &db) == SQLITE_OK &&
                     sqlite3_exec(db, "PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL", NULL,
                                  NULL, NULL) == SQLITE_OK
                 ? 0
                 : -1;
    for (int k = 0; rc == 0 && k < 6; k++)
        rc = sqlite3_prepare_v2(db, a_sql[k], -1, &a[k], NULL) == SQLITE_OK ? 0 : -1;
    for (int k = 0; rc == 0 && k < 5; k++)
        rc = sqlite3_prepare_v2(db, r_sql[k], -1, &r[k], NULL) == SQLITE_OK ? 0 : -1;
    for (size_t i = 0; rc == 0 && i < n; i++) {
        snprintf(vol, sizeof vol, "full-%zu", i);
        double t0 = now_us();
        rc = step_all(a, 6, vol, digest, time(NULL));
        acq[i] = now_us() - t0;
    }
    for (size_t i = 0; rc == 0 && i < n; i++) {
        snprintf(vol, sizeof vol, "full-%zu", i);
        double t0 = now_us();
        rc = step_all(r, 5, vol, digest, time(NULL));
        rel[i] = now_us() - t0;
    }
    if (rc < 0)
        fprintf(stderr, "baseline: %s\n", sqlite3_errmsg(db));
    for (int k = 0; k < 6; k++)
        sqlite3_finalize(a[k]);
    for (int k = 0; k < 5; k++)
        sqlite3_finalize(r[k]);
    sqlite3_close(db);
    return rc;
}

static void print_lat(const char *what, struct lat t, struct lat b)
{
    printf("%-8s tkm (NORMAL) p50 %7.1f us  p99 %7.1f us  max %8.1f us | FULL p50 %7.1f us  p99 "
           "%7.1f us  max %8.1f us | p50 ratio FULL/tkm %.1fx\n",
           what, t.p50, t.p99, t.max, b.p50, b.p99, b.max, b.p50 / t.p50);
}

int main(int argc, char **argv)
{
    const char *work = argc > 1 ? argv[1] : "/var/tmp";
    size_t calls = argc > 2 ? strtoul(argv[2], NULL, 10) : 2000;
    int rounds = argc > 3 ? (int)strtol(argv[3], NULL, 10) : 3, rc = 1;
    const char *fx = getenv("TKM_FIXTURES");
    char root[512], blob[600], dbpath[600], digest[72];
    struct tkm_store *s = NULL;
    struct tkm_store_state *st = NULL;
    struct tkm_err err = {0};
    double *v[4] = {0};
    if (calls < 10 || rounds < 1 || rounds > ROUNDS_MAX) {
        fprintf(stderr, "usage: %s [WORKDIR [CALLS >= 10 [ROUNDS 1..%d]]]\n", argv[0], ROUNDS_MAX);
        return 2;
    }
    snprintf(root, sizeof root, "%s/tkm-bench-state-XXXXXX", work);
    snprintf(blob, sizeof blob, "%s/triton-cache/triton-3.6.0-cuda-sm90-binary-only.tar.gz",
             fx && *fx ? fx : TKM_FIXTURES_DIR);
    if (!mkdtemp(root) || file_digest(blob, digest) < 0) {
        fprintf(stderr, "%s or %s: %s\n", root, blob, strerror(errno));
        return 1;
    }
    snprintf(dbpath, sizeof dbpath, "%s/state.db", root);
    for (int i = 0; i < 4; i++)
        if (!(v[i] = calloc(calls * (size_t)rounds, sizeof(double))))
            goto out;
    if (tkm_store_open(root, &s, &err) < 0 ||
        tkm_store_state_open(s, time(NULL), &st, NULL, &err) ||
        ingest(st, digest, blob, &err) < 0) {
        fprintf(stderr, "%s\n", err.msg);
        goto out;
    }
    tkm_store_state_free(st);
    st = NULL;
    printf("store state latency: %zu acquires then %zu releases per side and round, %d rounds, "
           "in %s\n",
           calls, calls, rounds, root);
    for (int r = 0; r < rounds; r++) {
        size_t o = (size_t)r * calls;
        int first_tkm = r % 2 == 0;
        for (int k = 0; k < 2; k++) {
            int ok = (k == 0) == first_tkm ? side_tkm(s, digest, calls, v[0] + o, v[1] + o)
                                           : side_full(dbpath, digest, calls, v[2] + o, v[3] + o);
            if (ok < 0)
                goto out;
        }
    }
    size_t n = calls * (size_t)rounds;
    struct lat ta = summarize(v[0], n), tr = summarize(v[1], n), ba = summarize(v[2], n),
               br = summarize(v[3], n);
    print_lat("acquire", ta, ba);
    print_lat("release", tr, br);
    rc = 0;
out:
    tkm_store_state_free(st);
    tkm_store_free(s);
    for (int i = 0; i < 4; i++)
        free(v[i]);
    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", root);
    return rc;
}
