/*
 * session.h - asynchronous registry work on the caller's libuv loop: one
 * session per registry host, and image jobs that run on it.
 *
 * The session (struct tkm_oci_session) belongs to the caller and lives as
 * long as it likes: it holds the credentials and the bearer tokens (cached
 * per scope until they expire) and sends every request through the caller's
 * struct tkm_http, i.e. libcurl multi on the caller's loop, whose connection
 * cache and HTTP/2 multiplexing are shared by every job of every session on
 * that client. Keep one session per host for the life of the process.
 *
 * A job (struct tkm_oci_job) is one piece of image work:
 *   tkm_oci_job_resolve    reference -> manifest digest: GET the manifest
 *                          and hash the bytes (Docker-Content-Digest is
 *                          never trusted); by digest, GET and verify.
 *   tkm_oci_job_inspect    resolve, then everything by that digest: the
 *                          manifest (an index is followed to linux/<host
 *                          arch>, by digest), the config blob, parsed.
 *   tkm_oci_job_pull       inspect, then the layers, into an OCI layout.
 *                          A new layout is staged in a sibling directory
 *                          and renamed into place at the end: a failed or
 *                          cancelled pull leaves no directory. An existing
 *                          layout gets its blobs first and its index.json
 *                          entry last.
 *   tkm_sig_job_verify     (trust/sigjob.h) the whole signature search
 *                          (referrers, tag schema, .sig) against a policy.
 *
 * What runs where: every request, token fetch, retry wait (a loop timer)
 * and callback runs on the loop thread. Bytes are hashed as they arrive
 * (incremental sha256, on the loop). Checking blobs already on disk (a
 * full-file hash), flushing and renaming the pulled layout and removing a
 * failed staging directory run on the libuv thread pool (uv_queue_work),
 * at most TKM_OCI_POOL_JOBS of one session at a time; the rest wait on the
 * loop. Nothing sleeps or polls a lock on the pool.
 *
 * Callback contract (one signature for every kind of job):
 *   - if a _start function fails (< 0), cb is never called;
 *   - otherwise cb runs exactly once, from the loop (never from inside the
 *     start or cancel function), with rc 0 and res filled, or rc < 0 and
 *     err saying why (-ECANCELED after tkm_oci_job_cancel or session free);
 *   - job, res and err are borrowed until cb returns; cb may keep parts of
 *     res by moving them out (copy the struct, then memset the original);
 *   - cb may start new jobs, cancel others and free the session.
 *
 * Ownership: strings and structs passed to _start are copied. The session
 * is freed with tkm_oci_session_close(, NULL, NULL), which cancels its jobs (each cb gets
 * -ECANCELED from the loop) and frees the memory once they have reported;
 * the http client and the loop must keep running until then.
 */
#ifndef TKM_OCI_SESSION_H
#define TKM_OCI_SESSION_H

#include <errno.h>
#include <stddef.h>

#include <tkm/buf.h>
#include <tkm/err.h>
#include <tkm/http.h>
#include <tkm/oci/image.h>
#include <tkm/oci/ref.h>
#include <tkm/oci/registry.h>

/* Most thread-pool work items one session has queued at a time. */
#define TKM_OCI_POOL_JOBS 2

/* Bounds on a paginated referrers answer (the signature search's first step). */
#define TKM_OCI_REFERRERS_MAX_PAGES 16
#define TKM_OCI_REFERRERS_MAX       512

struct tkm_oci_session;
struct tkm_oci_job;

/* A session for host on http (borrowed: must stay open until the session is
 * freed and its jobs have reported). opts may be NULL; its strings and
 * bytes are copied. *out is owned: tkm_oci_session_close(, NULL, NULL). */
int tkm_oci_session_new(struct tkm_http *http, const char *host,
                        const struct tkm_oci_registry_opts *opts, struct tkm_oci_session **out,
                        struct tkm_err *err);
/* Cancels the session's jobs and frees it once they have reported (at once
 * when none is in flight), then closed_cb(data) (optional): its jobs have
 * reported and its thread-pool work has finished, so nothing of it uses the
 * http client any more. From the loop, or at once (inside this call) when
 * nothing was in flight. s NULL: nothing (closed_cb is not called). */
