/* cache.c - TritonKernelCache / TritonKernelCacheCluster: decode, status apply. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tkm/oci/digest.h>

#include "api-int.h"

#define KIND         "TritonKernelCache"
#define KIND_CLUSTER "TritonKernelCacheCluster"

/* ---- signaturePolicy ------------------------------------------------------- */

void tkm_api_identities_release(struct tkm_api_identity *ids, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        free(ids[i].issuer);
        free(ids[i].subject);
        free(ids[i].subject_regexp);
    }
    free(ids);
}

static void signature_policy_release(struct tkm_api_signature_policy *p)
{
    free(p->public_key);
    free(p->public_key_ref_name);
    free(p->public_key_ref_key);
    free(p->trusted_root_kind);
    free(p->trusted_root_name);
    free(p->trusted_root_namespace);
    free(p->trusted_root_key);
    tkm_api_identities_release(p->identities, p->n_identities);
    memset(p, 0, sizeof *p);
}

int tkm_api_identities_decode(const json_t *arr, const char *field, struct tkm_api_identity **out,
                              size_t *n, struct tkm_err *err)
{
    char p[256];
    size_t len = json_array_size(arr);
    int rc;
    *out = NULL;
    *n = 0;
    if (!arr)
        return 0;
    if (!json_is_array(arr))
        return tkm_err_set(err, -EPROTO, "%s: expected an array", field);
    if (len > 16)
        return tkm_err_set(err, -EPROTO, "%s: %zu identities, at most 16", field, len);
    if ((rc = tkm__api_alloc(len, sizeof **out, (void **)out, err)))
        return rc;
    for (size_t i = 0; i < len; i++) {
        const json_t *e = json_array_get(arr, i);
        struct tkm_api_identity *id = &(*out)[i];
        snprintf(p, sizeof p, "%s[%zu]", field, i);
        *n = i + 1;
        if (!json_is_object(e))
            return tkm_err_set(err, -EPROTO, "%s: expected an object", p);
        if ((rc = tkm__api_str(e, p, "issuer", &id->issuer, err)) ||
            (rc = tkm__api_str(e, p, "subject", &id->subject, err)) ||
            (rc = tkm__api_str(e, p, "subjectRegExp", &id->subject_regexp, err)))
            return rc;
        if (!id->issuer)
            return tkm_err_set(err, -EPROTO, "%s.issuer: missing", p);
        if (!id->subject == !id->subject_regexp)
            return tkm_err_set(err, -EPROTO, "%s: needs exactly one of subject and subjectRegExp",
                               p);
    }
    return 0;
}

static int keyless_decode(const json_t *kl, const char *field, struct tkm_api_signature_policy *out,
                          struct tkm_err *err)
{
    char kp[256], rp[256];
    const json_t *root = NULL, *ids = NULL;
    size_t n = 0;
    int rc;
    if (!kl)
        return 0;
    snprintf(kp, sizeof kp, "%s.keyless", field);
    if (!json_is_object(kl))
        return tkm_err_set(err, -EPROTO, "%s: expected an object", kp);
    out->has_keyless = 1;
    snprintf(rp, sizeof rp, "%s.trustedRoot", kp);
    if ((rc = tkm__api_obj(kl, kp, "trustedRoot", &root, err)) ||
        (rc = tkm__api_str(root, rp, "kind", &out->trusted_root_kind, err)) ||
        (rc = tkm__api_str(root, rp, "name", &out->trusted_root_name, err)) ||
        (rc = tkm__api_str(root, rp, "namespace", &out->trusted_root_namespace, err)) ||
        (rc = tkm__api_str(root, rp, "key", &out->trusted_root_key, err)) ||
        (rc = tkm__api_arr(kl, kp, "identities", 16, &ids, &n, err)))
        return rc;
    snprintf(rp, sizeof rp, "%s.identities", kp);
    if ((rc = tkm_api_identities_decode(ids, rp, &out->identities, &out->n_identities, err)))
        return rc;
    if (!root || !out->trusted_root_name || !out->trusted_root_kind)
        return tkm_err_set(err, -EPROTO, "%s.trustedRoot: needs kind and name", kp);
    if (strcmp(out->trusted_root_kind, "ConfigMap") && strcmp(out->trusted_root_kind, "Secret"))
        return tkm_err_set(err, -EPROTO,
                           "%s.trustedRoot.kind: \"%s\", expected ConfigMap or Secret", kp,
                           out->trusted_root_kind);
    return 0;
}

