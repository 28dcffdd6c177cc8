/*
 * bundle.c - verification of Sigstore bundles with public keys (see bundle.h
 * and docs/security.md), and the policy helpers of policy.h.
 */
#include <tkm/trust/bundle.h>

#include <errno.h>
#include <jansson.h>
#include <openssl/evp.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <regex.h>
#include <string.h>

#include <tkm/archive.h> /* tkm_digest_valid */
#include <tkm/buf.h>
#include <tkm/trust/keys.h>
#include <tkm/util.h>

#include "trust-int.h"

#define MAX_DSSE_SIGS  16
#define MAX_SUBJECTS   8
#define MAX_SIG_BYTES  4096
#define STATEMENT_V1   "https://in-toto.io/Statement/v1"
#define STATEMENT_V01  "https://in-toto.io/Statement/v0.1"
#define INTOTO_PAYLOAD "application/vnd.in-toto+json"
#define OID_ISSUER_V1  "1.3.6.1.4.1.57264.1.1"
#define OID_ISSUER_V2  "1.3.6.1.4.1.57264.1.8"

/* ---- policy ------------------------------------------------------------- */

int tkm_sig_mode_parse(const char *s, enum tkm_sig_mode *out)
{
    static const char *const names[] = {"Enforce", "Audit", "Disabled"}; /* enum order */
    for (size_t i = 0; s && i < TKM_ARRAY_SIZE(names); i++)
        if (strcmp(s, names[i]) == 0) {
            *out = (enum tkm_sig_mode)i;
            return 0;
        }
    return -EINVAL;
}

static int identity_check(const struct tkm_sig_identity *id, size_t i, struct tkm_err *err)
{
    regex_t re;
    if (!id->issuer || !id->issuer[0])
        return tkm_err_set(err, -EINVAL, "identities[%zu].issuer is required", i);
    if (!!(id->subject && id->subject[0]) == !!(id->subject_regexp && id->subject_regexp[0]))
        return tkm_err_set(err, -EINVAL,
                           "identities[%zu] needs exactly one of subject and subjectRegExp", i);
    if (id->subject_regexp && id->subject_regexp[0]) {
        int r = regcomp(&re, id->subject_regexp, REG_EXTENDED | REG_NOSUB);
        if (r != 0)
            return tkm_err_set(err, -EINVAL,
                               "identities[%zu].subjectRegExp '%s' is not a valid POSIX extended "
                               "regular expression",
                               i, id->subject_regexp);
        regfree(&re);
    }
    return 0;
}

int tkm_sig_policy_check(const struct tkm_sig_policy *p, struct tkm_err *err)
{
    if (p->mode == TKM_SIG_MODE_DISABLED)
        return 0;
    for (size_t i = 0; i < p->nkeys; i++) {
        EVP_PKEY *k = NULL;
        const EVP_MD *md = NULL;
        int rc = tkm_trust_load_pubkey(p->keys[i].pem, p->keys[i].len, &k, err);
        if (rc == 0)
            rc = tkm_trust_cosign_md(k, &md, err);
        EVP_PKEY_free(k);
        if (rc < 0) {
            tkm_err_prefix(err, "signature policy: keys[%zu]", i);
            return rc;
        }
    }
    if (p->trusted_root && p->nidentities == 0)
        return tkm_err_set(err, -EINVAL,
                           "signature policy: keyless verification (a trusted root) needs at "
                           "least one identity (issuer and subject or subjectRegExp): any signer "
                           "at all is not a policy");
    if (p->nidentities && !p->trusted_root)
        return tkm_err_set(err, -EINVAL,
                           "signature policy: identities are given but no trusted root "
                           "(trusted_root.json) to check their certificates against");
    for (size_t i = 0; i < p->nidentities; i++) {
        int rc = identity_check(&p->identities[i], i, err);
        if (rc < 0) {
            tkm_err_prefix(err, "signature policy");
            return rc;
        }
    }
    if (p->nkeys == 0 && !p->trusted_root)
        return tkm_err_set(err, -EINVAL,
                           "signature policy: no public key and no trusted root: nothing to "
                           "verify signatures with");
    return 0;
}

