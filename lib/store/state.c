/*
 * state.c - the store's state database (see store/state.h, docs/store.md).
 */
#include <tkm/store/state.h>

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <stdatomic.h>
#include <uv.h>

#include <tkm/buf.h>
#include <tkm/fs.h>
#include <tkm/log.h>

#define SCHEMA_VERSION  1
#define BUSY_TIMEOUT_MS 1000
#define WALK_MAX_DEPTH  64
/* The commit that finds more WAL frames than this checkpoints itself: a
 * safety net for a caller that never runs tkm_store_state_checkpoint. */
#define WAL_SELF_CHECKPOINT_FRAMES 20000

struct tkm_store_state {
    struct tkm_store *s; /* borrowed */
    sqlite3 *db;
    sqlite3 *ckpt; /* the checkpoint's own connection (any one thread) */
    int lockfd;
    char *path;               /* <root>/state.db */
    atomic_ullong wal_frames; /* frames in the WAL after the last commit */
};

/* Migrations: migrations[v] takes a database at user_version v to v + 1.
 * A new schema version appends one entry; never edit an existing one. */
static const char *const migrations[SCHEMA_VERSION] = {
    "CREATE TABLE entries("
    " digest TEXT PRIMARY KEY NOT NULL,"
    " bytes INTEGER NOT NULL,"
    " created INTEGER NOT NULL,"
    " last_used INTEGER NOT NULL,"
    " source TEXT,"
    " removing INTEGER NOT NULL DEFAULT 0);"
    "CREATE INDEX entries_lru ON entries(last_used);"
    "CREATE TABLE refs("
    " volume_id TEXT PRIMARY KEY NOT NULL,"
    " digest TEXT NOT NULL REFERENCES entries(digest),"
    " pod_namespace TEXT NOT NULL, pod_name TEXT NOT NULL, pod_uid TEXT NOT NULL,"
    " cache_namespace TEXT NOT NULL, cache_name TEXT NOT NULL,"
    " created INTEGER NOT NULL);"
    "CREATE INDEX refs_digest ON refs(digest);",
};

/* ---- sqlite helpers ------------------------------------------------------ */

static int errno_of(int rc)
{
    switch (rc & 0xff) {
    case SQLITE_FULL:
        return -ENOSPC;
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
        return -EBUSY;
    case SQLITE_NOMEM:
        return -ENOMEM;
    case SQLITE_READONLY:
        return -EROFS;
    case SQLITE_PERM:
    case SQLITE_AUTH:
        return -EACCES;
    case SQLITE_CORRUPT:
    case SQLITE_NOTADB:
        return -EBADMSG;
    case SQLITE_CONSTRAINT:
        return -EEXIST;
    default:
        return -EIO;
    }
}

static int db_fail(struct tkm_store_state *st, int rc, const char *what, struct tkm_err *err)
{
    return tkm_err_set(err, errno_of(rc), "store state %s: %s: %s", st->path, what,
                       st->db ? sqlite3_errmsg(st->db) : sqlite3_errstr(rc));
}

static int exec(struct tkm_store_state *st, const char *sql, struct tkm_err *err)
{
    int rc = sqlite3_exec(st->db, sql, NULL, NULL, NULL);
    return rc == SQLITE_OK ? 0 : db_fail(st, rc, sql, err);
}

static int begin(struct tkm_store_state *st, struct tkm_err *err)
{
    return exec(st, "BEGIN IMMEDIATE", err);
}

static int commit(struct tkm_store_state *st, struct tkm_err *err)
{
    return exec(st, "COMMIT", err);
}

static void rollback(struct tkm_store_state *st)
{
    if (!sqlite3_get_autocommit(st->db))
        sqlite3_exec(st->db, "ROLLBACK", NULL, NULL, NULL);
}

/* Prepares sql and binds the text arguments (NULL binds NULL), in order. */
static int prep(struct tkm_store_state *st, sqlite3_stmt **q, const char *sql, int ntext,
                const char *const *text, struct tkm_err *err)
{
    int rc = sqlite3_prepare_v2(st->db, sql, -1, q, NULL);
    if (rc != SQLITE_OK)
        return db_fail(st, rc, sql, err);
    for (int i = 0; i < ntext; i++) {
        rc = text[i] ? sqlite3_bind_text(*q, i + 1, text[i], -1, SQLITE_TRANSIENT)
                     : sqlite3_bind_null(*q, i + 1);
        if (rc != SQLITE_OK) {
            sqlite3_finalize(*q);
            *q = NULL;
            return db_fail(st, rc, sql, err);
        }
    }
    return 0;
}

/* Runs a statement without rows: text arguments, then integers. */
static int run(struct tkm_store_state *st, const char *sql, int ntext, const char *const *text,
               int nint, const int64_t *ints, struct tkm_err *err)
{
    sqlite3_stmt *q = NULL;
    int rc = prep(st, &q, sql, ntext, text, err);
    for (int i = 0; rc == 0 && i < nint; i++)
        if (sqlite3_bind_int64(q, ntext + i + 1, ints[i]) != SQLITE_OK)
            rc = db_fail(st, SQLITE_ERROR, sql, err);
    if (rc == 0) {
        int s = sqlite3_step(q);
        if (s != SQLITE_DONE && s != SQLITE_ROW)
            rc = db_fail(st, s, sql, err);
    }
    sqlite3_finalize(q);
    return rc;
}

/* One row, one integer column: 1 with *v, 0 when no row, < 0 on error. */
static int scalar(struct tkm_store_state *st, const char *sql, int ntext, const char *const *text,
                  int64_t *v, struct tkm_err *err)
{
    sqlite3_stmt *q = NULL;
    int rc = prep(st, &q, sql, ntext, text, err);
    if (rc < 0)
        return rc;
    rc = sqlite3_step(q);
    if (rc == SQLITE_ROW) {
        *v = sqlite3_column_int64(q, 0);
        rc = 1;
    } else if (rc == SQLITE_DONE) {
        rc = 0;
    } else {
        rc = db_fail(st, rc, sql, err);
    }
    sqlite3_finalize(q);
    return rc;
}

