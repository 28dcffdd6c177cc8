/*
 * sig_registry.c - finds an image's signatures the way cosign v3 does (OCI
 * referrers, the "sha256-<hex>" tag schema, the classic ".sig" tag) and
 * verifies each against a policy until one satisfies it: one state machine,
 * run as a job on a registry session (tkm_sig_job_verify, sigjob.h) and, by
 * tkm_sig_verify_registry (bundle.h), on the synchronous client's private
 * loop. Each step is one registry operation of lib/oci; its callback decides
 * the next one. The signature checks run on the loop (docs/internals.md).
 */
#include <errno.h>
#include <jansson.h>
#include <openssl/crypto.h>
#include <stdlib.h>
#include <string.h>

#include <tkm/archive.h> /* tkm_digest_valid */
#include <tkm/buf.h>
#include <tkm/util.h>
#include <tkm/oci/registry.h>
#include <tkm/trust/bundle.h>
#include <tkm/trust/cosign.h>
#include <tkm/trust/keys.h>
#include <tkm/trust/sigjob.h>

#include "oci/session-int.h"
#include "trust-int.h"

#define EMPTY_TYPE "application/vnd.oci.empty.v1+json"

struct search {
    struct tkm_oci_job *job;
    char repo[TKM_OCI_NAME_MAX + 1];
    char digest[TKM_OCI_DIGEST_LEN + 1];
    char tag[80], sigtag[80]; /* "sha256-<hex>", "sha256-<hex>.sig" */
    /* the policy, copied */
    struct tkm_sig_policy pol;
    struct tkm_sig_key *keys;
    struct tkm_sig_identity *ids;
    char *root;
    /* what was seen */
    struct tkm_sig_result res;
    struct tkm_buf looked; /* "where it looked", for the unsigned message */
    int capped;            /* an index listed more than TKM_OCI_REFERRERS_MAX bundles */
    struct tkm_buf fails;  /* "; "-separated reasons of the signatures that failed */
    struct tkm_err best;   /* the most telling failure */
    size_t found;
    struct tkm_err err; /* the error being reported */
    /* the index being walked (referrers answer or tag-schema index) */
    enum tkm_sig_source src;
    struct tkm_buf idx;
    json_t *iroot;
    size_t ii, bundles;
    /* the manifest being read (a referrer, the tag-schema index, the .sig) */
    struct tkm__oci_manifest man;
    json_t *mroot;
    size_t li;
    char mdigest[TKM_OCI_DIGEST_LEN + 1];
    struct tkm_buf blob;
    /* the classic .sig payloads */
    struct tkm_cosign_layer *layers;
    size_t n, pi;
    struct tkm_buf *payloads;
    /* the image manifest HEAD (nothing found anywhere) */
    struct tkm__oci_call *call;
};

/* ---- the policy copy ----------------------------------------------------- */

static char *dup_n(const char *p, size_t n)
{
    char *s = malloc(n + 1);
    if (s) {
        memcpy(s, p, n);
        s[n] = '\0';
    }
    return s;
}

static char *dup_opt(const char *s, int *fail)
{
    char *d = s ? strdup(s) : NULL;
    if (s && !d)
        *fail = 1;
    return d;
}

/* A deep copy of p into s->pol; 0 or -ENOMEM (search_free releases a partial one). */
static int copy_policy(struct search *s, const struct tkm_sig_policy *p)
{
    int fail = 0;
    s->pol = *p;
    s->pol.nkeys = 0;
    s->pol.nidentities = 0;
    s->pol.keys = NULL;
    s->pol.identities = NULL;
    s->pol.trusted_root = NULL;
    if (p->nkeys && !(s->keys = calloc(p->nkeys, sizeof *s->keys)))
        return -ENOMEM;
    for (size_t i = 0; i < p->nkeys; i++, s->pol.nkeys++) {
        s->keys[i].len = p->keys[i].len;
        if (!p->keys[i].pem || !(s->keys[i].pem = dup_n(p->keys[i].pem, p->keys[i].len)))
            return p->keys[i].pem ? -ENOMEM : -EINVAL;
    }
    if (p->nidentities && !(s->ids = calloc(p->nidentities, sizeof *s->ids)))
        return -ENOMEM;
    for (size_t i = 0; i < p->nidentities; i++, s->pol.nidentities++) {
        s->ids[i].issuer = dup_opt(p->identities[i].issuer, &fail);
        s->ids[i].subject = dup_opt(p->identities[i].subject, &fail);
        s->ids[i].subject_regexp = dup_opt(p->identities[i].subject_regexp, &fail);
    }
    if (fail || (p->trusted_root && !(s->root = dup_n(p->trusted_root, p->trusted_root_len))))
        return -ENOMEM;
    s->pol.keys = s->keys;
    s->pol.identities = s->ids;
    s->pol.trusted_root = s->root;
    return 0;
}