const char *tkm_sig_source_name(enum tkm_sig_source s)
{
    static const char *const names[] = {"referrers", "tag schema", ".sig tag", "bytes"};
    return (unsigned)s < TKM_ARRAY_SIZE(names) ? names[s] : "bytes";
}

const char *tkm_sig_format_name(enum tkm_sig_format f)
{
    static const char *const names[] = {"cosign simplesigning", "Sigstore bundle (DSSE)",
                                        "Sigstore bundle (message signature)"};
    return (unsigned)f < TKM_ARRAY_SIZE(names) ? names[f] : names[TKM_SIG_FMT_BUNDLE_MESSAGE];
}

/* ---- parsing ------------------------------------------------------------ */

struct bundle {
    json_t *root;
    const char *media_type;
    json_t *material;
    json_t *dsse; /* dsseEnvelope, or NULL */
    json_t *msg;  /* messageSignature, or NULL */
};

/* Every member of o is in allowed (NULL-terminated); else -EINVAL naming it. */
static int only_members(json_t *o, const char *const *allowed, const char *what,
                        struct tkm_err *err)
{
    const char *k;
    json_t *v;
    if (!json_is_object(o))
        return tkm_err_set(err, -EINVAL, "bundle: %s is not an object", what);
    json_object_foreach(o, k, v)
    {
        size_t i = 0;
        while (allowed[i] && strcmp(allowed[i], k) != 0)
            i++;
        if (!allowed[i])
            return tkm_err_set(err, -EINVAL, "bundle: %s has an unknown member '%.64s'", what, k);
    }
    return 0;
}

static int media_type_ok(const char *mt)
{
    static const char *const known[] = {"application/vnd.dev.sigstore.bundle+json;version=0.1",
                                        "application/vnd.dev.sigstore.bundle+json;version=0.2",
                                        "application/vnd.dev.sigstore.bundle+json;version=0.3",
                                        TKM_BUNDLE_MEDIA_TYPE_V03, NULL};
    for (size_t i = 0; known[i]; i++)
        if (strcmp(mt, known[i]) == 0)
            return 1;
    return 0;
}

static int bundle_parse(const unsigned char *p, size_t len, struct bundle *b, struct tkm_err *err)
{
    static const char *const top[] = {"mediaType", "verificationMaterial", "dsseEnvelope",
                                      "messageSignature", NULL};
    static const char *const vm[] = {"publicKey",   "x509CertificateChain",      "certificate",
                                     "tlogEntries", "timestampVerificationData", NULL};
    json_error_t je;
    int rc;
    memset(b, 0, sizeof *b);
    if (len > TKM_BUNDLE_MAX)
        return tkm_err_set(err, -EINVAL, "bundle: %zu bytes, more than %d", len, TKM_BUNDLE_MAX);
    b->root = json_loadb((const char *)p, len, JSON_REJECT_DUPLICATES, &je);
    if (!b->root)
        return tkm_err_set(err, -EINVAL, "bundle is not valid JSON: %s (line %d)", je.text,
                           je.line);
    if ((rc = only_members(b->root, top, "the bundle", err)) < 0)
        return rc;
    b->media_type = json_string_value(json_object_get(b->root, "mediaType"));
    if (!b->media_type)
        return tkm_err_set(err, -EINVAL, "bundle: no mediaType");
    if (!media_type_ok(b->media_type))
        return tkm_err_set(err, -EPROTONOSUPPORT,
                           "bundle media type '%.64s' is not one tkm reads (Sigstore bundle v0.1, "
                           "v0.2, v0.3)",
                           b->media_type);
    b->material = json_object_get(b->root, "verificationMaterial");
    if ((rc = only_members(b->material, vm, "verificationMaterial", err)) < 0)
        return rc;
    b->dsse = json_object_get(b->root, "dsseEnvelope");
    b->msg = json_object_get(b->root, "messageSignature");
    if (!!b->dsse == !!b->msg)
        return tkm_err_set(err, -EINVAL,
                           "bundle: needs exactly one of dsseEnvelope and messageSignature");
    return 0;
}