static int sig_mode(const char *m, const char *field, enum tkm_api_sig_mode *out,
                    struct tkm_err *err)
{
    static const char *const names[] = {"Enforce", "Audit", "Disabled"};
    *out = TKM_API_SIG_UNSET;
    if (!m)
        return 0;
    for (int i = 0; i < 3; i++)
        if (strcmp(m, names[i]) == 0) {
            *out = (enum tkm_api_sig_mode)(i + 1);
            return 0;
        }
    return tkm_err_set(err, -EPROTO, "%s.mode: \"%s\", expected Enforce, Audit or Disabled", field,
                       m);
}

/* Decodes spec.signaturePolicy (v: the policy object, NULL = absent; field:
 * the path for messages). *out is owned. 0, -EPROTO, -ENOMEM. */
static int signature_policy_decode(const json_t *v, const char *field,
                                   struct tkm_api_signature_policy *out, struct tkm_err *err)
{
    char *mode = NULL, refpath[256];
    const json_t *ref = NULL;
    int rc = 0;
    memset(out, 0, sizeof *out);
    if (!v)
        return 0;
    if (!json_is_object(v))
        return tkm_err_set(err, -EPROTO, "%s: expected an object", field);
    out->present = 1;
    snprintf(refpath, sizeof refpath, "%s.publicKeySecretRef", field);
    if ((rc = tkm__api_str(v, field, "mode", &mode, err)) ||
        (rc = sig_mode(mode, field, &out->mode, err)) ||
        (rc = tkm__api_str(v, field, "publicKey", &out->public_key, err)) ||
        (rc = tkm__api_obj(v, field, "publicKeySecretRef", &ref, err)) ||
        (rc = tkm__api_str(ref, refpath, "name", &out->public_key_ref_name, err)) ||
        (rc = tkm__api_str(ref, refpath, "key", &out->public_key_ref_key, err)) ||
        (rc = keyless_decode(json_object_get(v, "keyless"), field, out, err)) ||
        (rc = tkm__api_bool(v, field, "allowCrossRepository", &out->allow_cross_repository, err)))
        goto out;
    if (ref && !out->public_key_ref_name)
        rc = tkm_err_set(err, -EPROTO, "%s.name: missing", refpath);
out:
    free(mode);
    if (rc)
        signature_policy_release(out);
    return rc;
}

/* ---- spec ------------------------------------------------------------------ */

int tkm_api_fallback_parse(const char *s, const char *field, enum tkm_api_fallback *out,
                           struct tkm_err *err)
{
    *out = TKM_API_FALLBACK_UNSET;
    if (strcmp(s, "Fail") == 0)
        *out = TKM_API_FALLBACK_FAIL;
    else if (strcmp(s, "Empty") == 0)
        *out = TKM_API_FALLBACK_EMPTY;
    else
        return tkm_err_set(err, -EPROTO, "%s: \"%.32s\", expected Fail or Empty", field, s);
    return 0;
}

const char *tkm_api_fallback_name(enum tkm_api_fallback f)
{
    return f == TKM_API_FALLBACK_FAIL ? "Fail" : "Empty";
}

static void spec_release(struct tkm_api_cache_spec *s)
{
    free(s->cache_image);
    free(s->mount_path);
    signature_policy_release(&s->signature_policy);
    for (size_t i = 0; i < s->n_image_pull_secrets; i++)
        free(s->image_pull_secrets[i]);
    free(s->image_pull_secrets);
    memset(s, 0, sizeof *s);
}

