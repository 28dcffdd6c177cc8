/*
 * k8s/client.h - the Kubernetes REST client on a libuv loop.
 *
 * A struct k8s_client holds a copy of a struct k8s_config, the credentials
 * derived from it and one lib/http transport (connection reuse, HTTP/2) on
 * the caller's loop. Requests are asynchronous with a completion callback;
 * k8s_sync_wait() (and k8s_list(), built on it) run the client's loop until
 * one request is done, for CLIs and tests: never call them from inside a
 * loop callback.
 *
 * Lifecycle:
 *   k8s_client_new(loop, &cfg, &opts, &c, err)   cfg is copied
 *   ... requests ...
 *   k8s_client_close(c, closed_cb, data)         in-flight requests complete
 *                                                with -ECANCELED; memory is
 *                                                freed from uv close callbacks
 *
 * Credentials: a bearer token is sent as "Authorization: Bearer". A tokenFile
 * (and the in-cluster token) is re-read every minute and after a 401, then the
 * request is retried once. Exec plugins are run at k8s_client_new() (blocking,
 * before the loop is busy) and again, in the libuv thread pool, when their
 * credential expires or a 401 arrives.
 *
 * CA rotation: a CA bundle given as a file (kubeconfig certificate-authority,
 * the in-cluster ca.crt) is read by the client and handed to the transport as
 * data. Its stat (inode, size, mtime) is checked every opts.ca_reload_ms and
 * after a TLS failure; a changed file is re-read and used for new
 * connections (connections already open stay up), and a request whose TLS
 * handshake failed is tried once more with the new bundle (nothing was sent).
 * A file that vanished, cannot be read or holds no certificate leaves the
 * previous bundle in use.
 *
 * Callback contract: if a function that takes a callback returns < 0, the
 * callback is never called. Otherwise it is called exactly once, from the
 * loop, never from inside the starting call.
 *
 * Errors: 0 or a negative errno (see k8s/status.h, k8s_status_errno()); the
 * full report is in the struct k8s_status handed to the callback / filled
 * by k8s_list() (pass NULL if you don't want it).
 *
 * Retries: requests marked idempotent (GET, LIST, server-side apply, DELETE
 * with preconditions) are retried up to opts.max_retries times when the
 * server answers 429 or 5xx, and after connection errors (backoff 200 ms x2
 * up to 5 s, or the server's Retry-After, at most 30 s). Other requests
 * (create, merge/JSON patch, plain delete) are retried only when the
 * server asked for it: 429, or 5xx with Retry-After. Nothing is retried on
 * 409. k8s_status_retryable() states the policy.
 */
#ifndef K8S_CLIENT_H
#define K8S_CLIENT_H

#include <stddef.h>
#include <stdint.h>
#include <jansson.h>
#include <uv.h>

#include <tkm/buf.h>
#include <tkm/err.h>
#include <k8s/config.h>
#include <k8s/status.h>

struct k8s_client;
struct k8s_req;

/* ---- client ------------------------------------------------------------- */

struct k8s_client_opts {
    const char *user_agent;   /* default "tkm/<version>"; copied */
    uint64_t timeout_ms;      /* default per-request timeout; default 30 s */
    size_t max_body;          /* cap on a buffered response body; default 64 MiB */
    int max_retries;          /* see "Retries" above; default 3, -1 = none */
    uint64_t token_reload_ms; /* tokenFile re-read period; default 60 s */
    uint64_t ca_reload_ms;    /* CA file change check period; default 60 s */
};

/* loop and cfg are borrowed (cfg is copied); opts may be NULL. *out is owned:
 * end with k8s_client_close(). Runs an exec plugin synchronously if cfg
 * uses one. */
int k8s_client_new(uv_loop_t *loop, const struct k8s_config *cfg,
                   const struct k8s_client_opts *opts, struct k8s_client **out,
                   struct tkm_err *err);
/* c may be NULL. closed_cb (optional) runs once everything is freed. */
void k8s_client_close(struct k8s_client *c, void (*closed_cb)(void *data), void *data);
/* Synchronous close: closes and runs the loop until the memory is freed. */
void k8s_client_free(struct k8s_client *c);

uv_loop_t *k8s_client_loop(const struct k8s_client *c);
/* The configuration's namespace ("default" when unset). Borrowed. */
const char *k8s_client_namespace(const struct k8s_client *c);
/* The server URL, "https://host:port". Borrowed. */
const char *k8s_client_server(const struct k8s_client *c);

/* ---- resources and paths ------------------------------------------------ */