static void search_free(void *p)
{
    struct search *s = p;
    for (size_t i = 0; s->keys && i < s->pol.nkeys; i++) {
        OPENSSL_cleanse((char *)s->keys[i].pem, s->keys[i].len);
        free((char *)s->keys[i].pem);
    }
    for (size_t i = 0; s->ids && i < s->pol.nidentities; i++) {
        free((char *)s->ids[i].issuer);
        free((char *)s->ids[i].subject);
        free((char *)s->ids[i].subject_regexp);
    }
    free(s->keys);
    free(s->ids);
    free(s->root);
    tkm_buf_release(&s->looked);
    tkm_buf_release(&s->fails);
    tkm_buf_release(&s->idx);
    tkm_buf_release(&s->man.body);
    tkm_buf_release(&s->blob);
    json_decref(s->iroot);
    json_decref(s->mroot);
    for (size_t i = 0; s->payloads && i < s->n; i++)
        tkm_buf_release(&s->payloads[i]);
    free(s->payloads);
    free(s->layers);
    free(s);
}

static void search_cancel(void *p)
{
    struct search *s = p;
    if (s->call)
        tkm__oci_call_cancel(s->call); /* reports -ECANCELED from the loop */
}

/* ---- reporting ------------------------------------------------------------- */

static void note_fail(struct search *s, const char *where, const struct tkm_err *e)
{
    if (s->best.code == 0 || tkm__trust_rank(e->code) > tkm__trust_rank(s->best.code)) {
        tkm_err_clear(&s->best);
        tkm_err_set(&s->best, e->code, "%s: %s", where, tkm_err_str(e));
    }
    tkm_buf_printf(&s->fails, "%s%s: %s", s->fails.len ? "; " : "", where, tkm_err_str(e));
}

static void report(struct search *s, int rc, const struct tkm_err *err)
{
    *tkm__oci_job_ext_op(s->job) = NULL;
    tkm__oci_job_ext_report(s->job, rc, err); /* frees s */
}

/* 1 (and reported) when the job was cancelled or the step failed so. */
static int stopped(struct search *s, int rc, struct tkm_err *err)
{
    if (rc != -ECANCELED && rc != -ESHUTDOWN && !tkm__oci_job_ext_cancelled(s->job))
        return 0;
    tkm_err_clear(&s->err);
    (void)err;
    tkm_err_set(&s->err, -ECANCELED, "signature search for %s@%s: cancelled", s->repo, s->digest);
    report(s, -ECANCELED, &s->err);
    return 1;
}

static void image_check(struct search *s);

/* A registry failure's code, unless it would read as a verdict on a signature
 * (a malformed answer, a digest mismatch): then -EPROTO, since the registry,
 * not the signature, is at fault. */
static int registry_code(int rc)
{
    switch (rc) {
    case -ENOENT:
    case -EBADMSG:
    case -EINVAL:
    case -ENOTSUP:
    case -EPROTONOSUPPORT:
    case -EKEYREJECTED:
    case TKM_SIG_ENOIMAGE:
    case TKM_SIG_EPOLICY:
        return -EPROTO;
    default:
        return rc;
    }
}

/* A referrer or bundle that could not be fetched: a failed signature. A
 * missing one stays -ENOENT (nothing there to verify). */
static void note_fetch_fail(struct search *s, const char *where, const struct tkm_err *e)
{
    struct tkm_err t = *e;
    if (t.code != -ENOENT)
        t.code = registry_code(t.code);
    note_fail(s, where, &t);
}

/* A registry error that stops the search (see registry_code). */
static void fatal(struct search *s, int rc, struct tkm_err *err)
{
    if (stopped(s, rc, err))
        return;
    tkm_err_clear(&s->err);
    if (rc == -ENOENT && s->found == 0) {
        s->err = *err;
        image_check(s);
        return;
    }
    rc = registry_code(rc);
    tkm_err_set(&s->err, rc, "%s", tkm_err_str(err));
    report(s, rc, &s->err);
}

