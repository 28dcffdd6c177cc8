/*
 * tkm/api/policy.h - what the daemons read from the API before they touch a
 * registry: the cluster defaults (ConfigMap tkm-config), a cache's effective
 * signature policy (its spec.signaturePolicy, else tkm-config) with the keys
 * and trusted roots it names fetched from Secrets and ConfigMaps, and the
 * registry credentials of its imagePullSecrets. One implementation for
 * tkm-controller and tkm-agent (docs/security.md, docs/api.md).
 *
 * Where referenced objects live: a TritonKernelCache's Secrets and
 * ConfigMaps in the cache's namespace; a TritonKernelCacheCluster's in the
 * namespace its reference names (keyless trustedRoot.namespace) or else in
 * the daemon's own namespace (config_ns, normally tkm-system); tkm-config's
 * references in config_ns. A namespaced cache never reads another
 * namespace's objects (tenant isolation).
 *
 * Failures carry a CamelCase reason for conditions and node status entries
 * (the messages name the object and key):
 *   InvalidPolicy     the policy is not one (tkm_sig_policy_check), or
 *                     tkm-config holds garbage
 *   NoTrustedKey      Enforce or Audit with nothing to verify against
 *   PolicyBelowFloor  a namespaced cache asks for a weaker mode than the floor
 *                     (tkm-config signatureFloor, default its signatureMode):
 *                     never verified, never mounted (docs/security.md)
 *   SecretNotFound    a referenced Secret / ConfigMap does not exist or
 *                     lacks the key (also: an imagePullSecret that is absent)
 *   KeyInvalid        the key / trusted root bytes are not usable
 *   APIUnavailable    the apiserver did not answer (retry later)
 *   Forbidden         RBAC refused the read
 */
#ifndef TKM_API_POLICY_H
#define TKM_API_POLICY_H

#include <stddef.h>
#include <jansson.h>

#include <tkm/err.h>
#include <tkm/oci/auth.h>
#include <tkm/reach.h>
#include <tkm/trust/policy.h>
#include <tkm/api/v1alpha1.h>

#define TKM_API_CONFIG_NAME "tkm-config"

/* ---- ConfigMap tkm-config ----------------------------------------------------- */

/* The ConfigMap's data, decoded. Owned strings; release with
 * tkm_api_config_release(). A zeroed struct is the defaults. */
struct tkm_api_config {
    int present;                 /* the ConfigMap exists */
    enum tkm_api_sig_mode mode;  /* signatureMode; UNSET means Enforce */
    enum tkm_api_sig_mode floor; /* signatureFloor: the weakest mode a namespaced cache may
                                    choose; UNSET means the cluster's mode (signatureMode) */
    char *public_keys;           /* signaturePublicKeys: PEM, one or more, or NULL */
    char *trusted_root_kind;     /* signatureTrustedRootRef: "ConfigMap" / "Secret" */
    char *trusted_root_name;
    char *trusted_root_key;              /* default "trusted_root.json" */
    struct tkm_api_identity *identities; /* signatureIdentities */
    size_t n_identities;
    int allow_cross_repository; /* signatureAllowCrossRepository "true" */
    int prefetch;               /* prefetch "true": agents extract ahead of demand */
    /* prefetchSlots ("10"): how many nodes may prefetch one cache's digest
     * at once, handed out by the controller (docs/prefetch.md); 0 when
     * absent: no fleet-wide limit. Capped at TKM_API_PREFETCH_SLOTS_MAX. */
    unsigned prefetch_slots;
    /* prefetchGrantTimeout ("15m"): how long a node keeps a slot it does
     * not give back; 0 when absent (then TKM_API_PREFETCH_GRANT_TIMEOUT_MS) */
    uint64_t prefetch_grant_timeout_ms;
    /* pullDeadline ("30m", lib/flags.c's duration grammar): each blob
     * download's deadline, over the daemons' --pull-deadline; 0 when absent */
    uint64_t pull_deadline_ms;
    /* registryAllow, registryPrivate, registryPlainHTTP (<tkm/reach.h>): the
     * strings as written (NULL when absent), checked to parse */
    char *registry_allow;
    char *registry_private;
    char *registry_plain_http;
    /* whenIncompatible ("Fail" or "Empty"): the default of the caches'
     * spec.whenIncompatible; UNSET when absent (then Empty) */
    enum tkm_api_fallback when_incompatible;
};

/* Decodes a ConfigMap object (the whole object as GET or an informer returns
 * it; NULL = the ConfigMap does not exist: defaults, present 0). Unknown
 * data keys are ignored (other components may share the ConfigMap); a known
 * key with a bad value is -EINVAL with err naming it ("tkm-config
 * signatureMode: \"enforce\" is not Enforce, Audit or Disabled"). *out is
 * owned; on failure it is released. */
int tkm_api_config_decode(const json_t *configmap, struct tkm_api_config *out, struct tkm_err *err);
void tkm_api_config_release(struct tkm_api_config *c);