static int b64_field(json_t *o, const char *key, size_t max, struct tkm_buf *out, const char *what,
                     struct tkm_err *err)
{
    const char *s = json_string_value(json_object_get(o, key));
    tkm_buf_release(out);
    tkm_buf_init(out, max);
    if (!s)
        return tkm_err_set(err, -EINVAL, "bundle: %s.%s is missing or not a string", what, key);
    int rc = tkm_base64_decode(s, strlen(s), out);
    if (rc == -E2BIG)
        return tkm_err_set(err, -EINVAL, "bundle: %s.%s is larger than %zu bytes", what, key, max);
    if (rc < 0)
        return tkm_err_set(err, rc == -ENOMEM ? rc : -EINVAL, "bundle: %s.%s is not base64", what,
                           key);
    return 0;
}

/* ---- keyless material -------------------------------------------------------- */

void tkm__trust_cert_identity(X509 *x, char *san, size_t san_n, char *iss, size_t iss_n)
{
    GENERAL_NAMES *gens = X509_get_ext_d2i(x, NID_subject_alt_name, NULL, NULL);
    snprintf(san, san_n, "(no SAN)");
    snprintf(iss, iss_n, "(no issuer extension)");
    for (int i = 0; gens && i < sk_GENERAL_NAME_num(gens); i++) {
        GENERAL_NAME *g = sk_GENERAL_NAME_value(gens, i);
        if (g->type == GEN_EMAIL || g->type == GEN_URI) {
            const ASN1_IA5STRING *s =
                g->type == GEN_EMAIL ? g->d.rfc822Name : g->d.uniformResourceIdentifier;
            snprintf(san, san_n, "%.*s", ASN1_STRING_length(s),
                     (const char *)ASN1_STRING_get0_data(s));
            break;
        }
    }
    GENERAL_NAMES_free(gens);
    const char *oids[] = {OID_ISSUER_V2, OID_ISSUER_V1};
    for (size_t o = 0; o < 2; o++) {
        ASN1_OBJECT *obj = OBJ_txt2obj(oids[o], 1);
        int idx = obj ? X509_get_ext_by_OBJ(x, obj, -1) : -1;
        ASN1_OBJECT_free(obj);
        if (idx < 0)
            continue;
        const ASN1_OCTET_STRING *v = X509_EXTENSION_get_data(X509_get_ext(x, idx));
        const unsigned char *d = ASN1_STRING_get0_data(v);
        int n = ASN1_STRING_length(v);
        if (o == 0 && n > 2 && d[0] == 0x0c && d[1] < 0x80 && d[1] + 2 == n) {
            d += 2; /* DER UTF8String, short form */
            n -= 2;
        } else if (o == 0 && n > 3 && d[0] == 0x0c && d[1] == 0x81 && d[2] >= 0x80 &&
                   d[2] + 3 == n) {
            d += 3; /* long form, 128..255 bytes */
            n -= 3;
        } else if (o == 0) {
            snprintf(iss, iss_n, "(malformed issuer extension)");
            return;
        }
        snprintf(iss, iss_n, "%.*s", n, (const char *)d);
        return;
    }
}