static void succeed(struct search *s)
{
    s->res.found = s->found;
    tkm__oci_job_ext_result(s->job)->detail = &s->res;
    report(s, 0, NULL);
}

/* Nothing verified: the error that says why. */
static void verdict(struct search *s)
{
    struct tkm_err *err = &s->err;
    tkm_err_clear(err);
    if (s->found == 0) {
        tkm_err_set(err, -ENOENT, "%s@%s is not signed: no signature found; looked at %s", s->repo,
                    s->digest, s->looked.data);
        image_check(s);
        return;
    }
    if (s->best.code == 0) /* found, but none was read (e.g. only attestations) */
        tkm_err_set(err, -ENOENT, "%s@%s: no signature satisfies the policy; looked at %s", s->repo,
                    s->digest, s->looked.data);
    else if (s->found == 1)
        tkm_err_set(err, s->best.code, "%s", s->best.msg);
    else if (s->capped)
        tkm_err_set(err, s->best.code,
                    "none of the %zu signatures tried (more than %d signature bundles: the "
                    "cap was hit) satisfies the policy: %s",
                    s->found, TKM_OCI_REFERRERS_MAX, s->fails.data);
    else
        tkm_err_set(err, s->best.code, "none of the %zu signatures satisfies the policy: %s",
                    s->found, s->fails.data);
    report(s, err->code, err);
}

/* ---- nothing found: is the image itself there? ----------------------------- */

static void on_image_head(int rc, struct tkm_http_resp *resp, struct tkm_err *err, void *data)
{
    struct search *s = data;
    s->call = NULL;
    if (stopped(s, rc, err))
        return;
    if (rc == 0 && resp->status == 404) {
        struct tkm_err pre = s->err;
        tkm_err_clear(&s->err);
        tkm_err_set(&s->err, TKM_SIG_ENOIMAGE,
                    "%s@%s: the registry has no such image (HEAD %s: HTTP 404); %s", s->repo,
                    s->digest, resp->url, pre.msg);
    }
    /* anything else: the image may well be there, the search's error stands */
    report(s, s->err.code, &s->err);
}

/* s->err holds the -ENOENT to report unless the image manifest is missing. */
static void image_check(struct search *s)
{
    struct tkm_oci_session *ses = tkm__oci_job_ext_session(s->job);
    struct tkm_buf url = TKM_BUF_INIT(TKM__OCI_URL_MAX);
    struct tkm_err e = {0};
    char scope[600];
    tkm__oci_scope(scope, sizeof scope, s->repo, 0);
    int rc = tkm__oci_api_url(ses, &url, "/%s/manifests/%s", s->repo, s->digest);
    struct tkm__oci_req q = {.method = "HEAD",
                             .url = url.data,
                             .scope = scope,
                             .accept = TKM_OCI_MANIFEST_ACCEPT,
                             .max_body = 64 * 1024};
    if (rc == 0)
        rc = tkm__oci_call_start(ses, &q, on_image_head, s, &s->call, &e);
    tkm_buf_release(&url);
    if (rc != 0 && !stopped(s, rc, &e))
        report(s, s->err.code, &s->err);
}

/* ---- the classic .sig tag ---------------------------------------------------- */

/* docker-reference "[host/]path[:tag|@digest]" names repo: the path is compared, the
 * host is not (mirrors and registry aliases serve the same repository). */
static int same_repo(const char *ref, const char *repo)
{
    const char *slash = strchr(ref, '/'), *path = ref;
    if (slash) {
        size_t hl = (size_t)(slash - ref);
        if (memchr(ref, '.', hl) || memchr(ref, ':', hl) ||
            (hl == 9 && strncmp(ref, "localhost", 9) == 0))
            path = slash + 1;
    }
    size_t n = strlen(repo);
    if (strncmp(path, repo, n) != 0)
        return 0;
    return path[n] == '\0' || path[n] == '@' || (path[n] == ':' && !strchr(path + n + 1, '/'));
}

