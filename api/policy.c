/* policy.c - tkm-config, a cache's effective signature policy, and the
 * registry credentials of its imagePullSecrets (see <tkm/api/policy.h>). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <uv.h>

#include <tkm/api/policy.h>
#include <tkm/flags.h>

#include "api-int.h"

#define MAX_KEYS         16
#define MAX_FETCH        2
#define DEFAULT_KEY      "cosign.pub"
#define DEFAULT_ROOT_KEY "trusted_root.json"
#define MAX_VALUE        (1024 * 1024) /* a key or trusted root larger than this is refused */

/* ---- tkm-config ------------------------------------------------------------- */

void tkm_api_config_release(struct tkm_api_config *c)
{
    free(c->public_keys);
    free(c->trusted_root_kind);
    free(c->trusted_root_name);
    free(c->trusted_root_key);
    free(c->registry_allow);
    free(c->registry_private);
    free(c->registry_plain_http);
    tkm_api_identities_release(c->identities, c->n_identities);
    memset(c, 0, sizeof *c);
}

static int cfg_bool(const json_t *data, const char *key, int *out, struct tkm_err *err)
{
    const char *v = json_string_value(json_object_get(data, key));
    *out = 0;
    if (!json_object_get(data, key))
        return 0;
    if (!v)
        return tkm_err_set(err, -EINVAL, "tkm-config %s: expected a string", key);
    if (strcmp(v, "true") == 0)
        *out = 1;
    else if (strcmp(v, "false") != 0)
        return tkm_err_set(err, -EINVAL, "tkm-config %s: \"%.64s\" is not \"true\" or \"false\"",
                           key, v);
    return 0;
}

/* data[key] as a decimal integer >= 0 ("10"), capped at max; *out untouched
 * when absent. */
static int cfg_count(const json_t *data, const char *key, unsigned max, unsigned *out,
                     struct tkm_err *err)
{
    const json_t *j = json_object_get(data, key);
    const char *v = json_string_value(j);
    unsigned long long n = 0;
    if (!j)
        return 0;
    if (!v)
        return tkm_err_set(err, -EINVAL, "tkm-config %s: expected a string", key);
    if (!*v || strlen(v) > 9)
        goto bad;
    for (const char *p = v; *p; p++) {
        if (*p < '0' || *p > '9')
            goto bad;
        n = n * 10 + (unsigned)(*p - '0');
    }
    *out = n > max ? max : (unsigned)n;
    return 0;
bad:
    return tkm_err_set(err, -EINVAL, "tkm-config %s: \"%.64s\" is not an integer from 0 to %u", key,
                       v, max);
}

/* data[key] as a duration ("500ms", "30m"); *out untouched when absent. */
static int cfg_duration(const json_t *data, const char *key, uint64_t *out, struct tkm_err *err)
{
    const json_t *j = json_object_get(data, key);
    const char *v = json_string_value(j);
    uint64_t ms = 0;
    if (!j)
        return 0;
    if (!v)
        return tkm_err_set(err, -EINVAL, "tkm-config %s: expected a string", key);
    if (tkm_parse_duration(v, &ms) < 0 || ms == 0)
        return tkm_err_set(err, -EINVAL,
                           "tkm-config %s: \"%.64s\" is not a duration above 0 (500ms, 10s, 5m, "
                           "1h, 1m30s)",
                           key, v);
    *out = ms;
    return 0;
}

/* data[key] as an owned string (NULL when absent); a ConfigMap's garbage is -EINVAL. */
static int cfg_str(const json_t *data, const char *key, char **out, struct tkm_err *err)
{
    int rc = tkm__api_str(data, "tkm-config", key, out, err);
    return rc == -EPROTO ? -EINVAL : rc;
}

/* "ConfigMap/<name>[/<key>]" or "Secret/<name>[/<key>]". */
static int cfg_root_ref(const char *ref, struct tkm_api_config *c, struct tkm_err *err)
{
    const char *s1 = strchr(ref, '/'), *s2 = s1 ? strchr(s1 + 1, '/') : NULL;
    size_t kl = s1 ? (size_t)(s1 - ref) : 0;
    if (!s1 || s1[1] == '\0' || s1[1] == '/' || (s2 && (s2[1] == '\0' || strchr(s2 + 1, '/'))) ||
        !((kl == 9 && strncmp(ref, "ConfigMap", 9) == 0) ||
          (kl == 6 && strncmp(ref, "Secret", 6) == 0)))
        return tkm_err_set(err, -EINVAL,
                           "tkm-config signatureTrustedRootRef: \"%.128s\" is not "
                           "ConfigMap/<name>[/<key>] or Secret/<name>[/<key>]",
                           ref);
    c->trusted_root_kind = strndup(ref, kl);
    c->trusted_root_name = s2 ? strndup(s1 + 1, (size_t)(s2 - s1 - 1)) : strdup(s1 + 1);
    c->trusted_root_key = strdup(s2 ? s2 + 1 : DEFAULT_ROOT_KEY);
    if (!c->trusted_root_kind || !c->trusted_root_name || !c->trusted_root_key)
        return tkm_err_set(err, -ENOMEM, "out of memory");
    return 0;
}