static int spec_decode(const json_t *root, struct tkm_api_cache_spec *s, struct tkm_err *err)
{
    const json_t *spec, *pol, *ips;
    size_t n;
    char p[64], *wi = NULL;
    int rc;
    if ((rc = tkm__api_obj(root, "", "spec", &spec, err)))
        return rc;
    if (!spec)
        return tkm_err_set(err, -EPROTO, "spec: missing");
    if ((rc = tkm__api_str(spec, "spec", "cacheImage", &s->cache_image, err)) ||
        (rc = tkm__api_str(spec, "spec", "mountPath", &s->mount_path, err)) ||
        (rc = tkm__api_str(spec, "spec", "whenIncompatible", &wi, err)) ||
        (wi &&
         (rc = tkm_api_fallback_parse(wi, "spec.whenIncompatible", &s->when_incompatible, err))) ||
        (rc = tkm__api_obj(spec, "spec", "signaturePolicy", &pol, err)) ||
        (rc = signature_policy_decode(pol, "spec.signaturePolicy", &s->signature_policy, err)) ||
        (rc = tkm__api_arr(spec, "spec", "imagePullSecrets", 8, &ips, &n, err)) ||
        (rc = tkm__api_alloc(n, sizeof(char *), (void **)&s->image_pull_secrets, err))) {
        free(wi);
        return rc;
    }
    free(wi);
    if (!s->cache_image)
        return tkm_err_set(err, -EPROTO, "spec.cacheImage: missing");
    for (size_t i = 0; i < n; i++) {
        const json_t *e = json_array_get(ips, i);
        snprintf(p, sizeof p, "spec.imagePullSecrets[%zu]", i);
        if (!json_is_object(e))
            return tkm_err_set(err, -EPROTO, "%s: expected an object", p);
        s->n_image_pull_secrets = i + 1;
        if ((rc = tkm__api_str(e, p, "name", &s->image_pull_secrets[i], err)))
            return rc;
        if (!s->image_pull_secrets[i])
            return tkm_err_set(err, -EPROTO, "%s.name: missing", p);
    }
    return 0;
}

/* ---- status ---------------------------------------------------------------- */

void tkm_api_summary_release(struct tkm_api_summary *s)
{
    for (size_t i = 0; i < s->n_targets; i++) {
        struct tkm_api_target *t = &s->targets[i];
        free(t->backend);
        free(t->arch);
        free(t->triton_version);
        free(t->ptx_version);
    }
    free(s->targets);
    memset(s, 0, sizeof *s);
}

void tkm_api_cache_status_release(struct tkm_api_cache_status *st)
{
    free(st->resolved_digest);
    tkm_api_summary_release(&st->summary);
    for (size_t i = 0; i < st->n_failed_nodes; i++) {
        free(st->failed_nodes[i].node);
        free(st->failed_nodes[i].reason);
        free(st->failed_nodes[i].message);
    }
    free(st->failed_nodes);
    tkm__api_conditions_release(st->conditions, st->n_conditions);
    free(st->last_updated);
    for (size_t i = 0; i < st->n_variants; i++) {
        free(st->variants[i].digest);
        free(st->variants[i].platform);
        free(st->variants[i].backend);
        free(st->variants[i].arch);
    }
    free(st->variants);
    for (size_t i = 0; i < st->n_gpu_types_without_variant; i++)
        free(st->gpu_types_without_variant[i]);
    free(st->gpu_types_without_variant);
    free(st->variant_summary);
    free(st->node_label);
    tkm_api_compiles_release(&st->compiles);
    for (size_t i = 0; i < st->prefetch.n_granted; i++)
        free(st->prefetch.granted[i]);
    free(st->prefetch.granted);
    memset(st, 0, sizeof *st);
}

int tkm_api_prefetch_granted(const struct tkm_api_prefetch_grants *g, const char *node)
{
    for (size_t i = 0; g && node && i < g->n_granted; i++)
        if (strcmp(g->granted[i], node) == 0)
            return 1;
    return 0;
}

/* status.prefetch: {slots, granted[], waiting}. */
static int prefetch_decode(const json_t *status, struct tkm_api_prefetch_grants *g,
                           struct tkm_err *err)
{
    const char *p = "status.prefetch";
    const json_t *o, *arr;
    int64_t slots = 0, waiting = 0;
    size_t n;
    int rc;
    if ((rc = tkm__api_obj(status, "status", "prefetch", &o, err)) || !o)
        return rc;
    if ((rc = tkm__api_int(o, p, "slots", 0, TKM_API_PREFETCH_SLOTS_MAX, &slots, err)) ||
        (rc = tkm__api_int(o, p, "waiting", 0, INT32_MAX, &waiting, err)) ||
        (rc = tkm__api_arr(o, p, "granted", TKM_API_PREFETCH_SLOTS_MAX, &arr, &n, err)) ||
        (rc = tkm__api_alloc(n, sizeof(char *), (void **)&g->granted, err)))
        return rc;
    g->present = 1;
    g->slots = (int32_t)slots;
    g->waiting = (int32_t)waiting;
    for (size_t i = 0; i < n; i++) {
        const char *s = json_string_value(json_array_get(arr, i));
        if (!s)
            return tkm_err_set(err, -EPROTO, "%s.granted[%zu]: expected a string", p, i);
        if (!(g->granted[i] = strdup(s)))
            return tkm_err_set(err, -ENOMEM, "out of memory");
        g->n_granted = i + 1;
    }
    return 0;
}