/* Every payload is here: each key tried (pure CPU, on the loop). 1 when one verified. */
static int sig_check(struct search *s, struct tkm_cosign_blob *blobs, const char *where)
{
    struct tkm_err e = {0};
    if (s->pol.nkeys == 0) {
        tkm_err_set(&e, -ENOTSUP,
                    "%zu classic signature%s: verifying them needs a public key (keyless classic "
                    "signatures, with certificate annotations, are not read; cosign v3 bundles "
                    "are)",
                    s->n, s->n == 1 ? "" : "s");
        note_fail(s, where, &e);
    }
    for (size_t k = 0; k < s->pol.nkeys; k++) {
        struct tkm_cosign_result cr;
        tkm_err_clear(&e);
        if (tkm_cosign_verify(s->man.body.data, s->man.body.len, blobs, s->n, s->pol.keys[k].pem,
                              s->pol.keys[k].len, s->digest, &cr, &e) < 0) {
            note_fail(s, where, &e);
            continue;
        }
        if (!s->pol.allow_cross_repository && cr.docker_reference[0] &&
            !same_repo(cr.docker_reference, s->repo)) {
            tkm_err_clear(&e);
            tkm_err_set(&e, -EBADMSG,
                        "signature layer %zu names the image %s, not %s (set "
                        "allowCrossRepository when the image was copied on purpose)",
                        cr.layer, cr.docker_reference, s->repo);
            note_fail(s, where, &e);
            continue;
        }
        memset(&s->res, 0, sizeof s->res);
        s->res.source = TKM_SIG_SRC_SIG_TAG;
        s->res.format = TKM_SIG_FMT_SIMPLESIGNING;
        s->res.tlog_index = -1;
        snprintf(s->res.location, sizeof s->res.location, "%s:%s layer %zu", s->repo, s->sigtag,
                 cr.layer);
        memcpy(s->res.key_id, cr.key_id, sizeof cr.key_id);
        EVP_PKEY *pk = NULL;
        if (tkm_trust_load_pubkey(s->pol.keys[k].pem, s->pol.keys[k].len, &pk, NULL) == 0)
            tkm_trust_key_desc(pk, s->res.key_desc, sizeof s->res.key_desc);
        EVP_PKEY_free(pk);
        memcpy(s->res.docker_reference, cr.docker_reference, sizeof cr.docker_reference);
        return 1;
    }
    return 0;
}

static void sig_payload_next(struct search *s);

static void on_sig_payload(int rc, struct tkm_err *err, void *data)
{
    struct search *s = data;
    *tkm__oci_job_ext_op(s->job) = NULL;
    if (rc) {
        tkm_err_prefix(err, "signature payload %zu of %s:%s", s->pi, s->repo, s->sigtag);
        fatal(s, rc, err);
        return;
    }
    s->pi++;
    sig_payload_next(s);
}

static void sig_payload_next(struct search *s)
{
    struct tkm_err e = {0};
    char where[640];
    snprintf(where, sizeof where, "%s:%s (.sig tag)", s->repo, s->sigtag);
    if (s->pi < s->n) {
        struct tkm_oci_desc d;
        memset(&d, 0, sizeof d);
        snprintf(d.media_type, sizeof d.media_type, "%s", TKM_COSIGN_MEDIA_TYPE);
        snprintf(d.digest, sizeof d.digest, "%s", s->layers[s->pi].digest);
        d.size = s->layers[s->pi].size;
        int rc = tkm__oci_get_blob(tkm__oci_job_ext_session(s->job), s->repo, &d, -1, NULL,
                                   &s->payloads[s->pi], on_sig_payload, s,
                                   tkm__oci_job_ext_op(s->job), &e);
        if (rc) {
            tkm_err_prefix(&e, "signature payload %zu of %s:%s", s->pi, s->repo, s->sigtag);
            fatal(s, rc, &e);
        }
        return;
    }
    struct tkm_cosign_blob *blobs = calloc(s->n ? s->n : 1, sizeof *blobs);
    if (!blobs) {
        fatal(s, tkm_err_set(&e, -ENOMEM, "out of memory"), &e);
        return;
    }
    for (size_t i = 0; i < s->n; i++)
        blobs[i] = (struct tkm_cosign_blob){
            s->layers[i].digest, (const unsigned char *)s->payloads[i].data, s->payloads[i].len};
    int ok = sig_check(s, blobs, where);
    free(blobs);
    if (ok)
        succeed(s);
    else
        verdict(s);
}

