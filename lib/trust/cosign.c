/*
 * cosign.c - key-based verification of cosign "sha256-<hex>.sig" signatures
 * (see cosign.h and docs/security.md).
 */
#include <tkm/trust/cosign.h>

#include <errno.h>
#include <jansson.h>
#include <openssl/evp.h>
#include <strings.h>

#include <tkm/archive.h> /* tkm_digest_valid */
#include <tkm/trust/keys.h>
#include <tkm/util.h>

#include "trust-int.h"

#define MAX_SIG_B64 8192
#define MAX_KEYS    512

int tkm_cosign_sig_tag(const char *image_digest, char out[80])
{
    if (!tkm_digest_valid(image_digest))
        return -EINVAL;
    snprintf(out, 80, "sha256-%s.sig", image_digest + 7);
    return 0;
}

static int load_manifest(const char *manifest, size_t len, json_t **root, json_t **layers,
                         struct tkm_err *err)
{
    json_error_t je;
    *root = NULL;
    if (len > TKM_COSIGN_MAX_MANIFEST)
        return tkm_err_set(err, -EINVAL, "signature manifest: %zu bytes, more than %d", len,
                           TKM_COSIGN_MAX_MANIFEST);
    *root = json_loadb(manifest, len, JSON_REJECT_DUPLICATES, &je);
    if (!*root)
        return tkm_err_set(err, -EINVAL, "signature manifest is not valid JSON: %s (line %d)",
                           je.text, je.line);
    *layers = json_object_get(*root, "layers");
    if (!json_is_object(*root) || !json_is_array(*layers))
        return tkm_err_set(err, -EINVAL, "signature manifest has no \"layers\" array");
    if (json_array_size(*layers) > TKM_COSIGN_MAX_LAYERS)
        return tkm_err_set(err, -EINVAL,
                           "signature manifest has %zu layers, more than the cap of %d",
                           json_array_size(*layers), TKM_COSIGN_MAX_LAYERS);
    return 0;
}

/* Step 1 for one layer: 1 = a signature layer (out filled), 0 = not one,
 * < 0 = a malformed signature layer. */
static int layer_desc(json_t *l, size_t i, struct tkm_cosign_layer *out, struct tkm_err *err)
{
    const char *mt = json_string_value(json_object_get(l, "mediaType"));
    if (!mt || strcmp(mt, TKM_COSIGN_MEDIA_TYPE) != 0)
        return 0;
    const char *dg = json_string_value(json_object_get(l, "digest"));
    json_t *sz = json_object_get(l, "size");
    if (!tkm_digest_valid(dg))
        return tkm_err_set(err, -EINVAL, "signature layer %zu: digest '%.80s' is not sha256:<hex>",
                           i, dg ? dg : "(missing)");
    if (!json_is_integer(sz) || json_integer_value(sz) < 0)
        return tkm_err_set(err, -EINVAL, "signature layer %zu (%s): no valid size", i, dg);
    if (json_integer_value(sz) > TKM_COSIGN_MAX_PAYLOAD)
        return tkm_err_set(err, -E2BIG,
                           "signature layer %zu (%s): payload of %lld bytes exceeds %d bytes", i,
                           dg, (long long)json_integer_value(sz), TKM_COSIGN_MAX_PAYLOAD);
    snprintf(out->digest, sizeof out->digest, "%s", dg);
    out->size = (uint64_t)json_integer_value(sz);
    return 1;
}

int tkm_cosign_sig_layers(const char *manifest, size_t len, struct tkm_cosign_layer **layers,
                          size_t *n, struct tkm_err *err)
{
    json_t *root = NULL, *arr = NULL;
    struct tkm_cosign_layer *v = NULL;
    size_t cnt = 0;
    int rc = load_manifest(manifest, len, &root, &arr, err);
    *layers = NULL;
    *n = 0;
    if (rc < 0)
        goto out;
    v = calloc(json_array_size(arr) + 1, sizeof(*v));
    if (!v) {
        rc = tkm_err_set(err, -ENOMEM, "out of memory");
        goto out;
    }
    for (size_t i = 0; i < json_array_size(arr); i++) {
        int r = layer_desc(json_array_get(arr, i), i, &v[cnt], err);
        if (r < 0) {
            rc = r;
            goto out;
        }
        cnt += (size_t)r;
    }
    if (cnt == 0) {
        rc =
            tkm_err_set(err, -ENOENT, "signature manifest has no %s layers", TKM_COSIGN_MEDIA_TYPE);
        goto out;
    }
    *layers = v;
    *n = cnt;
    v = NULL;
out:
    free(v);
    json_decref(root);
    return rc;
}