static int keyless_refuse(const struct bundle *b, struct tkm_err *err)
{
    json_t *c = json_object_get(b->material, "certificate");
    struct tkm_buf der = TKM_BUF_INIT(64 * 1024);
    char san[512], iss[512];
    X509 *x = NULL;
    if (!c) {
        json_t *chain =
            json_object_get(json_object_get(b->material, "x509CertificateChain"), "certificates");
        c = json_array_get(chain, 0);
    }
    int rc = b64_field(c, "rawBytes", 64 * 1024, &der, "verificationMaterial.certificate", err);
    if (rc < 0)
        goto out;
    const unsigned char *p = (const unsigned char *)der.data;
    if (!(x = d2i_X509(NULL, &p, (long)der.len)) ||
        p != (const unsigned char *)der.data + der.len) {
        rc = tkm_err_set(err, -EINVAL, "bundle: verificationMaterial certificate is not DER X.509");
        goto out;
    }
    tkm__trust_cert_identity(x, san, sizeof san, iss, sizeof iss);
    rc = tkm_err_set(err, -ENOTSUP,
                     "keyless signature by %s (issuer %s), and the policy has no trusted root "
                     "(trusted_root.json) to verify certificates with",
                     san, iss);
out:
    X509_free(x);
    tkm_buf_release(&der);
    return rc;
}

/* ---- statement ---------------------------------------------------------- */

static int subject_matches(json_t *subj, const char *hex, const struct tkm_sig_policy *pol,
                           const char *repository, struct tkm_err *err)
{
    json_t *s;
    size_t i;
    const char *other = NULL;
    json_array_foreach(subj, i, s)
    {
        const char *d = json_string_value(json_object_get(json_object_get(s, "digest"), "sha256"));
        const char *name = json_string_value(json_object_get(s, "name"));
        if (!d || strcmp(d, hex) != 0) {
            other = other ? other : d;
            continue;
        }
        if (name && name[0] && repository && !pol->allow_cross_repository &&
            strcmp(name, repository) != 0)
            return tkm_err_set(err, -EBADMSG,
                               "signature names the image %s, not %s (set allowCrossRepository "
                               "when the image was copied on purpose)",
                               name, repository);
        return 0;
    }
    if (other)
        return tkm_err_set(err, -EBADMSG, "signature is for sha256:%s, image is sha256:%s", other,
                           hex);
    return tkm_err_set(err, -EBADMSG, "signed statement names no sha256 subject");
}

/* Called only after the envelope's signature verified. */
static int check_statement(const struct tkm_buf *payload, const char *image_digest,
                           const struct tkm_sig_policy *pol, const char *repository,
                           struct tkm_err *err)
{
    json_error_t je;
    int rc;
    json_t *st = json_loadb(payload->data, payload->len, JSON_REJECT_DUPLICATES, &je);
    if (!st || !json_is_object(st)) {
        rc = tkm_err_set(err, -EINVAL, "signed statement is not a JSON object");
        goto out;
    }
    const char *dup = tkm__trust_case_dup(st);
    if (dup) {
        rc = tkm_err_set(err, -EINVAL, "signed statement has keys equal but for case ('%.64s')",
                         dup);
        goto out;
    }
    const char *type = json_string_value(json_object_get(st, "_type"));
    const char *pt = json_string_value(json_object_get(st, "predicateType"));
    json_t *subj = json_object_get(st, "subject");
    if (!type || (strcmp(type, STATEMENT_V1) != 0 && strcmp(type, STATEMENT_V01) != 0)) {
        rc =
            tkm_err_set(err, -EPROTONOSUPPORT, "signed payload is not an in-toto statement (%.64s)",
                        type ? type : "no _type");
        goto out;
    }
    if (!pt || strcmp(pt, TKM_BUNDLE_PREDICATE_SIGN) != 0) {
        rc = tkm_err_set(err, -EBADMSG,
                         "bundle is an attestation (predicateType %.64s), not an image signature "
                         "(%s)",
                         pt ? pt : "none", TKM_BUNDLE_PREDICATE_SIGN);
        goto out;
    }
    if (!json_is_array(subj) || json_array_size(subj) == 0 ||
        json_array_size(subj) > MAX_SUBJECTS) {
        rc = tkm_err_set(err, -EINVAL, "signed statement: subject must be 1..%d entries",
                         MAX_SUBJECTS);
        goto out;
    }
    rc = subject_matches(subj, image_digest + 7, pol, repository, err);
out:
    json_decref(st);
    return rc;
}