static void on_sig_manifest(int rc, struct tkm_err *err, void *data)
{
    struct search *s = data;
    struct tkm_err e = {0};
    char where[640];
    *tkm__oci_job_ext_op(s->job) = NULL;
    if (rc == -ENOENT && !tkm__oci_job_ext_cancelled(s->job)) {
        tkm_buf_printf(&s->looked, " (not found)");
        verdict(s);
        return;
    }
    if (rc) {
        fatal(s, rc, err);
        return;
    }
    snprintf(where, sizeof where, "%s:%s (.sig tag)", s->repo, s->sigtag);
    if ((rc = tkm_cosign_sig_layers(s->man.body.data, s->man.body.len, &s->layers, &s->n, &e)) <
        0) {
        if (rc != -ENOENT)
            s->found++;
        note_fail(s, where, &e);
        s->n = 0;
        verdict(s);
        return;
    }
    s->found += s->n;
    if (!(s->payloads = calloc(s->n ? s->n : 1, sizeof *s->payloads))) {
        fatal(s, tkm_err_set(&e, -ENOMEM, "out of memory"), &e);
        return;
    }
    for (size_t i = 0; i < s->n; i++)
        tkm_buf_init(&s->payloads[i], TKM_COSIGN_MAX_PAYLOAD);
    s->pi = 0;
    sig_payload_next(s);
}

static void sig_begin(struct search *s)
{
    struct tkm_err e = {0};
    tkm_buf_printf(&s->looked, " and the tag %s:%s", s->repo, s->sigtag);
    tkm_buf_release(&s->man.body);
    tkm_buf_init(&s->man.body, TKM_COSIGN_MAX_MANIFEST);
    int rc = tkm__oci_get_manifest(tkm__oci_job_ext_session(s->job), s->repo, s->sigtag, &s->man,
                                   on_sig_manifest, s, tkm__oci_job_ext_op(s->job), &e);
    if (rc)
        fatal(s, rc, &e);
}

/* ---- bundles: the referrers API or the tag-schema index -------------------- */

static int is_bundle_type(const char *t)
{
    return t && strncmp(t, TKM_BUNDLE_MEDIA_PREFIX, strlen(TKM_BUNDLE_MEDIA_PREFIX)) == 0;
}

static void index_next(struct search *s);
static void layer_next(struct search *s);

static void referrer_where(const struct search *s, char *where, size_t n)
{
    snprintf(where, n, "%s@%s layer %zu (%s)", s->repo, s->mdigest, s->li,
             tkm_sig_source_name(s->src));
}

static void on_bundle(int rc, struct tkm_err *err, void *data)
{
    struct search *s = data;
    struct tkm_err e = {0};
    char where[640];
    *tkm__oci_job_ext_op(s->job) = NULL;
    if (stopped(s, rc, err))
        return;
    referrer_where(s, where, sizeof where);
    if (rc) {
        note_fetch_fail(s, where, err);
    } else if (tkm_bundle_verify((const unsigned char *)s->blob.data, s->blob.len, &s->pol,
                                 s->digest, s->repo, &s->res, &e) == 0) {
        s->res.source = s->src;
        snprintf(s->res.location, sizeof s->res.location, "%s", where);
        succeed(s);
        return;
    } else {
        note_fail(s, where, &e);
    }
    s->li++;
    layer_next(s);
}

/* The next bundle layer of the referrer manifest s->mroot, or the next index entry. */
static void layer_next(struct search *s)
{
    json_t *layers = json_object_get(s->mroot, "layers");
    char where[640];
    for (; s->li < json_array_size(layers); s->li++) {
        json_t *l = json_array_get(layers, s->li);
        struct tkm_oci_desc d;
        struct tkm_err e = {0};
        const char *mt = json_string_value(json_object_get(l, "mediaType"));
        const char *dg = json_string_value(json_object_get(l, "digest"));
        json_int_t size = json_integer_value(json_object_get(l, "size"));
        if (!is_bundle_type(mt))
            continue;
        s->found++;
        referrer_where(s, where, sizeof where);
        if (!dg || !tkm_digest_valid(dg) || size <= 0 || size > TKM_BUNDLE_MAX) {
            tkm_err_set(&e, -EINVAL, "bundle layer has no valid digest or a size over %d bytes",
                        TKM_BUNDLE_MAX);
            note_fail(s, where, &e);
            continue;
        }
        memset(&d, 0, sizeof d);
        snprintf(d.media_type, sizeof d.media_type, "%s", mt);
        snprintf(d.digest, sizeof d.digest, "%s", dg);
        d.size = (uint64_t)size;
        tkm_buf_reset(&s->blob);
        int rc = tkm__oci_get_blob(tkm__oci_job_ext_session(s->job), s->repo, &d, -1, NULL,
                                   &s->blob, on_bundle, s, tkm__oci_job_ext_op(s->job), &e);
        if (rc == 0 || stopped(s, rc, &e))
            return;
        note_fetch_fail(s, where, &e);
    }
    json_decref(s->mroot);
    s->mroot = NULL;
    s->ii++;
    index_next(s);
}