static int cfg_identities(const char *text, struct tkm_api_config *c, struct tkm_err *err)
{
    json_error_t je;
    json_t *arr = json_loads(text, JSON_REJECT_DUPLICATES, &je);
    int rc;
    if (!arr)
        return tkm_err_set(err, -EINVAL, "tkm-config signatureIdentities: not JSON: %s (column %d)",
                           je.text, je.column);
    rc = tkm_api_identities_decode(arr, "tkm-config signatureIdentities", &c->identities,
                                   &c->n_identities, err);
    json_decref(arr);
    if (rc == -EPROTO)
        rc = -EINVAL;
    return rc;
}

static enum tkm_sig_mode sig_mode_of(enum tkm_api_sig_mode m)
{
    return m == TKM_API_SIG_AUDIT      ? TKM_SIG_MODE_AUDIT
           : m == TKM_API_SIG_DISABLED ? TKM_SIG_MODE_DISABLED
                                       : TKM_SIG_MODE_ENFORCE;
}

static const char *mode_name(enum tkm_sig_mode m)
{
    return m == TKM_SIG_MODE_AUDIT ? "Audit" : m == TKM_SIG_MODE_DISABLED ? "Disabled" : "Enforce";
}

/* How strict a mode is: Enforce 2, Audit 1, Disabled 0. */
static int sig_strength(enum tkm_sig_mode m)
{
    return m == TKM_SIG_MODE_ENFORCE ? 2 : m == TKM_SIG_MODE_AUDIT ? 1 : 0;
}

static int cfg_mode(const char *key, const char *text, enum tkm_api_sig_mode *out,
                    struct tkm_err *err)
{
    enum tkm_sig_mode m;
    if (tkm_sig_mode_parse(text, &m) < 0)
        return tkm_err_set(err, -EINVAL,
                           "tkm-config %s: \"%.64s\" is not Enforce, Audit or Disabled", key, text);
    *out = m == TKM_SIG_MODE_ENFORCE ? TKM_API_SIG_ENFORCE
           : m == TKM_SIG_MODE_AUDIT ? TKM_API_SIG_AUDIT
                                     : TKM_API_SIG_DISABLED;
    return 0;
}

void tkm_api_config_floor_default(struct tkm_api_config *cfg, const char *flag)
{
    if (cfg && flag && cfg->floor == TKM_API_SIG_UNSET &&
        cfg_mode("--signature-floor", flag, &cfg->floor, NULL) < 0)
        cfg->floor = TKM_API_SIG_UNSET;
}

enum tkm_sig_mode tkm_api_config_floor(const struct tkm_api_config *cfg)
{
    if (!cfg)
        return TKM_SIG_MODE_ENFORCE;
    return sig_mode_of(cfg->floor != TKM_API_SIG_UNSET ? cfg->floor : cfg->mode);
}

int tkm_api_policy_floor_check(int cluster, enum tkm_sig_mode mode, enum tkm_sig_mode floor,
                               const char *config_ns, struct tkm_err *err)
{
    if (cluster || sig_strength(mode) >= sig_strength(floor))
        return 0;
    return tkm_err_set(err, -EPERM,
                       "signature mode %s is weaker than the floor %s set for namespaced caches "
                       "by ConfigMap %s/%s (signatureFloor, default its signatureMode): a "
                       "namespaced cache may make signature checks stricter, never weaker",
                       mode_name(mode), mode_name(floor), config_ns ? config_ns : "tkm-system",
                       TKM_API_CONFIG_NAME);
}

/* The registry reach keys parse (on their own: a flag fills a key left out). */
static int cfg_reach(const struct tkm_api_config *c, struct tkm_err *err)
{
    struct tkm_reach_policy p;
    int rc = tkm_api_reach_policy(c, NULL, &p, err);
    tkm_reach_policy_release(&p);
    if (rc)
        tkm_err_prefix(err, "tkm-config");
    return rc;
}

int tkm_api_reach_policy(const struct tkm_api_config *cfg, const struct tkm_reach_config *flags,
                         struct tkm_reach_policy *out, struct tkm_err *err)
{
    const struct tkm_reach_config none = {0};
    const struct tkm_reach_config *f = flags ? flags : &none;
    const struct tkm_reach_config use = {
        .allow = cfg && cfg->registry_allow ? cfg->registry_allow : f->allow,
        .private_hosts = cfg && cfg->registry_private ? cfg->registry_private : f->private_hosts,
        .plain_http = cfg && cfg->registry_plain_http ? cfg->registry_plain_http : f->plain_http,
    };
    return tkm_reach_policy_parse(out, &use, err);
}

