/*
 * store/state.h - the store's state: which entries exist, how large they
 * are, when they were last used, and which volumes (pod, CSI volume id)
 * reference them; garbage collection by grace period and disk budget.
 *
 * The state lives in <root>/state.db (SQLite, WAL, synchronous=NORMAL; see
 * docs/store.md for what a kill -9 and a power loss can lose and why that is
 * safe). The directory (<tkm/store.h>) is the truth about what is on disk;
 * the database is the truth about references and last use. Invariant after
 * tkm_store_state_open(): every entry row names a complete tree (marker
 * present), every complete tree has a row, every reference names a row.
 * Each operation below is one transaction and keeps it:
 *   - a row is written only after its tree is complete (crash in between:
 *     the next open adopts the tree);
 *   - removal marks the row "removing" (no new reference can take it), then
 *     deletes the tree, then the row (crash in between: the next open drops
 *     the row if the tree went, or clears the mark if it stayed).
 *
 * Ownership: struct tkm_store_state is owned by the caller
 * (tkm_store_state_free); it borrows the struct tkm_store given to open,
 * which must stay open until the state is freed. Only one process holds a
 * store's state at a time (<root>/state.lock, flock): a second open gets
 * -EBUSY.
 *
 * Threads: one connection, used by one thread at a time. A daemon makes
 * every call on its loop thread: the quick calls (acquire, release, refs,
 * entries, stats, gc_plan, would_fit) are one small transaction each
 * (measured in docs/store.md: tens of microseconds, synchronous=NORMAL never
 * fsyncs on commit), and the _start forms (ingest, remove: the only ways in
 * and out of the store) do their disk work (trees walked, extracted, deleted)
 * on the libuv thread pool and every database statement on the loop thread.
 * tkm_store_state_open blocks on disk work: call it before the loop runs.
 * Never call into the state from a pool thread while the loop uses it
 * (transactions of one connection do not isolate threads from each other).
 * The exception is tkm_store_state_checkpoint: a second connection of its
 * own, on any one thread, concurrently with the loop's calls (see
 * Checkpoints below).
 *
 * Times are Unix seconds passed in by the caller (now), so tests and the
 * agent decide the clock; sizes are the bytes of the tree's regular files
 * (tkm_archive_result.file_bytes at ingest, the same sum when a tree is
 * adopted).
 */
#ifndef TKM_STORE_STATE_H
#define TKM_STORE_STATE_H

#include <stddef.h>
#include <stdint.h>

#include <tkm/err.h>
#include <tkm/store.h>

struct tkm_store_state;

/* The agent's defaults (docs/store.md): unused entries go after 10 minutes,
 * and the store keeps within 10 GiB of cache files. */
#define TKM_STORE_GC_GRACE_DEFAULT_S   600
#define TKM_STORE_BUDGET_DEFAULT_BYTES (10ULL << 30)

/* What tkm_store_state_open found and repaired. */
struct tkm_store_state_report {
    int rebuilt;           /* 1: state.db was unreadable and moved aside */
    char moved_to[512];    /* then: the path it was moved to */
    uint64_t rows_dropped; /* entry rows whose tree was not complete */
    uint64_t refs_dropped; /* references those rows had */
    uint64_t adopted;      /* complete trees that had no row (last_used = now) */
    uint64_t adopted_bytes;
    uint64_t unmarked;   /* rows left "removing" by a crash, tree still complete */
    uint64_t unreadable; /* complete trees without row that could not be walked: removed */
};

/*
 * Opens (creating) <root>/state.db of the open store s (borrowed, see
 * above), migrates its schema (PRAGMA user_version) and reconciles it with
 * the directory. A database that cannot be read (not a database, corrupt,
 * failed quick_check, newer schema) is renamed to
 * state.db.corrupt-<unix time> (with its -wal) and rebuilt from the
 * directory: every tree is adopted, references are gone (rep->rebuilt; the
 * agent then re-derives them from its mounts). Never refuses to start for a
 * bad database; fails only when the root itself cannot be written, or with
 * -EBUSY when another process holds the state. rep (may be NULL) says what
 * happened. *out is owned: tkm_store_state_free().
 */