/* Runs sql (text arguments as for prep) and appends one zeroed element of
 * size bytes to *v per row (*n counts them; *v starts NULL, *n 0), which
 * fill sets from the row: fill returns -ENOMEM leaving nothing of the
 * element to free. 0, or < 0 with err; *v and *n stay the caller's to free. */
static int rows(struct tkm_store_state *st, const char *sql, int ntext, const char *const *text,
                void **v, size_t size, size_t *n, int (*fill)(sqlite3_stmt *q, void *elem),
                struct tkm_err *err)
{
    sqlite3_stmt *q = NULL;
    size_t cap = 0;
    int rc = prep(st, &q, sql, ntext, text, err);
    while (rc == 0 && (rc = sqlite3_step(q)) == SQLITE_ROW) {
        rc = 0;
        if (*n == cap) {
            size_t nc = cap ? cap * 2 : 16;
            void *nv = reallocarray(*v, nc, size);
            if (!nv) {
                rc = tkm_err_set(err, -ENOMEM, "out of memory");
                break;
            }
            *v = nv;
            cap = nc;
        }
        char *e = (char *)*v + *n * size;
        memset(e, 0, size);
        if (fill(q, e) < 0) {
            rc = tkm_err_set(err, -ENOMEM, "out of memory");
            break;
        }
        (*n)++;
    }
    if (rc == SQLITE_DONE)
        rc = 0;
    else if (rc > 0)
        rc = db_fail(st, rc, sql, err);
    sqlite3_finalize(q);
    return rc;
}

/* ---- sizes --------------------------------------------------------------- */

static int walk(int dirfd, const char *name, int depth, uint64_t *sum)
{
    char **names = NULL;
    size_t n = 0;
    int rc, fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    rc = tkm_list_dir(fd, TKM_LIST_ALL, SIZE_MAX, &names, &n);
    for (size_t i = 0; rc == 0 && i < n; i++) {
        struct stat sb;
        if (fstatat(fd, names[i], &sb, AT_SYMLINK_NOFOLLOW) < 0)
            rc = -errno;
        else if (S_ISREG(sb.st_mode))
            *sum += (uint64_t)sb.st_size;
        else if (S_ISDIR(sb.st_mode))
            rc = depth >= WALK_MAX_DEPTH ? -ELOOP : walk(fd, names[i], depth + 1, sum);
    }
    tkm_names_free(names, n);
    close(fd);
    return rc;
}

static int tree_bytes(struct tkm_store *s, const char *digest, uint64_t *bytes, struct tkm_err *err)
{
    char *path = NULL;
    int rc = tkm_store_lookup(s, digest, &path, err);
    *bytes = 0;
    if (rc < 0)
        return rc;
    if ((rc = walk(AT_FDCWD, path, 0, bytes)) < 0)
        tkm_err_set(err, rc, "store %s: cannot measure %s: %s", tkm_store_root(s), path,
                    strerror(-rc));
    free(path);
    return rc;
}

/* ---- open, migrate, reconcile -------------------------------------------- */

static int migrate(struct tkm_store_state *st, struct tkm_err *err)
{
    int64_t v = 0;
    int rc = scalar(st, "PRAGMA user_version", 0, NULL, &v, err);
    if (rc < 0)
        return rc;
    if (v > SCHEMA_VERSION)
        return tkm_err_set(err, -EPROTO,
                           "store state %s: schema version %lld is newer than this program's %d",
                           st->path, (long long)v, SCHEMA_VERSION);
    for (; v < SCHEMA_VERSION; v++) {
        char setv[64];
        snprintf(setv, sizeof setv, "PRAGMA user_version=%lld", (long long)v + 1);
        if ((rc = begin(st, err)) < 0 || (rc = exec(st, migrations[v], err)) < 0 ||
            (rc = exec(st, setv, err)) < 0 || (rc = commit(st, err)) < 0) {
            rollback(st);
            return rc;
        }
        if (v > 0)
            tkm_info("store state %s: migrated schema %lld -> %lld", st->path, (long long)v,
                     (long long)v + 1);
    }
    return 0;
}

/* After each commit on the loop's connection: no checkpoint here (its
 * fsyncs would stall the loop), only the count, unless the WAL is huge. */
static int wal_hook(void *ud, sqlite3 *db, const char *name, int frames)
{
    struct tkm_store_state *st = ud;
    atomic_store(&st->wal_frames, (unsigned long long)frames);
    if (frames >= WAL_SELF_CHECKPOINT_FRAMES)
        sqlite3_wal_checkpoint_v2(db, name, SQLITE_CHECKPOINT_PASSIVE, NULL, NULL);
    return SQLITE_OK;
}

/* Opens the database and checks it; any failure leaves st->db NULL. */
static int db_open(struct tkm_store_state *st, struct tkm_err *err)
{
    int64_t dummy;
    char mode[16] = "";
    sqlite3_stmt *q = NULL;
    int rc = sqlite3_open_v2(st->path, &st->db,
                             SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX |
                                 SQLITE_OPEN_NOFOLLOW,
                             NULL);
    if (rc != SQLITE_OK) {
        rc = db_fail(st, rc, "open", err);
        goto out;
    }
    sqlite3_busy_timeout(st->db, BUSY_TIMEOUT_MS);
    sqlite3_extended_result_codes(st->db, 1);
    /* The first read of a file that is not a database fails here (NOTADB). */
    if ((rc = prep(st, &q, "PRAGMA journal_mode=WAL", 0, NULL, err)) < 0)
        goto out;
    if ((rc = sqlite3_step(q)) != SQLITE_ROW) {
        rc = db_fail(st, rc, "PRAGMA journal_mode=WAL", err);
        goto out;
    }
    snprintf(mode, sizeof mode, "%s", (const char *)sqlite3_column_text(q, 0));
    sqlite3_finalize(q);
    q = NULL;
    if (strcmp(mode, "wal") != 0) {
        rc =
            tkm_err_set(err, -EIO, "store state %s: journal_mode is '%s', not wal", st->path, mode);
        goto out;
    }
    if ((rc = exec(st, "PRAGMA synchronous=NORMAL", err)) < 0 ||
        (rc = exec(st, "PRAGMA foreign_keys=ON", err)) < 0)
        goto out;
    sqlite3_wal_hook(st->db, wal_hook, st); /* replaces the autocheckpoint */
    if ((rc = prep(st, &q, "PRAGMA quick_check", 0, NULL, err)) < 0)
        goto out;
    rc = sqlite3_step(q);
    if (rc != SQLITE_ROW || strcmp((const char *)sqlite3_column_text(q, 0), "ok") != 0) {
        rc = rc == SQLITE_ROW ? tkm_err_set(err, -EBADMSG, "store state %s: quick_check: %s",
                                            st->path, (const char *)sqlite3_column_text(q, 0))
                              : db_fail(st, rc, "quick_check", err);
        goto out;
    }
    sqlite3_finalize(q);
    q = NULL;
    rc = migrate(st, err);
    if (rc == 0 && (rc = scalar(st, "SELECT COUNT(*) FROM entries", 0, NULL, &dummy, err)) > 0)
        rc = 0;
out:
    sqlite3_finalize(q);
    if (rc < 0) {
        sqlite3_close_v2(st->db);
        st->db = NULL;
    }
    return rc;
}