static int summary_decode(const json_t *sum, struct tkm_api_summary *s, struct tkm_err *err)
{
    const json_t *arr;
    size_t n;
    char p[64];
    int rc;
    if ((rc = tkm__api_int(sum, "status.summary", "entryCount", 0, INT64_MAX, &s->entry_count,
                           err)) ||
        (rc = tkm__api_int(sum, "status.summary", "cacheSizeBytes", 0, INT64_MAX,
                           &s->cache_size_bytes, err)) ||
        (rc = tkm__api_arr(sum, "status.summary", "targets", 64, &arr, &n, err)) ||
        (rc = tkm__api_alloc(n, sizeof *s->targets, (void **)&s->targets, err)))
        return rc;
    for (size_t i = 0; i < n; i++) {
        const json_t *e = json_array_get(arr, i);
        struct tkm_api_target *t = &s->targets[i];
        snprintf(p, sizeof p, "status.summary.targets[%zu]", i);
        s->n_targets = i + 1;
        if (!json_is_object(e))
            return tkm_err_set(err, -EPROTO, "%s: expected an object", p);
        if ((rc = tkm__api_str(e, p, "backend", &t->backend, err)) ||
            (rc = tkm__api_str(e, p, "arch", &t->arch, err)) ||
            (rc = tkm__api_int(e, p, "warpSize", 0, INT32_MAX, &t->warp_size, err)) ||
            (rc = tkm__api_str(e, p, "tritonVersion", &t->triton_version, err)) ||
            (rc = tkm__api_str(e, p, "ptxVersion", &t->ptx_version, err)))
            return rc;
    }
    return 0;
}

static int counts_decode(const json_t *c, struct tkm_api_counts *o, struct tkm_err *err)
{
    const char *p = "status.counts";
    int rc;
    if ((rc = tkm__api_i32(c, p, "nodes", &o->nodes, err)) ||
        (rc = tkm__api_i32(c, p, "compatible", &o->compatible, err)) ||
        (rc = tkm__api_i32(c, p, "incompatible", &o->incompatible, err)) ||
        (rc = tkm__api_i32(c, p, "failed", &o->failed, err)) ||
        (rc = tkm__api_i32(c, p, "inUse", &o->in_use, err)))
        return rc;
    return 0;
}

static int failed_decode(const json_t *status, struct tkm_api_cache_status *st, struct tkm_err *err)
{
    const json_t *arr;
    size_t n;
    char p[64];
    int rc;
    if ((rc = tkm__api_arr(status, "status", "failedNodes", 16, &arr, &n, err)) ||
        (rc = tkm__api_alloc(n, sizeof *st->failed_nodes, (void **)&st->failed_nodes, err)))
        return rc;
    for (size_t i = 0; i < n; i++) {
        const json_t *e = json_array_get(arr, i);
        struct tkm_api_failed_node *f = &st->failed_nodes[i];
        snprintf(p, sizeof p, "status.failedNodes[%zu]", i);
        st->n_failed_nodes = i + 1;
        if (!json_is_object(e))
            return tkm_err_set(err, -EPROTO, "%s: expected an object", p);
        if ((rc = tkm__api_str(e, p, "node", &f->node, err)) ||
            (rc = tkm__api_str(e, p, "reason", &f->reason, err)) ||
            (rc = tkm__api_str(e, p, "message", &f->message, err)))
            return rc;
        if (!f->node)
            return tkm_err_set(err, -EPROTO, "%s.node: missing", p);
    }
    return 0;
}