/* What a request addresses. Strings are borrowed; descriptors are normally
 * static const. group "" (or NULL) is the core group (/api/v1). Custom
 * resources are described by their own modules (tkm.io/v1alpha1: <tkm/api/v1alpha1.h>). */
struct k8s_resource {
    const char *group;
    const char *version;
    const char *plural;
    const char *kind; /* for apply bodies and messages */
    int namespaced;
};

extern const struct k8s_resource k8s_res_configmaps;
extern const struct k8s_resource k8s_res_secrets;
extern const struct k8s_resource k8s_res_pods;
extern const struct k8s_resource k8s_res_nodes;
extern const struct k8s_resource k8s_res_namespaces;
extern const struct k8s_resource k8s_res_events; /* core/v1 Event */
extern const struct k8s_resource k8s_res_leases; /* coordination.k8s.io/v1 */

/*
 * Appends the path of a resource to out:
 *   /api/v1/namespaces/<ns>/<plural>[/<name>[/<subresource>]]
 *   /apis/<group>/<version>[/namespaces/<ns>]/<plural>[/<name>[/<subresource>]]
 * ns is ignored for cluster-scoped resources; NULL or "" ns on a namespaced
 * resource means all namespaces (lists and watches only). name and
 * subresource may be NULL. Path segments are percent-escaped and validated
 * (no "/", ".", ".." or empty names). Returns 0, -EINVAL (err says which
 * part), -E2BIG/-ENOMEM.
 */
int k8s_path(struct tkm_buf *out, const struct k8s_resource *r, const char *ns, const char *name,
             const char *subresource, struct tkm_err *err);
/* Appends "?key=value" or "&key=value" (value percent-escaped) depending on
 * whether out already holds a '?'. value NULL appends nothing. */
int k8s_query_add(struct tkm_buf *out, const char *key, const char *value);

/* ---- raw requests (used by watch, informers, the verbs below) ----------- */

enum k8s_idem {
    K8S_NOT_IDEMPOTENT = 0, /* create, patch: retried on 429 only */
    K8S_IDEMPOTENT = 1,     /* get, list, apply, delete w/ preconditions */
};

/* Every pointer is borrowed for the duration of the starting call only. */
struct k8s_request {
    const char *method;       /* "GET", "POST", "PUT", "PATCH", "DELETE" */
    const char *path;         /* "/api/v1/...?query" (from k8s_path + k8s_query_add) */
    const char *content_type; /* default "application/json" when a body is set */
    const char *accept;       /* default "application/json" */
    const void *body;
    size_t body_len;
    uint64_t timeout_ms;      /* 0 = the client's default; UINT64_MAX = none (watches) */
    uint64_t idle_timeout_ms; /* streaming: abort after this long without a byte; 0 = none */
    enum k8s_idem idempotent;
    int no_retry; /* 1: never retry (watches handle their own) */
};

/* The outcome of a raw request. Borrowed, valid until the callback returns.
 * rc is 0 for a 2xx response, else the negative errno and st describes it.
 * body (2xx, non-streaming): the callback may take it with tkm_buf_detach(). */
struct k8s_response {
    int rc;
    long code; /* HTTP status, 0 on transport errors */
    struct tkm_buf *body;
    struct k8s_status *st; /* always non-NULL; empty (rc 0) on success */
    long http_version;     /* 1 or 2 (HTTP/2 negotiated); 0 when no response arrived */
};

typedef void (*k8s_response_cb)(struct k8s_req *req, struct k8s_response *resp, void *data);
/* Streaming body bytes of a 2xx response, any split (see <tkm/http.h>).
 * Return 0 to go on, non-zero to stop (the callback then gets rc -EINTR). */
typedef int (*k8s_data_cb)(struct k8s_req *req, const char *p, size_t n, void *data);

/* Starts a request; done runs once. *out (optional) is borrowed, valid until
 * done returns, for k8s_req_cancel(). With data_cb non-NULL the 2xx body is
 * streamed to it (watch); non-2xx bodies are still decoded into st. */
int k8s_request_start(struct k8s_client *c, const struct k8s_request *r, k8s_data_cb data_cb,
                      k8s_response_cb done, void *data, struct k8s_req **out, struct tkm_err *err);
/* Stops a request; its callback runs (from the loop) with rc -ECANCELED. */
void k8s_req_cancel(struct k8s_req *req);

/* ---- verbs --------------------------------------------------------------- */

/* Result of a verb: rc 0 and obj = the decoded response object (borrowed for
 * the callback: json_incref() it to keep it), or rc < 0, obj NULL and st
 * filled. st is borrowed for the callback. */