static int sha256_hex_eq(const unsigned char *p, size_t n, const char *digest)
{
    unsigned char md[32];
    unsigned int mdlen = 0;
    char hex[65];
    if (EVP_Digest(p, n, md, &mdlen, EVP_sha256(), NULL) != 1)
        return 0;
    tkm_hex(md, 32, hex);
    return strcmp(hex, digest + 7) == 0;
}

static int b64_decode(const char *s, unsigned char **out, size_t *outlen)
{
    size_t n = strlen(s);
    *out = NULL;
    if (n == 0 || n % 4 != 0 || n > MAX_SIG_B64)
        return -EINVAL;
    unsigned char *buf = malloc(n / 4 * 3 + 1);
    if (!buf)
        return -ENOMEM;
    int r = EVP_DecodeBlock(buf, (const unsigned char *)s, (int)n);
    if (r < 0) {
        free(buf);
        return -EINVAL;
    }
    size_t pad = (s[n - 1] == '=') + (s[n - 2] == '=');
    *out = buf;
    *outlen = (size_t)r - pad;
    return 0;
}

/* 1 when the signature verifies, 0 when it does not (or is malformed). */
int tkm__trust_sig_ok(EVP_PKEY *k, const EVP_MD *md, const unsigned char *sig, size_t siglen,
                      const unsigned char *p, size_t n)
{
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    int ok = ctx && EVP_DigestVerifyInit(ctx, NULL, md, NULL, k) == 1 &&
             EVP_DigestVerify(ctx, sig, siglen, p, n) == 1;
    EVP_MD_CTX_free(ctx);
    return ok;
}

/* Rejects, anywhere in the document, an object with two keys equal but for case. */
const char *tkm__trust_case_dup(json_t *v)
{
    if (json_is_array(v)) {
        for (size_t i = 0; i < json_array_size(v); i++) {
            const char *d = tkm__trust_case_dup(json_array_get(v, i));
            if (d)
                return d;
        }
        return NULL;
    }
    if (!json_is_object(v))
        return NULL;
    if (json_object_size(v) > MAX_KEYS)
        return "(more than 512 keys in one object)";
    const char *k1, *k2;
    json_t *c1, *c2;
    json_object_foreach(v, k1, c1)
    {
        json_object_foreach(v, k2, c2)
        {
            if (k1 != k2 && strcasecmp(k1, k2) == 0)
                return k1;
        }
        const char *d = tkm__trust_case_dup(c1);
        if (d)
            return d;
    }
    return NULL;
}

/* The member whose key equals key ignoring case (unique after case_dup). */
static json_t *get_ci(json_t *obj, const char *key)
{
    const char *k;
    json_t *v;
    json_object_foreach(obj, k, v)
    {
        if (strcasecmp(k, key) == 0)
            return v;
    }
    return NULL;
}

/* Step 4: the claims of a payload whose signature verified. */
static int check_claims(const struct tkm_cosign_blob *b, const char *image_digest,
                        struct tkm_cosign_result *res, struct tkm_err *err)
{
    json_error_t je;
    json_t *root = json_loadb((const char *)b->data, b->len, JSON_REJECT_DUPLICATES, &je);
    int rc = 0;
    if (!root) {
        rc = tkm_err_set(err, -EBADMSG, "signed payload %s is not valid JSON: %s", b->digest,
                         je.text);
        goto out;
    }
    const char *dup = tkm__trust_case_dup(root);
    if (dup) {
        rc = tkm_err_set(err, -EBADMSG,
                         "signed payload %s has keys that differ only in case (\"%s\")", b->digest,
                         dup);
        goto out;
    }
    json_t *crit = get_ci(root, "critical");
    const char *type = json_string_value(get_ci(crit, "type"));
    const char *dg = json_string_value(get_ci(get_ci(crit, "image"), "docker-manifest-digest"));
    const char *ref = json_string_value(get_ci(get_ci(crit, "identity"), "docker-reference"));
    if (!json_is_object(root) || !json_is_object(crit)) {
        rc = tkm_err_set(err, -EBADMSG, "signed payload %s has no \"critical\" object", b->digest);
    } else if (!type || strcmp(type, TKM_COSIGN_CLAIM_TYPE) != 0) {
        rc = tkm_err_set(err, -EBADMSG, "signed payload %s: critical.type is \"%.64s\", not \"%s\"",
                         b->digest, type ? type : "(missing)", TKM_COSIGN_CLAIM_TYPE);
    } else if (!dg) {
        rc = tkm_err_set(err, -EBADMSG,
                         "signed payload %s has no critical.image.docker-manifest-digest",
                         b->digest);
    } else if (strcmp(dg, image_digest) != 0) {
        rc = tkm_err_set(err, -EBADMSG, "signature is for %.100s, image is %s", dg, image_digest);
    } else if (res) {
        snprintf(res->docker_reference, sizeof res->docker_reference, "%s", ref ? ref : "");
    }
out:
    json_decref(root);
    return rc;
}