int tkm_store_state_open(struct tkm_store *s, int64_t now, struct tkm_store_state **out,
                         struct tkm_store_state_report *rep, struct tkm_err *err);
/* Closes the database (checkpointing the WAL) and frees; NULL is a no-op. */
void tkm_store_state_free(struct tkm_store_state *st);

/* One reference: a CSI volume of a pod using a cache's digest. Strings are
 * borrowed (in) or owned by the array they came in (out). */
struct tkm_store_ref {
    const char *volume_id; /* primary key */
    const char *digest;
    const char *pod_namespace, *pod_name, *pod_uid;
    const char *cache_namespace, *cache_name;
    int64_t created;
};

/*
 * References ref->digest for ref->volume_id and sets the entry's last_used
 * = now. Idempotent: the same volume id with the same digest again is 0
 * with *created = 0 (no second reference). -EEXIST when the volume id
 * already references another digest (err names both), -ENOENT when the
 * digest has no entry, is being removed, or its tree is no longer complete
 * on disk (then ingest it again: the row is kept and updated), -EINVAL for a bad digest or an
 * empty volume id. created (may be NULL): 1 when a row was inserted.
 */
int tkm_store_state_acquire(struct tkm_store_state *st, const struct tkm_store_ref *ref,
                            int64_t now, int *created, struct tkm_err *err);
/* Drops the reference of volume_id and sets its entry's last_used = now
 * (the grace period runs from the last release). -ENOENT when unknown. */
int tkm_store_state_release(struct tkm_store_state *st, const char *volume_id, int64_t now,
                            struct tkm_err *err);

/* The references of digest (NULL: all), ordered by volume id. *refs is an
 * owned array of *n: tkm_store_state_refs_free(). */
int tkm_store_state_refs(struct tkm_store_state *st, const char *digest,
                         struct tkm_store_ref **refs, size_t *n, struct tkm_err *err);
void tkm_store_state_refs_free(struct tkm_store_ref *refs, size_t n);

struct tkm_store_entry {
    char digest[72];
    uint64_t bytes;
    int64_t created, last_used;
    uint64_t refs;
    int removing;
    char *source; /* owned by the array (NULL when none) */
};
/* All entries, least recently used first. *v: owned array of *n,
 * tkm_store_state_entries_free(). */
int tkm_store_state_entries(struct tkm_store_state *st, struct tkm_store_entry **v, size_t *n,
                            struct tkm_err *err);
void tkm_store_state_entries_free(struct tkm_store_entry *v, size_t n);

/* For metrics. */
struct tkm_store_stats {
    uint64_t entries, bytes;
    uint64_t referenced, referenced_bytes; /* entries with at least one reference */
    uint64_t refs;                         /* reference rows */
};
int tkm_store_state_stats(struct tkm_store_state *st, struct tkm_store_stats *out,
                          struct tkm_err *err);

/*
 * The garbage-collection plan: unreferenced entries idle for at least
 * grace_s (now - last_used >= grace_s), then, while the total of what stays
 * exceeds budget_bytes (0 = no budget), more unreferenced entries, least
 * recently used first, even within grace. A referenced entry is never
 * planned. *digests: owned array of *n owned strings, in removal order
 * (tkm_store_list_free); freed (may be NULL): the bytes they hold; over
 * (may be NULL): 1 when the referenced entries alone exceed the budget.
 */
int tkm_store_state_gc_plan(struct tkm_store_state *st, int64_t now, int64_t grace_s,
                            uint64_t budget_bytes, char ***digests, size_t *n, uint64_t *freed,
                            int *over, struct tkm_err *err);

/*
 * Admission: *fits = 1 when an entry of new_bytes can be stored within
 * budget_bytes once every unreferenced entry (at most) is evicted, i.e.
 * referenced bytes + new_bytes <= budget (0 = no budget: always fits). The
 * agent answers RESOURCE_EXHAUSTED otherwise. *need (may be NULL): the bytes
 * that must be evicted first (0 when it fits as is).
 */