/* ---- signatures --------------------------------------------------------- */

/* "DSSEv1 <len(type)> <type> <len(body)> <body>" */
static int dsse_pae(const char *type, const struct tkm_buf *body, struct tkm_buf *pae)
{
    int rc = tkm_buf_printf(pae, "DSSEv1 %zu %s %zu ", strlen(type), type, body->len);
    return rc ? rc : tkm_buf_append(pae, body->data, body->len);
}

/* A message signature over a precomputed digest (the image manifest's sha256). */
int tkm__trust_prehash_ok(EVP_PKEY *k, const unsigned char *sig, size_t siglen,
                          const unsigned char *dg, size_t dlen)
{
    EVP_PKEY_CTX *c = EVP_PKEY_CTX_new(k, NULL);
    int ok = c && EVP_PKEY_verify_init(c) == 1 &&
             EVP_PKEY_CTX_set_signature_md(c, EVP_sha256()) == 1 &&
             EVP_PKEY_verify(c, sig, siglen, dg, dlen) == 1;
    EVP_PKEY_CTX_free(c);
    return ok;
}

struct sigset {
    struct tkm_buf sig[MAX_DSSE_SIGS];
    size_t n;
    struct tkm_buf signed_bytes; /* PAE, or the message digest */
    struct tkm_buf payload;      /* DSSE payload */
};

static int dsse_load(json_t *env, struct sigset *s, struct tkm_err *err)
{
    static const char *const mem[] = {"payload", "payloadType", "signatures", NULL};
    static const char *const smem[] = {"sig", "keyid", NULL};
    int rc;
    if ((rc = only_members(env, mem, "dsseEnvelope", err)) < 0 ||
        (rc = b64_field(env, "payload", TKM_BUNDLE_MAX, &s->payload, "dsseEnvelope", err)) < 0)
        return rc;
    const char *type = json_string_value(json_object_get(env, "payloadType"));
    json_t *sigs = json_object_get(env, "signatures");
    if (!type)
        return tkm_err_set(err, -EINVAL, "bundle: dsseEnvelope.payloadType is missing");
    if (strcmp(type, INTOTO_PAYLOAD) != 0)
        return tkm_err_set(err, -EPROTONOSUPPORT,
                           "bundle: DSSE payloadType '%.64s' is not one tkm reads (%s)", type,
                           INTOTO_PAYLOAD);
    if (!json_is_array(sigs) || json_array_size(sigs) == 0 || json_array_size(sigs) > MAX_DSSE_SIGS)
        return tkm_err_set(err, -EINVAL, "bundle: dsseEnvelope.signatures must be 1..%d entries",
                           MAX_DSSE_SIGS);
    for (s->n = 0; s->n < json_array_size(sigs); s->n++) {
        json_t *e = json_array_get(sigs, s->n);
        if ((rc = only_members(e, smem, "dsseEnvelope.signatures[]", err)) < 0 ||
            (rc = b64_field(e, "sig", MAX_SIG_BYTES, &s->sig[s->n], "dsseEnvelope.signatures[]",
                            err)) < 0)
            return rc;
    }
    if (dsse_pae(type, &s->payload, &s->signed_bytes) != 0)
        return tkm_err_set(err, -ENOMEM, "out of memory");
    return 0;
}

