/*
 * tkm/api/verify.h - the verify job: what tkm-controller and tkm-agent both
 * do with a cache image before anything uses it, written once. Each daemon
 * supplies only what it does with the result (the controller pins and
 * writes conditions, the agent judges its GPUs).
 *
 *   credentials   the cache's imagePullSecrets (tkm_api_pull_creds_resolve)
 *   session       the registry session for (host, credentials), from the
 *                 context's one pool, reused for the life of the context
 *   resolve       tag -> manifest digest (TKM_VERIFY_RESOLVE; the agent never
 *                 resolves: it gives the pinned digest)
 *   inspect       by digest: manifest, config, Triton labels (TKM_VERIFY_INSPECT
 *                 before the signature, TKM_VERIFY_SUMMARY after it); a
 *                 variant index is read (its variants), not followed
 *   policy        the cache's effective signature policy (tkm_api_policy_resolve)
 *   signature     the signature search (tkm_sig_job_verify) against it
 *   -> one callback with every result
 *
 * The credential and policy reads go to the apiserver at once, side by side;
 * the registry steps run one after the other on the session. Everything runs
 * on the caller's loop (the one of the http and k8s clients).
 *
 * Ownership:
 *   - struct tkm_verify_ctx is the caller's (one per daemon): created with
 *     tkm_verify_ctx_new, ended with tkm_verify_ctx_close. It owns the
 *     sessions of its pool and every job started on it; it borrows the loop
 *     and the http client, which must keep running until the close callback.
 *   - A job (struct tkm_verify_job) is owned by the context. The pointer a
 *     start returns is borrowed until the callback has started or the job is
 *     cancelled, whichever comes first.
 *   - Everything in a struct tkm_verify_req is borrowed for the start call
 *     only (the job copies what it needs later).
 *   - struct tkm_verify_result and what it points to are borrowed until the
 *     callback returns; image, manifest and variants may be moved out (copy
 *     the struct, then zero the original), the rest copied.
 *
 * Callback contract:
 *   - a start that fails (< 0, err set) never calls back;
 *   - otherwise cb runs exactly once, from the loop, never from inside the
 *     start, unless the job is cancelled first: after tkm_verify_job_cancel
 *     (or tkm_verify_ctx_close) returns, cb is never called, so the caller's
 *     data may be freed at once. Requests in flight are cancelled; an
 *     apiserver read in flight (credentials, policy) cannot be and is waited
 *     for by the context, not by the caller.
 *   - cb may start and cancel other jobs; it must not close the context.
 */
#ifndef TKM_API_VERIFY_H
#define TKM_API_VERIFY_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include <tkm/err.h>
#include <tkm/http.h>
#include <tkm/oci/manifest.h>
#include <tkm/oci/session.h>
#include <tkm/triton/image.h>
#include <tkm/triton/variants.h>
#include <tkm/trust/policy.h>
#include <tkm/api/policy.h>
#include <tkm/api/v1alpha1.h>
#include <k8s/client.h>

/* ---- the context: one registry session pool per daemon ------------------------ */

struct tkm_verify_ctx;

struct tkm_verify_ctx_opts {
    uint64_t timeout_ms; /* per registry request; 0: 30 s */
    /* each blob download, retries included; 0: 30 min (tkm_oci_registry_opts) */
    uint64_t pull_deadline_ms;
    /* each blob download's receive rate cap in bytes/s; 0: none (tkm-agent
     * --pull-bandwidth split over --max-concurrent-pulls) */
    uint64_t max_recv_bps;
};

/* loop and http borrowed (see above); o may be NULL. *out owned:
 * tkm_verify_ctx_close. 0 or -ENOMEM. */
int tkm_verify_ctx_new(uv_loop_t *loop, struct tkm_http *http, const struct tkm_verify_ctx_opts *o,
                       struct tkm_verify_ctx **out, struct tkm_err *err);