static void on_referrer(int rc, struct tkm_err *err, void *data)
{
    struct search *s = data;
    char where[640];
    *tkm__oci_job_ext_op(s->job) = NULL;
    if (stopped(s, rc, err))
        return;
    snprintf(where, sizeof where, "%s@%s (%s)", s->repo, s->mdigest, tkm_sig_source_name(s->src));
    if (rc == 0)
        s->mroot = json_loadb(s->man.body.data, s->man.body.len, JSON_REJECT_DUPLICATES, NULL);
    if (rc || !json_is_array(json_object_get(s->mroot, "layers"))) {
        struct tkm_err e = {0};
        if (rc == 0)
            tkm_err_set(&e, -EINVAL, "the referrer is not an image manifest with layers");
        s->found++;
        if (rc)
            note_fetch_fail(s, where, err);
        else
            note_fail(s, where, &e);
        json_decref(s->mroot);
        s->mroot = NULL;
        s->ii++;
        index_next(s);
        return;
    }
    const char *pt = json_string_value(json_object_get(json_object_get(s->mroot, "annotations"),
                                                       "dev.sigstore.bundle.predicateType"));
    s->li = 0;
    if (pt && strcmp(pt, TKM_BUNDLE_PREDICATE_SIGN) != 0) /* an attestation, not a signature */
        s->li = json_array_size(json_object_get(s->mroot, "layers"));
    layer_next(s);
}

/* The index's next bundle entry; at the end, the .sig tag. */
static void index_next(struct search *s)
{
    json_t *ms = json_object_get(s->iroot, "manifests");
    for (; s->ii < json_array_size(ms); s->ii++) {
        json_t *m = json_array_get(ms, s->ii);
        const char *at = json_string_value(json_object_get(m, "artifactType"));
        const char *dg = json_string_value(json_object_get(m, "digest"));
        const char *pt = json_string_value(json_object_get(json_object_get(m, "annotations"),
                                                           "dev.sigstore.bundle.predicateType"));
        struct tkm_err e = {0};
        /* Some registries put the config's media type (the empty descriptor)
         * in the index instead of the manifest's artifactType: look inside. */
        if ((at && !is_bundle_type(at) && strcmp(at, EMPTY_TYPE) != 0) || !dg ||
            !tkm_digest_valid(dg))
            continue;
        if (pt && strcmp(pt, TKM_BUNDLE_PREDICATE_SIGN) != 0)
            continue; /* an attestation, not a signature */
        if (++s->bundles > TKM_OCI_REFERRERS_MAX)
            break; /* the same bound as the referrers API's pages */
        snprintf(s->mdigest, sizeof s->mdigest, "%s", dg);
        tkm_buf_release(&s->man.body);
        tkm_buf_init(&s->man.body, TKM_COSIGN_MAX_MANIFEST);
        int rc = tkm__oci_get_manifest(tkm__oci_job_ext_session(s->job), s->repo, dg, &s->man,
                                       on_referrer, s, tkm__oci_job_ext_op(s->job), &e);
        if (rc == 0 || stopped(s, rc, &e))
            return;
        char where[640];
        snprintf(where, sizeof where, "%s@%s (%s)", s->repo, dg, tkm_sig_source_name(s->src));
        s->found++;
        note_fetch_fail(s, where, &e);
    }
    if (s->bundles > TKM_OCI_REFERRERS_MAX) {
        s->capped = 1;
        tkm_buf_printf(&s->looked,
                       " (more than %d signature bundles: the cap was hit, only the first %d "
                       "were tried)",
                       TKM_OCI_REFERRERS_MAX, TKM_OCI_REFERRERS_MAX);
    } else {
        tkm_buf_printf(&s->looked, " (%zu signature bundle%s)", s->bundles,
                       s->bundles == 1 ? "" : "s");
    }
    json_decref(s->iroot);
    s->iroot = NULL;
    sig_begin(s);
}