/* Failures after which the file itself is not to blame: never moved aside. */
static int keep_file(int rc)
{
    return rc == -EBUSY || rc == -ENOSPC || rc == -ENOMEM || rc == -EROFS || rc == -EACCES;
}

static int move_aside(struct tkm_store_state *st, int64_t now, struct tkm_store_state_report *rep,
                      struct tkm_err *err)
{
    char from[PATH_MAX], to[PATH_MAX], base[PATH_MAX];
    snprintf(base, sizeof base, "%s.corrupt-%lld", st->path, (long long)now);
    snprintf(to, sizeof to, "%s", base);
    /* never over an earlier one (two in the same second) */
    for (int i = 1; renameat2(AT_FDCWD, st->path, AT_FDCWD, to, RENAME_NOREPLACE) < 0; i++) {
        if (errno != EEXIST || i > 100)
            return tkm_err_set(err, -errno, "store state %s: cannot move it aside to %s: %s",
                               st->path, to, strerror(errno));
        snprintf(to, sizeof to, "%s.%d", base, i);
    }
    snprintf(rep->moved_to, sizeof rep->moved_to, "%s", to);
    snprintf(from, sizeof from, "%s-wal", st->path);
    snprintf(base, sizeof base, "%s-wal", to);
    if (rename(from, base) < 0 && errno != ENOENT)
        unlink(from); /* a WAL must never be replayed into the new database */
    snprintf(from, sizeof from, "%s-shm", st->path);
    unlink(from);
    rep->rebuilt = 1;
    return 0;
}

struct row {
    char *digest;
    int removing;
};