enum tkm_api_fallback tkm_api_fallback_effective(const struct tkm_api_cache_spec *spec,
                                                 const struct tkm_api_config *cfg)
{
    if (spec && spec->when_incompatible != TKM_API_FALLBACK_UNSET)
        return spec->when_incompatible;
    if (cfg && cfg->when_incompatible != TKM_API_FALLBACK_UNSET)
        return cfg->when_incompatible;
    return TKM_API_FALLBACK_EMPTY;
}

int tkm_api_config_decode(const json_t *configmap, struct tkm_api_config *out, struct tkm_err *err)
{
    const json_t *data;
    char *mode = NULL, *floor = NULL, *ref = NULL, *ids = NULL, *wi = NULL;
    int rc = 0;
    memset(out, 0, sizeof *out);
    if (!configmap)
        return 0;
    out->present = 1;
    data = json_object_get(configmap, "data");
    if (!data)
        return 0;
    if (!json_is_object(data)) {
        rc = tkm_err_set(err, -EINVAL, "tkm-config data: expected an object");
        goto out;
    }
    if ((rc = cfg_str(data, "signatureMode", &mode, err)) ||
        (rc = cfg_str(data, "signatureFloor", &floor, err)) ||
        (rc = cfg_str(data, "signaturePublicKeys", &out->public_keys, err)) ||
        (rc = cfg_str(data, "signatureTrustedRootRef", &ref, err)) ||
        (rc = cfg_str(data, "signatureIdentities", &ids, err)) ||
        (rc = cfg_bool(data, "signatureAllowCrossRepository", &out->allow_cross_repository, err)) ||
        (rc = cfg_bool(data, "prefetch", &out->prefetch, err)) ||
        (rc = cfg_count(data, "prefetchSlots", TKM_API_PREFETCH_SLOTS_MAX, &out->prefetch_slots,
                        err)) ||
        (rc = cfg_duration(data, "prefetchGrantTimeout", &out->prefetch_grant_timeout_ms, err)) ||
        (rc = cfg_duration(data, "pullDeadline", &out->pull_deadline_ms, err)) ||
        (rc = cfg_str(data, TKM_REACH_KEY_ALLOW, &out->registry_allow, err)) ||
        (rc = cfg_str(data, TKM_REACH_KEY_PRIVATE, &out->registry_private, err)) ||
        (rc = cfg_str(data, TKM_REACH_KEY_PLAIN_HTTP, &out->registry_plain_http, err)) ||
        (rc = cfg_str(data, "whenIncompatible", &wi, err)) || (rc = cfg_reach(out, err)))
        goto out;
    if (wi && (rc = tkm_api_fallback_parse(wi, "tkm-config whenIncompatible",
                                           &out->when_incompatible, err))) {
        rc = -EINVAL;
        goto out;
    }
    if ((mode && (rc = cfg_mode("signatureMode", mode, &out->mode, err))) ||
        (floor && (rc = cfg_mode("signatureFloor", floor, &out->floor, err))))
        goto out;
    if (floor && sig_strength(sig_mode_of(out->mode)) < sig_strength(sig_mode_of(out->floor))) {
        rc = tkm_err_set(err, -EINVAL,
                         "tkm-config signatureFloor: %s is stricter than signatureMode %s (the "
                         "cluster's own default must satisfy the floor)",
                         floor, mode ? mode : "Enforce");
        goto out;
    }
    if ((ref && (rc = cfg_root_ref(ref, out, err))) ||
        (ids && (rc = cfg_identities(ids, out, err))))
        goto out;
    if (!ref != !out->n_identities)
        rc = tkm_err_set(err, -EINVAL,
                         "tkm-config: signatureTrustedRootRef and signatureIdentities go together "
                         "(keyless needs a trusted root and at least one identity)");
out:
    free(mode);
    free(floor);
    free(ref);
    free(ids);
    free(wi);
    if (rc)
        tkm_api_config_release(out);
    return rc;
}

/* ---- the policy's storage ------------------------------------------------------ */

struct policy_full {
    struct tkm_api_policy pub; /* first: tkm_api_policy_free casts back */
    struct tkm_sig_key keys[MAX_KEYS];
    char *key_text; /* all PEM blocks, NUL-separated; keys[] point into it */
    char *trusted_root;
    struct tkm_sig_identity ids[16];
    struct tkm_api_identity *own_ids;
    size_t n_own_ids;
};

void tkm_api_policy_free(struct tkm_api_policy *p)
{
    struct policy_full *f = (struct policy_full *)p;
    if (!f)
        return;
    free(f->key_text);
    free(f->trusted_root);
    tkm_api_identities_release(f->own_ids, f->n_own_ids);
    free(f);
}

