/*
 * store.h - the content-addressed store of extracted, verified layers.
 *
 * Layout under the root (all on one filesystem, so rename() is atomic):
 *   sha256/<hex>/           the extracted tree of one layer blob
 *   sha256/<hex>.complete   completion marker (JSON), written last: an entry
 *                           exists only when its marker does
 *   staging/                private (0700) extraction and removal dirs
 *   locks/<hex>.lock        per-digest flock(2) locks, so two processes
 *                           (or threads) never extract one digest at once
 *
 * A crash at any point leaves nothing visible: a tree without a marker and
 * everything under staging/ is purged by the next tkm_store_open() (entries
 * whose lock another live process holds are left alone).
 *
 * Digests are "sha256:<64 lower-case hex>". The key is the digest the caller
 * verified (normally the layer blob's descriptor digest); ingest also checks
 * it against the blob bytes.
 *
 * Thread safety: after open the struct is read-only; every call may run on
 * any thread (all but tkm_store_ingest_start block: run them on a worker
 * thread, not on a loop).
 */
#ifndef TKM_STORE_H
#define TKM_STORE_H

#include <stddef.h>

#include <tkm/archive.h>
#include <tkm/err.h>

struct tkm_store;

/* Opens (creating as needed, mode 0755) the store at root (borrowed) and
 * purges leftovers of interrupted work. *out is owned: tkm_store_free(). */
int tkm_store_open(const char *root, struct tkm_store **out, struct tkm_err *err);
void tkm_store_free(struct tkm_store *s);
/* The root path; borrowed from s. */
const char *tkm_store_root(const struct tkm_store *s);

/* 0 when digest is "sha256:<64 lower-case hex>", else -EINVAL with err. */
int tkm_store_check_digest(const char *digest, struct tkm_err *err);

/* *path (owned, free()) = the extracted tree of digest, only when its
 * completion marker exists. -ENOENT when absent, -EINVAL for a bad digest. */
int tkm_store_lookup(struct tkm_store *s, const char *digest, char **path, struct tkm_err *err);

struct tkm_store_ingest_info {
    int existed;                       /* 1: the entry was already complete; nothing was read */
    struct tkm_archive_result archive; /* zero when existed */
};

/*
 * Makes digest present, for a daemon that owns one libuv loop: the work runs
 * on the libuv thread pool (uv_queue_work), cb on the loop thread. It takes
 * the digest's lock, returns at once if the entry is complete, else extracts
 * blob_path with lib/tkm_archive into staging/ -- checking that the blob's
 * sha256 is digest, plus o->diff_id when set -- fsyncs, renames it to
 * sha256/<hex> and writes the marker last; on failure nothing becomes
 * visible. o may be NULL for the defaults; its blob_digest is ignored (the
 * digest argument is what is checked). A pool thread never waits for the
 * digest's lock: when another process holds it, the job waits on a loop
 * timer (20 ms doubling to 500 ms) and tries again.
 *
 * Everything passed in is copied (digest, blob_path, and opts with its
 * strings and include list), so the caller may free its copies on return;
 * opts->cancel is replaced by the job's own flag (tkm_store_job_cancel) and
 * opts->progress, if set, is called on the worker thread. s must stay open
 * until cb has run.
 *
 * Cancelling: the library installs no signal handlers (in a daemon signals
 * belong to the daemon). tkm_store_job_cancel stops the job: the extraction
 * notices between reads and entries and removes its staging directory; the
 * entry stays absent.
 *
 * Callback contract: if _start fails (< 0), cb is never called. Otherwise cb
 * runs exactly once, with rc 0, path (borrowed for the call) and info (what
 * happened), or rc < 0 and err saying why (-ECANCELED after
 * tkm_store_job_cancel or when the loop closed before the work started).
 * *job (may be NULL) is borrowed: valid until cb runs, for
 * tkm_store_job_cancel only.
 */
struct tkm_store_job;
typedef void (*tkm_store_ingest_cb)(int rc, const char *path,
                                    const struct tkm_store_ingest_info *info,
                                    const struct tkm_err *err, void *data);
struct uv_loop_s;
int tkm_store_ingest_start(struct uv_loop_s *loop, struct tkm_store *s, const char *digest,
                           const char *blob_path, const struct tkm_archive_opts *o,
                           tkm_store_ingest_cb cb, void *data, struct tkm_store_job **job,
                           struct tkm_err *err);
/* Asks a running job to stop (loop thread; the extraction notices within one
 * buffer). Its cb still runs, with -ECANCELED unless the work had finished. */
void tkm_store_job_cancel(struct tkm_store_job *job);

/* Removes digest: the marker first (the entry disappears atomically), then
 * the tree. -ENOENT when absent. Takes the digest's lock. */
int tkm_store_remove(struct tkm_store *s, const char *digest, struct tkm_err *err);

/* *digests: owned array of n owned strings, sorted; free with
 * tkm_store_list_free(). Only complete entries are listed. */
int tkm_store_list(struct tkm_store *s, char ***digests, size_t *n, struct tkm_err *err);
void tkm_store_list_free(char **digests, size_t n);

#endif