static const struct tkm_cosign_blob *find_blob(const struct tkm_cosign_blob *blobs, size_t n,
                                               const char *digest)
{
    for (size_t i = 0; i < n; i++)
        if (blobs[i].digest && strcmp(blobs[i].digest, digest) == 0)
            return &blobs[i];
    return NULL;
}

/* Steps 2-4 for layer i. */
static int verify_layer(json_t *l, size_t i, const struct tkm_cosign_layer *d,
                        const struct tkm_cosign_blob *blobs, size_t nblobs, EVP_PKEY *k,
                        const EVP_MD *md, const char *kdesc, const char *image_digest,
                        struct tkm_cosign_result *res, struct tkm_err *err)
{
    const struct tkm_cosign_blob *b = find_blob(blobs, nblobs, d->digest);
    if (!b || !b->data)
        return tkm_err_set(err, -ENOENT, "signature layer %zu: payload %s was not fetched", i,
                           d->digest);
    if (b->len != d->size || !sha256_hex_eq(b->data, b->len, d->digest))
        return tkm_err_set(err, -EBADMSG,
                           "signature layer %zu: payload does not match its descriptor %s "
                           "(%zu bytes, %llu expected)",
                           i, d->digest, b->len, (unsigned long long)d->size);
    const char *s64 = json_string_value(
        json_object_get(json_object_get(l, "annotations"), TKM_COSIGN_SIG_ANNOTATION));
    unsigned char *sig = NULL;
    size_t siglen = 0;
    if (!s64 || b64_decode(s64, &sig, &siglen) < 0)
        return tkm_err_set(err, -EINVAL, "signature layer %zu: annotation %s is %s", i,
                           TKM_COSIGN_SIG_ANNOTATION, s64 ? "not valid base64" : "missing");
    int ok = tkm__trust_sig_ok(k, md, sig, siglen, b->data, b->len);
    free(sig);
    if (!ok)
        return tkm_err_set(err, -EKEYREJECTED, "signature does not verify with key %s", kdesc);
    return check_claims(b, image_digest, res, err);
}

/* See trust-int.h. */
int tkm__trust_rank(int code)
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

int tkm_cosign_verify(const char *manifest, size_t manifest_len,
                      const struct tkm_cosign_blob *blobs, size_t nblobs, const char *pubkey_pem,
                      size_t pem_len, const char *image_digest, struct tkm_cosign_result *res,
                      struct tkm_err *err)
{
    json_t *root = NULL, *arr = NULL;
    EVP_PKEY *k = NULL;
    const EVP_MD *md = NULL;
    struct tkm_err best = {0};
    char kid[40], kdesc[160], desc[80];
    int rc, nsig = 0;
    if (!tkm_digest_valid(image_digest))
        return tkm_err_set(err, -EINVAL, "image digest '%s' is not sha256:<64 hex>",
                           image_digest ? image_digest : "(null)");
    if ((rc = tkm_trust_load_pubkey(pubkey_pem, pem_len, &k, err)) < 0 ||
        (rc = tkm_trust_cosign_md(k, &md, err)) < 0 ||
        (rc = load_manifest(manifest, manifest_len, &root, &arr, err)) < 0)
        goto out;
    tkm_trust_key_id(k, kid);
    tkm_trust_key_desc(k, desc, sizeof desc);
    snprintf(kdesc, sizeof kdesc, "%s (%s)", kid, desc);
    rc = -ENOENT;
    for (size_t i = 0; i < json_array_size(arr); i++) {
        json_t *l = json_array_get(arr, i);
        struct tkm_cosign_layer d;
        struct tkm_err e = {0};
        int r = layer_desc(l, i, &d, &e);
        if (r == 0)
            continue;
        nsig++;
        if (r > 0)
            r = verify_layer(l, i, &d, blobs, nblobs, k, md, kdesc, image_digest, res, &e);
        if (r == 0) {
            if (res) {
                res->layer = i;
                memcpy(res->key_id, kid, sizeof kid);
            }
            rc = 0;
            goto out;
        }
        if (best.code == 0 || tkm__trust_rank(r) > tkm__trust_rank(best.code))
            best = e;
    }
    if (nsig == 0)
        rc = tkm_err_set(err, -ENOENT, "no cosign signatures (%s layers) for %s",
                         TKM_COSIGN_MEDIA_TYPE, image_digest);
    else
        rc = tkm_err_set(err, best.code, "%s%s", best.msg,
                         nsig > 1 ? " (no other signature layer verified either)" : "");
out:
    json_decref(root);
    EVP_PKEY_free(k);
    return rc;
}