/* The blob download deadline of the pool's sessions, now and for those made
 * later (tkm-config pullDeadline); 0: back to o->pull_deadline_ms. NULL ctx:
 * nothing. */
void tkm_verify_ctx_set_pull_deadline(struct tkm_verify_ctx *ctx, uint64_t ms);
/* Cancels every job (none calls back), frees the sessions once their jobs
 * have reported (jobs the caller started itself on a session from
 * tkm_verify_ctx_session get -ECANCELED), then calls cb(data) once from the
 * loop (cb may be NULL). NULL ctx: nothing (cb is not called). */
void tkm_verify_ctx_close(struct tkm_verify_ctx *ctx, void (*cb)(void *data), void *data);
/* The pool's session for host with auth_json (docker config JSON bytes,
 * copied; NULL or 0 bytes: anonymous), created on first use. *out is
 * borrowed until tkm_verify_ctx_close: for the caller's own jobs on the
 * same registry (the agent's layer pull). 0, -ENOMEM or a session error. */
int tkm_verify_ctx_session(struct tkm_verify_ctx *ctx, const char *host, const void *auth_json,
                           size_t auth_len, struct tkm_oci_session **out, struct tkm_err *err);
/* The admin's registry reach policy (docs/registry-reach.md) for every
 * session of the pool, those made later included (<tkm/oci/session.h>):
 * tkm_api_reach_policy(cfg, flags), swapped in for the one before (decisions
 * in flight finish under the old one). A refused registry fails the job's
 * first registry step with TKM_OCI_EREACH: reason RegistryNotAllowed, retry
 * 0, before any request is sent. The agent's layer pulls go through the
 * same sessions. 0, or < 0 with err (a bad value: the policy before stays). */
int tkm_verify_ctx_reach(struct tkm_verify_ctx *ctx, const struct tkm_api_config *cfg,
                         const struct tkm_reach_config *flags, struct tkm_err *err);

/* The daemons' --registry-allow, --registry-private and --registry-plain-http
 * flags (<tkm/flags.h> entries) into the struct tkm_reach_config *rc. */
#define TKM_VERIFY_REACH_FLAGS(rc)                                                                 \
    {.name = "registry-allow",                                                                     \
     .type = TKM_FLAG_STRING,                                                                      \
     .dst = &(rc)->allow,                                                                          \
     .arg = "LIST",                                                                                \
     .def = "*",                                                                                   \
     .help = "registries tkm may contact: host names, *.suffix, IP literals, each with an\n"       \
             "optional :port (tkm-config registryAllow wins; docs/registry-reach.md)"},            \
        {.name = "registry-private",                                                               \
         .type = TKM_FLAG_STRING,                                                                  \
         .dst = &(rc)->private_hosts,                                                              \
         .arg = "LIST",                                                                            \
         .def = "none",                                                                            \
         .help = "registries that may use loopback or private addresses (tkm-config\n"             \
                 "registryPrivate wins)"},                                                         \
    {                                                                                              \
        .name = "registry-plain-http", .type = TKM_FLAG_STRING, .dst = &(rc)->plain_http,          \
        .arg = "LIST", .def = "none",                                                              \
        .help = "registries spoken to over http:// instead of https:// (tkm-config\n"              \
                "registryPlainHTTP wins)"                                                          \
    }
/* Sessions in the pool and jobs not yet ended (cancelled ones still
 * waiting for their requests included): metrics and tests. */
size_t tkm_verify_ctx_sessions(const struct tkm_verify_ctx *ctx);
size_t tkm_verify_ctx_jobs(const struct tkm_verify_ctx *ctx);

/* ---- the job ------------------------------------------------------------------- */

struct tkm_verify_job;

/* What a job does besides credentials and session (any combination, at
 * least one). */