/* Appends the PEM blocks of text (len bytes) to f's keys. */
static int add_keys(struct policy_full *f, const char *text, size_t len, const char *what,
                    struct tkm_err *err)
{
    static const char begin[] = "-----BEGIN ", end[] = "-----END ";
    size_t old = 0, found = 0;
    char *buf;
    for (size_t i = 0; i < f->pub.pol.nkeys; i++)
        old += f->keys[i].len + 1;
    /* Keys point into key_text: build a new buffer, then re-point. */
    if (!(buf = malloc(old + len + 1)))
        return tkm_err_set(err, -ENOMEM, "out of memory");
    if (old)
        memcpy(buf, f->key_text, old);
    for (size_t i = 0, off = 0; i < f->pub.pol.nkeys; i++) {
        f->keys[i].pem = buf + off;
        off += f->keys[i].len + 1;
    }
    free(f->key_text);
    f->key_text = buf;
    memcpy(buf + old, text, len);
    buf[old + len] = '\0';
    for (char *p = buf + old; (p = strstr(p, begin));) {
        char *e = strstr(p, end), *eol;
        if (!e || !(eol = strstr(e + sizeof end - 1, "-----")))
            return tkm_err_set(err, -EINVAL, "%s: a PEM block without its END line", what);
        eol += 5;
        if (f->pub.pol.nkeys == MAX_KEYS)
            return tkm_err_set(err, -EINVAL, "%s: more than %d keys", what, MAX_KEYS);
        f->keys[f->pub.pol.nkeys].pem = p;
        f->keys[f->pub.pol.nkeys].len = (size_t)(eol - p);
        f->pub.pol.nkeys++;
        found++;
        if (*eol)
            *eol++ = '\0';
        p = eol;
    }
    if (!found)
        return tkm_err_set(err, -EINVAL, "%s: no PEM public key in it", what);
    return 0;
}

static int copy_identities(struct policy_full *f, const struct tkm_api_identity *ids, size_t n,
                           struct tkm_err *err)
{
    if (n > 16)
        return tkm_err_set(err, -EINVAL, "more than 16 identities");
    if (n && !(f->own_ids = calloc(n, sizeof *f->own_ids)))
        return tkm_err_set(err, -ENOMEM, "out of memory");
    for (size_t i = 0; i < n; i++) {
        struct tkm_api_identity *d = &f->own_ids[i];
        f->n_own_ids = i + 1;
        d->issuer = strdup(ids[i].issuer);
        d->subject = ids[i].subject ? strdup(ids[i].subject) : NULL;
        d->subject_regexp = ids[i].subject_regexp ? strdup(ids[i].subject_regexp) : NULL;
        if (!d->issuer || (ids[i].subject && !d->subject) ||
            (ids[i].subject_regexp && !d->subject_regexp))
            return tkm_err_set(err, -ENOMEM, "out of memory");
        f->ids[i].issuer = d->issuer;
        f->ids[i].subject = d->subject;
        f->ids[i].subject_regexp = d->subject_regexp;
    }
    f->pub.pol.identities = f->ids;
    f->pub.pol.nidentities = n;
    return 0;
}

/* ---- fetching referenced objects ------------------------------------------------ */

enum fetch_what { FETCH_KEY = 0, FETCH_ROOT };

struct fetch {
    enum fetch_what what;
    const struct k8s_resource *res; /* secrets or configmaps */
    char ns[254], name[254], key[254];
    char field[96]; /* where the reference came from, for messages */
};

struct resolve {
    struct k8s_client *c;
    uv_timer_t timer; /* defers the callback when nothing is fetched */
    struct policy_full *f;
    struct fetch fetch[MAX_FETCH];
    int nfetch, next;
    tkm_api_policy_cb cb;
    void *data;
    int rc;
    const char *reason;
    struct tkm_err err;
};

static void resolve_closed(uv_handle_t *h)
{
    struct resolve *r = h->data;
    if (r->f) /* NULL once the policy was handed to the callback */
        tkm_api_policy_free(&r->f->pub);
    free(r);
}

static void resolve_finish(struct resolve *r)
{
    struct tkm_api_policy *pol = NULL;
    if (r->rc == 0) {
        struct tkm_err e = {0};
        int rc = tkm_sig_policy_check(&r->f->pub.pol, &e);
        if (rc < 0) {
            r->rc = rc;
            r->reason = strstr(e.msg, "keys[") ? "KeyInvalid" : "InvalidPolicy";
            r->err = e;
            tkm_err_prefix(&r->err, "%s", r->f->pub.describe);
        }
    }
    if (r->rc == 0) {
        pol = &r->f->pub;
        r->f = NULL;
    }
    r->cb(r->rc, pol, r->rc ? r->reason : NULL, r->rc ? &r->err : NULL, r->data);
    uv_close((uv_handle_t *)&r->timer, resolve_closed);
}

static const char *api_reason(int rc)
{
    return rc == -ENOENT ? "SecretNotFound" : rc == -EACCES ? "Forbidden" : "APIUnavailable";
}

/* Bytes of data[key] (Secret: base64; ConfigMap: data text or binaryData
 * base64). *out owned, NUL-terminated. */
