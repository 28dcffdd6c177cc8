/*
 * sig_registry.c - finds an image's signatures the way cosign v3 does (OCI
 * referrers, the "sha256-<hex>" tag schema, the classic ".sig" tag) and
 * verifies each against a policy until one satisfies it (see bundle.h).
 */
#include <errno.h>
#include <jansson.h>
#include <string.h>

#include <tkm/archive.h> /* tkm_digest_valid */
#include <tkm/buf.h>
#include <tkm/oci/registry.h>
#include <tkm/trust/bundle.h>
#include <tkm/trust/cosign.h>
#include <tkm/trust/keys.h>

#include "trust-int.h"

#define EMPTY_TYPE "application/vnd.oci.empty.v1+json"

struct search {
    struct tkm_oci_registry *r;
    const char *repo, *digest;
    const struct tkm_sig_policy *pol;
    struct tkm_sig_result *res;
    struct tkm_buf looked; /* "where it looked", for the unsigned message */
    int capped;            /* an index listed more than TKM_OCI_REFERRERS_MAX bundles */
    struct tkm_buf fails;  /* "; "-separated reasons of the signatures that failed */
    struct tkm_err best;   /* the most telling failure */
    size_t found;
};

/* Which failure to report when nothing verified: the most specific first. */
static int rank(int code)
{
    switch (code) {
    case -EBADMSG:
        return 6;
    case -EKEYREJECTED:
        return 5;
    case -ENOTSUP:
        return 4;
    case -EPROTONOSUPPORT:
        return 3;
    case -EINVAL:
        return 2;
    default:
        return 1;
    }
}

static void note_fail(struct search *s, const char *where, const struct tkm_err *e)
{
    if (s->best.code == 0 || rank(e->code) > rank(s->best.code)) {
        s->best = *e;
        tkm_err_clear(&s->best);
        tkm_err_set(&s->best, e->code, "%s: %s", where, tkm_err_str(e));
    }
    tkm_buf_printf(&s->fails, "%s%s: %s", s->fails.len ? "; " : "", where, tkm_err_str(e));
}

static int is_bundle_type(const char *t)
{
    return t && strncmp(t, TKM_BUNDLE_MEDIA_PREFIX, strlen(TKM_BUNDLE_MEDIA_PREFIX)) == 0;
}

/* One referrer manifest (by digest): its bundle layers, each verified. 1 when
 * one satisfied the policy, 0 when none did, < 0 on a registry error. */
static int try_referrer(struct search *s, const char *mdigest, enum tkm_sig_source src)
{
    struct tkm_buf man = TKM_BUF_INIT(TKM_COSIGN_MAX_MANIFEST), blob = TKM_BUF_INIT(TKM_BUNDLE_MAX);
    struct tkm_err e = {0};
    char ct[256], got[TKM_OCI_DIGEST_LEN + 1], where[640];
    json_t *root = NULL;
    int rc = tkm_oci_registry_get_manifest(s->r, s->repo, mdigest, &man, ct, sizeof ct, got, &e);
    snprintf(where, sizeof where, "%s@%s (%s)", s->repo, mdigest, tkm_sig_source_name(src));
    if (rc < 0) {
        s->found++;
        note_fail(s, where, &e);
        rc = 0;
        goto out;
    }
    root = json_loadb(man.data, man.len, JSON_REJECT_DUPLICATES, NULL);
    json_t *layers = json_object_get(root, "layers"), *l;
    if (!json_is_array(layers)) {
        s->found++;
        tkm_err_set(&e, -EINVAL, "the referrer is not an image manifest with layers");
        note_fail(s, where, &e);
        rc = 0;
        goto out;
    }
    const char *pt = json_string_value(
        json_object_get(json_object_get(root, "annotations"), "dev.sigstore.bundle.predicateType"));
    size_t i;
    rc = 0;
    if (pt && strcmp(pt, TKM_BUNDLE_PREDICATE_SIGN) != 0)
        goto out; /* an attestation, not a signature */
    json_array_foreach(layers, i, l)
    {
        struct tkm_oci_desc d;
        const char *mt = json_string_value(json_object_get(l, "mediaType"));
        const char *dg = json_string_value(json_object_get(l, "digest"));
        json_int_t size = json_integer_value(json_object_get(l, "size"));
        if (!is_bundle_type(mt))
            continue;
        s->found++;
        snprintf(where, sizeof where, "%s@%s layer %zu (%s)", s->repo, mdigest, i,
                 tkm_sig_source_name(src));
        tkm_err_clear(&e);
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
        if ((rc = tkm_oci_registry_fetch_blob_mem(s->r, s->repo, &d, &blob, &e)) < 0) {
            note_fail(s, where, &e);
            rc = 0;
            continue;
        }
        if (tkm_bundle_verify((const unsigned char *)blob.data, blob.len, s->pol, s->digest,
                              s->repo, s->res, &e) == 0) {
            s->res->source = src;
            snprintf(s->res->location, sizeof s->res->location, "%s", where);
            rc = 1;
            goto out;
        }
        note_fail(s, where, &e);
    }
out:
    json_decref(root);
    tkm_buf_release(&man);
    tkm_buf_release(&blob);
    return rc;
}

