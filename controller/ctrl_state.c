/*
 * ctrl_state.c - the controller's memory across restarts, in SQLite
 * (<state-dir>/controller.db, WAL, synchronous=NORMAL: a crash may lose the
 * last transactions, never corrupt the file; what is lost is recomputed).
 *
 *   pins(uid, image, digest)                 the digest pinned for a cache's image
 *   verifications(uid, digest, policy, ...)  a verification's outcome, with the
 *                                            fingerprint of the policy it used and the
 *                                            id of the key that verified
 *
 * Each statement is a few tens of microseconds on the loop thread (no fsync
 * per commit in WAL NORMAL mode); see docs/controller.md.
 *
 * Memory: the page cache is 64 KiB at most (16 pages) and grows page by page.
 * SQLite's defaults here would take 20 pages (87 KB) at open and up to 256 KiB
 * (about 282 KB of heap at 1000 caches); the pages not cached are read from
 * the file, which the kernel caches, and the statements are as fast (measured
 * in docs/controller.md).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sqlite3.h>

#include <tkm/log.h>

#include "ctrl-int.h"

struct ctrl_state {
    sqlite3 *db;
};

static const char schema[] =
    "PRAGMA journal_mode=WAL;"
    "PRAGMA synchronous=NORMAL;"
    "PRAGMA cache_size=-64;" /* KiB: see ctrl_state_open */
    "CREATE TABLE IF NOT EXISTS pins(uid TEXT NOT NULL, image TEXT NOT NULL, digest TEXT NOT "
    "NULL, PRIMARY KEY(uid, image));"
    "CREATE TABLE IF NOT EXISTS verifications(uid TEXT NOT NULL, digest TEXT NOT NULL, policy "
    "TEXT NOT NULL, ok INTEGER NOT NULL, reason TEXT NOT NULL, message TEXT NOT NULL, key_id "
    "TEXT NOT NULL, at INTEGER NOT NULL, PRIMARY KEY(uid, digest, policy));";

int ctrl_state_open(const char *dir, struct ctrl_state **out, struct tkm_err *err)
{
    char path[4096];
    struct ctrl_state *s = calloc(1, sizeof *s);
    char *emsg = NULL;
    int rc = -ENOMEM;
    if (!s)
        goto out;
    /* No bulk page allocation at open (SQLITE_DEFAULT_PCACHE_INITSZ): pages
     * come one by one as the cache fills. Possible only before SQLite is
     * initialized, i.e. at the process's first open (the controller's only
     * use of SQLite); later it is SQLITE_MISUSE and changes nothing. */
    sqlite3_config(SQLITE_CONFIG_PAGECACHE, NULL, 0, 0);
    if (dir)
        snprintf(path, sizeof path, "%s/controller.db", dir);
    else
        snprintf(path, sizeof path, ":memory:");
    if (sqlite3_open_v2(path, &s->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, NULL) !=
        SQLITE_OK) {
        rc = tkm_err_set(err, -EIO, "state database %s: %s", path,
                         s->db ? sqlite3_errmsg(s->db) : "cannot open");
        goto out;
    }
    sqlite3_busy_timeout(s->db, 2000);
    if (sqlite3_exec(s->db, schema, NULL, NULL, &emsg) != SQLITE_OK) {
        rc = tkm_err_set(err, -EIO, "state database %s: %s", path, emsg ? emsg : "schema failed");
        goto out;
    }
    *out = s;
    s = NULL;
    rc = 0;
out:
    sqlite3_free(emsg);
    ctrl_state_close(s);
    return rc;
}

void ctrl_state_close(struct ctrl_state *s)
{
    if (!s)
        return;
    sqlite3_close(s->db);
    free(s);
}

/* Prepares sql and binds the NULL-terminated text args. */
static sqlite3_stmt *prep(struct ctrl_state *s, const char *sql, const char *const *args)
{
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(s->db, sql, -1, &st, NULL) != SQLITE_OK) {
        tkm_warn("controller: state: %s", sqlite3_errmsg(s->db));
        return NULL;
    }
    for (int i = 0; args && args[i]; i++)
        sqlite3_bind_text(st, i + 1, args[i], -1, SQLITE_TRANSIENT);
    return st;
}