static int object_value(const json_t *obj, const struct fetch *fe, char **out, size_t *len,
                        struct tkm_err *err)
{
    int secret = fe->res == &k8s_res_secrets;
    const json_t *v = json_object_get(json_object_get(obj, "data"), fe->key);
    const char *kind = secret ? "Secret" : "ConfigMap";
    const char *s;
    size_t n;
    *out = NULL;
    if (!v && !secret) {
        v = json_object_get(json_object_get(obj, "binaryData"), fe->key);
        secret = 1; /* base64 */
    }
    if (!v || !(s = json_string_value(v)))
        return tkm_err_set(err, -ENOENT, "%s %s/%s has no key \"%s\" (%s)", kind, fe->ns, fe->name,
                           fe->key, fe->field);
    n = strlen(s);
    if (n > MAX_VALUE * 4 / 3 + 4)
        return tkm_err_set(err, -EINVAL, "%s %s/%s key \"%s\": larger than %d bytes", kind, fe->ns,
                           fe->name, fe->key, MAX_VALUE);
    if (!(*out = malloc(n + 1)))
        return tkm_err_set(err, -ENOMEM, "out of memory");
    if (!secret) {
        memcpy(*out, s, n + 1);
        *len = n;
        return 0;
    }
    if (tkm_oci_base64_decode(s, n, (unsigned char *)*out, n, len) < 0) {
        free(*out);
        *out = NULL;
        return tkm_err_set(err, -EINVAL, "%s %s/%s key \"%s\": not base64", kind, fe->ns, fe->name,
                           fe->key);
    }
    (*out)[*len] = '\0';
    return 0;
}

static void fetch_next(struct resolve *r);

static void fetch_done(int rc, json_t *obj, const struct k8s_status *st, void *data)
{
    struct resolve *r = data;
    const struct fetch *fe = &r->fetch[r->next];
    const char *kind = fe->res == &k8s_res_secrets ? "Secret" : "ConfigMap";
    char *val = NULL, what[640];
    size_t len = 0;
    if (rc < 0) {
        r->rc = rc;
        r->reason = rc == -ECANCELED ? "APIUnavailable" : api_reason(rc);
        if (rc == -ENOENT)
            tkm_err_set(&r->err, rc, "%s %s/%s not found (%s)", kind, fe->ns, fe->name, fe->field);
        else
            tkm_err_set(&r->err, rc, "reading %s %s/%s (%s): %s", kind, fe->ns, fe->name, fe->field,
                        st && st->message ? st->message : strerror(-rc));
        resolve_finish(r);
        return;
    }
    rc = object_value(obj, fe, &val, &len, &r->err);
    snprintf(what, sizeof what, "%s %s/%s key \"%s\"", kind, fe->ns, fe->name, fe->key);
    if (rc == 0 && fe->what == FETCH_KEY)
        rc = add_keys(r->f, val, len, what, &r->err);
    if (rc == 0 && fe->what == FETCH_ROOT) {
        r->f->trusted_root = val;
        r->f->pub.pol.trusted_root = val;
        r->f->pub.pol.trusted_root_len = len;
        val = NULL;
    }
    free(val);
    if (rc < 0) {
        r->rc = rc;
        r->reason = rc == -ENOENT   ? "SecretNotFound"
                    : rc == -ENOMEM ? "APIUnavailable"
                                    : "KeyInvalid";
        resolve_finish(r);
        return;
    }
    r->next++;
    fetch_next(r);
}

static void fetch_next(struct resolve *r)
{
    const struct fetch *fe;
    int rc;
    if (r->next >= r->nfetch) {
        resolve_finish(r);
        return;
    }
    fe = &r->fetch[r->next];
    rc = k8s_get_async(r->c, fe->res, fe->ns, fe->name, NULL, fetch_done, r);
    if (rc < 0) {
        r->rc = rc;
        r->reason = "APIUnavailable";
        tkm_err_set(&r->err, rc, "reading %s/%s: %s", fe->ns, fe->name, strerror(-rc));
        resolve_finish(r);
    }
}

static void timer_fired(uv_timer_t *t)
{
    struct resolve *r = t->data;
    if (r->rc < 0)
        resolve_finish(r);
    else
        fetch_next(r);
}

static int add_fetch(struct resolve *r, enum fetch_what what, const char *kind, const char *ns,
                     const char *name, const char *key, const char *field, struct tkm_err *err)
{
    struct fetch *fe = &r->fetch[r->nfetch];
    if (r->nfetch == MAX_FETCH)
        return tkm_err_set(err, -EINVAL, "too many references");
    fe->what = what;
    fe->res = strcmp(kind, "ConfigMap") == 0 ? &k8s_res_configmaps : &k8s_res_secrets;
    if ((size_t)snprintf(fe->ns, sizeof fe->ns, "%s", ns) >= sizeof fe->ns ||
        (size_t)snprintf(fe->name, sizeof fe->name, "%s", name) >= sizeof fe->name ||
        (size_t)snprintf(fe->key, sizeof fe->key, "%s", key) >= sizeof fe->key)
        return tkm_err_set(err, -EINVAL, "%s: a name longer than 253 characters", field);
    snprintf(fe->field, sizeof fe->field, "%s", field);
    r->nfetch++;
    return 0;
}

