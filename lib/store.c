/*
 * store.c - content-addressed store of extracted layers (see store.h).
 */
#include <tkm/store.h>

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <openssl/crypto.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>

#include <tkm/backoff.h>
#include <tkm/buf.h>
#include <tkm/fs.h>
#include <tkm/log.h>
#include <tkm/util.h>

#define HEXLEN 64

struct tkm_store {
    char *root;
    int rootfd;
    int shafd;  /* sha256/ */
    int stgfd;  /* staging/ */
    int lockfd; /* locks/ */
};

static int is_hex64(const char *s, size_t n)
{
    if (n < HEXLEN)
        return 0;
    for (size_t i = 0; i < HEXLEN; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
            return 0;
    return 1;
}

int tkm_store_check_digest(const char *digest, struct tkm_err *err)
{
    if (!tkm_digest_valid(digest))
        return tkm_err_set(err, -EINVAL, "'%s' is not a digest of the form sha256:<64 hex>",
                           digest ? digest : "(null)");
    return 0;
}

static int open_subdir(int dirfd, const char *root, const char *name, mode_t mode,
                       struct tkm_err *err)
{
    if (mkdirat(dirfd, name, mode) < 0 && errno != EEXIST)
        return tkm_err_set(err, -errno, "store %s: cannot create %s/: %s", root, name,
                           strerror(errno));
    int fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return tkm_err_set(err, -errno, "store %s: cannot open %s/: %s", root, name,
                           strerror(errno));
    return fd;
}

/* Opens and flocks locks/<hex>.lock. nonblock: -EWOULDBLOCK when held. */
static int lock_digest(struct tkm_store *s, const char *hex, int nonblock, struct tkm_err *err)
{
    char name[HEXLEN + 8];
    snprintf(name, sizeof name, "%.64s.lock", hex);
    int fd = openat(s->lockfd, name, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0)
        return tkm_err_set(err, -errno, "store %s: cannot open lock %s: %s", s->root, name,
                           strerror(errno));
    for (;;) {
        if (flock(fd, LOCK_EX | LOCK_NB) == 0)
            return fd;
        if (errno != EWOULDBLOCK && errno != EINTR) {
            int e = errno;
            close(fd);
            return tkm_err_set(err, -e, "store %s: flock %s: %s", s->root, name, strerror(e));
        }
        if (nonblock) {
            close(fd);
            return -EWOULDBLOCK;
        }
        struct timespec ts = {0, 20 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
}

static void unlock_digest(int fd)
{
    if (fd >= 0) {
        flock(fd, LOCK_UN);
        close(fd);
    }
}

static int marker_exists(struct tkm_store *s, const char *hex)
{
    char name[HEXLEN + 16];
    struct stat st;
    snprintf(name, sizeof name, "%.64s.complete", hex);
    return fstatat(s->shafd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode);
}

/* Removes staging/<name> or a marker-less sha256/<hex> whose lock is free. */
static void purge(struct tkm_store *s)
{
    int fds[2] = {s->stgfd, s->shafd};
    for (int k = 0; k < 2; k++) {
        char **names;
        size_t n;
        if (tkm_list_dir(fds[k], TKM_LIST_ALL, SIZE_MAX, &names, &n) < 0)
            continue;
        for (size_t i = 0; i < n; i++) {
            const char *nm = names[i];
            size_t len = strlen(nm);
            if (k == 1 && (len != HEXLEN || !is_hex64(nm, len)))
                continue; /* markers and foreign names in sha256/ stay */
            int lk = is_hex64(nm, len) ? lock_digest(s, nm, 1, NULL) : -1;
            if (is_hex64(nm, len) && lk < 0)
                continue; /* a live process is working on it */
            if (k == 0 || !marker_exists(s, nm)) {
                tkm_warn("store %s: removing leftover %s/%s", s->root, k ? "sha256" : "staging",
                         nm);
                tkm_rmtree_at(fds[k], nm);
            }
            unlock_digest(lk);
        }
        tkm_names_free(names, n);
    }
}

int tkm_store_open(const char *root, struct tkm_store **out, struct tkm_err *err)
{
    struct tkm_store *s = calloc(1, sizeof(*s));
    int rc = 0;
    *out = NULL;
    if (!s)
        return tkm_err_set(err, -ENOMEM, "out of memory");
    s->rootfd = s->shafd = s->stgfd = s->lockfd = -1;
    s->root = strdup(root);
    if (!s->root) {
        rc = tkm_err_set(err, -ENOMEM, "out of memory");
        goto out;
    }
    if (mkdir(root, 0755) < 0 && errno != EEXIST) {
        rc = tkm_err_set(err, -errno, "store %s: cannot create: %s", root, strerror(errno));
        goto out;
    }
    s->rootfd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (s->rootfd < 0) {
        rc = tkm_err_set(err, -errno, "store %s: cannot open: %s", root, strerror(errno));
        goto out;
    }
    if ((s->shafd = open_subdir(s->rootfd, root, "sha256", 0755, err)) < 0 ||
        (s->stgfd = open_subdir(s->rootfd, root, "staging", 0700, err)) < 0 ||
        (s->lockfd = open_subdir(s->rootfd, root, "locks", 0700, err)) < 0) {
        rc = err && err->code ? err->code : -EIO;
        goto out;
    }
    purge(s);
    *out = s;
    s = NULL;
out:
    tkm_store_free(s);
    return rc;
}

void tkm_store_free(struct tkm_store *s)
{
    if (!s)
        return;
    int fds[4] = {s->rootfd, s->shafd, s->stgfd, s->lockfd};
    for (int i = 0; i < 4; i++)
        if (fds[i] >= 0)
            close(fds[i]);
    free(s->root);
    free(s);
}

const char *tkm_store_root(const struct tkm_store *s)
{
    return s->root;
}

static int entry_path(struct tkm_store *s, const char *hex, char **path, struct tkm_err *err)
{
    struct tkm_buf b = TKM_BUF_INIT(PATH_MAX);
    if (tkm_buf_printf(&b, "%s/sha256/%.64s", s->root, hex) < 0)
        return tkm_err_set(err, -ENAMETOOLONG, "store %s: path too long", s->root);
    *path = tkm_buf_detach(&b, NULL);
    return *path ? 0 : tkm_err_set(err, -ENOMEM, "out of memory");
}

int tkm_store_lookup(struct tkm_store *s, const char *digest, char **path, struct tkm_err *err)
{
    int rc = tkm_store_check_digest(digest, err);
    if (rc < 0)
        return rc;
    const char *hex = digest + 7;
    struct stat st;
    if (!marker_exists(s, hex) || fstatat(s->shafd, hex, &st, AT_SYMLINK_NOFOLLOW) < 0 ||
        !S_ISDIR(st.st_mode))
        return tkm_err_set(err, -ENOENT, "%s is not in the store %s", digest, s->root);
    return path ? entry_path(s, hex, path, err) : 0;
}

/* Writes the marker through staging/ and renames it into sha256/. */
static int write_marker(struct tkm_store *s, const char *hex, const struct tkm_archive_result *r,
                        struct tkm_err *err)
{
    struct tkm_buf body = TKM_BUF_INIT(4096);
    char tmp[HEXLEN + 32], name[HEXLEN + 16];
    int rc, fd = -1;
    snprintf(tmp, sizeof tmp, "%.64s.marker.%d", hex, (int)getpid());
    snprintf(name, sizeof name, "%.64s.complete", hex);
    rc = tkm_buf_printf(&body,
                        "{\"digest\":\"sha256:%.64s\",\"diff_id\":\"%s\",\"files\":%llu,"
                        "\"dirs\":%llu,\"file_bytes\":%llu,\"compression\":\"%s\","
                        "\"created_unix\":%lld}\n",
                        hex, r->diff_id, (unsigned long long)r->files, (unsigned long long)r->dirs,
                        (unsigned long long)r->file_bytes, tkm_compression_name(r->compression),
                        (long long)time(NULL));
    if (rc < 0)
        goto out;
    errno = 0;
    fd = openat(s->stgfd, tmp, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0 || write(fd, body.data, body.len) != (ssize_t)body.len || fsync(fd) < 0) {
        rc = errno ? -errno : -EIO;
        goto out;
    }
    if (renameat(s->stgfd, tmp, s->shafd, name) < 0 || fsync(s->shafd) < 0)
        rc = -errno;
out:
    if (fd >= 0)
        close(fd);
    if (rc < 0) {
        unlinkat(s->stgfd, tmp, 0);
        tkm_err_set(err, rc, "store %s: cannot write the completion marker of sha256:%.64s: %s",
                    s->root, hex, strerror(-rc));
    }
    tkm_buf_release(&body);
    return rc;
}

/* Extracts into staging/<hex>.XXXXXX and renames to sha256/<hex>. */
static int extract_entry(struct tkm_store *s, const char *digest, const char *blob_path,
                         const struct tkm_archive_opts *o, struct tkm_archive_result *r,
                         struct tkm_err *err)
{
    const char *hex = digest + 7;
    char stg[HEXLEN + 16];
    struct tkm_buf full = TKM_BUF_INIT(PATH_MAX);
    int rc, bfd = -1, sfd = -1, made = 0;
    struct tkm_archive_opts opts = *o;
    opts.blob_digest = digest;
    snprintf(stg, sizeof stg, "%.64s.XXXXXX", hex);
    if ((rc = tkm_buf_printf(&full, "%s/staging/%s", s->root, stg)) < 0 || !mkdtemp(full.data)) {
        rc = tkm_err_set(err, rc < 0 ? rc : -errno, "store %s: cannot create a staging dir: %s",
                         s->root, strerror(rc < 0 ? -rc : errno));
        goto out;
    }
    made = 1;
    memcpy(stg, strrchr(full.data, '/') + 1, HEXLEN + 8);
    sfd = openat(s->stgfd, stg, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    bfd = open(blob_path, O_RDONLY | O_CLOEXEC);
    if (sfd < 0 || bfd < 0) {
        rc = tkm_err_set(err, -errno, "store %s: cannot open %s: %s", s->root,
                         sfd < 0 ? full.data : blob_path, strerror(errno));
        goto out;
    }
    if ((rc = tkm_archive_extract_fd(bfd, sfd, &opts, r, err)) < 0) {
        tkm_err_prefix(err, "%s (blob %s)", digest, blob_path);
        goto out;
    }
    if (fchmod(sfd, 0755) < 0 || renameat(s->stgfd, stg, s->shafd, hex) < 0 ||
        fsync(s->shafd) < 0) {
        rc = tkm_err_set(err, -errno, "store %s: cannot publish %s: %s", s->root, digest,
                         strerror(errno));
        goto out;
    }
    made = 0;
out:
    if (made)
        tkm_rmtree_at(s->stgfd, stg);
    if (sfd >= 0)
        close(sfd);
    if (bfd >= 0)
        close(bfd);
    tkm_buf_release(&full);
    return rc;
}

/* The ingest of one job, on a pool thread (o, info and path are the job's):
 * -EWOULDBLOCK (no message) when another process holds the digest's lock,
 * so that the job waits on a loop timer instead of a pool thread. */
static int ingest(struct tkm_store *s, const char *digest, const char *blob_path,
                  const struct tkm_archive_opts *o, char **path, struct tkm_store_ingest_info *info,
                  struct tkm_err *err)
{
    const char *hex = digest + 7; /* checked by tkm_store_ingest_start */
    int rc = 0, lk;
    memset(info, 0, sizeof(*info));
    *path = NULL;
    if ((lk = lock_digest(s, hex, 1, err)) < 0)
        return lk;
    if (marker_exists(s, hex)) {
        info->existed = 1;
    } else {
        tkm_rmtree_at(s->shafd, hex); /* a tree without marker: an interrupted ingest */
        if ((rc = extract_entry(s, digest, blob_path, o, &info->archive, err)) < 0 ||
            (rc = write_marker(s, hex, &info->archive, err)) < 0) {
            tkm_rmtree_at(s->shafd, hex);
            goto out;
        }
        tkm_info("store: extracted %s (%llu files, %llu bytes)", digest,
                 (unsigned long long)info->archive.files,
                 (unsigned long long)info->archive.file_bytes);
    }
    rc = entry_path(s, hex, path, err);
out:
    unlock_digest(lk);
    return rc;
}

int tkm_store_remove(struct tkm_store *s, const char *digest, struct tkm_err *err)
{
    int rc = tkm_store_check_digest(digest, err), lk = -1;
    if (rc < 0)
        return rc;
    const char *hex = digest + 7;
    char marker[HEXLEN + 16], trash[HEXLEN + 48];
    snprintf(marker, sizeof marker, "%.64s.complete", hex);
    snprintf(trash, sizeof trash, "%.64s.rm.%d.%llu", hex, (int)getpid(),
             (unsigned long long)tkm_now_ms());
    if ((lk = lock_digest(s, hex, 0, err)) < 0)
        return lk;
    if (unlinkat(s->shafd, marker, 0) < 0) {
        rc = errno == ENOENT
                 ? tkm_err_set(err, -ENOENT, "%s is not in the store %s", digest, s->root)
                 : tkm_err_set(err, -errno, "store %s: cannot remove %s: %s", s->root, marker,
                               strerror(errno));
        goto out;
    }
    fsync(s->shafd);
    if (renameat(s->shafd, hex, s->stgfd, trash) == 0)
        rc = tkm_rmtree_at(s->stgfd, trash);
    else
        rc = tkm_rmtree_at(s->shafd, hex);
    if (rc < 0)
        tkm_warn("store %s: %s removed, but its tree was not fully deleted: %s", s->root, digest,
                 strerror(-rc));
    rc = 0;
out:
    unlock_digest(lk);
    return rc;
}

int tkm_store_list(struct tkm_store *s, char ***digests, size_t *n, struct tkm_err *err)
{
    char **v;
    size_t cnt, k = 0;
    int rc = tkm_list_dir(s->shafd, TKM_LIST_ALL, SIZE_MAX, &v, &cnt); /* sorted */
    *digests = NULL;
    *n = 0;
    if (rc < 0)
        return tkm_err_set(err, rc, "store %s: cannot list sha256/: %s", s->root, strerror(-rc));
    for (size_t i = 0; i < cnt; i++) {
        char *d = v[i];
        size_t len = strlen(d);
        if (len != HEXLEN + 9 || !is_hex64(d, len) || strcmp(d + HEXLEN, ".complete") != 0) {
            free(d);
            continue;
        }
        memmove(d + 7, d, HEXLEN); /* "<hex>.complete" -> "sha256:<hex>", in place */
        memcpy(d, "sha256:", 7);
        d[7 + HEXLEN] = '\0';
        v[k++] = d;
    }
    if (k == 0) {
        free(v);
        v = NULL;
    }
    *digests = v;
    *n = k;
    return 0;
}

void tkm_store_list_free(char **digests, size_t n)
{
    if (!digests)
        return;
    for (size_t i = 0; i < n; i++)
        free(digests[i]);
    free(digests);
}

/* ---- the libuv thread-pool form ------------------------------------------ */

#define JOB_LOCK_WAIT_MIN_MS 20
#define JOB_LOCK_WAIT_MAX_MS 500

struct tkm_store_job {
    uv_work_t work;
    uv_loop_t *loop;
    uv_timer_t wait; /* another process holds the digest's lock: retry later */
    int wait_ready, waiting;
    struct tkm_backoff wait_bo;  /* 20 ms doubling to 500 ms */
    uint64_t wait_ms, waited_ms; /* the current wait; the sum of those before */
    struct tkm_store *s;
    char *digest, *blob, *diff_id, *strip, *path;
    char **include;
    struct tkm_archive_opts opts;
    atomic_int cancel;
    tkm_store_ingest_cb cb;
    void *data;
    int rc;
    struct tkm_store_ingest_info info;
    struct tkm_err err;
};

static void job_free(struct tkm_store_job *j)
{
    for (size_t i = 0; j->include && j->include[i]; i++)
        free(j->include[i]);
    free(j->include);
    free(j->digest);
    free(j->blob);
    free(j->diff_id);
    free(j->strip);
    free(j->path);
    free(j);
}

static void job_work(uv_work_t *w)
{
    struct tkm_store_job *j = w->data;
    /* Never waits for the lock here: a pool thread must not sleep or poll. */
    j->rc = ingest(j->s, j->digest, j->blob, &j->opts, &j->path, &j->info, &j->err);
    OPENSSL_thread_stop(); /* per-thread OpenSSL state of a pool thread that never exits */
}

static void job_timer_closed(uv_handle_t *h)
{
    job_free(h->data);
}

static void job_report(struct tkm_store_job *j)
{
    j->cb(j->rc, j->rc == 0 ? j->path : NULL, &j->info, &j->err, j->data);
    if (j->wait_ready)
        uv_close((uv_handle_t *)&j->wait, job_timer_closed);
    else
        job_free(j);
}

static void job_after(uv_work_t *w, int status);

static void job_retry(uv_timer_t *t)
{
    struct tkm_store_job *j = t->data;
    int rc;
    j->waiting = 0;
    j->waited_ms += j->wait_ms;
    if (atomic_load(&j->cancel)) {
        j->rc = tkm_err_set(&j->err, -ECANCELED,
                            "ingest of %s cancelled while another process was extracting it "
                            "(waited about %llu ms)",
                            j->digest, (unsigned long long)j->waited_ms);
        job_report(j);
        return;
    }
    if ((rc = uv_queue_work(j->loop, &j->work, job_work, job_after)) != 0) {
        j->rc =
            tkm_err_set(&j->err, rc, "ingest of %s: uv_queue_work: %s", j->digest, uv_strerror(rc));
        job_report(j);
    }
}

static void job_after(uv_work_t *w, int status)
{
    struct tkm_store_job *j = w->data;
    if (status == UV_ECANCELED) {
        tkm_err_clear(&j->err);
        j->rc =
            tkm_err_set(&j->err, -ECANCELED, "ingest of %s cancelled before it started", j->digest);
    }
    if (j->rc == -EWOULDBLOCK) { /* locked by another process: wait on the loop */
        if (!j->wait_ready && uv_timer_init(j->loop, &j->wait) == 0) {
            j->wait.data = j;
            j->wait_ready = 1;
        }
        j->wait_ms = tkm_backoff_next(&j->wait_bo, 0);
        if (j->wait_ready && uv_timer_start(&j->wait, job_retry, j->wait_ms, 0) == 0) {
            j->waiting = 1;
            return;
        }
        j->rc = tkm_err_set(&j->err, -EIO, "ingest of %s: cannot arm a timer", j->digest);
    }
    job_report(j);
}

/* Deep copy of the strings of o into j. */
static int job_copy_opts(struct tkm_store_job *j, const struct tkm_archive_opts *o)
{
    size_t n = 0;
    j->opts = *o;
    j->opts.cancel = &j->cancel;
    j->opts.blob_digest = NULL;
    if (o->diff_id && !(j->opts.diff_id = j->diff_id = strdup(o->diff_id)))
        return -ENOMEM;
    if (o->strip && !(j->opts.strip = j->strip = strdup(o->strip)))
        return -ENOMEM;
    if (!o->include)
        return 0;
    while (o->include[n])
        n++;
    if (!(j->include = calloc(n + 1, sizeof(char *))))
        return -ENOMEM;
    for (size_t i = 0; i < n; i++)
        if (!(j->include[i] = strdup(o->include[i])))
            return -ENOMEM;
    j->opts.include = (const char *const *)j->include;
    return 0;
}

int tkm_store_ingest_start(struct uv_loop_s *loop, struct tkm_store *s, const char *digest,
                           const char *blob_path, const struct tkm_archive_opts *o,
                           tkm_store_ingest_cb cb, void *data, struct tkm_store_job **job,
                           struct tkm_err *err)
{
    struct tkm_archive_opts defaults;
    struct tkm_store_job *j = NULL;
    int rc = tkm_store_check_digest(digest, err);
    if (job)
        *job = NULL;
    if (rc < 0)
        return rc;
    if (!o) {
        tkm_archive_opts_init(&defaults);
        o = &defaults;
    }
    if (!(j = calloc(1, sizeof(*j))) || !(j->digest = strdup(digest)) ||
        !(j->blob = strdup(blob_path)) || job_copy_opts(j, o) < 0) {
        rc = tkm_err_set(err, -ENOMEM, "out of memory");
        goto fail;
    }
    atomic_init(&j->cancel, 0);
    j->wait_bo =
        (struct tkm_backoff){.initial_ms = JOB_LOCK_WAIT_MIN_MS, .max_ms = JOB_LOCK_WAIT_MAX_MS};
    j->loop = loop;
    j->s = s;
    j->cb = cb;
    j->data = data;
    j->work.data = j;
    if ((rc = uv_queue_work(loop, &j->work, job_work, job_after)) != 0) {
        rc = tkm_err_set(err, rc, "ingest of %s: uv_queue_work: %s", digest, uv_strerror(rc));
        goto fail;
    }
    if (job)
        *job = j;
    return 0;
fail:
    if (j)
        job_free(j);
    return rc;
}

void tkm_store_job_cancel(struct tkm_store_job *job)
{
    if (!job)
        return;
    atomic_store(&job->cancel, 1);
    if (job->waiting) /* end the wait for the lock now (its callback reports) */
        uv_timer_start(&job->wait, job_retry, 0, 0);
}