/* status.variants and status.gpuTypesWithoutVariant. */
static int variants_decode(const json_t *status, struct tkm_api_cache_status *st,
                           struct tkm_err *err)
{
    const json_t *arr, *types;
    size_t n, nt;
    char p[64];
    int rc;
    if ((rc = tkm__api_arr(status, "status", "variants", 64, &arr, &n, err)) ||
        (rc = tkm__api_alloc(n, sizeof *st->variants, (void **)&st->variants, err)))
        return rc;
    for (size_t i = 0; i < n; i++) {
        const json_t *e = json_array_get(arr, i);
        struct tkm_api_variant_count *v = &st->variants[i];
        snprintf(p, sizeof p, "status.variants[%zu]", i);
        st->n_variants = i + 1;
        if (!json_is_object(e))
            return tkm_err_set(err, -EPROTO, "%s: expected an object", p);
        if ((rc = tkm__api_str(e, p, "digest", &v->digest, err)) ||
            (rc = tkm__api_str(e, p, "platform", &v->platform, err)) ||
            (rc = tkm__api_str(e, p, "backend", &v->backend, err)) ||
            (rc = tkm__api_str(e, p, "arch", &v->arch, err)) ||
            (rc = tkm__api_int(e, p, "warpSize", 0, 1024, &v->warp_size, err)) ||
            (rc = tkm__api_i32(e, p, "nodes", &v->nodes, err)) ||
            (rc = tkm__api_i32(e, p, "gpus", &v->gpus, err)))
            return rc;
    }
    if ((rc = tkm__api_arr(status, "status", "gpuTypesWithoutVariant", 64, &types, &nt, err)) ||
        (rc = tkm__api_alloc(nt, sizeof(char *), (void **)&st->gpu_types_without_variant, err)))
        return rc;
    for (size_t i = 0; i < nt; i++) {
        const char *t = json_string_value(json_array_get(types, i));
        if (!t)
            return tkm_err_set(err, -EPROTO,
                               "status.gpuTypesWithoutVariant[%zu]: expected a string", i);
        if (!(st->gpu_types_without_variant[i] = strdup(t)))
            return tkm_err_set(err, -ENOMEM, "out of memory");
        st->n_gpu_types_without_variant = i + 1;
    }
    return 0;
}

static int status_decode(const json_t *root, struct tkm_api_cache_status *st, struct tkm_err *err)
{
    const json_t *status, *sum, *cnt;
    int rc;
    if ((rc = tkm__api_obj(root, "", "status", &status, err)) || !status)
        return rc;
    if ((rc = tkm__api_int(status, "status", "observedGeneration", 0, INT64_MAX,
                           &st->observed_generation, err)) ||
        (rc = tkm__api_str(status, "status", "resolvedDigest", &st->resolved_digest, err)) ||
        (rc = tkm__api_obj(status, "status", "summary", &sum, err)) ||
        (rc = tkm__api_obj(status, "status", "counts", &cnt, err)) ||
        (rc = summary_decode(sum, &st->summary, err)) ||
        (rc = counts_decode(cnt, &st->counts, err)) || (rc = failed_decode(status, st, err)) ||
        (rc = tkm__api_conditions_decode(status, "status", &st->conditions, &st->n_conditions,
                                         err)) ||
        (rc = tkm__api_str(status, "status", "lastUpdated", &st->last_updated, err)) ||
        (rc = variants_decode(status, st, err)) ||
        (rc = tkm__api_str(status, "status", "variantSummary", &st->variant_summary, err)) ||
        (rc = tkm__api_str(status, "status", "nodeLabel", &st->node_label, err)) ||
        (rc = tkm__api_compiles_decode(status, "status", &st->compiles, err)) ||
        (rc = prefetch_decode(status, &st->prefetch, err)))
        return rc;
    st->has_summary = sum != NULL;
    st->has_counts = cnt != NULL;
    return 0;
}

void tkm_api_cache_release(struct tkm_api_cache *c)
{
    tkm__api_meta_release(&c->meta);
    spec_release(&c->spec);
    tkm_api_cache_status_release(&c->status);
    c->cluster = 0;
}

int tkm_api_cache_decode_root(const char *json, size_t len, struct tkm_api_cache *out,
                              json_t **root, struct tkm_err *err)
{
    memset(out, 0, sizeof *out);
    *root = NULL;
    int rc = tkm__api_parse(json, len, KIND, KIND_CLUSTER, root, &out->cluster, &out->meta, err);
    if (rc == 0)
        rc = spec_decode(*root, &out->spec, err);
    if (rc == 0)
        rc = status_decode(*root, &out->status, err);
    if (rc) {
        tkm_err_prefix(err, "%s %s", out->cluster ? KIND_CLUSTER : KIND,
                       out->meta.name ? out->meta.name : "(unnamed)");
        tkm_api_cache_release(out);
        json_decref(*root);
        *root = NULL;
    }
    return rc;
}

