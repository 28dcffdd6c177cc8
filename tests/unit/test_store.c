/*
 * Unit tests for lib/store: ingest/lookup/list/remove, digest checks, the
 * per-digest lock across processes, and crash safety (a child killed in the
 * middle of an extraction leaves nothing visible after the next open).
 */
#include <dirent.h>
#include <signal.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <uv.h>

#include <tkm/archive.h>
#include <tkm/store.h>

#include "sup_archive.h"
#include "test.h"
#include "tarbuild.h"

static void path_in_tmp(char *p, size_t n, const char *rel)
{
    snprintf(p, n, "%s/%s", tkm_test_tmpdir(), rel);
}

/* Writes a tar.gz with nfiles small files under io.triton.cache/K/; returns
 * its sha256 digest in digest[72]. */
static void make_blob(const char *rel, int nfiles, char digest[72])
{
    struct tkm_buf t = TKM_BUF_INIT(64 << 20), gz = TKM_BUF_INIT(64 << 20);
    tb_dir(&t, "io.triton.cache/");
    for (int i = 0; i < nfiles; i++) {
        char n[128], d[64];
        snprintf(n, sizeof n, "io.triton.cache/K%03d/kernel.json", i);
        snprintf(d, sizeof d, "{\"hash\":\"%d\"}", i);
        tb_file(&t, n, d, strlen(d), 0644);
    }
    tb_end(&t);
    tb_gzip(&t, &gz);
    char p[512];
    path_in_tmp(p, sizeof p, rel);
    tb_write(p, gz.data, gz.len);
    /* the digest, computed by lib/archive on a throwaway extraction */
    char out[600];
    snprintf(out, sizeof out, "%s.probe", p);
    struct tkm_archive_opts o;
    tkm_archive_opts_init(&o);
    o.fsync = 0;
    struct tkm_archive_result r;
    struct tkm_err err = {0};
    ASSERT_OK(sup_extract_path(p, out, &o, &r, &err));
    ASSERT_OK(tkm_rmtree_at(AT_FDCWD, out));
    memcpy(digest, r.blob_digest, 72);
    tkm_buf_release(&t);
    tkm_buf_release(&gz);
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

TEST(ingest_lookup_list_remove)
{
    char root[512], blob[512], dg[72];
    path_in_tmp(root, sizeof root, "store");
    path_in_tmp(blob, sizeof blob, "blob.tgz");
    make_blob("blob.tgz", 3, dg);
    struct tkm_store *s = NULL;
    struct tkm_err err = {0};
    ASSERT_OK(tkm_store_open(root, &s, &err));
    char *path = NULL;
    ASSERT_EQ(tkm_store_lookup(s, dg, &path, &err), -ENOENT);
    ASSERT_STRCONTAINS(err.msg, "is not in the store");
    tkm_err_clear(&err);
    struct tkm_store_ingest_info info;
    ASSERT_OK(sup_store_ingest(s, dg, blob, NULL, &path, &info, &err));
    ASSERT_EQ(info.existed, 0);
    ASSERT_EQ(info.archive.files, 3);
    char expect[700];
    snprintf(expect, sizeof expect, "%s/sha256/%s", root, dg + 7);
    ASSERT_STREQ(path, expect);
    free(path);
    char f[800];
    snprintf(f, sizeof f, "%s/io.triton.cache/K001/kernel.json", expect);
    ASSERT_OK(access(f, R_OK));
    /* second ingest: already there, blob not even read */
    ASSERT_OK(sup_store_ingest(s, dg, "/nonexistent", NULL, NULL, &info, &err));
    ASSERT_EQ(info.existed, 1);
    ASSERT_OK(tkm_store_lookup(s, dg, &path, &err));
    ASSERT_STREQ(path, expect);
    free(path);
    char **list = NULL;
    size_t n = 0;
    ASSERT_OK(tkm_store_list(s, &list, &n, &err));
    ASSERT_EQ(n, 1);
    ASSERT_STREQ(list[0], dg);
    tkm_store_list_free(list, n);
    ASSERT_OK(tkm_store_remove(s, dg, &err));
    ASSERT_EQ(tkm_store_lookup(s, dg, NULL, &err), -ENOENT);
    ASSERT(access(expect, F_OK) != 0);
    ASSERT_EQ(tkm_store_remove(s, dg, &err), -ENOENT);
    ASSERT_OK(tkm_store_list(s, &list, &n, &err));
    ASSERT_EQ(n, 0);
    char stg[600];
    snprintf(stg, sizeof stg, "%s/staging", root);
    ASSERT_EQ(count_dir(stg), 0);
    tkm_store_free(s);
}

TEST(ingest_checks_digest_and_leaves_nothing)
{
    char root[512], blob[512], dg[72], other[72];
    path_in_tmp(root, sizeof root, "store");
    path_in_tmp(blob, sizeof blob, "blob.tgz");
    make_blob("blob.tgz", 2, dg);
    make_blob("other.tgz", 5, other);
    struct tkm_store *s = NULL;
    struct tkm_err err = {0};
    ASSERT_OK(tkm_store_open(root, &s, &err));
    /* the blob does not hash to the digest it is filed under */
    ASSERT_EQ(sup_store_ingest(s, other, blob, NULL, NULL, NULL, &err), -EBADMSG);
    ASSERT_STRCONTAINS(err.msg, "layer blob digest mismatch");
    ASSERT_STRCONTAINS(err.msg, other);
    char p[700];
    snprintf(p, sizeof p, "%s/sha256", root);
    ASSERT_EQ(count_dir(p), 0);
    snprintf(p, sizeof p, "%s/staging", root);
    ASSERT_EQ(count_dir(p), 0);
    tkm_err_clear(&err);
    ASSERT_EQ(sup_store_ingest(s, "sha256:xyz", blob, NULL, NULL, NULL, &err), -EINVAL);
    ASSERT_STRCONTAINS(err.msg, "'sha256:xyz' is not a digest");
    tkm_err_clear(&err);
    ASSERT_EQ(tkm_store_lookup(s, "../../etc", NULL, &err), -EINVAL);
    /* a wrong diff_id also leaves nothing */
    struct tkm_archive_opts o;
    tkm_archive_opts_init(&o);
    o.diff_id = "sha256:1111111111111111111111111111111111111111111111111111111111111111";
    tkm_err_clear(&err);
    ASSERT_EQ(sup_store_ingest(s, dg, blob, &o, NULL, NULL, &err), -EBADMSG);
    ASSERT_STRCONTAINS(err.msg, "diff_id mismatch");
    snprintf(p, sizeof p, "%s/sha256", root);
    ASSERT_EQ(count_dir(p), 0);
    tkm_store_free(s);
}

TEST(open_purges_leftovers)
{
    char root[512], p[800], dg[72];
    path_in_tmp(root, sizeof root, "store");
    make_blob("blob.tgz", 1, dg);
    struct tkm_store *s = NULL;
    struct tkm_err err = {0};
    ASSERT_OK(tkm_store_open(root, &s, &err));
    tkm_store_free(s);
    /* a crash after the rename but before the marker; a staging leftover */
    snprintf(p, sizeof p, "%s/sha256/%s", root, dg + 7);
    ASSERT_OK(mkdir(p, 0755));
    snprintf(p, sizeof p, "%s/sha256/%s/file", root, dg + 7);
    tb_write(p, "x", 1);
    snprintf(p, sizeof p, "%s/staging/%s.abcdef", root, dg + 7);
    ASSERT_OK(mkdir(p, 0700));
    snprintf(p, sizeof p, "%s/staging/junk", root);
    tb_write(p, "x", 1);
    ASSERT_OK(tkm_store_open(root, &s, &err));
    ASSERT_EQ(tkm_store_lookup(s, dg, NULL, &err), -ENOENT);
    snprintf(p, sizeof p, "%s/sha256", root);
    ASSERT_EQ(count_dir(p), 0);
    snprintf(p, sizeof p, "%s/staging", root);
    ASSERT_EQ(count_dir(p), 0);
    tkm_store_free(s);
}

struct child_sync {
    int fd;
    uint64_t entries;
};

static void announce(void *ud, const struct tkm_archive_progress *p)
{
    struct child_sync *cs = ud;
    if (p->entries >= cs->entries && cs->fd >= 0) {
        ASSERT_EQ(write(cs->fd, "x", 1), 1);
        close(cs->fd);
        cs->fd = -1;
        pause(); /* hold the lock, mid-extraction, until killed */
    }
}

/* Forks a child that ingests blob and stops after `entries` entries. */
static pid_t start_stuck_child(const char *root, const char *dg, const char *blob)
{
    int pfd[2];
    ASSERT_OK(pipe(pfd));
    pid_t pid = fork();
    ASSERT(pid >= 0);
    if (pid == 0) {
        close(pfd[0]);
        struct tkm_store *s = NULL;
        struct tkm_err err = {0};
        if (tkm_store_open(root, &s, &err) < 0)
            _exit(3);
        struct child_sync cs = {pfd[1], 200};
        struct tkm_archive_opts o;
        tkm_archive_opts_init(&o);
        o.progress = announce;
        o.progress_ud = &cs;
        sup_store_ingest(s, dg, blob, &o, NULL, NULL, &err);
        _exit(4);
    }
    close(pfd[1]);
    char c;
    ASSERT_EQ(read(pfd[0], &c, 1), 1); /* the child is in the middle of it */
    close(pfd[0]);
    return pid;
}

TEST_TIMEOUT(crash_mid_extraction_leaves_nothing, 60)
{
    char root[512], blob[512], dg[72], p[700];
    path_in_tmp(root, sizeof root, "store");
    path_in_tmp(blob, sizeof blob, "blob.tgz");
    make_blob("blob.tgz", 600, dg);
    struct tkm_store *s = NULL;
    struct tkm_err err = {0};
    ASSERT_OK(tkm_store_open(root, &s, &err));
    tkm_store_free(s);
    pid_t pid = start_stuck_child(root, dg, blob);
    snprintf(p, sizeof p, "%s/staging", root);
    ASSERT_EQ(count_dir(p), 1); /* its staging dir exists right now */
    /* while it holds the lock, a reopen must not purge its work */
    ASSERT_OK(tkm_store_open(root, &s, &err));
    ASSERT_EQ(count_dir(p), 1);
    tkm_store_free(s);
    ASSERT_OK(kill(pid, SIGKILL));
    int st;
    ASSERT_EQ(waitpid(pid, &st, 0), pid);
    ASSERT(WIFSIGNALED(st));
    ASSERT_OK(tkm_store_open(root, &s, &err));
    ASSERT_EQ(tkm_store_lookup(s, dg, NULL, &err), -ENOENT);
    ASSERT_EQ(count_dir(p), 0);
    snprintf(p, sizeof p, "%s/sha256", root);
    ASSERT_EQ(count_dir(p), 0);
    /* and it can be ingested afterwards */
    struct tkm_store_ingest_info info;
    ASSERT_OK(sup_store_ingest(s, dg, blob, NULL, NULL, &info, &err));
    ASSERT_EQ(info.archive.files, 600);
    ASSERT_OK(tkm_store_lookup(s, dg, NULL, &err));
    tkm_store_free(s);
}

TEST_TIMEOUT(lock_excludes_a_second_process, 60)
{
    char root[512], blob[512], dg[72];
    path_in_tmp(root, sizeof root, "store");
    path_in_tmp(blob, sizeof blob, "blob.tgz");
    make_blob("blob.tgz", 400, dg);
    struct tkm_store *s = NULL;
    struct tkm_err err = {0};
    ASSERT_OK(tkm_store_open(root, &s, &err));
    pid_t pid = start_stuck_child(root, dg, blob);
    struct tkm_archive_opts o;
    tkm_archive_opts_init(&o);
    atomic_int cancel = 1;
    o.cancel = &cancel;
    ASSERT_EQ(sup_store_ingest(s, dg, blob, &o, NULL, NULL, &err), -ECANCELED);
    ASSERT_STRCONTAINS(err.msg, "cancelled while another process was extracting it");
    ASSERT_OK(kill(pid, SIGKILL));
    ASSERT_EQ(waitpid(pid, NULL, 0), pid);
    /* the kernel dropped the dead child's lock: this one now extracts */
    tkm_err_clear(&err);
    cancel = 0;
    struct tkm_store_ingest_info info;
    ASSERT_OK(sup_store_ingest(s, dg, blob, &o, NULL, &info, &err));
    ASSERT_EQ(info.existed, 0);
    ASSERT_EQ(info.archive.files, 400);
    tkm_store_free(s);
}

TEST(concurrent_ingest_same_digest)
{
    char root[512], blob[512], dg[72];
    path_in_tmp(root, sizeof root, "store");
    path_in_tmp(blob, sizeof blob, "blob.tgz");
    make_blob("blob.tgz", 100, dg);
    pid_t kids[3];
    for (int i = 0; i < 3; i++) {
        kids[i] = fork();
        ASSERT(kids[i] >= 0);
        if (kids[i] == 0) {
            struct tkm_store *s = NULL;
            struct tkm_err err = {0};
            if (tkm_store_open(root, &s, &err) < 0 ||
                sup_store_ingest(s, dg, blob, NULL, NULL, NULL, &err) < 0)
                _exit(1);
            tkm_store_free(s);
            _exit(0);
        }
    }
    for (int i = 0; i < 3; i++) {
        int st;
        ASSERT_EQ(waitpid(kids[i], &st, 0), kids[i]);
        ASSERT(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    }
    struct tkm_store *s = NULL;
    struct tkm_err err = {0};
    ASSERT_OK(tkm_store_open(root, &s, &err));
    char **list = NULL;
    size_t n = 0;
    ASSERT_OK(tkm_store_list(s, &list, &n, &err));
    ASSERT_EQ(n, 1);
    tkm_store_list_free(list, n);
    char p[700];
    snprintf(p, sizeof p, "%s/sha256/%s/io.triton.cache", root, dg + 7);
    ASSERT_EQ(count_dir(p), 100);
    tkm_store_free(s);
}

TEST(fixture_into_store)
{
    char root[512], fx[512], dg[72] = {0};
    path_in_tmp(root, sizeof root, "store");
    snprintf(fx, sizeof fx, "%s/triton-cache/triton-3.6.0-cuda-sm90.tar.gz", tkm_test_fixtures());
    char cmd[1200], sump[600];
    path_in_tmp(sump, sizeof sump, "sum");
    snprintf(cmd, sizeof cmd, "sha256sum '%s' | cut -c1-64 > '%s'", fx, sump);
    ASSERT_OK(system(cmd));
    FILE *f = fopen(sump, "r");
    ASSERT_NOT_NULL(f);
    memcpy(dg, "sha256:", 7);
    ASSERT_NOT_NULL(fgets(dg + 7, 65, f));
    fclose(f);
    struct tkm_store *s = NULL;
    struct tkm_err err = {0};
    ASSERT_OK(tkm_store_open(root, &s, &err));
    static const char *const inc[] = {"tcache/", NULL};
    struct tkm_archive_opts o;
    tkm_archive_opts_init(&o);
    o.include = inc;
    char *path = NULL;
    struct tkm_store_ingest_info info;
    ASSERT_OK(sup_store_ingest(s, dg, fx, &o, &path, &info, &err));
    ASSERT(info.archive.files > 10);
    char m[800];
    snprintf(m, sizeof m, "%s.complete", path);
    f = fopen(m, "r");
    ASSERT_NOT_NULL(f);
    char line[1024];
    ASSERT_NOT_NULL(fgets(line, sizeof line, f));
    fclose(f);
    ASSERT_STRCONTAINS(line, dg);
    ASSERT_STRCONTAINS(line, info.archive.diff_id);
    free(path);
    tkm_store_free(s);
}

struct async_out {
    int calls, rc;
    char path[700];
    uint64_t files;
    char msg[1024];
};

static void on_ingest(int rc, const char *path, const struct tkm_store_ingest_info *info,
                      const struct tkm_err *err, void *data)
{
    struct async_out *o = data;
    o->calls++;
    o->rc = rc;
    if (path)
        snprintf(o->path, sizeof o->path, "%s", path);
    o->files = info->archive.files;
    snprintf(o->msg, sizeof o->msg, "%s", rc ? err->msg : "");
}

TEST_TIMEOUT(ingest_on_the_libuv_thread_pool, 60)
{
    char root[512], blob[512], dg[72];
    path_in_tmp(root, sizeof root, "store");
    path_in_tmp(blob, sizeof blob, "blob.tgz");
    make_blob("blob.tgz", 50, dg);
    struct tkm_store *s = NULL;
    struct tkm_err err = {0};
    ASSERT_OK(tkm_store_open(root, &s, &err));
    uv_loop_t loop;
    ASSERT_OK(uv_loop_init(&loop));
    /* copies: the caller's strings may go away at once */
    char *dcopy = strdup(dg), *bcopy = strdup(blob), *inc0 = strdup("io.triton.cache/");
    const char *inc[] = {inc0, NULL};
    struct tkm_archive_opts o;
    tkm_archive_opts_init(&o);
    o.include = inc;
    struct async_out out = {0};
    struct tkm_store_job *job = NULL;
    ASSERT_OK(tkm_store_ingest_start(&loop, s, dcopy, bcopy, &o, on_ingest, &out, &job, &err));
    ASSERT_NOT_NULL(job);
    memset(dcopy, 'x', strlen(dcopy));
    memset(bcopy, 'x', strlen(bcopy));
    memset(inc0, 'x', strlen(inc0));
    free(dcopy);
    free(bcopy);
    free(inc0);
    ASSERT_EQ(out.calls, 0); /* never called before the loop runs */
    ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
    ASSERT_EQ(out.calls, 1);
    if (out.rc)
        tkm_test_fail(__FILE__, __LINE__, "%s", out.msg);
    ASSERT_EQ(out.files, 50);
    ASSERT_STRCONTAINS(out.path, dg + 7);
    /* a cancelled job reports -ECANCELED and leaves nothing */
    char blob2[512], dg2[72];
    path_in_tmp(blob2, sizeof blob2, "blob2.tgz");
    make_blob("blob2.tgz", 600, dg2);
    memset(&out, 0, sizeof out);
    ASSERT_OK(tkm_store_ingest_start(&loop, s, dg2, blob2, NULL, on_ingest, &out, &job, &err));
    tkm_store_job_cancel(job);
    ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
    ASSERT_EQ(out.calls, 1);
    ASSERT_EQ(out.rc, -ECANCELED);
    ASSERT_STRCONTAINS(out.msg, "cancelled");
    ASSERT_EQ(tkm_store_lookup(s, dg2, NULL, &err), -ENOENT);
    char p[700];
    snprintf(p, sizeof p, "%s/staging", root);
    ASSERT_EQ(count_dir(p), 0);
    /* a bad digest fails at once, and cb is never called */
    memset(&out, 0, sizeof out);
    tkm_err_clear(&err);
    ASSERT_EQ(
        tkm_store_ingest_start(&loop, s, "sha256:nope", blob, NULL, on_ingest, &out, NULL, &err),
        -EINVAL);
    ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
    ASSERT_EQ(out.calls, 0);
    ASSERT_OK(uv_loop_close(&loop));
    tkm_store_free(s);
}

/* The cancel path a daemon uses instead of signals: once entries are on
 * disk in staging/, the progress callback (a pool thread) wakes the loop,
 * which calls tkm_store_job_cancel, and waits until it has. */
struct cancel_probe {
    uv_async_t wake;
    uv_sem_t cancelled;
    atomic_int asked;
    struct tkm_store_job *job;
    struct async_out out;
    char staging[600];
    int seen_in_staging;
};

static void cancel_after_entries(void *ud, const struct tkm_archive_progress *p)
{
    struct cancel_probe *c = ud;
    if (p->entries < 64 || atomic_exchange(&c->asked, 1))
        return;
    char cmd[700];
    snprintf(cmd, sizeof cmd, "find '%s' -name kernel.json | grep -q .", c->staging);
    c->seen_in_staging = system(cmd) == 0;
    uv_async_send(&c->wake);
    uv_sem_wait(&c->cancelled);
}

static void cancel_on_loop(uv_async_t *a)
{
    struct cancel_probe *c = a->data;
    tkm_store_job_cancel(c->job);
    uv_sem_post(&c->cancelled);
}

static void cancel_probe_done(int rc, const char *path, const struct tkm_store_ingest_info *info,
                              const struct tkm_err *err, void *data)
{
    struct cancel_probe *c = data;
    on_ingest(rc, path, info, err, &c->out);
    uv_close((uv_handle_t *)&c->wake, NULL);
}

TEST(ingest_cancelled_mid_way_leaves_nothing)
{
    char root[512], blob[512], dg[72], p[700];
    path_in_tmp(root, sizeof root, "store");
    path_in_tmp(blob, sizeof blob, "blob.tgz");
    make_blob("blob.tgz", 400, dg);
    struct tkm_store *s = NULL;
    struct tkm_err err = {0};
    ASSERT_OK(tkm_store_open(root, &s, &err));
    uv_loop_t loop;
    ASSERT_OK(uv_loop_init(&loop));
    struct cancel_probe c;
    memset(&c, 0, sizeof c);
    atomic_init(&c.asked, 0);
    ASSERT_OK(uv_sem_init(&c.cancelled, 0));
    ASSERT_OK(uv_async_init(&loop, &c.wake, cancel_on_loop));
    c.wake.data = &c;
    snprintf(c.staging, sizeof c.staging, "%s/staging", root);
    struct tkm_archive_opts o;
    tkm_archive_opts_init(&o);
    o.fsync = 0;
    o.progress = cancel_after_entries;
    o.progress_ud = &c;
    ASSERT_OK(tkm_store_ingest_start(&loop, s, dg, blob, &o, cancel_probe_done, &c, &c.job, &err));
    ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
    ASSERT_EQ(c.out.calls, 1);
    ASSERT_EQ(c.out.rc, -ECANCELED);
    ASSERT_STRCONTAINS(c.out.msg, "extraction cancelled");
    ASSERT_EQ(c.seen_in_staging, 1);    /* it was stopped mid-way ... */
    ASSERT_EQ(count_dir(c.staging), 0); /* ... and staging/ is empty again */
    snprintf(p, sizeof p, "%s/sha256", root);
    ASSERT_EQ(count_dir(p), 0);
    ASSERT_EQ(tkm_store_lookup(s, dg, NULL, &err), -ENOENT);
    /* the same ingest without cancelling completes */
    o.progress = NULL;
    tkm_err_clear(&err);
    struct tkm_store_ingest_info info;
    ASSERT_OK(sup_store_ingest(s, dg, blob, &o, NULL, &info, &err));
    ASSERT_EQ(info.archive.files, 400);
    uv_sem_destroy(&c.cancelled);
    ASSERT_OK(uv_loop_close(&loop));
    tkm_store_free(s);
}

/* ---- the job waits for a held lock on the loop, not on a pool thread ----- */

struct lock_wait {
    int lockfd;
    uint64_t released_ms, probe_ms;
    struct tkm_store_job *job;
    int cancel; /* cancel the job instead of releasing the lock */
};

static void probe_work(uv_work_t *w)
{
    (void)w;
}

static void probe_after(uv_work_t *w, int status)
{
    struct lock_wait *lw = w->data;
    (void)status;
    lw->probe_ms = uv_now(w->loop);
}

static void release_lock(uv_timer_t *t)
{
    struct lock_wait *lw = t->data;
    lw->released_ms = uv_now(t->loop);
    if (lw->cancel) {
        tkm_store_job_cancel(lw->job);
    } else {
        flock(lw->lockfd, LOCK_UN);
        close(lw->lockfd);
        lw->lockfd = -1;
    }
    uv_close((uv_handle_t *)t, NULL);
}

static void held_lock_case(int cancel)
{
    char root[512], blob[512], dg[72], lockp[700];
    /* one pool thread: a job that slept on it would hold the probe up */
    setenv("UV_THREADPOOL_SIZE", "1", 1);
    path_in_tmp(root, sizeof root, "store");
    path_in_tmp(blob, sizeof blob, "blob.tgz");
    make_blob("blob.tgz", 20, dg);
    struct tkm_store *s = NULL;
    struct tkm_err err = {0};
    ASSERT_OK(tkm_store_open(root, &s, &err));
    /* "another process": an open file description of our own on the lock */
    snprintf(lockp, sizeof lockp, "%s/locks/%s.lock", root, dg + 7);
    struct lock_wait lw = {.cancel = cancel};
    lw.lockfd = open(lockp, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    ASSERT(lw.lockfd >= 0);
    ASSERT_OK(flock(lw.lockfd, LOCK_EX | LOCK_NB));
    uv_loop_t loop;
    uv_timer_t t;
    uv_work_t probe = {.data = &lw};
    ASSERT_OK(uv_loop_init(&loop));
    struct async_out out = {0};
    uint64_t t0 = uv_now(&loop);
    ASSERT_OK(tkm_store_ingest_start(&loop, s, dg, blob, NULL, on_ingest, &out, &lw.job, &err));
    ASSERT_OK(uv_timer_init(&loop, &t));
    t.data = &lw;
    ASSERT_OK(uv_timer_start(&t, release_lock, 400u * tkm_test_timeout_scale(), 0));
    /* queued after the job: it needs the only pool thread */
    uv_update_time(&loop);
    ASSERT_OK(uv_queue_work(&loop, &probe, probe_work, probe_after));
    ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
    ASSERT_EQ(out.calls, 1);
    ASSERT(lw.probe_ms > 0);
    ASSERT(lw.probe_ms < lw.released_ms); /* the pool thread was free while the job waited */
    ASSERT(lw.released_ms - t0 >= 400u * tkm_test_timeout_scale());
    if (cancel) {
        ASSERT_EQ(out.rc, -ECANCELED);
        ASSERT_STRCONTAINS(out.msg, "cancelled while another process was extracting it");
        ASSERT_EQ(tkm_store_lookup(s, dg, NULL, &err), -ENOENT);
        close(lw.lockfd);
    } else {
        if (out.rc)
            tkm_test_fail(__FILE__, __LINE__, "%s", out.msg);
        ASSERT_EQ(out.files, 20);
        ASSERT_STRCONTAINS(out.path, dg + 7);
    }
    ASSERT_OK(uv_loop_close(&loop));
    tkm_store_free(s);
}

TEST_TIMEOUT(ingest_job_waits_for_a_held_lock_on_the_loop, 60)
{
    held_lock_case(0);
}

TEST_TIMEOUT(ingest_job_cancelled_while_waiting_for_the_lock, 60)
{
    held_lock_case(1);
}