static int msg_load(json_t *m, struct sigset *s, struct tkm_err *err)
{
    static const char *const mem[] = {"messageDigest", "signature", NULL};
    static const char *const dmem[] = {"algorithm", "digest", NULL};
    json_t *md = json_object_get(m, "messageDigest");
    int rc;
    if ((rc = only_members(m, mem, "messageSignature", err)) < 0 ||
        (rc = only_members(md, dmem, "messageSignature.messageDigest", err)) < 0 ||
        (rc = b64_field(m, "signature", MAX_SIG_BYTES, &s->sig[0], "messageSignature", err)) < 0 ||
        (rc = b64_field(md, "digest", 64, &s->signed_bytes, "messageDigest", err)) < 0)
        return rc;
    s->n = 1;
    const char *alg = json_string_value(json_object_get(md, "algorithm"));
    if (!alg || strcmp(alg, "SHA2_256") != 0)
        return tkm_err_set(err, -EPROTONOSUPPORT,
                           "bundle: messageDigest algorithm '%.64s' is not SHA2_256, the image "
                           "digest's",
                           alg ? alg : "(none)");
    if (s->signed_bytes.len != 32)
        return tkm_err_set(err, -EINVAL, "bundle: messageDigest.digest is not 32 bytes");
    return 0;
}

/* Called only after the signature over the message digest verified. */
static int check_message(const struct sigset *s, const char *image_digest, struct tkm_err *err)
{
    char hex[65];
    tkm_hex((const unsigned char *)s->signed_bytes.data, 32, hex);
    if (strcmp(hex, image_digest + 7) != 0)
        return tkm_err_set(err, -EBADMSG, "signature is for sha256:%s, image is %s", hex,
                           image_digest);
    return 0;
}

static void sigset_release(struct sigset *s)
{
    for (size_t i = 0; i < MAX_DSSE_SIGS; i++)
        tkm_buf_release(&s->sig[i]);
    tkm_buf_release(&s->signed_bytes);
    tkm_buf_release(&s->payload);
}

/* Index of the policy key that verifies one of the signatures, or < 0. */
static int find_key(const struct sigset *s, int prehashed, const struct tkm_sig_policy *pol,
                    struct tkm_sig_result *res, char *tried, size_t tried_n, struct tkm_err *err)
{
    size_t used = 0;
    tried[0] = '\0';
    for (size_t i = 0; i < pol->nkeys; i++) {
        EVP_PKEY *k = NULL;
        const EVP_MD *md = NULL;
        char kid[40], desc[80];
        int rc = tkm_trust_load_pubkey(pol->keys[i].pem, pol->keys[i].len, &k, err);
        if (rc == 0)
            rc = tkm_trust_cosign_md(k, &md, err);
        if (rc < 0) {
            EVP_PKEY_free(k);
            tkm_err_prefix(err, "signature policy keys[%zu]", i);
            return rc;
        }
        tkm_trust_key_id(k, kid);
        tkm_trust_key_desc(k, desc, sizeof desc);
        int ok = 0;
        for (size_t j = 0; j < s->n && !ok; j++) {
            const unsigned char *sig = (const unsigned char *)s->sig[j].data;
            const unsigned char *m = (const unsigned char *)s->signed_bytes.data;
            ok = prehashed ? tkm__trust_prehash_ok(k, sig, s->sig[j].len, m, s->signed_bytes.len)
                           : tkm__trust_sig_ok(k, md, sig, s->sig[j].len, m, s->signed_bytes.len);
        }
        EVP_PKEY_free(k);
        if (ok) {
            if (res) {
                memcpy(res->key_id, kid, sizeof kid);
                snprintf(res->key_desc, sizeof res->key_desc, "%s", desc);
            }
            return (int)i;
        }
        int w = snprintf(tried + used, tried_n - used, "%s%s (%s)", used ? ", " : "", kid, desc);
        if (w > 0 && (size_t)w < tried_n - used)
            used += (size_t)w;
    }
    return -EKEYREJECTED;
}

