/*
 * session-int.h - lib/oci's asynchronous registry core, shared by session.c
 * (the session and its calls), registry.c (the synchronous wrapper) and
 * image.c (the image jobs). Not part of the public API.
 */
#ifndef TKM_OCI_SESSION_INT_H
#define TKM_OCI_SESSION_INT_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include <tkm/buf.h>
#include <tkm/err.h>
#include <tkm/http.h>
#include <tkm/oci/manifest.h>
#include <tkm/oci/session.h>

#define TKM__OCI_URL_MAX 8192

struct tkm__oci_call;

/* Everything in flight on a session (calls, jobs) is linked into it, so
 * tkm_oci_session_close(, NULL, NULL) can cancel it and free the session last. cancel
 * must not report synchronously. */
struct tkm__oci_link {
    struct tkm__oci_link *prev, *next;
    void (*cancel)(struct tkm__oci_link *l);
    int is_job;
};
void tkm__oci_link_add(struct tkm_oci_session *s, struct tkm__oci_link *l, int is_job);
/* May free s (a freed session whose last link this was). */
void tkm__oci_link_del(struct tkm_oci_session *s, struct tkm__oci_link *l);
int tkm__oci_session_freeing(const struct tkm_oci_session *s);
/* Cancels everything in flight on s (each callback reports -ECANCELED on a
 * later loop turn) and keeps s open. */
void tkm__oci_session_cancel_all(struct tkm_oci_session *s);
tkm_oci_progress_cb tkm__oci_session_progress(const struct tkm_oci_session *s, void **ud);

/* A work item for the thread pool, at most TKM_OCI_POOL_JOBS of a session
 * at a time (FIFO). work runs on a pool thread, after on the loop; after
 * may free the item. The owner must hold a link until after has run. */
struct tkm__oci_work {
    uv_work_t req;
    struct tkm_oci_session *s;
    struct tkm__oci_work *next;
    void (*work)(struct tkm__oci_work *w);
    void (*after)(struct tkm__oci_work *w);
    int rc;
};
void tkm__oci_pool_queue(struct tkm_oci_session *s, struct tkm__oci_work *w);

/* One registry request. Strings are copied by tkm__oci_call_start(); body
 * and data are borrowed until the call's callback has returned. */
struct tkm__oci_req {
    const char *method;
    const char *url;
    const char *scope; /* "repository:<repo>:pull" or ":pull,push" */
    const char *accept;
    const char *content_type;
    const char *extra; /* one more "Name: value" header, or NULL */
    const void *body;
    size_t body_len;
    size_t max_body;
    int follow;
    int streaming;
    tkm_http_data_cb data_cb;
    void *data;
    int (*reset)(void *data); /* streaming: start the sink over before a retry */
};

/* rc 0: a response arrived (resp->status tells which); rc < 0: transport
 * error, cancellation or authentication failure, err says why. resp and
 * err are borrowed for the call. Called once, from the loop. */
typedef void (*tkm__oci_call_cb)(int rc, struct tkm_http_resp *resp, struct tkm_err *err,
                                 void *data);

/* Performs q on the session's loop: once more after authenticating on a
 * 401 (the token request is itself asynchronous), and up to 3 more times
 * after a retryable failure, waiting on a loop timer (never a sleep). *out
 * (optional) is borrowed until cb returns. */
int tkm__oci_call_start(struct tkm_oci_session *s, const struct tkm__oci_req *q,
                        tkm__oci_call_cb cb, void *data, struct tkm__oci_call **out,
                        struct tkm_err *err);
/* cb then runs from the loop with -ECANCELED. No-op after cb started. */
void tkm__oci_call_cancel(struct tkm__oci_call *c);

/* The error sentence for a non-success status (quotes the OCI error body). */
int tkm__oci_status_error(const struct tkm_oci_session *s, const struct tkm_http_resp *resp,
                          const char *what, struct tkm_err *err);
/* scheme://host[:port] then fmt (an absolute path from a Location or Link
 * header, or ""). */