enum {
    /* No digest given and none in the image reference: resolve the tag. */
    TKM_VERIFY_RESOLVE = 1 << 0,
    /* Inspect by digest before the policy; a failure ends the job (an image
     * that cannot be judged is not worth a signature search). */
    TKM_VERIFY_INSPECT = 1 << 1,
    /* The effective policy, then the signature search. */
    TKM_VERIFY_SIGNATURE = 1 << 2,
    /* Inspect by digest after the signature step, unless that step ran and
     * found the image unusable; a failure is reported in summary_* and ends
     * nothing. */
    TKM_VERIFY_SUMMARY = 1 << 3,
};

/* The step that ended a job early (failed), or TKM_VERIFY_DONE. */
enum tkm_verify_step {
    TKM_VERIFY_DONE = 0,
    TKM_VERIFY_STEP_CREDS,   /* reason from <tkm/api/policy.h> (SecretNotFound, Forbidden, ...) */
    TKM_VERIFY_STEP_SESSION, /* InvalidImage: the host or the credentials are unusable */
    TKM_VERIFY_STEP_RESOLVE, /* tkm_verify_registry_reason() */
    TKM_VERIFY_STEP_INSPECT, /* tkm_verify_registry_reason() */
    TKM_VERIFY_STEP_POLICY,  /* reason from <tkm/api/policy.h> (InvalidPolicy, NoTrustedKey, ...) */
};

/* How the signature step ended. */
enum tkm_verify_sig_state {
    TKM_VERIFY_SIG_NOT_RUN = 0, /* not asked, or the job ended before it */
    TKM_VERIFY_SIG_DISABLED,    /* the policy's mode is Disabled: nothing searched */
    TKM_VERIFY_SIG_KNOWN,       /* the caller's known() hook answered */
    TKM_VERIFY_SIG_SEARCHED,    /* searched (or the search could not start: sig_rc says) */
};

struct tkm_verify_result {
    /* How the job ended: failed is the step that ended it (rc, reason,
     * message and retry are that step's), or TKM_VERIFY_DONE with rc 0. A
     * signature that does not verify is a verdict (sig_*), not a failure. */
    enum tkm_verify_step failed;
    int rc;
    const char *reason; /* static CamelCase, "" when none */
    char message[768];  /* one sentence (the failing call's error), "" when none */
    int retry;          /* 1: trying again later may help (unreachable, unauthorized, API) */

    /* The pinned digest: the one given, the reference's, or resolved
     * (resolved 1); "" when the job ended before one was known. */
    char digest[TKM_OCI_DIGEST_LEN + 1];
    int resolved;
    /* The pool's session the registry steps used (borrowed until the
     * context is closed), NULL when the job ended before one. */
    struct tkm_oci_session *session;

    /* Inspect (TKM_VERIFY_INSPECT, or TKM_VERIFY_SUMMARY when it ran and
     * succeeded): image (the Triton summary, entry count, size label and
     * the config with every label) and manifest (the image manifest: its
     * layers, descs[0] the Triton cache layer) are owned by the result
     * until cb returns (movable). image_digest is the image manifest's
     * digest (differs from digest when digest names an index). */
    int inspected;
    char image_digest[TKM_OCI_DIGEST_LEN + 1];
    struct tkm_triton_image image;
    struct tkm_oci_manifest manifest;
    /* The variants (triton/variants.h), owned like image (movable): when
     * digest names a variant index, the index's (from_index 1) and image,
     * manifest and image_digest are left empty (the caller inspects the
     * variants it uses, by the digests the index names); otherwise the set
     * of one built from the image. */
    struct tkm_variant_set variants;
    /* TKM_VERIFY_SUMMARY's own failure (failed stays TKM_VERIFY_DONE):
     * summary_rc < 0 with reason (tkm_verify_registry_reason) and message;
     * 0 when it succeeded or did not run. */
    int summary_rc;
    const char *summary_reason;
    char summary_message[768];

    /* The effective policy (TKM_VERIFY_SIGNATURE, once read). */
    int has_policy;
    enum tkm_sig_mode mode;
    enum tkm_api_policy_source policy_source;
    char policy_describe[256]; /* tkm_api_policy.describe */
    char policy_fp[72];        /* tkm_verify_policy_fingerprint() */