/* Key material from the spec. Returns 1 when the spec names any. */
static int plan_spec(struct resolve *r, const struct tkm_api_cache *cache, const char *config_ns,
                     struct tkm_buf *desc, struct tkm_err *err)
{
    const struct tkm_api_signature_policy *sp = &cache->spec.signature_policy;
    const char *ns = cache->cluster ? config_ns : cache->meta.ns;
    int rc, any = 0;
    if (sp->public_key) {
        if ((rc = add_keys(r->f, sp->public_key, strlen(sp->public_key),
                           "spec.signaturePolicy.publicKey", err)) < 0)
            return rc;
        tkm_buf_printf(desc, ", key inline");
        any = 1;
    } else if (sp->public_key_ref_name) {
        const char *key = sp->public_key_ref_key ? sp->public_key_ref_key : DEFAULT_KEY;
        if ((rc = add_fetch(r, FETCH_KEY, "Secret", ns, sp->public_key_ref_name, key,
                            "spec.signaturePolicy.publicKeySecretRef", err)) < 0)
            return rc;
        tkm_buf_printf(desc, ", key from Secret %s/%s %s", ns, sp->public_key_ref_name, key);
        any = 1;
    }
    if (sp->has_keyless) {
        const char *rns = sp->trusted_root_namespace;
        if (!cache->cluster && rns && strcmp(rns, cache->meta.ns) != 0)
            return tkm_err_set(err, -EINVAL,
                               "spec.signaturePolicy.keyless.trustedRoot.namespace \"%s\": a "
                               "namespaced cache reads only its own namespace (%s)",
                               rns, cache->meta.ns);
        if (!rns)
            rns = ns;
        if ((rc = add_fetch(r, FETCH_ROOT, sp->trusted_root_kind, rns, sp->trusted_root_name,
                            sp->trusted_root_key ? sp->trusted_root_key : DEFAULT_ROOT_KEY,
                            "spec.signaturePolicy.keyless.trustedRoot", err)) < 0 ||
            (rc = copy_identities(r->f, sp->identities, sp->n_identities, err)) < 0)
            return rc;
        tkm_buf_printf(desc, ", keyless with %s %s/%s, %zu identities", sp->trusted_root_kind, rns,
                       sp->trusted_root_name, sp->n_identities);
        any = 1;
    }
    return any;
}

/* Key material from tkm-config. Returns 1 when it names any. */
static int plan_config(struct resolve *r, const struct tkm_api_config *cfg, const char *config_ns,
                       struct tkm_buf *desc, struct tkm_err *err)
{
    int rc, any = 0;
    if (!cfg)
        return 0;
    if (cfg->public_keys) {
        if ((rc = add_keys(r->f, cfg->public_keys, strlen(cfg->public_keys),
                           "tkm-config signaturePublicKeys", err)) < 0)
            return rc;
        tkm_buf_printf(desc, ", %zu key%s from ConfigMap %s/%s", r->f->pub.pol.nkeys,
                       r->f->pub.pol.nkeys == 1 ? "" : "s", config_ns, TKM_API_CONFIG_NAME);
        any = 1;
    }
    if (cfg->trusted_root_name) {
        if ((rc =
                 add_fetch(r, FETCH_ROOT, cfg->trusted_root_kind, config_ns, cfg->trusted_root_name,
                           cfg->trusted_root_key, "tkm-config signatureTrustedRootRef", err)) < 0 ||
            (rc = copy_identities(r->f, cfg->identities, cfg->n_identities, err)) < 0)
            return rc;
        tkm_buf_printf(desc, ", keyless with %s %s/%s, %zu identities", cfg->trusted_root_kind,
                       config_ns, cfg->trusted_root_name, cfg->n_identities);
        any = 1;
    }
    return any;
}