int tkm_api_cache_decode(const char *json, size_t len, struct tkm_api_cache *out,
                         struct tkm_err *err)
{
    json_t *root = NULL;
    int rc = tkm_api_cache_decode_root(json, len, out, &root, err);
    json_decref(root);
    return rc;
}

/* ---- the Node label ---------------------------------------------------------- */

int tkm_api_node_label(const char *ns, const char *name, char *out, size_t n)
{
    const char *prefix = ns && *ns ? TKM_API_NODE_LABEL_NS : TKM_API_NODE_LABEL_CLUSTER;
    char full[600], digest[TKM_OCI_DIGEST_LEN + 1];
    if (!name || !*name || n < TKM_API_NODE_LABEL_MAX)
        return -EINVAL;
    int w = ns && *ns ? snprintf(full, sizeof full, "%s.%s", ns, name)
                      : snprintf(full, sizeof full, "%s", name);
    if (w < 0 || (size_t)w >= sizeof full)
        return -EINVAL;
    if (w <= 63) {
        snprintf(out, n, "%s%s", prefix, full);
        return 0;
    }
    char id[600];
    snprintf(id, sizeof id, "%s/%s", ns ? ns : "", name);
    if (tkm_oci_digest_bytes(id, strlen(id), digest) < 0)
        return -EINVAL;
    snprintf(out, n, "%s%.52s-%.10s", prefix, full, tkm_oci_digest_hex(digest));
    return 0;
}

/* ---- status apply ---------------------------------------------------------- */

static json_t *summary_encode(const struct tkm_api_summary *s)
{
    json_t *o = json_object(), *arr = json_array();
    int bad = !o || !arr || tkm__api_set_int(o, "entryCount", s->entry_count) ||
              tkm__api_set_int(o, "cacheSizeBytes", s->cache_size_bytes);
    for (size_t i = 0; !bad && i < s->n_targets; i++) {
        const struct tkm_api_target *t = &s->targets[i];
        /* s*: the member is left out when the string is NULL */
        json_t *e = json_pack("{s:s*,s:s*,s:I,s:s*,s:s*}", "backend", t->backend, "arch", t->arch,
                              "warpSize", (json_int_t)t->warp_size, "tritonVersion",
                              t->triton_version, "ptxVersion", t->ptx_version);
        bad = !e || json_array_append_new(arr, e) != 0; /* append_new frees e on failure */
    }
    if (!bad && s->n_targets)
        bad = json_object_set(o, "targets", arr) != 0;
    json_decref(arr);
    if (bad) {
        json_decref(o);
        return NULL;
    }
    return o;
}

static json_t *counts_encode(const struct tkm_api_counts *c)
{
    return json_pack("{s:i,s:i,s:i,s:i,s:i}", "nodes", (int)c->nodes, "compatible",
                     (int)c->compatible, "incompatible", (int)c->incompatible, "failed",
                     (int)c->failed, "inUse", (int)c->in_use);
}

static json_t *failed_encode(const struct tkm_api_cache_status *st, struct tkm_err *err)
{
    json_t *arr = json_array();
    for (size_t i = 0; arr && i < st->n_failed_nodes; i++) {
        const struct tkm_api_failed_node *f = &st->failed_nodes[i];
        if (!f->node) {
            tkm_err_set(err, -EINVAL, "status.failedNodes[%zu].node is required", i);
            json_decref(arr);
            return NULL;
        }
        json_t *e = json_pack("{s:s,s:s*,s:s*}", "node", f->node, "reason", f->reason, "message",
                              f->message);
        if (!e || json_array_append_new(arr, e)) {
            json_decref(arr);
            arr = NULL;
        }
    }
    if (!arr && !err->code)
        tkm_err_set(err, -ENOMEM, "status.failedNodes: out of memory");
    return arr;
}