/* The index bytes (referrers answer or tag-schema index) are in data[0..n). */
static void index_begin(struct search *s, const char *data, size_t n)
{
    s->iroot = json_loadb(data ? data : "", n, JSON_REJECT_DUPLICATES, NULL);
    s->ii = 0;
    s->bundles = 0;
    if (!json_is_array(json_object_get(s->iroot, "manifests"))) {
        struct tkm_err e = {0};
        tkm_err_set(&e, -EINVAL, "the %s index is not an OCI image index",
                    tkm_sig_source_name(s->src));
        note_fail(s, s->repo, &e);
    }
    index_next(s);
}

static void on_tag_index(int rc, struct tkm_err *err, void *data)
{
    struct search *s = data;
    *tkm__oci_job_ext_op(s->job) = NULL;
    if (rc == -ENOENT && !tkm__oci_job_ext_cancelled(s->job)) {
        tkm_buf_printf(&s->looked, " (not found)");
        sig_begin(s);
        return;
    }
    if (rc) {
        fatal(s, rc, err);
        return;
    }
    s->src = TKM_SIG_SRC_TAG_SCHEMA;
    index_begin(s, s->man.body.data, s->man.body.len);
}

static void on_referrers(int rc, struct tkm_err *err, void *data)
{
    struct search *s = data;
    struct tkm_err e = {0};
    *tkm__oci_job_ext_op(s->job) = NULL;
    if (rc == 0) {
        tkm_buf_printf(&s->looked, "the referrers API (/v2/%s/referrers/%s)", s->repo, s->digest);
        s->src = TKM_SIG_SRC_REFERRERS;
        index_begin(s, s->idx.data, s->idx.len);
        return;
    }
    if (rc != -ENOTSUP || tkm__oci_job_ext_cancelled(s->job)) {
        fatal(s, rc, err);
        return;
    }
    tkm_buf_printf(&s->looked, "the referrers API (none on this registry), the tag %s:%s", s->repo,
                   s->tag);
    tkm_buf_release(&s->man.body);
    tkm_buf_init(&s->man.body, TKM_OCI_MANIFEST_MAX);
    rc = tkm__oci_get_manifest(tkm__oci_job_ext_session(s->job), s->repo, s->tag, &s->man,
                               on_tag_index, s, tkm__oci_job_ext_op(s->job), &e);
    if (rc)
        fatal(s, rc, &e);
}

/* ---- starting ------------------------------------------------------------------ */

int tkm_sig_job_verify(struct tkm_oci_session *ses, const char *repo, const char *image_digest,
                       const struct tkm_sig_policy *pol, tkm_oci_job_cb cb, void *data,
                       struct tkm_oci_job **out, struct tkm_err *err)
{
    struct search *s = NULL;
    struct tkm_oci_job *j = NULL;
    int rc;
    if (!ses || !repo || !cb || !pol || strlen(repo) > TKM_OCI_NAME_MAX)
        return tkm_err_set(err, -EINVAL,
                           "signature search: session, repository (at most %d characters), "
                           "policy and callback are required",
                           TKM_OCI_NAME_MAX);
    if (!image_digest || !tkm_digest_valid(image_digest))
        return tkm_err_set(err, -EINVAL, "image digest '%s' is not sha256:<64 hex>",
                           image_digest ? image_digest : "(null)");
    if ((rc = tkm_sig_policy_check(pol, err)) < 0) {
        if (err && err->code == rc)
            err->code = TKM_SIG_EPOLICY;
        return TKM_SIG_EPOLICY;
    }
    if (!(s = calloc(1, sizeof *s)))
        return tkm_err_set(err, -ENOMEM, "signature search: out of memory");
    tkm_buf_init(&s->looked, 4096);
    tkm_buf_init(&s->fails, 8192);
    tkm_buf_init(&s->idx, TKM_OCI_MANIFEST_MAX);
    tkm_buf_init(&s->man.body, TKM_OCI_MANIFEST_MAX);
    tkm_buf_init(&s->blob, TKM_BUNDLE_MAX);
    snprintf(s->repo, sizeof s->repo, "%s", repo);
    snprintf(s->digest, sizeof s->digest, "%s", image_digest);
    snprintf(s->tag, sizeof s->tag, "sha256-%s", image_digest + 7);
    tkm_cosign_sig_tag(image_digest, s->sigtag);
    if ((rc = copy_policy(s, pol)) < 0) {
        rc = tkm_err_set(err, rc, "signature search: out of memory");
        goto fail;
    }
    if ((rc = tkm__oci_job_ext_new(ses, repo, image_digest, cb, data, &j, err)) != 0)
        goto fail;
    tkm__oci_job_ext_set(j, s, search_free, search_cancel); /* freed with the job from here on */
    s->job = j;
    if ((rc = tkm__oci_get_referrers(ses, repo, image_digest, NULL, &s->idx, on_referrers, s,
                                     tkm__oci_job_ext_op(j), err)) != 0) {
        tkm__oci_job_ext_discard(j);
        return rc;
    }
    tkm__oci_job_ext_link(j, out);
    return 0;
fail:
    search_free(s);
    return rc;
}

