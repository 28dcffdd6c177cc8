/*
 * k8s/status.h - the error report of every Kubernetes request.
 *
 * Every request of libk8sclient fills a caller-supplied struct k8s_status
 * when it fails, and leaves it untouched (still "empty") when it succeeds:
 *   - HTTP errors (non-2xx): code is the HTTP status and the apiserver's
 *     metav1.Status body is decoded in full (status, reason, message, details
 *     with causes, retryAfterSeconds). A body that is not a Status (a proxy's
 *     HTML page, plain text) is kept, trimmed, in message, so nothing the
 *     server said is dropped.
 *   - Transport errors (no HTTP response: refused, TLS, timeout): code is 0,
 *     transport is 1 and message is a sentence naming the URL.
 * The function's negative return code is k8s_status_errno() of the report.
 *
 * Ownership: the struct is caller-owned (usually on the stack), initialised
 * with k8s_status_init() or K8S_STATUS_INIT; its strings are owned by it and
 * freed by k8s_status_release(). Passing one struct to a second failing call
 * replaces its contents (the previous strings are freed).
 */
#ifndef K8S_STATUS_H
#define K8S_STATUS_H

#include <stddef.h>

struct k8s_status_cause {
    char *reason;  /* e.g. "FieldManagerConflict", "FieldValueRequired"; may be NULL */
    char *message; /* may be NULL */
    char *field;   /* e.g. "spec.cacheImage"; may be NULL */
};

struct k8s_status {
    long code;     /* HTTP status; 0 for a transport error or "no error" */
    int transport; /* 1: no HTTP response (see message) */
    int rc;        /* negative errno of the failure, 0 when empty */
    char *status;  /* "Failure", or NULL */
    char *reason;  /* "NotFound", "AlreadyExists", "Conflict", "Invalid", "Forbidden", ... */
    char *message; /* the apiserver's message, the raw body, or the transport error */
    char *details_name;
    char *details_group;
    char *details_kind;
    char *details_uid;
    long retry_after_s; /* details.retryAfterSeconds or the Retry-After header; -1 if none */
    struct k8s_status_cause *causes;
    size_t ncauses;
};

#define K8S_STATUS_INIT                                                                            \
    {                                                                                              \
        .retry_after_s = -1                                                                        \
    }

void k8s_status_init(struct k8s_status *st);
/* Frees the strings and re-initialises. NULL is a no-op. */
void k8s_status_release(struct k8s_status *st);

/*
 * Decodes an HTTP error reply: http_code and the body (borrowed, need not be
 * NUL-terminated; JSON is decoded with duplicate keys rejected). Never fails
 * on bad input: a body that is not a Status ends up, trimmed to 1 KiB, in
 * message. retry_after_s (-1 for none) comes from the Retry-After header and is
 * replaced by details.retryAfterSeconds when present. Sets st->rc. Returns
 * st->rc (negative), or -ENOMEM.
 */
int k8s_status_decode(struct k8s_status *st, long http_code, const char *body, size_t len,
                      long retry_after_s);

/* Decodes a Status that arrived as a JSON object (e.g. a watch ERROR event's
 * object; obj is a borrowed json_t *, typed void * to keep jansson out of this
 * header). http_code 0 takes the object's own "code". */
int k8s_status_decode_json(struct k8s_status *st, long http_code, const void *obj);

/* Records a transport error (code 0, transport 1). msg is copied. Returns rc. */
int k8s_status_set_transport(struct k8s_status *st, int rc, const char *msg);

/*
 * The negative errno a failed request returns for an HTTP status (reason
 * refines 409):
 *   400, 422 -EINVAL     401 -EKEYREJECTED   403 -EACCES      404 -ENOENT
 *   405 -EOPNOTSUPP      406, 415 -EPROTO    409 AlreadyExists -EEXIST, other 409 -ESTALE
 *   410 -EIDRM (Gone/Expired)   413 -E2BIG   429 -EBUSY       500..599 -EREMOTEIO
 *   504 -ETIMEDOUT       anything else non-2xx -EPROTO
 */
int k8s_status_errno(long http_code, const char *reason);

/* Writes one line a person can read, e.g.
 *   409 Conflict: Apply failed with 1 conflict: conflict with "mgr-a": .data.k
 *   [FieldManagerConflict .data.k: conflict with "mgr-a"]
 * into out (size n, always NUL-terminated). Returns out. */
const char *k8s_status_str(const struct k8s_status *st, char *out, size_t n);

/* 1 when a cause with this reason (e.g. "FieldManagerConflict") is present. */
int k8s_status_has_cause(const struct k8s_status *st, const char *reason);

/* Retry policy helpers. A request is worth retrying when the server asked to
 * wait (429, or 5xx with Retry-After) or, for idempotent requests only (GET,
 * server-side apply, DELETE with preconditions), after a connection error or
 * a 5xx. POST (create) is never retried on a transport error. */
int k8s_status_retryable(const struct k8s_status *st, int idempotent);

#endif