typedef void (*k8s_result_cb)(int rc, json_t *obj, const struct k8s_status *st, void *data);

struct k8s_list_opts {
    const char *label_selector;
    const char *field_selector;
    long limit;                         /* 0 = unlimited */
    const char *continue_token;         /* from metadata.continue of the previous page */
    const char *resource_version;       /* "0" = any (watch cache), NULL = most recent */
    const char *resource_version_match; /* "NotOlderThan", "Exact" or NULL */
};

enum k8s_propagation {
    K8S_PROPAGATE_DEFAULT = 0,
    K8S_PROPAGATE_BACKGROUND,
    K8S_PROPAGATE_FOREGROUND,
    K8S_PROPAGATE_ORPHAN
};

struct k8s_delete_opts {
    enum k8s_propagation propagation;
    const char *precondition_uid;              /* delete only this incarnation */
    const char *precondition_resource_version; /* delete only this version */
    long grace_period_s;  /* -1 = server default (0 in a zeroed struct means 0!) */
    int has_grace_period; /* 1: send grace_period_s */
};

enum k8s_patch_type {
    K8S_PATCH_MERGE = 0, /* application/merge-patch+json (RFC 7386) */
    K8S_PATCH_JSON,      /* application/json-patch+json (RFC 6902), patch is an array */
    K8S_PATCH_STRATEGIC, /* application/strategic-merge-patch+json (built-in kinds only) */
};

struct k8s_patch_opts {
    enum k8s_patch_type type;
    const char *field_manager; /* optional */
    const char *subresource;   /* e.g. "status", or NULL */
};

struct k8s_apply_opts {
    const char *field_manager; /* required; stable per writer (e.g. "tkm-agent") */
    int force;                 /* 1: take over conflicting fields */
    const char *subresource;   /* "status" to apply status (the object must exist) */
};

/*
 * Asynchronous verbs. r borrowed; ns NULL = the client's namespace for
 * namespaced resources; objects and patches (borrowed json_t) are serialised
 * during the call. name for apply comes from obj's metadata.name.
 * Server-side apply sends obj as JSON with Content-Type
 * application/apply-patch+yaml; it must carry apiVersion, kind and
 * metadata.name and must not carry metadata.resourceVersion (-EINVAL). A
 * request refused before it is sent returns its error and logs the reason.
 */
int k8s_get_async(struct k8s_client *c, const struct k8s_resource *r, const char *ns,
                  const char *name, const char *subresource, k8s_result_cb cb, void *data);
int k8s_create_async(struct k8s_client *c, const struct k8s_resource *r, const char *ns,
                     json_t *obj, k8s_result_cb cb, void *data);
int k8s_delete_async(struct k8s_client *c, const struct k8s_resource *r, const char *ns,
                     const char *name, const struct k8s_delete_opts *o, k8s_result_cb cb,
                     void *data);
int k8s_patch_async(struct k8s_client *c, const struct k8s_resource *r, const char *ns,
                    const char *name, json_t *patch, const struct k8s_patch_opts *o,
                    k8s_result_cb cb, void *data);
int k8s_apply_async(struct k8s_client *c, const struct k8s_resource *r, const char *ns, json_t *obj,
                    const struct k8s_apply_opts *o, k8s_result_cb cb, void *data);

/*
 * Waiting for one request from outside the loop (CLIs, tests; never inside a
 * loop callback): pass k8s_sync_cb and a struct k8s_sync (zeroed; st, the
 * caller's, optional) to a verb, then k8s_sync_wait() with what the verb
 * returned: it runs the client's loop until the request is done. *out
 * (optional) gets an owned reference (json_decref()) on success, NULL on
 * failure; st gets the report of a request that was sent and failed.
 * Returns 0 or the negative errno.
 */
struct k8s_sync {
    int done, rc;
    json_t *obj;
    struct k8s_status *st;
};
void k8s_sync_cb(int rc, json_t *obj, const struct k8s_status *st, void *data);
int k8s_sync_wait(struct k8s_client *c, int rc, struct k8s_sync *s, json_t **out);
/* The synchronous list, the same way (st also gets a refusal before sending). */
int k8s_list(struct k8s_client *c, const struct k8s_resource *r, const char *ns,
             const struct k8s_list_opts *o, json_t **out, struct k8s_status *st);

/* Small accessors on objects (borrowed strings, NULL when absent). */
const char *k8s_obj_name(const json_t *obj);
const char *k8s_obj_uid(const json_t *obj);
const char *k8s_obj_resource_version(const json_t *obj);

#endif