/* ---- the synchronous form: the job on the client's private loop ------------ */

struct sync_wait {
    int done, rc;
    struct tkm_sig_result *res;
    struct tkm_err *err;
};

static void sync_done(struct tkm_oci_job *job, int rc, struct tkm_oci_job_result *res,
                      const struct tkm_err *err, void *data)
{
    struct sync_wait *w = data;
    (void)job;
    w->done = 1;
    w->rc = rc;
    if (rc == 0 && w->res)
        *w->res = *(const struct tkm_sig_result *)res->detail;
    if (rc && w->err)
        tkm_err_set(w->err, err->code, "%s", err->msg);
}

int tkm_sig_verify_registry(struct tkm_oci_registry *r, const char *repo, const char *image_digest,
                            const struct tkm_sig_policy *pol, struct tkm_sig_result *res,
                            struct tkm_err *err)
{
    struct tkm_oci_session *ses = r ? tkm__oci_registry_session(r) : NULL;
    struct sync_wait w = {.res = res, .err = err};
    int rc = tkm_sig_job_verify(ses, repo, image_digest, pol, sync_done, &w, NULL, err);
    if (rc)
        return rc;
    while (!w.done)
        uv_run(tkm__oci_session_loop(ses), UV_RUN_ONCE);
    return w.rc;
}

/* ---- reasons ------------------------------------------------------------------- */

const char *tkm_sig_reason(int rc)
{
    static const struct {
        int rc;
        const char *reason;
    } reasons[] = {
        {0, "Verified"},
        {-ENOENT, "NoSignature"},
        {TKM_SIG_ENOIMAGE, "ImageNotFound"},
        {-EKEYREJECTED, "KeyMismatch"},
        {-EBADMSG, "SignatureForOtherImage"},
        {-ENOTSUP, "UnsupportedSignature"},
        {-EPROTONOSUPPORT, "UnsupportedSignature"},
        {-EINVAL, "MalformedSignature"},
        {-EACCES, "RegistryUnauthorized"},
        {-EPERM, "RegistryUnauthorized"},
        {-ECONNREFUSED, "RegistryUnreachable"},
        {-ECONNRESET, "RegistryUnreachable"},
        {-ETIMEDOUT, "RegistryUnreachable"},
        {-EHOSTUNREACH, "RegistryUnreachable"},
        {-ENETUNREACH, "RegistryUnreachable"},
        {-EIO, "RegistryUnreachable"},
        {-EAGAIN, "RegistryUnreachable"},
        {-ETIME, TKM_OCI_REASON_PULL_DEADLINE},
        {TKM_OCI_EREACH, "RegistryNotAllowed"},
        {-EPROTO, "RegistryError"},
        {-E2BIG, "RegistryError"},
        {-ELOOP, "RegistryError"},
        {TKM_SIG_EPOLICY, "InvalidPolicy"},
        {-ECANCELED, "Cancelled"},
        {-ESHUTDOWN, "Cancelled"},
    };
    for (size_t i = 0; i < TKM_ARRAY_SIZE(reasons); i++)
        if (reasons[i].rc == rc)
            return reasons[i].reason;
    return "InternalError";
}