static int plan(struct resolve *r, const struct tkm_api_cache *cache,
                const struct tkm_api_config *cfg, const char *config_ns, struct tkm_err *err)
{
    const struct tkm_api_signature_policy *sp = &cache->spec.signature_policy;
    struct tkm_api_policy *p = &r->f->pub;
    struct tkm_buf desc;
    enum tkm_api_sig_mode m = TKM_API_SIG_UNSET;
    int rc = 0, any = 0;
    tkm_buf_init(&desc, 4096);
    if (sp->present) {
        p->source = TKM_API_POLICY_SPEC;
        m = sp->mode;
        p->pol.allow_cross_repository = sp->allow_cross_repository;
    } else if (cfg && cfg->present) {
        p->source = TKM_API_POLICY_CONFIG;
        p->pol.allow_cross_repository = cfg->allow_cross_repository;
    } else {
        p->source = TKM_API_POLICY_DEFAULT;
    }
    if (m == TKM_API_SIG_UNSET && cfg)
        m = cfg->mode; /* a spec policy without a mode takes the cluster default's */
    p->pol.mode = sig_mode_of(m);
    if ((rc = tkm_api_policy_floor_check(cache->cluster, p->pol.mode, tkm_api_config_floor(cfg),
                                         config_ns, err)) < 0) {
        snprintf(p->describe, sizeof p->describe, "%s (%s)",
                 p->source == TKM_API_POLICY_SPEC ? "spec.signaturePolicy" : "ConfigMap tkm-config",
                 mode_name(p->pol.mode));
        tkm_err_prefix(err, "%s", p->describe);
        tkm_buf_release(&desc);
        return rc;
    }
    tkm_buf_printf(&desc, "%s (%s",
                   p->source == TKM_API_POLICY_SPEC     ? "spec.signaturePolicy"
                   : p->source == TKM_API_POLICY_CONFIG ? "ConfigMap tkm-config"
                                                        : "the default policy",
                   mode_name(p->pol.mode));
    if (p->pol.mode != TKM_SIG_MODE_DISABLED) {
        if (p->source == TKM_API_POLICY_SPEC)
            any = rc = plan_spec(r, cache, config_ns, &desc, err);
        /* A spec policy with no key material of its own (only a mode) uses tkm-config's. */
        if (rc == 0 && !any)
            any = rc = plan_config(r, cfg, config_ns, &desc, err);
    }
    tkm_buf_printf(&desc, ")");
    snprintf(p->describe, sizeof p->describe, "%s", desc.data);
    tkm_buf_release(&desc);
    if (rc < 0)
        return rc;
    if (p->pol.mode != TKM_SIG_MODE_DISABLED && !any)
        return tkm_err_set(err, -ENOKEY,
                           "%s: signatures are checked but no key is configured: set "
                           "spec.signaturePolicy (publicKey, publicKeySecretRef or keyless) or "
                           "signaturePublicKeys in ConfigMap %s/%s",
                           p->describe, config_ns, TKM_API_CONFIG_NAME);
    return 0;
}

int tkm_api_policy_resolve(struct k8s_client *c, const struct tkm_api_cache *cache,
                           const struct tkm_api_config *cfg, const char *config_ns,
                           tkm_api_policy_cb cb, void *data, struct tkm_err *err)
{
    struct resolve *r;
    int rc;
    if (!c || !cache || !config_ns || !cb || (!cache->cluster && !cache->meta.ns))
        return tkm_err_set(err, -EINVAL, "tkm_api_policy_resolve: missing argument");
    if (!(r = calloc(1, sizeof *r)) || !(r->f = calloc(1, sizeof *r->f))) {
        free(r);
        return tkm_err_set(err, -ENOMEM, "out of memory");
    }
    r->c = c;
    r->cb = cb;
    r->data = data;
    r->f->pub.pol.keys = r->f->keys;
    rc = plan(r, cache, cfg, config_ns, &r->err);
    if (rc < 0) {
        /* A policy that is not one is the cache's problem, reported through cb. */
        r->rc = rc;
        r->reason = rc == -ENOKEY   ? "NoTrustedKey"
                    : rc == -ENOMEM ? "APIUnavailable"
                    : rc == -EPERM  ? TKM_API_REASON_BELOW_FLOOR
                                    : "InvalidPolicy";
        r->nfetch = 0;
    }
    if ((rc = uv_timer_init(k8s_client_loop(c), &r->timer)) < 0) {
        tkm_api_policy_free(&r->f->pub);
        free(r);
        return tkm_err_set(err, rc, "uv_timer_init: %s", uv_strerror(rc));
    }
    r->timer.data = r;
    uv_timer_start(&r->timer, timer_fired, 0, 0); /* reports from the loop, never from here */
    return 0;
}

/* ---- imagePullSecrets ----------------------------------------------------------- */

struct creds_req {
    struct k8s_client *c;
    uv_timer_t timer;
    char ns[254];
    char host[256];
    char **names;
    size_t n, next;
    tkm_api_creds_cb cb;
    void *data;
    int rc;
    const char *reason;
    struct tkm_err err;
    struct tkm_oci_creds creds;
};

static void creds_closed(uv_handle_t *h)
{
    struct creds_req *q = h->data;
    for (size_t i = 0; i < q->n; i++)
        free(q->names[i]);
    free(q->names);
    tkm_oci_creds_wipe(&q->creds);
    free(q);
}

static void creds_finish(struct creds_req *q)
{
    q->cb(q->rc, q->rc ? NULL : &q->creds, q->rc ? q->reason : NULL, q->rc ? &q->err : NULL,
          q->data);
    uv_close((uv_handle_t *)&q->timer, creds_closed);
}