int tkm_store_state_would_fit(struct tkm_store_state *st, uint64_t new_bytes, uint64_t budget_bytes,
                              int *fits, uint64_t *need, struct tkm_err *err);

/* ---- the loop forms (disk work on the libuv thread pool) --------------- */

struct uv_loop_s;

/*
 * Ingest and record: tkm_store_ingest_start (<tkm/store.h>; o, path and
 * info as there: the extraction on the pool, a held lock waited for on a
 * loop timer), then on the loop the row with the extracted size and
 * last_used (an entry that was already complete keeps its row's size, or has
 * its tree walked on the pool when it had no row). On failure no row is
 * written and nothing becomes visible; the row is not written while the
 * entry is being removed (-EAGAIN: ingest it again once the removal
 * reported). Strings are copied; s and st must stay
 * open until cb has run. cb runs on the loop thread exactly once unless
 * _start fails (< 0: never); path is borrowed for the call; rc < 0 with err
 * (-ECANCELED after tkm_store_state_job_cancel during the extraction). The
 * row's time is time(NULL) when it is written. *job (may be NULL) is
 * borrowed, valid until cb runs, for tkm_store_state_job_cancel only.
 */
struct tkm_store_state_job;
typedef void (*tkm_store_state_ingest_cb)(int rc, const char *digest, const char *path,
                                          const struct tkm_store_ingest_info *info,
                                          const struct tkm_err *err, void *data);
int tkm_store_state_ingest_start(struct uv_loop_s *loop, struct tkm_store_state *st,
                                 const char *digest, const char *blob_path,
                                 const struct tkm_archive_opts *o, const char *source,
                                 tkm_store_state_ingest_cb cb, void *data,
                                 struct tkm_store_state_job **job, struct tkm_err *err);
/* Loop thread. Stops the extraction if it still runs (tkm_store_job_cancel);
 * once it finished, the row is written anyway and cb reports success. */
void tkm_store_state_job_cancel(struct tkm_store_state_job *job);

/*
 * Removes the unreferenced entry digest: the row is marked removing at once
 * (on the calling loop thread, so no new reference can take it; -EBUSY when
 * it is referenced, -ENOENT when there is no row: returned by _start and cb
 * is never called), the tree is removed on the pool (tkm_store_remove:
 * marker first), the row is deleted on the loop, then cb(rc, digest, freed
 * bytes, err, data). digest is copied. Garbage collection is
 * tkm_store_state_gc_plan, then this for each digest of the plan.
 */
typedef void (*tkm_store_state_remove_cb)(int rc, const char *digest, uint64_t freed,
                                          const struct tkm_err *err, void *data);
int tkm_store_state_remove_start(struct uv_loop_s *loop, struct tkm_store_state *st,
                                 const char *digest, tkm_store_state_remove_cb cb, void *data,
                                 struct tkm_err *err);

/*
 * Checkpoints: the loop's connection never copies the WAL back into
 * state.db on its own (that costs fsyncs: up to 16 ms measured, on the
 * loop), except as a safety net once the WAL holds 20000 frames (~80 MiB).
 * The daemon runs tkm_store_state_checkpoint_start now and then (e.g. when
 * tkm_store_state_wal_frames passes 1000, or on a timer): a PASSIVE
 * checkpoint through a second connection on the thread pool, concurrent
 * with the loop's calls (never two at once). cb (may be NULL) runs on the
 * loop thread unless _start fails. tkm_store_state_checkpoint is the
 * blocking form (any one thread). st must stay open until cb ran.
 */
typedef void (*tkm_store_state_done_cb)(int rc, const struct tkm_err *err, void *data);
int tkm_store_state_checkpoint(struct tkm_store_state *st, struct tkm_err *err);
int tkm_store_state_checkpoint_start(struct uv_loop_s *loop, struct tkm_store_state *st,
                                     tkm_store_state_done_cb cb, void *data, struct tkm_err *err);
/* Frames in the WAL after the last commit (any thread). */
uint64_t tkm_store_state_wal_frames(struct tkm_store_state *st);

#endif