static int keyless(const struct bundle *b, struct sigset *s, const struct tkm_sig_policy *pol,
                   const char *image_digest, const char *repository, struct tkm_sig_result *res,
                   struct tkm_err *err)
{
    int rc = b->dsse ? dsse_load(b->dsse, s, err) : msg_load(b->msg, s, err);
    if (rc < 0)
        return rc;
    struct tkm__signed sg = {(const unsigned char *)s->sig[0].data,
                             s->sig[0].len,
                             (const unsigned char *)s->signed_bytes.data,
                             s->signed_bytes.len,
                             b->msg != NULL,
                             b->dsse ? (const unsigned char *)s->payload.data : NULL,
                             s->payload.len};
    if ((rc = tkm__keyless_verify(b->material, &sg, pol, res, err)) < 0)
        return rc;
    rc = b->dsse ? check_statement(&s->payload, image_digest, pol, repository, err)
                 : check_message(s, image_digest, err);
    if (rc < 0)
        return rc;
    if (res) {
        res->source = TKM_SIG_SRC_BYTES;
        res->format = b->dsse ? TKM_SIG_FMT_BUNDLE_DSSE : TKM_SIG_FMT_BUNDLE_MESSAGE;
        snprintf(res->bundle_media_type, sizeof res->bundle_media_type, "%s", b->media_type);
    }
    return 0;
}

int tkm_bundle_verify(const unsigned char *bundle, size_t len, const struct tkm_sig_policy *pol,
                      const char *image_digest, const char *repository, struct tkm_sig_result *res,
                      struct tkm_err *err)
{
    struct bundle b;
    struct sigset s;
    char tried[512];
    int rc;
    memset(&s, 0, sizeof s);
    memset(&b, 0, sizeof b);
    if (res)
        memset(res, 0, sizeof *res);
    for (size_t i = 0; i < MAX_DSSE_SIGS; i++)
        tkm_buf_init(&s.sig[i], MAX_SIG_BYTES);
    tkm_buf_init(&s.signed_bytes, TKM_BUNDLE_MAX + 64);
    tkm_buf_init(&s.payload, TKM_BUNDLE_MAX);
    if (!image_digest || !tkm_digest_valid(image_digest)) {
        rc = tkm_err_set(err, -EINVAL, "image digest '%s' is not sha256:<64 hex>",
                         image_digest ? image_digest : "(null)");
        goto out;
    }
    if ((rc = bundle_parse(bundle, len, &b, err)) < 0)
        goto out;
    if (json_object_get(b.material, "certificate") ||
        json_object_get(b.material, "x509CertificateChain")) {
        rc = pol->trusted_root ? keyless(&b, &s, pol, image_digest, repository, res, err)
                               : keyless_refuse(&b, err);
        goto out;
    }
    if (!json_object_get(b.material, "publicKey")) {
        rc = tkm_err_set(err, -EINVAL,
                         "bundle: verificationMaterial has no publicKey or "
                         "certificate");
        goto out;
    }
    if (pol->nkeys == 0) {
        rc = tkm_err_set(err, -EKEYREJECTED,
                         "bundle is signed with a public key, and the policy has no public keys");
        goto out;
    }
    rc = b.dsse ? dsse_load(b.dsse, &s, err) : msg_load(b.msg, &s, err);
    if (rc < 0)
        goto out;
    if ((rc = find_key(&s, b.msg != NULL, pol, res, tried, sizeof tried, err)) < 0) {
        if (rc == -EKEYREJECTED)
            tkm_err_set(err, rc, "signature does not verify with %s %s",
                        pol->nkeys > 1 ? "any of the keys" : "key", tried);
        goto out;
    }
    rc = b.dsse ? check_statement(&s.payload, image_digest, pol, repository, err)
                : check_message(&s, image_digest, err);
    if (rc < 0)
        goto out;
    if (res) {
        res->source = TKM_SIG_SRC_BYTES;
        res->format = b.dsse ? TKM_SIG_FMT_BUNDLE_DSSE : TKM_SIG_FMT_BUNDLE_MESSAGE;
        snprintf(res->bundle_media_type, sizeof res->bundle_media_type, "%s", b.media_type);
        res->tlog_index = -1;
    }
    rc = 0;
out:
    sigset_release(&s);
    json_decref(b.root);
    return rc;
}