    /* The signature step. verified 1: a signature satisfied the policy
     * (sig says which; key_id "" for keyless) or known() said so. Else
     * sig_rc < 0 (tkm_sig_job_verify's codes) with sig_reason
     * (tkm_sig_reason(), or InvalidPolicy / VerificationError when the
     * search could not start), sig_message and sig_retry. */
    enum tkm_verify_sig_state sig_state;
    int verified;
    int sig_rc;
    const char *sig_reason;
    char sig_message[768];
    int sig_retry;
    struct tkm_sig_result sig;
    /* Nodes may use the digest as far as the signature step goes: verified,
     * or mode Audit or Disabled, or no signature step asked (1). */
    int usable;
};

typedef void (*tkm_verify_cb)(const struct tkm_verify_result *r, void *data);

struct tkm_verify_req {
    unsigned flags;                    /* TKM_VERIFY_* */
    struct k8s_client *kc;             /* for the cache's Secrets and ConfigMaps; NULL only when
                                          no SIGNATURE and no imagePullSecrets */
    const struct tkm_api_cache *cache; /* spec.cacheImage, imagePullSecrets, signaturePolicy;
                                          meta.namespace */
    const char *image;                 /* NULL: cache->spec.cache_image */
    const char *digest;                /* the pinned digest; NULL: the reference's, else RESOLVE */
    const struct tkm_api_config *cfg;  /* tkm-config (NULL: none) */
    const char *config_ns;             /* the daemon's namespace (cluster caches' Secrets) */
    /* Optional, called once the policy is known and before the signature
     * search, with r as filled so far (digest, policy_*): return 1 (verified)
     * or 0 (not) to take a result the caller remembers for this digest and
     * policy fingerprint (sig_state KNOWN, no search), or -1 to search. It
     * must not cancel the job or close the context. */
    int (*known)(const struct tkm_verify_result *r, void *data);
};

/* Starts a job on ctx. cb gets data. *out (optional) is the job, for
 * tkm_verify_job_cancel. Start failures (cb never called): -EINVAL (bad
 * request: no image, no digest and no RESOLVE, SIGNATURE without kc,
 * nothing to do (only RESOLVE, and the digest is known); a
 * reference that does not parse, with err saying why: reason InvalidImage),
 * -ESHUTDOWN (the context is closing), -ENOMEM, or a session that cannot
 * be made (InvalidImage). */
int tkm_verify_start(struct tkm_verify_ctx *ctx, const struct tkm_verify_req *req, tkm_verify_cb cb,
                     void *data, struct tkm_verify_job **out, struct tkm_err *err);
/* Cancels job: cb is never called once this returns. A no-op once cb has
 * started (and for NULL). */
void tkm_verify_job_cancel(struct tkm_verify_job *job);

/* ---- helpers of the result --------------------------------------------------------- */

/* The CamelCase reason of a registry step's failure (resolve, inspect) and
 * whether a retry may help: ImageNotFound, NotATritonCache (inspect: the
 * image has no summary label; msg is the error text), DigestMismatch,
 * InvalidImage, RegistryUnauthorized, RegistryForbidden,
 * RegistryNotAllowed (the reach policy refused the host: retry 0),
 * RegistryUnreachable (anything else). */
const char *tkm_verify_registry_reason(int rc, const char *msg, int *retry);
/* The summary the API shows (status.summary) of an inspected image. *out
 * owned: tkm_api_summary_release (v1alpha1.h). 0 or -ENOMEM (*out released). */
int tkm_verify_api_summary(const struct tkm_triton_image *im, struct tkm_api_summary *out);
/* "sha256:<hex>" of what a policy verifies with (mode, cross-repository,
 * keys, trusted root, identities): equal policies, equal fingerprints. */
void tkm_verify_policy_fingerprint(const struct tkm_sig_policy *p, char out[72]);

#endif