void tkm_oci_session_close(struct tkm_oci_session *s, void (*closed_cb)(void *data), void *data);
/* "https" or "http" (borrowed). */
const char *tkm_oci_session_scheme(const struct tkm_oci_session *s);
/* Jobs started and not yet reported (tests, metrics). */
size_t tkm_oci_session_jobs(const struct tkm_oci_session *s);
/* The deadline of each blob download (tkm_oci_registry_opts.deadline_ms):
 * set applies to downloads started from now on (0: the default, 30 min). */
void tkm_oci_session_set_deadline(struct tkm_oci_session *s, uint64_t ms);
uint64_t tkm_oci_session_deadline(const struct tkm_oci_session *s);

/*
 * Registry reach (<tkm/reach.h>, docs/registry-reach.md): the daemons give
 * their sessions the admin's policy; tkmctl gives none (the user's own
 * machine: any host, loopback is plain HTTP).
 *
 * With a policy, before each request the session decides for the URL's
 * host[:port] (its registry with TKM_REACH_REGISTRY; a redirect's or token
 * realm's host with TKM_REACH_FOLLOW) on the thread pool, resolving the name
 * once, and sends the request with the checked addresses pinned
 * (CURLOPT_RESOLVE): curl connects to what was checked. An allowed decision
 * is kept 30 s per host. Redirects are followed by the session (never by
 * curl), each hop decided the same way, without credentials to another host.
 * The scheme is https, or http for a host in registryPlainHTTP (a CA file
 * still means https); an IP literal is written in URLs canonically. A refused
 * host fails the call before anything is sent: TKM_OCI_EREACH, err holding
 * the decision's tenant-safe message (reason RegistryNotAllowed); a name that
 * does not resolve fails with -EHOSTUNREACH.
 *
 * Ownership: tkm_oci_reach_new takes p's lists (p is left empty, also on
 * failure: NULL means out of memory) and returns one reference; each
 * session and each decision in flight holds its own, so the caller may
 * unref (and swap in a new policy) at any time. Loop thread only.
 */
#define TKM_OCI_EREACH (-EADDRNOTAVAIL)
struct tkm_reach_policy;
struct tkm_oci_reach;
struct tkm_oci_reach *tkm_oci_reach_new(struct tkm_reach_policy *p);
void tkm_oci_reach_unref(struct tkm_oci_reach *r);
/* r NULL: no more checks (the scheme stays). Drops the decisions kept. */
void tkm_oci_session_set_reach(struct tkm_oci_session *s, struct tkm_oci_reach *r);

struct tkm_oci_job_result {
    /* resolve: the digest of the reference's manifest (index or image);
     * inspect, pull: the image manifest's digest (also in image.manifest). */
    char digest[TKM_OCI_DIGEST_LEN + 1];
    struct tkm_oci_pull_result image; /* inspect, pull (owned by the job until cb returns) */
    /* Jobs defined outside lib/oci (tkm_sig_job_verify: a struct
     * tkm_sig_result), borrowed like res; NULL otherwise. */
    const void *detail;
    /* An inspect that stopped at an index (a cache variant index, read by
     * triton/variants.h): the index's bytes, verified against digest,
     * borrowed like res; NULL otherwise. */
    const void *raw;
    size_t raw_len;
};

typedef void (*tkm_oci_job_cb)(struct tkm_oci_job *job, int rc, struct tkm_oci_job_result *res,
                               const struct tkm_err *err, void *data);

/* *out (optional) is borrowed until cb returns, for tkm_oci_job_cancel(). */
int tkm_oci_job_resolve(struct tkm_oci_session *s, const char *repo, const char *reference,
                        tkm_oci_job_cb cb, void *data, struct tkm_oci_job **out,
                        struct tkm_err *err);
/* ref->host must be the session's host. */
int tkm_oci_job_inspect(struct tkm_oci_session *s, const struct tkm_oci_ref *ref, tkm_oci_job_cb cb,
                        void *data, struct tkm_oci_job **out, struct tkm_err *err);
/* tag NULL: the reference's tag, else "latest". */
int tkm_oci_job_pull(struct tkm_oci_session *s, const struct tkm_oci_ref *ref,
                     const char *layout_dir, const char *tag, tkm_oci_job_cb cb, void *data,
                     struct tkm_oci_job **out, struct tkm_err *err);
/* Stops a job that has not reported; cb then gets -ECANCELED from the loop.
 * A no-op once cb has started. */
void tkm_oci_job_cancel(struct tkm_oci_job *job);

#endif