/* status.prefetch when present: slots, granted (always, maybe empty), waiting. */
static json_t *prefetch_encode(const struct tkm_api_prefetch_grants *g)
{
    json_t *arr = json_array();
    for (size_t i = 0; arr && i < g->n_granted; i++)
        if (json_array_append_new(arr, json_string(g->granted[i]))) {
            json_decref(arr);
            arr = NULL;
        }
    return arr ? json_pack("{s:i,s:o,s:i}", "slots", (int)g->slots, "granted", arr, "waiting",
                           (int)g->waiting)
               : NULL;
}

/* status.variants, gpuTypesWithoutVariant, variantSummary, nodeLabel, compiles, prefetch: only
 * what is set. */
static int variants_fill(json_t *s, const struct tkm_api_cache_status *st)
{
    json_t *arr = st->n_variants ? json_array() : NULL;
    json_t *types = st->n_gpu_types_without_variant ? json_array() : NULL;
    int bad = (st->n_variants && !arr) || (st->n_gpu_types_without_variant && !types);
    for (size_t i = 0; !bad && i < st->n_variants; i++) {
        const struct tkm_api_variant_count *v = &st->variants[i];
        json_t *e =
            json_pack("{s:s*,s:s*,s:s*,s:s*,s:I,s:i,s:i}", "digest", v->digest, "platform",
                      v->platform, "backend", v->backend, "arch", v->arch, "warpSize",
                      (json_int_t)v->warp_size, "nodes", (int)v->nodes, "gpus", (int)v->gpus);
        bad = !e || json_array_append_new(arr, e) != 0;
    }
    for (size_t i = 0; !bad && i < st->n_gpu_types_without_variant; i++)
        bad = json_array_append_new(types, json_string(st->gpu_types_without_variant[i])) != 0;
    bad = bad || (arr && json_object_set(s, "variants", arr)) ||
          (types && json_object_set(s, "gpuTypesWithoutVariant", types)) ||
          tkm__api_set_str(s, "variantSummary", st->variant_summary) ||
          tkm__api_set_str(s, "nodeLabel", st->node_label) ||
          (st->compiles.present &&
           tkm__api_set_new(s, "compiles", tkm_api_compiles_json(&st->compiles))) ||
          (st->prefetch.present && tkm__api_set_new(s, "prefetch", prefetch_encode(&st->prefetch)));
    json_decref(arr);
    json_decref(types);
    return bad ? -ENOMEM : 0;
}

static int status_fill(json_t *s, const struct tkm_api_cache_status *st, struct tkm_err *err)
{
    if (tkm__api_set_int(s, "observedGeneration", st->observed_generation) ||
        tkm__api_set_str(s, "resolvedDigest", st->resolved_digest) ||
        (st->has_summary && tkm__api_set_new(s, "summary", summary_encode(&st->summary))) ||
        (st->has_counts && tkm__api_set_new(s, "counts", counts_encode(&st->counts))))
        return tkm_err_set(err, -ENOMEM, "status: out of memory");
    if (st->n_failed_nodes) {
        json_t *f = failed_encode(st, err);
        if (!f || tkm__api_set_new(s, "failedNodes", f))
            return err->code ? err->code : tkm_err_set(err, -ENOMEM, "out of memory");
    }
    if (st->n_conditions) {
        json_t *c = tkm__api_conditions_encode(st->conditions, st->n_conditions, err);
        if (!c || tkm__api_set_new(s, "conditions", c))
            return err->code ? err->code : tkm_err_set(err, -ENOMEM, "out of memory");
    }
    if (variants_fill(s, st) || tkm__api_set_str(s, "lastUpdated", st->last_updated))
        return tkm_err_set(err, -ENOMEM, "status: out of memory");
    return 0;
}

int tkm_api_cache_status_apply(const struct tkm_api_cache_status *st, const char *name,
                               const char *ns, json_t **out, struct tkm_err *err)
{
    struct tkm_err local = {0};
    json_t *o = NULL, *s = json_object();
    if (!err)
        err = &local;
    int rc = tkm__api_object(ns ? KIND : KIND_CLUSTER, name, ns, &o, err);
    if (rc == 0 && !s)
        rc = tkm_err_set(err, -ENOMEM, "status: out of memory");
    if (rc == 0)
        rc = status_fill(s, st, err);
    if (rc == 0 && json_object_set(o, "status", s))
        rc = tkm_err_set(err, -ENOMEM, "status: out of memory");
    json_decref(s);
    if (rc) {
        json_decref(o);
        o = NULL;
    }
    *out = o;
    return rc;
}