/* What a pod gets on a node where no variant of the cache fits: spec
 * (whenIncompatible), else cfg's (NULL: no tkm-config), else Empty. Never
 * UNSET. Pure. */
enum tkm_api_fallback tkm_api_fallback_effective(const struct tkm_api_cache_spec *spec,
                                                 const struct tkm_api_config *cfg);

/* The registry reach policy of cfg (NULL: no tkm-config), each key the
 * ConfigMap leaves out taken from flags (the daemon's --registry-* flags;
 * NULL: none), else its default. *out as tkm_reach_policy_parse gives it
 * (release it either way); err names the key and the entry. */
int tkm_api_reach_policy(const struct tkm_api_config *cfg, const struct tkm_reach_config *flags,
                         struct tkm_reach_policy *out, struct tkm_err *err);

/* ---- effective signature policy ----------------------------------------------- */

/* The reason of a namespaced cache whose mode is weaker than the floor. */
#define TKM_API_REASON_BELOW_FLOOR "PolicyBelowFloor"

/* The daemons' --signature-floor flag (NULL: not given; else "Enforce",
 * "Audit" or "Disabled"): the floor when tkm-config sets no signatureFloor
 * (the ConfigMap wins, as for every signature key). */
void tkm_api_config_floor_default(struct tkm_api_config *cfg, const char *flag);

/* The floor cfg (NULL: no tkm-config) sets for namespaced caches: its
 * signatureFloor, else its signatureMode, else Enforce. */
enum tkm_sig_mode tkm_api_config_floor(const struct tkm_api_config *cfg);

/* 0 when a namespaced cache may use mode under floor (mode is at least as
 * strict: Enforce > Audit > Disabled); else -EPERM with err saying which mode,
 * which floor and where it is set. A TritonKernelCacheCluster (cluster 1) may
 * use any mode: only the cluster's admin can write one. Pure. */
int tkm_api_policy_floor_check(int cluster, enum tkm_sig_mode mode, enum tkm_sig_mode floor,
                               const char *config_ns, struct tkm_err *err);

enum tkm_api_policy_source {
    TKM_API_POLICY_SPEC = 0, /* the cache's spec.signaturePolicy */
    TKM_API_POLICY_CONFIG,   /* ConfigMap tkm-config */
    TKM_API_POLICY_DEFAULT,  /* neither: Enforce with no key (every verify fails NoTrustedKey) */
};

/* The policy one cache is verified with. pol's pointers point into storage
 * the struct owns; free with tkm_api_policy_free(). */
struct tkm_api_policy {
    struct tkm_sig_policy pol;
    enum tkm_api_policy_source source;
    char describe[256]; /* "spec.signaturePolicy (Enforce, key from Secret ml/signing-key
                           cosign.pub)" */
    /* private storage follows (keys, trusted root, identities) */
};

/*
 * Builds the effective policy of cache (borrowed; copied as needed) with cfg
 * (borrowed; NULL = no tkm-config) and config_ns (borrowed), fetching the
 * Secrets and ConfigMaps it references through c (asynchronously, on c's
 * loop). Mode Disabled fetches nothing.
 *
 * Callback contract: if _resolve fails (< 0: -ENOMEM, -EINVAL for a bad
 * argument) cb is never called; otherwise cb runs exactly once on the loop,
 * never from inside the call, with rc 0 and pol (taken: the callee frees it
 * with tkm_api_policy_free) or rc < 0, pol NULL, reason (static string, see
 * above) and err. -ECANCELED when the client was closed first.
 */
typedef void (*tkm_api_policy_cb)(int rc, struct tkm_api_policy *pol, const char *reason,
                                  const struct tkm_err *err, void *data);
int tkm_api_policy_resolve(struct k8s_client *c, const struct tkm_api_cache *cache,
                           const struct tkm_api_config *cfg, const char *config_ns,
                           tkm_api_policy_cb cb, void *data, struct tkm_err *err);
void tkm_api_policy_free(struct tkm_api_policy *p);

/* ---- registry credentials from imagePullSecrets -------------------------------- */

/*
 * Looks host (an API host[:port] as in struct tkm_oci_ref) up in the cache's
 * imagePullSecrets (kubernetes.io/dockerconfigjson or kubernetes.io/dockercfg,
 * in the cache's namespace; for the cluster kind in config_ns), first match
 * wins, as the kubelet does. No secrets, or none naming host: rc 0 with
 * zeroed creds (anonymous). cb as above: rc 0 and creds (borrowed for the
 * call; copy what you keep, the callee wipes them) or rc < 0 with reason and
 * err (SecretNotFound for a named Secret that is absent, Forbidden,
 * APIUnavailable, InvalidPolicy for a Secret of another type or bad JSON).
 */
typedef void (*tkm_api_creds_cb)(int rc, const struct tkm_oci_creds *creds, const char *reason,
                                 const struct tkm_err *err, void *data);
int tkm_api_pull_creds_resolve(struct k8s_client *c, const struct tkm_api_cache *cache,
                               const char *config_ns, const char *host, tkm_api_creds_cb cb,
                               void *data, struct tkm_err *err);

#endif