static int exec_args(struct ctrl_state *s, const char *sql, const char *const *args)
{
    sqlite3_stmt *st = prep(s, sql, args);
    if (!st)
        return -EIO;
    int rc = sqlite3_step(st);
    sqlite3_finalize(st);
    if (rc != SQLITE_DONE) {
        tkm_warn("controller: state: %s", sqlite3_errmsg(s->db));
        return -EIO;
    }
    return 0;
}

static void copy_col(sqlite3_stmt *st, int col, char *out, size_t n)
{
    const unsigned char *t = sqlite3_column_text(st, col);
    snprintf(out, n, "%s", t ? (const char *)t : "");
}

int ctrl_state_pin_get(struct ctrl_state *s, const char *uid, const char *image,
                       char digest[CTRL_DIGEST_MAX])
{
    const char *a[] = {uid, image, NULL};
    sqlite3_stmt *st = prep(s, "SELECT digest FROM pins WHERE uid=?1 AND image=?2", a);
    if (!st)
        return -EIO;
    int rc = sqlite3_step(st);
    int found = rc == SQLITE_ROW;
    if (found)
        copy_col(st, 0, digest, CTRL_DIGEST_MAX);
    sqlite3_finalize(st);
    return found ? 1 : rc == SQLITE_DONE ? 0 : -EIO;
}

int ctrl_state_pin_put(struct ctrl_state *s, const char *uid, const char *image, const char *digest)
{
    const char *d[] = {uid, NULL};
    const char *a[] = {uid, image, digest, NULL};
    /* One pin per cache: a new image replaces the old one. */
    if (exec_args(s, "DELETE FROM pins WHERE uid=?1", d) < 0)
        return -EIO;
    return exec_args(s, "INSERT OR REPLACE INTO pins(uid, image, digest) VALUES(?1, ?2, ?3)", a);
}

int ctrl_state_verify_get(struct ctrl_state *s, const char *uid, const char *digest,
                          const char *policy_fp, struct ctrl_verify_rec *out)
{
    const char *a[] = {uid, digest, policy_fp, NULL};
    sqlite3_stmt *st = prep(s,
                            "SELECT ok, reason, message, key_id FROM verifications WHERE uid=?1 "
                            "AND digest=?2 AND policy=?3",
                            a);
    if (!st)
        return -EIO;
    int rc = sqlite3_step(st);
    int found = rc == SQLITE_ROW;
    if (found) {
        out->ok = sqlite3_column_int(st, 0);
        copy_col(st, 1, out->reason, sizeof out->reason);
        copy_col(st, 2, out->message, sizeof out->message);
        copy_col(st, 3, out->key_id, sizeof out->key_id);
    }
    sqlite3_finalize(st);
    return found ? 1 : rc == SQLITE_DONE ? 0 : -EIO;
}

int ctrl_state_verify_put(struct ctrl_state *s, const char *uid, const char *digest,
                          const char *policy_fp, const struct ctrl_verify_rec *r)
{
    const char *d[] = {uid, NULL};
    const char *a[] = {uid,       digest,     policy_fp, r->ok ? "1" : "0",
                       r->reason, r->message, r->key_id, NULL};
    /* Only the latest verification of a cache is worth keeping. */
    if (exec_args(s, "DELETE FROM verifications WHERE uid=?1", d) < 0)
        return -EIO;
    return exec_args(s,
                     "INSERT INTO verifications(uid, digest, policy, ok, reason, message, "
                     "key_id, at) VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, strftime('%s','now'))",
                     a);
}

int ctrl_state_forget(struct ctrl_state *s, const char *uid)
{
    const char *a[] = {uid, NULL};
    int rc = exec_args(s, "DELETE FROM pins WHERE uid=?1", a);
    rc |= exec_args(s, "DELETE FROM verifications WHERE uid=?1", a);
    return rc ? -EIO : 0;
}

int ctrl_state_foreach_uid(struct ctrl_state *s, int (*fn)(const char *uid, void *data), void *data)
{
    sqlite3_stmt *st = prep(s, "SELECT uid FROM pins UNION SELECT uid FROM verifications", NULL);
    int rc = 0;
    if (!st)
        return -EIO;
    while (sqlite3_step(st) == SQLITE_ROW) {
        const unsigned char *u = sqlite3_column_text(st, 0);
        if (u && (rc = fn((const char *)u, data)) != 0)
            break;
    }
    sqlite3_finalize(st);
    return rc;
}