/* The index's bundle entries (referrers answer or tag-schema index), tried in order. */
static int try_index(struct search *s, const struct tkm_buf *idx, enum tkm_sig_source src)
{
    json_t *root = json_loadb(idx->data, idx->len, JSON_REJECT_DUPLICATES, NULL);
    json_t *m, *ms = json_object_get(root, "manifests");
    size_t i, bundles = 0;
    int rc = 0;
    if (!json_is_array(ms)) {
        struct tkm_err e = {0};
        tkm_err_set(&e, -EINVAL, "the %s index is not an OCI image index",
                    tkm_sig_source_name(src));
        note_fail(s, s->repo, &e);
        goto out;
    }
    json_array_foreach(ms, i, m)
    {
        const char *at = json_string_value(json_object_get(m, "artifactType"));
        const char *dg = json_string_value(json_object_get(m, "digest"));
        json_t *ann = json_object_get(m, "annotations");
        const char *pt =
            json_string_value(json_object_get(ann, "dev.sigstore.bundle.predicateType"));
        /* Some registries put the config's media type (the empty descriptor)
         * in the index instead of the manifest's artifactType: look inside. */
        if ((at && !is_bundle_type(at) && strcmp(at, EMPTY_TYPE) != 0) || !dg ||
            !tkm_digest_valid(dg))
            continue;
        if (pt && strcmp(pt, TKM_BUNDLE_PREDICATE_SIGN) != 0)
            continue; /* an attestation, not a signature */
        if (++bundles > TKM_OCI_REFERRERS_MAX)
            break; /* the same bound as the referrers API's pages */
        if ((rc = try_referrer(s, dg, src)) != 0)
            goto out;
    }
out:
    if (bundles > TKM_OCI_REFERRERS_MAX) {
        s->capped = 1;
        tkm_buf_printf(&s->looked,
                       " (more than %d signature bundles: the cap was hit, only the first %d "
                       "were tried)",
                       TKM_OCI_REFERRERS_MAX, TKM_OCI_REFERRERS_MAX);
    } else {
        tkm_buf_printf(&s->looked, " (%zu signature bundle%s)", bundles, bundles == 1 ? "" : "s");
    }
    json_decref(root);
    return rc;
}

/* Referrers API, else the tag schema. 1 verified, 0 not, < 0 registry error. */
static int try_bundles(struct search *s, struct tkm_err *err)
{
    struct tkm_buf idx = TKM_BUF_INIT(TKM_OCI_MANIFEST_MAX);
    struct tkm_err e = {0};
    char tag[80], ct[256], got[TKM_OCI_DIGEST_LEN + 1];
    snprintf(tag, sizeof tag, "sha256-%s", s->digest + 7);
    int rc = tkm_oci_registry_get_referrers(s->r, s->repo, s->digest, NULL, &idx, &e);
    if (rc == 0) {
        tkm_buf_printf(&s->looked, "the referrers API (/v2/%s/referrers/%s)", s->repo, s->digest);
        rc = try_index(s, &idx, TKM_SIG_SRC_REFERRERS);
        goto out;
    }
    if (rc != -ENOTSUP) {
        *err = e;
        goto out;
    }
    tkm_err_clear(&e);
    tkm_buf_printf(&s->looked, "the referrers API (none on this registry), the tag %s:%s", s->repo,
                   tag);
    rc = tkm_oci_registry_get_manifest(s->r, s->repo, tag, &idx, ct, sizeof ct, got, &e);
    if (rc == -ENOENT) {
        tkm_buf_printf(&s->looked, " (not found)");
        rc = 0;
        goto out;
    }
    if (rc < 0) {
        *err = e;
        goto out;
    }
    rc = try_index(s, &idx, TKM_SIG_SRC_TAG_SCHEMA);
out:
    tkm_buf_release(&idx);
    return rc;
}

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