/* Looks q->host up in one pull Secret. 0 found, -ENOENT not in it, < 0 error. */
static int creds_from_secret(struct creds_req *q, const json_t *obj)
{
    const char *name = q->names[q->next];
    const char *type = json_string_value(json_object_get(obj, "type"));
    const char *key = NULL;
    struct fetch fe = {.res = &k8s_res_secrets};
    char *val = NULL, what[600];
    size_t len = 0;
    int rc;
    if (type && strcmp(type, "kubernetes.io/dockerconfigjson") == 0)
        key = ".dockerconfigjson";
    else if (type && strcmp(type, "kubernetes.io/dockercfg") == 0)
        key = ".dockercfg";
    else
        return tkm_err_set(&q->err, -EINVAL,
                           "imagePullSecret %s/%s has type \"%s\", expected "
                           "kubernetes.io/dockerconfigjson or kubernetes.io/dockercfg",
                           q->ns, name, type ? type : "");
    snprintf(fe.ns, sizeof fe.ns, "%s", q->ns);
    snprintf(fe.name, sizeof fe.name, "%s", name);
    snprintf(fe.key, sizeof fe.key, "%s", key);
    snprintf(fe.field, sizeof fe.field, "spec.imagePullSecrets");
    if ((rc = object_value(obj, &fe, &val, &len, &q->err)) < 0)
        return rc == -ENOENT ? -EINVAL : rc;
    snprintf(what, sizeof what, "Secret %s/%s", q->ns, name);
    rc = tkm_oci_creds_from_config(val, len, q->host, what, &q->creds, &q->err);
    if (val) {
        memset(val, 0, len);
        free(val);
    }
    if (rc == 0)
        snprintf(q->creds.source, sizeof q->creds.source, "%s", what);
    return rc;
}

static void creds_next(struct creds_req *q);

static void creds_got(int rc, json_t *obj, const struct k8s_status *st, void *data)
{
    struct creds_req *q = data;
    const char *name = q->names[q->next];
    if (rc < 0) {
        q->rc = rc;
        q->reason = api_reason(rc);
        if (rc == -ENOENT)
            tkm_err_set(&q->err, rc, "imagePullSecret %s/%s not found", q->ns, name);
        else
            tkm_err_set(&q->err, rc, "reading imagePullSecret %s/%s: %s", q->ns, name,
                        st && st->message ? st->message : strerror(-rc));
        creds_finish(q);
        return;
    }
    rc = creds_from_secret(q, obj);
    if (rc == -ENOENT) { /* not for this host: the next Secret */
        memset(&q->err, 0, sizeof q->err);
        q->next++;
        creds_next(q);
        return;
    }
    if (rc < 0) {
        q->rc = rc;
        q->reason = "InvalidPolicy";
    }
    creds_finish(q);
}

static void creds_next(struct creds_req *q)
{
    int rc;
    if (q->next >= q->n) {
        memset(&q->creds, 0, sizeof q->creds); /* none for this host: anonymous */
        creds_finish(q);
        return;
    }
    rc = k8s_get_async(q->c, &k8s_res_secrets, q->ns, q->names[q->next], NULL, creds_got, q);
    if (rc < 0) {
        q->rc = rc;
        q->reason = "APIUnavailable";
        tkm_err_set(&q->err, rc, "reading imagePullSecret %s/%s: %s", q->ns, q->names[q->next],
                    strerror(-rc));
        creds_finish(q);
    }
}

static void creds_timer(uv_timer_t *t)
{
    creds_next(t->data);
}

int tkm_api_pull_creds_resolve(struct k8s_client *c, const struct tkm_api_cache *cache,
                               const char *config_ns, const char *host, tkm_api_creds_cb cb,
                               void *data, struct tkm_err *err)
{
    const char *ns = cache && cache->cluster ? config_ns : cache ? cache->meta.ns : NULL;
    struct creds_req *q;
    int rc;
    if (!c || !cache || !ns || !host || !cb)
        return tkm_err_set(err, -EINVAL, "tkm_api_pull_creds_resolve: missing argument");
    if (strlen(ns) >= sizeof q->ns || strlen(host) >= sizeof q->host)
        return tkm_err_set(err, -EINVAL, "namespace or host too long");
    if (!(q = calloc(1, sizeof *q)))
        return tkm_err_set(err, -ENOMEM, "out of memory");
    q->c = c;
    q->cb = cb;
    q->data = data;
    snprintf(q->ns, sizeof q->ns, "%s", ns);
    snprintf(q->host, sizeof q->host, "%s", host);
    if (cache->spec.n_image_pull_secrets &&
        !(q->names = calloc(cache->spec.n_image_pull_secrets, sizeof *q->names)))
        goto nomem;
    for (size_t i = 0; i < cache->spec.n_image_pull_secrets; i++) {
        if (!(q->names[i] = strdup(cache->spec.image_pull_secrets[i])))
            goto nomem;
        q->n = i + 1;
    }
    if ((rc = uv_timer_init(k8s_client_loop(c), &q->timer)) < 0) {
        creds_closed((uv_handle_t *)&(uv_timer_t){.data = q});
        return tkm_err_set(err, rc, "uv_timer_init: %s", uv_strerror(rc));
    }
    q->timer.data = q;
    uv_timer_start(&q->timer, creds_timer, 0, 0);
    return 0;
nomem:
    for (size_t i = 0; i < q->n; i++)
        free(q->names[i]);
    free(q->names);
    free(q);
    return tkm_err_set(err, -ENOMEM, "out of memory");
}