int tkm__oci_url(const struct tkm_oci_session *s, struct tkm_buf *b, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* A registry API URL: scheme://host[:port], the path prefix ("/v2" or the
 * endpoint's), fmt ("/<repo>/manifests/<ref>"...), then ?ns= when the
 * session has one. */
int tkm__oci_api_url(const struct tkm_oci_session *s, struct tkm_buf *b, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void tkm__oci_scope(char *out, size_t n, const char *repo, int push);

/* ---- operations: one call each, results checked ------------------------ */

struct tkm__oci_op;

/* Manifest GET: body (taken by the callee into *res_body when rc == 0; the
 * callback may detach it), its Content-Type and digest (sha256 of the bytes,
 * equal to reference when reference is a digest). */
struct tkm__oci_manifest {
    struct tkm_buf body;
    char content_type[256];
    char digest[TKM_OCI_DIGEST_LEN + 1];
};
typedef void (*tkm__oci_op_cb)(int rc, struct tkm_err *err, void *data);

/* All four: cb once from the loop; m/out are borrowed and filled before cb.
 * *op (optional) is for tkm__oci_op_cancel, borrowed until cb returns. */
int tkm__oci_get_manifest(struct tkm_oci_session *s, const char *repo, const char *reference,
                          struct tkm__oci_manifest *m, tkm__oci_op_cb cb, void *data,
                          struct tkm__oci_op **op, struct tkm_err *err);
/* Blob d into fd (>= 0, at its current offset, truncated on retries) or, with
 * fd < 0, into mem (its max caps it). Size and digest verified. */
int tkm__oci_get_blob(struct tkm_oci_session *s, const char *repo, const struct tkm_oci_desc *d,
                      int fd, const char *where, struct tkm_buf *mem, tkm__oci_op_cb cb, void *data,
                      struct tkm__oci_op **op, struct tkm_err *err);
/* HEAD: *exists 1 or 0. */
int tkm__oci_blob_exists(struct tkm_oci_session *s, const char *repo, const char *digest,
                         int *exists, tkm__oci_op_cb cb, void *data, struct tkm__oci_op **op,
                         struct tkm_err *err);
/* GET /v2/<repo>/referrers/<digest>[?artifactType=<percent-encoded type>]
 * (OCI 1.1; artifact_type NULL: all): the image index of the subject's
 * referrers into body (caller-owned, capped at 4 MiB). Registries may ignore
 * the filter, so callers filter again. A registry that paginates sends
 * `Link: <url>; rel="next"`: the pages are followed and their "manifests"
 * merged into one index (page 1's other fields) in body; a single page is
 * given as its bytes. A next URL must be on this registry (a path, a
 * "?query" on the current path, or an absolute URL with the same scheme and
 * host[:port]): any other is refused (-EPERM), never sent our credentials.
 * More than TKM_OCI_REFERRERS_MAX_PAGES pages (a loop, say): -ELOOP; more
 * than TKM_OCI_REFERRERS_MAX manifests over several pages: -E2BIG; a Link
 * header that is not `<url>[; param=value]...[, ...]`: -EBADMSG (refused
 * rather than ignored, which would hide the later pages). Links with other
 * rels are ignored. -ENOTSUP when the registry has no
 * referrers API (400, 405, 501, a 404 that is not a NAME_UNKNOWN or
 * MANIFEST_UNKNOWN error, or a 200 that is not an OCI image index): fall back
 * to the "sha256-<hex>" tag schema. -ENOENT when the repository is unknown. */
int tkm__oci_get_referrers(struct tkm_oci_session *s, const char *repo, const char *digest,
                           const char *artifact_type, struct tkm_buf *body, tkm__oci_op_cb cb,
                           void *data, struct tkm__oci_op **op, struct tkm_err *err);
void tkm__oci_op_cancel(struct tkm__oci_op *op);

/* tkm_oci_job_pull with layers = 0: manifest and config only (tkmctl pull
 * --no-layers). */
int tkm__oci_job_pull(struct tkm_oci_session *s, const struct tkm_oci_ref *ref,
                      const char *layout_dir, const char *tag, int layers, tkm_oci_job_cb cb,
                      void *data, struct tkm_oci_job **out, struct tkm_err *err);
/* tkm_oci_job_inspect that stops at an index for which stop(raw, len)
 * returns 1 (a cache variant index, triton/variants.h): it reports 0 with
 * res->digest the index's, res->image.index_digest too, res->image.parsed
 * the index and res->raw/raw_len its verified bytes; the config is not
 * fetched. Any other index or manifest: as tkm_oci_job_inspect. */
int tkm__oci_job_inspect_stop(struct tkm_oci_session *s, const struct tkm_oci_ref *ref,
                              int (*stop)(const void *raw, size_t len), tkm_oci_job_cb cb,
                              void *data, struct tkm_oci_job **out, struct tkm_err *err);
/* A job whose steps live elsewhere in libtkm (lib/trust's cosign verify):
 * the same handle, cancel and callback as every job. _new makes it (no
 * callback yet; _discard frees it if the first step cannot start), _set
 * gives it a context freed with it (and an optional cancel hook for work
 * that is not a registry operation), _link makes it live on the session
 * (after the first step started), *_op is where the step in flight goes (a
 * cancel cancels it; its callback must then report), _report ends it from
 * the loop (once; frees it). */
int tkm__oci_job_ext_new(struct tkm_oci_session *s, const char *repo, const char *reference,
                         tkm_oci_job_cb cb, void *data, struct tkm_oci_job **out,
                         struct tkm_err *err);
void tkm__oci_job_ext_set(struct tkm_oci_job *j, void *ext, void (*ext_free)(void *ext),
                          void (*ext_cancel)(void *ext));
void tkm__oci_job_ext_link(struct tkm_oci_job *j, struct tkm_oci_job **out);
void tkm__oci_job_ext_discard(struct tkm_oci_job *j);
struct tkm__oci_op **tkm__oci_job_ext_op(struct tkm_oci_job *j);
struct tkm_oci_session *tkm__oci_job_ext_session(const struct tkm_oci_job *j);
int tkm__oci_job_ext_cancelled(const struct tkm_oci_job *j);
struct tkm_oci_job_result *tkm__oci_job_ext_result(struct tkm_oci_job *j);
void tkm__oci_job_ext_report(struct tkm_oci_job *j, int rc, const struct tkm_err *err);

/* The session under a synchronous client (borrowed). */
struct tkm_oci_registry;
struct tkm_oci_session *tkm__oci_registry_session(struct tkm_oci_registry *r);

uv_loop_t *tkm__oci_session_loop(const struct tkm_oci_session *s);
const char *tkm__oci_session_host(const struct tkm_oci_session *s);

#endif