static int row_fill(sqlite3_stmt *q, void *elem)
{
    struct row *r = elem;
    r->removing = sqlite3_column_int(q, 1);
    return (r->digest = strdup((const char *)sqlite3_column_text(q, 0))) ? 0 : -ENOMEM;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Rows against complete trees: drop, unmark; then adopt trees without row. */
static int reconcile(struct tkm_store_state *st, int64_t now, struct tkm_store_state_report *rep,
                     struct tkm_err *err)
{
    char **have = NULL;
    size_t nh = 0;
    unsigned char *seen = NULL;
    struct row *row = NULL;
    size_t nrow = 0;
    int rc = tkm_store_list(st->s, &have, &nh, err);
    if (rc < 0)
        return rc;
    if (!(seen = calloc(nh + 1, 1))) {
        rc = tkm_err_set(err, -ENOMEM, "out of memory");
        goto out;
    }
    if ((rc = begin(st, err)) < 0 ||
        (rc = rows(st, "SELECT digest, removing FROM entries ORDER BY digest", 0, NULL,
                   (void **)&row, sizeof *row, &nrow, row_fill, err)) < 0)
        goto out;
    for (size_t i = 0; i < nrow; i++) {
        const char *d = row[i].digest;
        char **hit = nh ? bsearch(&d, have, nh, sizeof *have, cmp_str) : NULL;
        if (hit) {
            seen[hit - have] = 1;
            if (row[i].removing) {
                tkm_warn("store state %s: %s was being removed; its tree is complete: kept",
                         st->path, d);
                rep->unmarked++;
                if ((rc = run(st, "UPDATE entries SET removing=0 WHERE digest=?", 1, &d, 0, NULL,
                              err)) < 0)
                    goto out;
            }
            continue;
        }
        int64_t nref = 0;
        if ((rc = scalar(st, "SELECT COUNT(*) FROM refs WHERE digest=?", 1, &d, &nref, err)) < 0 ||
            (rc = run(st, "DELETE FROM refs WHERE digest=?", 1, &d, 0, NULL, err)) < 0 ||
            (rc = run(st, "DELETE FROM entries WHERE digest=?", 1, &d, 0, NULL, err)) < 0)
            goto out;
        if (row[i].removing && nref == 0)
            tkm_info("store state %s: the interrupted removal of %s is finished", st->path, d);
        else
            tkm_warn("store state %s: %s has no complete tree: row dropped with %lld "
                     "reference(s)",
                     st->path, d, (long long)nref);
        rep->rows_dropped++;
        rep->refs_dropped += (uint64_t)nref;
    }
    for (size_t i = 0; i < nh; i++) {
        uint64_t bytes = 0;
        if (seen[i])
            continue;
        struct tkm_err we = {0};
        if (tree_bytes(st->s, have[i], &bytes, &we) < 0) {
            /* a tree that cannot be read serves no pod: it goes (no row, no reference) */
            tkm_warn("store state %s: %s; removing %s", st->path, we.msg, have[i]);
            rep->unreadable++;
            if ((rc = tkm_store_remove(st->s, have[i], err)) < 0)
                goto out;
            continue;
        }
        const char *t[] = {have[i]};
        int64_t v[] = {(int64_t)bytes, now, now};
        if ((rc = run(st, "INSERT INTO entries(digest, bytes, created, last_used) VALUES(?,?,?,?)",
                      1, t, 3, v, err)) < 0)
            goto out;
        tkm_info("store state %s: adopted %s (%llu bytes)", st->path, have[i],
                 (unsigned long long)bytes);
        rep->adopted++;
        rep->adopted_bytes += bytes;
    }
    rc = commit(st, err);
out:
    if (rc < 0)
        rollback(st);
    for (size_t i = 0; i < nrow; i++)
        free(row[i].digest);
    free(row);
    free(seen);
    tkm_store_list_free(have, nh);
    return rc;
}

static int take_lock(struct tkm_store_state *st, struct tkm_err *err)
{
    char p[PATH_MAX];
    snprintf(p, sizeof p, "%s/state.lock", tkm_store_root(st->s));
    st->lockfd = open(p, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (st->lockfd < 0)
        return tkm_err_set(err, -errno, "store state: cannot open %s: %s", p, strerror(errno));
    if (flock(st->lockfd, LOCK_EX | LOCK_NB) < 0)
        return tkm_err_set(err, errno == EWOULDBLOCK ? -EBUSY : -errno,
                           "store state %s: held by another process (%s): %s", st->path, p,
                           strerror(errno));
    return 0;
}

int tkm_store_state_open(struct tkm_store *s, int64_t now, struct tkm_store_state **out,
                         struct tkm_store_state_report *rep, struct tkm_err *err)
{
    struct tkm_store_state_report local;
    struct tkm_store_state *st = calloc(1, sizeof *st);
    struct tkm_buf p = TKM_BUF_INIT(PATH_MAX);
    struct tkm_err first = {0};
    int rc = 0;
    *out = NULL;
    if (!rep)
        rep = &local;
    memset(rep, 0, sizeof *rep);
    if (!st || tkm_buf_printf(&p, "%s/state.db", tkm_store_root(s)) < 0) {
        rc = tkm_err_set(err, -ENOMEM, "out of memory");
        goto out;
    }
    st->s = s;
    st->lockfd = -1;
    st->path = tkm_buf_detach(&p, NULL);
    if (!st->path) {
        rc = tkm_err_set(err, -ENOMEM, "out of memory");
        goto out;
    }
    if ((rc = take_lock(st, err)) < 0)
        goto out;
    if ((rc = db_open(st, &first)) == 0 && (rc = reconcile(st, now, rep, &first)) < 0 &&
        rc != -EBADMSG) {
        tkm_err_set(err, rc, "%s", first.msg); /* the directory, not the database */
        goto out;
    }
    if (rc < 0) {
        if (keep_file(rc)) {
            tkm_err_set(err, rc, "%s", first.msg);
            goto out;
        }
        tkm_err("store state %s is unreadable (%s): moving it aside and rebuilding it from the "
                "directory",
                st->path, first.msg);
        if (st->db) {
            sqlite3_close_v2(st->db);
            st->db = NULL;
        }
        memset(rep, 0, sizeof *rep);
        if ((rc = move_aside(st, now, rep, err)) < 0 || (rc = db_open(st, err)) < 0 ||
            (rc = reconcile(st, now, rep, err)) < 0)
            goto out;
    }
    if (rep->rows_dropped || rep->adopted || rep->unmarked)
        tkm_info("store state %s: reconciled: %llu row(s) dropped with %llu reference(s), %llu "
                 "tree(s) adopted (%llu bytes), %llu removal(s) undone",
                 st->path, (unsigned long long)rep->rows_dropped,
                 (unsigned long long)rep->refs_dropped, (unsigned long long)rep->adopted,
                 (unsigned long long)rep->adopted_bytes, (unsigned long long)rep->unmarked);
    *out = st;
    st = NULL;
out:
    tkm_buf_release(&p);
    tkm_store_state_free(st);
    return rc;
}

uint64_t tkm_store_state_wal_frames(struct tkm_store_state *st)
{
    return atomic_load(&st->wal_frames);
}

int tkm_store_state_checkpoint(struct tkm_store_state *st, struct tkm_err *err)
{
    int rc = SQLITE_OK, logn = 0, done = 0;
    if (!st->ckpt) {
        rc = sqlite3_open_v2(st->path, &st->ckpt,
                             SQLITE_OPEN_READWRITE | SQLITE_OPEN_FULLMUTEX | SQLITE_OPEN_NOFOLLOW,
                             NULL);
        if (rc == SQLITE_OK) {
            sqlite3_busy_timeout(st->ckpt, BUSY_TIMEOUT_MS);
            rc = sqlite3_exec(st->ckpt, "PRAGMA synchronous=NORMAL", NULL, NULL, NULL);
        }
    }
    if (rc == SQLITE_OK)
        rc = sqlite3_wal_checkpoint_v2(st->ckpt, NULL, SQLITE_CHECKPOINT_PASSIVE, &logn, &done);
    if (rc != SQLITE_OK) {
        rc = tkm_err_set(err, errno_of(rc), "store state %s: checkpoint: %s", st->path,
                         st->ckpt ? sqlite3_errmsg(st->ckpt) : sqlite3_errstr(rc));
        sqlite3_close_v2(st->ckpt);
        st->ckpt = NULL;
        return rc;
    }
    return 0;
}

void tkm_store_state_free(struct tkm_store_state *st)
{
    if (!st)
        return;
    if (st->ckpt)
        sqlite3_close_v2(st->ckpt);
    if (st->db)
        sqlite3_close_v2(st->db);
    if (st->lockfd >= 0)
        close(st->lockfd); /* drops the flock */
    free(st->path);
    free(st);
}

/* ---- entries and references ---------------------------------------------- */

/* Records the complete entry digest with its size: inserts the row, or for
 * an existing row updates bytes (unless bytes is 0) and source, and sets
 * last_used = now. -ENOENT when the tree is not complete in the store,
 * -EAGAIN when the entry is being removed. */
static int add_row(struct tkm_store_state *st, const char *digest, uint64_t bytes,
                   const char *source, int64_t now, struct tkm_err *err)
{
    int64_t removing = 0;
    int rc = tkm_store_check_digest(digest, err), have;
    if (rc < 0)
        return rc;
    if ((rc = begin(st, err)) < 0)
        return rc;
    const char *t[] = {digest, source};
    if ((have = scalar(st, "SELECT removing FROM entries WHERE digest=?", 1, t, &removing, err)) <
        0) {
        rc = have;
        goto out;
    }
    if (have && removing) {
        rc = tkm_err_set(err, -EAGAIN, "store state %s: %s is being removed; ingest it again",
                         st->path, digest);
        goto out;
    }
    /* checked inside the transaction: a removal marks the row before it
     * unlinks the marker, so a present marker and no mark stay consistent */
    if ((rc = tkm_store_lookup(st->s, digest, NULL, err)) < 0)
        goto out;
    if (have) {
        int64_t v[] = {(int64_t)bytes, now};
        rc = run(st,
                 "UPDATE entries SET source=COALESCE(?2, source),"
                 " bytes=CASE WHEN ?3 > 0 THEN ?3 ELSE bytes END, last_used=?4 WHERE digest=?1",
                 2, t, 2, v, err);
    } else {
        int64_t v[] = {(int64_t)bytes, now, now};
        rc = run(st,
                 "INSERT INTO entries(digest, source, bytes, created, last_used)"
                 " VALUES(?,?,?,?,?)",
                 2, t, 3, v, err);
    }
    if (rc == 0)
        rc = commit(st, err);
out:
    if (rc < 0)
        rollback(st);
    return rc;
}

static const char *nz(const char *s)
{
    return s ? s : "";
}

int tkm_store_state_acquire(struct tkm_store_state *st, const struct tkm_store_ref *ref,
                            int64_t now, int *created, struct tkm_err *err)
{
    sqlite3_stmt *q = NULL;
    int64_t removing = 0;
    int rc = tkm_store_check_digest(ref->digest, err), have;
    if (created)
        *created = 0;
    if (rc < 0)
        return rc;
    if (!ref->volume_id || !ref->volume_id[0])
        return tkm_err_set(err, -EINVAL, "store state %s: a reference needs a volume id", st->path);
    if ((rc = begin(st, err)) < 0)
        return rc;
    const char *vol[] = {ref->volume_id}, *dg[] = {ref->digest};
    if ((rc = prep(st, &q, "SELECT digest FROM refs WHERE volume_id=?", 1, vol, err)) < 0)
        goto out;
    if ((rc = sqlite3_step(q)) == SQLITE_ROW) {
        const char *old = (const char *)sqlite3_column_text(q, 0);
        if (strcmp(old, ref->digest) != 0) {
            rc = tkm_err_set(err, -EEXIST, "volume %s already references %s, not %s",
                             ref->volume_id, old, ref->digest);
            goto out;
        }
        sqlite3_reset(q); /* no statement in progress across the writes */
        int64_t v[] = {now};
        if ((rc = run(st, "UPDATE entries SET last_used=?2 WHERE digest=?1", 1, dg, 1, v, err)) ==
            0)
            rc = commit(st, err);
        goto out;
    } else if (rc != SQLITE_DONE) {
        rc = db_fail(st, rc, "SELECT refs", err);
        goto out;
    }
    if ((have = scalar(st, "SELECT removing FROM entries WHERE digest=?", 1, dg, &removing, err)) <=
            0 ||
        removing) {
        rc = have < 0
                 ? have
                 : tkm_err_set(err, -ENOENT, "%s is not in the store%s (volume %s)", ref->digest,
                               have ? " any more: it is being removed" : "", ref->volume_id);
        goto out;
    }
    /* a tree deleted behind the state's back: the caller ingests it again */
    if (tkm_store_lookup(st->s, ref->digest, NULL, NULL) < 0) {
        rc = tkm_err_set(err, -ENOENT,
                         "%s is recorded but its tree is not complete in the store %s (volume %s)",
                         ref->digest, tkm_store_root(st->s), ref->volume_id);
        goto out;
    }
    const char *t[] = {ref->volume_id,     ref->digest,      nz(ref->pod_namespace),
                       nz(ref->pod_name),  nz(ref->pod_uid), nz(ref->cache_namespace),
                       nz(ref->cache_name)};
    int64_t v[] = {now};
    if ((rc = run(st,
                  "INSERT INTO refs(volume_id, digest, pod_namespace, pod_name, pod_uid,"
                  " cache_namespace, cache_name, created) VALUES(?,?,?,?,?,?,?,?)",
                  7, t, 1, v, err)) < 0 ||
        (rc = run(st, "UPDATE entries SET last_used=?2 WHERE digest=?1", 1, dg, 1, v, err)) < 0 ||
        (rc = commit(st, err)) < 0)
        goto out;
    if (created)
        *created = 1;
out:
    sqlite3_finalize(q);
    if (rc < 0)
        rollback(st);
    return rc;
}

int tkm_store_state_release(struct tkm_store_state *st, const char *volume_id, int64_t now,
                            struct tkm_err *err)
{
    sqlite3_stmt *q = NULL;
    char *digest = NULL;
    int rc;
    if (!volume_id || !volume_id[0])
        return tkm_err_set(err, -EINVAL, "store state %s: a reference needs a volume id", st->path);
    if ((rc = begin(st, err)) < 0)
        return rc;
    const char *vol[] = {volume_id};
    if ((rc = prep(st, &q, "SELECT digest FROM refs WHERE volume_id=?", 1, vol, err)) < 0)
        goto out;
    if ((rc = sqlite3_step(q)) == SQLITE_DONE) {
        rc = tkm_err_set(err, -ENOENT, "volume %s references nothing in the store", volume_id);
        goto out;
    } else if (rc != SQLITE_ROW) {
        rc = db_fail(st, rc, "SELECT refs", err);
        goto out;
    }
    if (!(digest = strdup((const char *)sqlite3_column_text(q, 0)))) {
        rc = tkm_err_set(err, -ENOMEM, "out of memory");
        goto out;
    }
    sqlite3_reset(q);
    const char *dg[] = {digest};
    int64_t v[] = {now};
    if ((rc = run(st, "DELETE FROM refs WHERE volume_id=?", 1, vol, 0, NULL, err)) < 0 ||
        (rc = run(st, "UPDATE entries SET last_used=?2 WHERE digest=?1", 1, dg, 1, v, err)) < 0)
        goto out;
    rc = commit(st, err);
out:
    sqlite3_finalize(q);
    if (rc < 0)
        rollback(st);
    free(digest);
    return rc;
}

/* Copies the 7 text columns of a refs row into one block owned by volume_id. */
static int ref_fill(sqlite3_stmt *q, void *elem)
{
    struct tkm_store_ref *r = elem;
    size_t len[7], total = 0;
    for (int i = 0; i < 7; i++)
        total += (len[i] = (size_t)sqlite3_column_bytes(q, i)) + 1;
    char *blk = malloc(total), *p = blk;
    const char **f[7] = {&r->volume_id, &r->digest,          &r->pod_namespace, &r->pod_name,
                         &r->pod_uid,   &r->cache_namespace, &r->cache_name};
    if (!blk)
        return -ENOMEM;
    for (int i = 0; i < 7; i++) {
        const unsigned char *t = sqlite3_column_text(q, i);
        if (len[i])
            memcpy(p, t, len[i]);
        p[len[i]] = '\0';
        *f[i] = p;
        p += len[i] + 1;
    }
    r->created = sqlite3_column_int64(q, 7);
    return 0;
}

int tkm_store_state_refs(struct tkm_store_state *st, const char *digest,
                         struct tkm_store_ref **refs, size_t *n, struct tkm_err *err)
{
    struct tkm_store_ref *v = NULL;
    size_t cnt = 0;
    int rc = digest ? tkm_store_check_digest(digest, err) : 0;
    *refs = NULL;
    *n = 0;
    if (rc < 0)
        return rc;
    const char *dg[] = {digest}; /* NULL binds NULL: every reference */
    rc = rows(st,
              "SELECT volume_id, digest, pod_namespace, pod_name, pod_uid, cache_namespace,"
              " cache_name, created FROM refs WHERE ?1 IS NULL OR digest=?1 ORDER BY volume_id",
              1, dg, (void **)&v, sizeof *v, &cnt, ref_fill, err);
    if (rc < 0) {
        tkm_store_state_refs_free(v, cnt);
        return rc;
    }
    *refs = v;
    *n = cnt;
    return 0;
}

void tkm_store_state_refs_free(struct tkm_store_ref *refs, size_t n)
{
    if (!refs)
        return;
    for (size_t i = 0; i < n; i++)
        free((char *)refs[i].volume_id);
    free(refs);
}

static int entry_fill(sqlite3_stmt *q, void *elem)
{
    struct tkm_store_entry *e = elem;
    snprintf(e->digest, sizeof e->digest, "%s", (const char *)sqlite3_column_text(q, 0));
    e->bytes = (uint64_t)sqlite3_column_int64(q, 1);
    e->created = sqlite3_column_int64(q, 2);
    e->last_used = sqlite3_column_int64(q, 3);
    e->removing = sqlite3_column_int(q, 4);
    e->refs = (uint64_t)sqlite3_column_int64(q, 6);
    if (sqlite3_column_type(q, 5) != SQLITE_NULL &&
        !(e->source = strdup((const char *)sqlite3_column_text(q, 5))))
        return -ENOMEM;
    return 0;
}

int tkm_store_state_entries(struct tkm_store_state *st, struct tkm_store_entry **out, size_t *n,
                            struct tkm_err *err)
{
    struct tkm_store_entry *v = NULL;
    size_t cnt = 0;
    int rc = rows(st,
                  "SELECT e.digest, e.bytes, e.created, e.last_used, e.removing, e.source,"
                  " (SELECT COUNT(*) FROM refs r WHERE r.digest=e.digest)"
                  " FROM entries e ORDER BY e.last_used, e.digest",
                  0, NULL, (void **)&v, sizeof *v, &cnt, entry_fill, err);
    *out = NULL;
    *n = 0;
    if (rc < 0) {
        tkm_store_state_entries_free(v, cnt);
        return rc;
    }
    *out = v;
    *n = cnt;
    return 0;
}

void tkm_store_state_entries_free(struct tkm_store_entry *v, size_t n)
{
    if (!v)
        return;
    for (size_t i = 0; i < n; i++)
        free(v[i].source);
    free(v);
}

int tkm_store_state_stats(struct tkm_store_state *st, struct tkm_store_stats *out,
                          struct tkm_err *err)
{
    sqlite3_stmt *q = NULL;
    memset(out, 0, sizeof *out);
    int rc = prep(st, &q,
                  "SELECT COUNT(*), COALESCE(SUM(bytes),0),"
                  " COALESCE(SUM(digest IN (SELECT digest FROM refs)),0),"
                  " COALESCE(SUM(CASE WHEN digest IN (SELECT digest FROM refs) THEN bytes END),0),"
                  " (SELECT COUNT(*) FROM refs) FROM entries",
                  0, NULL, err);
    if (rc < 0)
        return rc;
    if ((rc = sqlite3_step(q)) == SQLITE_ROW) {
        out->entries = (uint64_t)sqlite3_column_int64(q, 0);
        out->bytes = (uint64_t)sqlite3_column_int64(q, 1);
        out->referenced = (uint64_t)sqlite3_column_int64(q, 2);
        out->referenced_bytes = (uint64_t)sqlite3_column_int64(q, 3);
        out->refs = (uint64_t)sqlite3_column_int64(q, 4);
        rc = 0;
    } else {
        rc = db_fail(st, rc, "stats", err);
    }
    sqlite3_finalize(q);
    return rc;
}

/* ---- garbage collection -------------------------------------------------- */

int tkm_store_state_gc_plan(struct tkm_store_state *st, int64_t now, int64_t grace_s,
                            uint64_t budget_bytes, char ***digests, size_t *n, uint64_t *freed,
                            int *over, struct tkm_err *err)
{
    struct tkm_store_entry *v = NULL;
    size_t cnt = 0, k = 0;
    char **plan = NULL;
    unsigned char *pick = NULL;
    uint64_t total = 0, gone = 0;
    int rc = tkm_store_state_entries(st, &v, &cnt, err);
    *digests = NULL;
    *n = 0;
    if (rc < 0)
        return rc;
    if (!(pick = calloc(cnt + 1, 1)) || !(plan = calloc(cnt + 1, sizeof *plan))) {
        rc = tkm_err_set(err, -ENOMEM, "out of memory");
        goto out;
    }
    for (size_t i = 0; i < cnt; i++) { /* pass 1: idle for the grace period */
        if (v[i].removing)
            continue; /* already going: neither counted nor planned */
        total += v[i].bytes;
        if (v[i].refs == 0 && now - v[i].last_used >= grace_s) {
            pick[i] = 1;
            gone += v[i].bytes;
        }
    }
    for (size_t i = 0; i < cnt && budget_bytes && total - gone > budget_bytes; i++) {
        if (!v[i].removing && !v[i].refs && !pick[i]) { /* pass 2: LRU over budget */
            pick[i] = 2;
            gone += v[i].bytes;
        }
    }
    for (int pass = 1; pass <= 2; pass++)
        for (size_t i = 0; i < cnt; i++)
            if (pick[i] == pass && !(plan[k++] = strdup(v[i].digest))) {
                rc = tkm_err_set(err, -ENOMEM, "out of memory");
                goto out;
            }
    if (freed)
        *freed = gone;
    if (over)
        *over = budget_bytes && total - gone > budget_bytes;
    *digests = plan;
    *n = k;
    plan = NULL;
out:
    tkm_store_list_free(plan, k);
    free(pick);
    tkm_store_state_entries_free(v, cnt);
    return rc;
}

int tkm_store_state_would_fit(struct tkm_store_state *st, uint64_t new_bytes, uint64_t budget_bytes,
                              int *fits, uint64_t *need, struct tkm_err *err)
{
    struct tkm_store_stats s;
    int rc = tkm_store_state_stats(st, &s, err);
    int64_t removing = 0;
    *fits = 0;
    if (need)
        *need = 0;
    if (rc < 0)
        return rc;
    if ((rc = scalar(st, "SELECT COALESCE(SUM(bytes),0) FROM entries WHERE removing=1", 0, NULL,
                     &removing, err)) < 0)
        return rc;
    uint64_t present = s.bytes - (uint64_t)removing;
    if (!budget_bytes) {
        *fits = 1;
        return 0;
    }
    *fits = new_bytes <= budget_bytes && s.referenced_bytes <= budget_bytes - new_bytes;
    if (need && *fits && present + new_bytes > budget_bytes)
        *need = present + new_bytes - budget_bytes;
    return 0;
}

/* Marks digest removing if unreferenced: 0, -ENOENT, -EBUSY. */
static int mark_removing(struct tkm_store_state *st, const char *digest, uint64_t *bytes,
                         struct tkm_err *err)
{
    int64_t v = 0, removing = 0, nref = 0;
    int rc = tkm_store_check_digest(digest, err), have;
    if (rc < 0)
        return rc;
    if ((rc = begin(st, err)) < 0)
        return rc;
    const char *dg[] = {digest};
    if ((have = scalar(st, "SELECT removing FROM entries WHERE digest=?", 1, dg, &removing, err)) <=
        0) {
        rc = have < 0 ? have : tkm_err_set(err, -ENOENT, "%s is not in the store", digest);
        goto out;
    }
    if (removing) {
        rc = tkm_err_set(err, -EBUSY, "%s is already being removed", digest);
        goto out;
    }
    if ((rc = scalar(st, "SELECT COUNT(*) FROM refs WHERE digest=?", 1, dg, &nref, err)) < 0)
        goto out;
    if (nref > 0) {
        rc = tkm_err_set(err, -EBUSY, "%s is referenced by %lld volume(s): not removed", digest,
                         (long long)nref);
        goto out;
    }
    if ((rc = scalar(st, "SELECT bytes FROM entries WHERE digest=?", 1, dg, &v, err)) < 0 ||
        (rc = run(st, "UPDATE entries SET removing=1 WHERE digest=?", 1, dg, 0, NULL, err)) < 0)
        goto out;
    rc = commit(st, err);
    *bytes = (uint64_t)v;
out:
    if (rc < 0)
        rollback(st);
    return rc;
}

/* After the tree's removal (rc): the row goes, or is unmarked when the
 * entry is still complete (the removal failed before the marker). */
static int finish_removal(struct tkm_store_state *st, const char *digest, int rc,
                          struct tkm_err *err)
{
    const char *dg[] = {digest};
    if (rc < 0 && rc != -ENOENT && tkm_store_lookup(st->s, digest, NULL, NULL) == 0) {
        run(st, "UPDATE entries SET removing=0 WHERE digest=?", 1, dg, 0, NULL, NULL);
        return rc;
    }
    int r = run(st, "DELETE FROM entries WHERE digest=? AND removing=1", 1, dg, 0, NULL, err);
    if (r == 0)
        tkm_info("store: removed %s", digest);
    return rc < 0 && rc != -ENOENT ? rc : r;
}

/* ---- the loop forms ------------------------------------------------------ */

struct tkm_store_state_job {
    uv_work_t work;             /* the walk of a tree that had no row */
    struct tkm_store_job *sjob; /* the extraction, until it reports */
    struct tkm_store_state *st;
    char *digest, *source, *path;
    struct tkm_store_ingest_info info;
    uint64_t bytes;
    int rc;
    struct tkm_err err;
    tkm_store_state_ingest_cb cb;
    void *data;
};

static void ing_report(struct tkm_store_state_job *j)
{
    j->cb(j->rc, j->digest, j->rc == 0 ? j->path : NULL, &j->info, &j->err, j->data);
    free(j->digest);
    free(j->source);
    free(j->path);
    free(j);
}

static void ing_walk(uv_work_t *w)
{
    struct tkm_store_state_job *j = w->data;
    j->rc = tree_bytes(j->st->s, j->digest, &j->bytes, &j->err);
}

static void ing_walked(uv_work_t *w, int status)
{
    struct tkm_store_state_job *j = w->data;
    if (status == UV_ECANCELED)
        j->rc = tkm_err_set(&j->err, -ECANCELED, "ingest of %s cancelled", j->digest);
    if (j->rc == 0)
        j->rc = add_row(j->st, j->digest, j->bytes, j->source, (int64_t)time(NULL), &j->err);
    ing_report(j);
}

static void ing_done(int rc, const char *path, const struct tkm_store_ingest_info *info,
                     const struct tkm_err *err, void *data)
{
    struct tkm_store_state_job *j = data;
    int64_t dummy;
    const char *dg[] = {j->digest};
    j->sjob = NULL; /* cancelling from now on is a no-op: the extraction is done */
    j->rc = rc;
    j->info = *info;
    if (rc < 0) {
        j->err = *err;
        ing_report(j);
        return;
    }
    if (!(j->path = strdup(path))) {
        j->rc = tkm_err_set(&j->err, -ENOMEM, "out of memory");
    } else if (info->existed && (j->rc = scalar(j->st, "SELECT bytes FROM entries WHERE digest=?",
                                                1, dg, &dummy, &j->err)) == 0) {
        /* complete, but no row (another process ingested it): walk on the pool */
        j->work.data = j;
        if ((j->rc = uv_queue_work(j->work.loop, &j->work, ing_walk, ing_walked)) == 0)
            return;
        j->rc = tkm_err_set(&j->err, j->rc, "ingest of %s: uv_queue_work: %s", j->digest,
                            uv_strerror(j->rc));
    } else if (j->rc >= 0) {
        j->rc = add_row(j->st, j->digest, info->existed ? 0 : info->archive.file_bytes, j->source,
                        (int64_t)time(NULL), &j->err);
    }
    ing_report(j);
}

int tkm_store_state_ingest_start(struct uv_loop_s *loop, struct tkm_store_state *st,
                                 const char *digest, const char *blob_path,
                                 const struct tkm_archive_opts *o, const char *source,
                                 tkm_store_state_ingest_cb cb, void *data,
                                 struct tkm_store_state_job **job, struct tkm_err *err)
{
    struct tkm_store_state_job *j = NULL;
    int rc = tkm_store_check_digest(digest, err);
    if (job)
        *job = NULL;
    if (rc < 0)
        return rc;
    if (!(j = calloc(1, sizeof *j)) || !(j->digest = strdup(digest)) ||
        (source && !(j->source = strdup(source)))) {
        rc = tkm_err_set(err, -ENOMEM, "out of memory");
        goto fail;
    }
    j->st = st;
    j->cb = cb;
    j->data = data;
    j->work.loop = loop; /* read by ing_done; uv_queue_work sets it again */
    if ((rc = tkm_store_ingest_start(loop, st->s, digest, blob_path, o, ing_done, j, &j->sjob,
                                     err)) < 0)
        goto fail;
    if (job)
        *job = j;
    return 0;
fail:
    if (j) {
        free(j->digest);
        free(j->source);
        free(j);
    }
    return rc;
}

void tkm_store_state_job_cancel(struct tkm_store_state_job *job)
{
    if (job && job->sjob)
        tkm_store_job_cancel(job->sjob);
}

struct rm_job {
    uv_work_t work;
    struct tkm_store_state *st;
    char *digest;
    uint64_t bytes;
    int rc;
    struct tkm_err err;
    tkm_store_state_remove_cb cb;
    void *data;
};

static void rm_work(uv_work_t *w)
{
    struct rm_job *j = w->data;
    j->rc = tkm_store_remove(j->st->s, j->digest, &j->err);
}

static void rm_after(uv_work_t *w, int status)
{
    struct rm_job *j = w->data;
    if (status == UV_ECANCELED)
        j->rc = tkm_err_set(&j->err, -ECANCELED, "removal of %s cancelled before it started",
                            j->digest);
    j->rc = finish_removal(j->st, j->digest, j->rc, &j->err);
    j->cb(j->rc, j->digest, j->rc == 0 ? j->bytes : 0, &j->err, j->data);
    free(j->digest);
    free(j);
}

int tkm_store_state_remove_start(struct uv_loop_s *loop, struct tkm_store_state *st,
                                 const char *digest, tkm_store_state_remove_cb cb, void *data,
                                 struct tkm_err *err)
{
    struct rm_job *j = calloc(1, sizeof *j);
    int rc;
    if (!j || !(j->digest = strdup(digest ? digest : ""))) {
        free(j);
        return tkm_err_set(err, -ENOMEM, "out of memory");
    }
    if ((rc = mark_removing(st, digest, &j->bytes, err)) < 0)
        goto fail;
    j->st = st;
    j->cb = cb;
    j->data = data;
    j->work.data = j;
    if ((rc = uv_queue_work(loop, &j->work, rm_work, rm_after)) != 0) {
        rc = tkm_err_set(err, rc, "removal of %s: uv_queue_work: %s", digest, uv_strerror(rc));
        finish_removal(st, digest, rc, NULL);
        goto fail;
    }
    return 0;
fail:
    free(j->digest);
    free(j);
    return rc;
}

struct ck_job {
    uv_work_t work;
    struct tkm_store_state *st;
    int rc;
    struct tkm_err err;
    tkm_store_state_done_cb cb;
    void *data;
};

static void ck_work(uv_work_t *w)
{
    struct ck_job *j = w->data;
    j->rc = tkm_store_state_checkpoint(j->st, &j->err);
}

static void ck_after(uv_work_t *w, int status)
{
    struct ck_job *j = w->data;
    if (status == UV_ECANCELED)
        j->rc = tkm_err_set(&j->err, -ECANCELED, "checkpoint cancelled before it started");
    if (j->cb)
        j->cb(j->rc, &j->err, j->data);
    free(j);
}

int tkm_store_state_checkpoint_start(struct uv_loop_s *loop, struct tkm_store_state *st,
                                     tkm_store_state_done_cb cb, void *data, struct tkm_err *err)
{
    struct ck_job *j = calloc(1, sizeof *j);
    int rc;
    if (!j)
        return tkm_err_set(err, -ENOMEM, "out of memory");
    j->st = st;
    j->cb = cb;
    j->data = data;
    j->work.data = j;
    if ((rc = uv_queue_work(loop, &j->work, ck_work, ck_after)) != 0) {
        free(j);
        return tkm_err_set(err, rc, "checkpoint: uv_queue_work: %s", uv_strerror(rc));
    }
    return 0;
}