/* The classic "sha256-<hex>.sig" manifest, each payload fetched once, every key tried. */
static int try_sig_tag(struct search *s, struct tkm_err *err)
{
    struct tkm_buf man = TKM_BUF_INIT(TKM_COSIGN_MAX_MANIFEST);
    struct tkm_cosign_layer *layers = NULL;
    struct tkm_buf *payloads = NULL;
    struct tkm_cosign_blob *blobs = NULL;
    struct tkm_err e = {0};
    size_t n = 0;
    char tag[80], ct[256], md[TKM_OCI_DIGEST_LEN + 1], where[640];
    tkm_cosign_sig_tag(s->digest, tag);
    snprintf(where, sizeof where, "%s:%s (.sig tag)", s->repo, tag);
    tkm_buf_printf(&s->looked, " and the tag %s:%s", s->repo, tag);
    int rc = tkm_oci_registry_get_manifest(s->r, s->repo, tag, &man, ct, sizeof ct, md, &e);
    if (rc == -ENOENT) {
        tkm_buf_printf(&s->looked, " (not found)");
        rc = 0;
        goto out;
    }
    if (rc < 0) {
        *err = e;
        goto out;
    }
    if ((rc = tkm_cosign_sig_layers(man.data, man.len, &layers, &n, &e)) < 0) {
        if (rc != -ENOENT)
            s->found++;
        note_fail(s, where, &e);
        rc = 0;
        goto out;
    }
    s->found += n;
    if ((rc = tkm__trust_fetch_payloads(s->r, s->repo, layers, n, where, &payloads, &blobs, err)) <
        0)
        goto out;
    rc = 0;
    if (s->pol->nkeys == 0) {
        tkm_err_clear(&e);
        tkm_err_set(
            &e, -ENOTSUP,
            "%zu classic signature%s: verifying them needs a public key (keyless classic "
            "signatures, with certificate annotations, are not read; cosign v3 bundles are)",
            n, n == 1 ? "" : "s");
        note_fail(s, where, &e);
    }
    for (size_t k = 0; k < s->pol->nkeys; k++) {
        struct tkm_cosign_result cr;
        tkm_err_clear(&e);
        if (tkm_cosign_verify(man.data, man.len, blobs, n, s->pol->keys[k].pem, s->pol->keys[k].len,
                              s->digest, &cr, &e) < 0) {
            note_fail(s, where, &e);
            continue;
        }
        if (!s->pol->allow_cross_repository && cr.docker_reference[0] &&
            !same_repo(cr.docker_reference, s->repo)) {
            tkm_err_clear(&e);
            tkm_err_set(&e, -EBADMSG,
                        "signature layer %zu names the image %s, not %s (set "
                        "allowCrossRepository when the image was copied on purpose)",
                        cr.layer, cr.docker_reference, s->repo);
            note_fail(s, where, &e);
            continue;
        }
        memset(s->res, 0, sizeof *s->res);
        s->res->source = TKM_SIG_SRC_SIG_TAG;
        s->res->format = TKM_SIG_FMT_SIMPLESIGNING;
        s->res->tlog_index = -1;
        snprintf(s->res->location, sizeof s->res->location, "%s:%s layer %zu", s->repo, tag,
                 cr.layer);
        memcpy(s->res->key_id, cr.key_id, sizeof cr.key_id);
        EVP_PKEY *pk = NULL;
        if (tkm_trust_load_pubkey(s->pol->keys[k].pem, s->pol->keys[k].len, &pk, NULL) == 0)
            tkm_trust_key_desc(pk, s->res->key_desc, sizeof s->res->key_desc);
        EVP_PKEY_free(pk);
        memcpy(s->res->docker_reference, cr.docker_reference, sizeof cr.docker_reference);
        rc = 1;
        break;
    }
out:
    tkm__trust_payloads_free(payloads, blobs, n);
    free(layers);
    tkm_buf_release(&man);
    return rc;
}

static int verdict(struct search *s, struct tkm_err *err)
{
    if (s->found == 0)
        return tkm_err_set(err, -ENOENT, "%s@%s is not signed: no signature found; looked at %s",
                           s->repo, s->digest, s->looked.data);
    if (s->best.code == 0) /* found, but none was read (e.g. only attestations) */
        return tkm_err_set(err, -ENOENT, "%s@%s: no signature satisfies the policy; looked at %s",
                           s->repo, s->digest, s->looked.data);
    if (s->found == 1)
        return tkm_err_set(err, s->best.code, "%s", s->best.msg);
    if (s->capped)
        return tkm_err_set(err, s->best.code,
                           "none of the %zu signatures tried (more than %d signature bundles: the "
                           "cap was hit) satisfies the policy: %s",
                           s->found, TKM_OCI_REFERRERS_MAX, s->fails.data);
    return tkm_err_set(err, s->best.code, "none of the %zu signatures satisfies the policy: %s",
                       s->found, s->fails.data);
}

int tkm_sig_verify_registry(struct tkm_oci_registry *r, const char *repo, const char *image_digest,
                            const struct tkm_sig_policy *pol, struct tkm_sig_result *res,
                            struct tkm_err *err)
{
    struct tkm_sig_result local;
    struct search s = {.r = r,
                       .repo = repo,
                       .digest = image_digest,
                       .pol = pol,
                       .res = res ? res : &local,
                       .looked = TKM_BUF_INIT(4096),
                       .fails = TKM_BUF_INIT(8192)};
    int rc;
    if (!image_digest || !tkm_digest_valid(image_digest))
        return tkm_err_set(err, -EINVAL, "image digest '%s' is not sha256:<64 hex>",
                           image_digest ? image_digest : "(null)");
    if ((rc = tkm_sig_policy_check(pol, err)) < 0)
        return rc;
    if ((rc = try_bundles(&s, err)) == 0)
        rc = try_sig_tag(&s, err);
    if (rc == 1) {
        s.res->found = s.found;
        rc = 0;
    } else if (rc == 0) {
        rc = verdict(&s, err);
    }
    tkm_buf_release(&s.looked);
    tkm_buf_release(&s.fails);
    return rc;
}
