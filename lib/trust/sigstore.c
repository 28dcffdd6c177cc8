/*
 * sigstore.c - keyless verification of a Sigstore bundle, offline, against a
 * trusted_root.json (see bundle.h and docs/security.md):
 *   1. the signature verifies with the leaf certificate's key;
 *   2. a transparency log entry (of the first 4): its log is in the trusted
 *      root (log id = sha256 of the key) and valid at the integrated time;
 *      the SET (ECDSA over the canonical JSON {body, integratedTime, logID,
 *      logIndex}), required because it alone vouches for the integrated time,
 *      verifies; the inclusion proof, when present (RFC 6962 audit path to the
 *      root hash, and a checkpoint, a signed note, by the same log key that
 *      names that root and tree size), verifies too;
 *      the entry's body records this signature and certificate (dsse:
 *      payloadHash and signatures[].signature/verifier; hashedrekord:
 *      data.hash and signature.content/publicKey);
 *   3. the certificate chains to a trusted Fulcio CA at the integrated time
 *      (leaf validity included), with the code-signing EKU;
 *   4. when the trusted root lists CT logs, one of the certificate's embedded
 *      SCTs verifies with one of them (RFC 6962 section 3.2: the log's
 *      signature over the precertificate entry: the issuer's key hash and the
 *      TBS without the SCT list), at a time the log was valid;
 *   5. its SAN and OIDC issuer match one identity of the policy.
 */
#include <errno.h>
#include <jansson.h>
#include <openssl/ct.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <regex.h>
#include <stdlib.h>
#include <string.h>

#include <tkm/buf.h>
#include <tkm/trust/keys.h>
#include <tkm/util.h>

#include "trust-int.h"

#define MAX_PROOF 64

struct tentry {
    int64_t time, index;
    unsigned char log_id[32];
    struct tkm_buf body, set, root, hashes; /* hashes: 32 bytes each */
    int has_proof;
    int64_t proof_index, tree_size;
    const char *checkpoint;
};

static int get_i64(json_t *o, const char *key, int64_t *out)
{
    json_t *v = json_object_get(o, key);
    if (json_is_integer(v)) {
        *out = json_integer_value(v);
        return 0;
    }
    if (json_is_string(v))
        return tkm_parse_i64(json_string_value(v), 0, INT64_MAX, out);
    return -EINVAL;
}

static void tentry_release(struct tentry *e)
{
    tkm_buf_release(&e->body);
    tkm_buf_release(&e->set);
    tkm_buf_release(&e->root);
    tkm_buf_release(&e->hashes);
}

static int tentry_parse(json_t *t, struct tentry *e, struct tkm_err *err)
{
    struct tkm_buf id = TKM_BUF_INIT(0), h = TKM_BUF_INIT(0);
    json_t *proof = json_object_get(t, "inclusionProof"), *x;
    json_t *promise = json_object_get(t, "inclusionPromise");
    json_t *kv = json_object_get(t, "kindVersion");
    const char *kind = json_string_value(json_object_get(kv, "kind"));
    const char *ver = json_string_value(json_object_get(kv, "version"));
    size_t i;
    int rc = -EINVAL;
    if (kind && strcmp(kind, "dsse") != 0 && strcmp(kind, "hashedrekord") != 0) {
        rc = tkm_err_set(err, -EPROTONOSUPPORT,
                         "transparency log entry of kind %s is not one tkm reads (dsse, "
                         "hashedrekord)",
                         kind);
        goto out;
    }
    if (ver && strcmp(ver, "0.0.1") != 0) {
        rc = tkm_err_set(err, -EPROTONOSUPPORT,
                         "transparency log entry of kind %s version %s (Rekor v2) is not one tkm "
                         "reads: it reads Rekor v1 entries (version 0.0.1)",
                         kind ? kind : "?", ver);
        goto out;
    }
    if (get_i64(t, "integratedTime", &e->time) < 0 || get_i64(t, "logIndex", &e->index) < 0 ||
        tkm__trust_b64(json_string_value(json_object_get(json_object_get(t, "logId"), "keyId")), 32,
                       &id) < 0 ||
        id.len != 32 ||
        tkm__trust_b64(json_string_value(json_object_get(t, "canonicalizedBody")), 1 << 20,
                       &e->body) < 0) {
        tkm_err_set(err, rc,
                    "transparency log entry: integratedTime, logIndex, logId.keyId or "
                    "canonicalizedBody missing or malformed");
        goto out;
    }
    memcpy(e->log_id, id.data, 32);
    if (promise &&
        tkm__trust_b64(json_string_value(json_object_get(promise, "signedEntryTimestamp")), 4096,
                       &e->set) < 0) {
        tkm_err_set(err, rc, "transparency log entry: inclusionPromise is not base64");
        goto out;
    }
    if (proof) {
        json_t *hs = json_object_get(proof, "hashes");
        e->has_proof = 1;
        e->checkpoint =
            json_string_value(json_object_get(json_object_get(proof, "checkpoint"), "envelope"));
        if (get_i64(proof, "logIndex", &e->proof_index) < 0 ||
            get_i64(proof, "treeSize", &e->tree_size) < 0 ||
            tkm__trust_b64(json_string_value(json_object_get(proof, "rootHash")), 32, &e->root) <
                0 ||
            e->root.len != 32 || !json_is_array(hs) || json_array_size(hs) > MAX_PROOF ||
            !e->checkpoint) {
            tkm_err_set(err, rc, "transparency log entry: inclusionProof is malformed");
            goto out;
        }
        tkm_buf_init(&e->hashes, 32 * MAX_PROOF);
        json_array_foreach(hs, i, x)
        {
            if (tkm__trust_b64(json_string_value(x), 32, &h) < 0 || h.len != 32 ||
                tkm_buf_append(&e->hashes, h.data, 32) != 0) {
                tkm_err_set(err, rc,
                            "transparency log entry: inclusionProof.hashes[%zu] is not a "
                            "sha256",
                            i);
                goto out;
            }
        }
    }
    rc = 0;
out:
    tkm_buf_release(&id);
    tkm_buf_release(&h);
    return rc;
}

static void hash2(const unsigned char *l, const unsigned char *r, unsigned char out[32])
{
    EVP_MD_CTX *c = EVP_MD_CTX_new();
    unsigned char one = 1;
    unsigned int n = 0;
    if (!c || EVP_DigestInit_ex(c, EVP_sha256(), NULL) != 1 || EVP_DigestUpdate(c, &one, 1) != 1 ||
        EVP_DigestUpdate(c, l, 32) != 1 || EVP_DigestUpdate(c, r, 32) != 1 ||
        EVP_DigestFinal_ex(c, out, &n) != 1)
        memset(out, 0, 32);
    EVP_MD_CTX_free(c);
}

/* RFC 9162 section 2.1.3.2: the root the audit path leads to from leaf. */
static int proof_root(const struct tentry *e, const unsigned char leaf[32], unsigned char r[32])
{
    uint64_t fn = (uint64_t)e->proof_index, sn = (uint64_t)e->tree_size - 1;
    size_t n = e->hashes.len / 32;
    if (e->proof_index >= e->tree_size)
        return -EINVAL;
    memcpy(r, leaf, 32);
    for (size_t i = 0; i < n; i++) {
        const unsigned char *p = (const unsigned char *)e->hashes.data + 32 * i;
        if (sn == 0)
            return -EINVAL;
        if ((fn & 1) || fn == sn) {
            hash2(p, r, r);
            while (!(fn & 1) && fn != 0) {
                fn >>= 1;
                sn >>= 1;
            }
        } else {
            hash2(r, p, r);
        }
        fn >>= 1;
        sn >>= 1;
    }
    return sn == 0 ? 0 : -EINVAL;
}

/* The checkpoint (a signed note) names the proof's tree size and root and is
 * signed by the log's key. */
static int checkpoint_ok(const struct tentry *e, const struct tkm__tlog *log, struct tkm_err *err)
{
    const char *cp = e->checkpoint, *sep = strstr(cp, "\n\n");
    struct tkm_buf root = TKM_BUF_INIT(0), sig = TKM_BUF_INIT(0);
    char line[1024];
    int rc = -EBADMSG, ok = 0;
    const EVP_MD *md = NULL;
    if (!sep || tkm_trust_cosign_md(log->key, &md, NULL) < 0)
        goto fail;
    size_t textlen = (size_t)(sep - cp) + 1;
    const char *end = cp + textlen; /* the note's text: origin, size, root hash, ... */
    const char *l2 = memchr(cp, '\n', textlen);
    const char *l3 = l2 ? memchr(l2 + 1, '\n', (size_t)(end - l2 - 1)) : NULL;
    const char *l4 = l3 ? memchr(l3 + 1, '\n', (size_t)(end - l3 - 1)) : NULL;
    if (!l4 || (size_t)(l4 - l3) >= sizeof line)
        goto fail;
    snprintf(line, sizeof line, "%.*s", (int)(l3 - l2 - 1), l2 + 1);
    int64_t size;
    if (tkm_parse_i64(line, 0, INT64_MAX, &size) < 0 || size != e->tree_size)
        goto fail;
    snprintf(line, sizeof line, "%.*s", (int)(l4 - l3 - 1), l3 + 1);
    if (tkm__trust_b64(line, 32, &root) < 0 || root.len != 32 ||
        memcmp(root.data, e->root.data, 32) != 0)
        goto fail;
    for (const char *p = sep + 2; *p && !ok;) {
        const char *nl = strchr(p, '\n');
        size_t ll = nl ? (size_t)(nl - p) : strlen(p);
        const char *sp = memrchr(p, ' ', ll); /* "\u2014 <name> <base64>" */
        if (strncmp(p, "\xe2\x80\x94 ", 4) == 0 && sp && sp < p + ll && ll < 4096) {
            snprintf(line, sizeof line, "%.*s", (int)(p + ll - sp - 1), sp + 1);
            if (tkm__trust_b64(line, 1024, &sig) == 0 && sig.len > 4)
                ok = tkm__trust_sig_ok(log->key, md, (const unsigned char *)sig.data + 4,
                                       sig.len - 4, (const unsigned char *)cp, textlen);
        }
        p += ll + (nl ? 1 : 0);
    }
    if (ok)
        rc = 0;
fail:
    tkm_buf_release(&root);
    tkm_buf_release(&sig);
    if (rc < 0)
        tkm_err_set(err, rc,
                    "transparency log: the inclusion proof's checkpoint is malformed, "
                    "names another tree, or is not signed by the log's key");
    return rc;
}

static int set_ok(const struct tentry *e, const struct tkm__tlog *log)
{
    struct tkm_buf j = TKM_BUF_INIT(4 << 20), b64 = TKM_BUF_INIT(4 << 20);
    char hex[65];
    const EVP_MD *md = NULL;
    int ok = 0;
    tkm_hex(e->log_id, 32, hex);
    if (tkm_buf_grow(&b64, 4 * ((e->body.len + 2) / 3) + 1) != 0 ||
        tkm_trust_cosign_md(log->key, &md, NULL) < 0)
        goto out;
    EVP_EncodeBlock((unsigned char *)b64.data, (const unsigned char *)e->body.data,
                    (int)e->body.len);
    if (tkm_buf_printf(
            &j, "{\"body\":\"%s\",\"integratedTime\":%lld,\"logID\":\"%s\",\"logIndex\":%lld}",
            b64.data, (long long)e->time, hex, (long long)e->index) != 0)
        goto out;
    ok = tkm__trust_sig_ok(log->key, md, (const unsigned char *)e->set.data, e->set.len,
                           (const unsigned char *)j.data, j.len);
out:
    tkm_buf_release(&j);
    tkm_buf_release(&b64);
    return ok;
}

static int leaf_hash(const struct tkm_buf *body, unsigned char out[32])
{
    EVP_MD_CTX *c = EVP_MD_CTX_new();
    unsigned char zero = 0;
    unsigned int n = 0;
    int ok = c && EVP_DigestInit_ex(c, EVP_sha256(), NULL) == 1 &&
             EVP_DigestUpdate(c, &zero, 1) == 1 &&
             EVP_DigestUpdate(c, body->data, body->len) == 1 && EVP_DigestFinal_ex(c, out, &n) == 1;
    EVP_MD_CTX_free(c);
    return ok ? 0 : -EIO;
}

/* The SET and/or the inclusion proof of e verify with the trusted log. */
static int tlog_ok(const struct tentry *e, const struct tkm__troot *t, struct tkm_err *err)
{
    char hex[65];
    unsigned char leaf[32], root[32];
    tkm_hex(e->log_id, 32, hex);
    const struct tkm__tlog *log = tkm__troot_log(t->tlog, t->ntlog, e->log_id);
    if (!log)
        return tkm_err_set(err, -EKEYREJECTED,
                           "transparency log %.16s... is not in the trusted root", hex);
    if (e->time < log->start || e->time > log->end)
        return tkm_err_set(err, -EKEYREJECTED,
                           "transparency log %.16s... was not valid at the entry's integrated time "
                           "%lld",
                           hex, (long long)e->time);
    /* The SET is what vouches for integratedTime, which dates the signature
     * (the inclusion proof covers the body only); RFC 3161 timestamps, the
     * other way to date it, are not read. */
    if (!e->set.len)
        return tkm_err_set(err, -EBADMSG,
                           "transparency log entry %lld has no signed entry timestamp (SET), so "
                           "nothing vouches for its integrated time (RFC 3161 timestamps are not "
                           "read)",
                           (long long)e->index);
    if (!set_ok(e, log))
        return tkm_err_set(err, -EBADMSG,
                           "transparency log entry %lld: the signed entry timestamp (SET) does not "
                           "verify with log %.16s...",
                           (long long)e->index, hex);
    if (!e->has_proof)
        return 0;
    if (leaf_hash(&e->body, leaf) < 0 || proof_root(e, leaf, root) < 0 ||
        memcmp(root, e->root.data, 32) != 0)
        return tkm_err_set(err, -EBADMSG,
                           "transparency log entry %lld: the inclusion proof does not verify (the "
                           "audit path does not lead to root hash of the tree of size %lld)",
                           (long long)e->index, (long long)e->tree_size);
    return checkpoint_ok(e, log, err);
}

/* b64 string s decodes to exactly (p, n). */
static int b64_is(const char *s, const void *p, size_t n)
{
    struct tkm_buf b = TKM_BUF_INIT(0);
    int eq = tkm__trust_b64(s, 1 << 20, &b) == 0 && b.len == n && memcmp(b.data, p, n) == 0;
    tkm_buf_release(&b);
    return eq;
}

/* The PEM (base64 in the log body) holds the leaf certificate. */
static int pem_is_cert(const char *b64pem, X509 *leaf)
{
    struct tkm_buf b = TKM_BUF_INIT(0);
    int eq = 0;
    if (tkm__trust_b64(b64pem, 1 << 20, &b) == 0) {
        BIO *bio = BIO_new_mem_buf(b.data, (int)b.len);
        X509 *x = bio ? PEM_read_bio_X509(bio, NULL, NULL, NULL) : NULL;
        eq = x && X509_cmp(x, leaf) == 0;
        X509_free(x);
        BIO_free(bio);
    }
    tkm_buf_release(&b);
    return eq;
}

/* The log entry's body records this signature, certificate and content. */
static int body_binds(const struct tentry *e, const struct tkm__signed *s, X509 *leaf,
                      struct tkm_err *err)
{
    json_t *b = json_loadb(e->body.data, e->body.len, JSON_REJECT_DUPLICATES, NULL);
    json_t *spec = json_object_get(b, "spec"), *sg;
    const char *kind = json_string_value(json_object_get(b, "kind"));
    unsigned char md[32];
    char hex[65];
    size_t i;
    int ok = 0;
    if (kind && strcmp(kind, "dsse") == 0 && s->payload) {
        json_t *ph = json_object_get(spec, "payloadHash");
        EVP_Digest(s->payload, s->payload_len, md, NULL, EVP_sha256(), NULL);
        tkm_hex(md, 32, hex);
        const char *v = json_string_value(json_object_get(ph, "value"));
        int hash_ok = v && strcmp(v, hex) == 0;
        json_array_foreach(json_object_get(spec, "signatures"), i, sg)
        {
            if (hash_ok &&
                b64_is(json_string_value(json_object_get(sg, "signature")), s->sig, s->sig_len) &&
                pem_is_cert(json_string_value(json_object_get(sg, "verifier")), leaf))
                ok = 1;
        }
    } else if (kind && strcmp(kind, "hashedrekord") == 0 && s->prehashed) {
        tkm_hex(s->msg, 32, hex);
        json_t *sig = json_object_get(spec, "signature");
        const char *v = json_string_value(
            json_object_get(json_object_get(json_object_get(spec, "data"), "hash"), "value"));
        ok = v && strcmp(v, hex) == 0 &&
             b64_is(json_string_value(json_object_get(sig, "content")), s->sig, s->sig_len) &&
             pem_is_cert(
                 json_string_value(json_object_get(json_object_get(sig, "publicKey"), "content")),
                 leaf);
    }
    char kind_s[64];
    snprintf(kind_s, sizeof kind_s, "%s", kind ? kind : "unknown"); /* kind is b's */
    json_decref(b);
    if (!ok)
        return tkm_err_set(err, -EBADMSG,
                           "transparency log entry %lld (kind %s) does not record this signature "
                           "and certificate",
                           (long long)e->index, kind_s);
    return 0;
}

/* Chain to one of the trusted root's CAs at time t, code-signing EKU. */
static int chain_ok(X509 *leaf, const struct tkm__troot *tr, int64_t t, X509 **issuer, char *why,
                    size_t why_n)
{
    snprintf(why, why_n, "no certificate authority in the trusted root");
    if (!(X509_get_extension_flags(leaf) & EXFLAG_XKUSAGE) ||
        !(X509_get_extended_key_usage(leaf) & XKU_CODE_SIGN)) {
        snprintf(why, why_n, "the certificate is not for code signing (extended key usage)");
        return 0;
    }
    for (size_t i = 0; i < tr->nca; i++) {
        const struct tkm__ca *ca = &tr->ca[i];
        int n = sk_X509_num(ca->chain), ok = 0;
        if (t < ca->start || t > ca->end) {
            snprintf(why, why_n, "certificate authority %zu was not valid at that time", i);
            continue;
        }
        X509_STORE *st = X509_STORE_new();
        X509_STORE_CTX *ctx = X509_STORE_CTX_new();
        STACK_OF(X509) *inter = sk_X509_new_null();
        for (int k = 0; inter && k < n - 1; k++)
            sk_X509_push(inter, sk_X509_value(ca->chain, k));
        if (st && ctx && inter && X509_STORE_add_cert(st, sk_X509_value(ca->chain, n - 1)) == 1 &&
            X509_STORE_CTX_init(ctx, st, leaf, inter) == 1) {
            X509_VERIFY_PARAM_set_time(X509_STORE_CTX_get0_param(ctx), (time_t)t);
            ok = X509_verify_cert(ctx) == 1;
            if (!ok)
                snprintf(why, why_n, "%s",
                         X509_verify_cert_error_string(X509_STORE_CTX_get_error(ctx)));
        }
        X509_STORE_CTX_free(ctx);
        X509_STORE_free(st);
        sk_X509_free(inter);
        for (int k = 0; ok && k < n; k++)
            if (X509_check_issued(sk_X509_value(ca->chain, k), leaf) == X509_V_OK)
                *issuer = sk_X509_value(ca->chain, k);
        if (ok)
            return 1;
    }
    return 0;
}

static int sct_sig_ok(const SCT *sct, const struct tkm__tlog *log, const unsigned char ikh[32],
                      const unsigned char *tbs, size_t tbslen)
{
    struct tkm_buf m = TKM_BUF_INIT(1 << 20);
    unsigned char *ext = NULL, *sig = NULL, hdr[12];
    size_t extlen = SCT_get0_extensions(sct, &ext), siglen = SCT_get0_signature(sct, &sig);
    uint64_t ts = SCT_get_timestamp(sct);
    const EVP_MD *md = NULL;
    int ok = 0;
    hdr[0] = 0; /* v1 */
    hdr[1] = 0; /* certificate_timestamp */
    for (int i = 0; i < 8; i++)
        hdr[2 + i] = (unsigned char)(ts >> (56 - 8 * i));
    hdr[10] = 0; /* precert_entry */
    hdr[11] = 1;
    unsigned char l3[3] = {(unsigned char)(tbslen >> 16), (unsigned char)(tbslen >> 8),
                           (unsigned char)tbslen};
    unsigned char l2[2] = {(unsigned char)(extlen >> 8), (unsigned char)extlen};
    if (tkm_trust_cosign_md(log->key, &md, NULL) == 0 && tbslen < (1u << 24) &&
        extlen < (1u << 16) && tkm_buf_append(&m, hdr, sizeof hdr) == 0 &&
        tkm_buf_append(&m, ikh, 32) == 0 && tkm_buf_append(&m, l3, 3) == 0 &&
        tkm_buf_append(&m, tbs, tbslen) == 0 && tkm_buf_append(&m, l2, 2) == 0 &&
        (extlen == 0 || tkm_buf_append(&m, ext, extlen) == 0))
        ok = tkm__trust_sig_ok(log->key, md, sig, siglen, (const unsigned char *)m.data, m.len);
    tkm_buf_release(&m);
    return ok;
}

/* One embedded SCT verifies with a CT log of the trusted root. */
static int sct_ok(X509 *leaf, X509 *issuer, const struct tkm__troot *tr, char *why, size_t why_n)
{
    STACK_OF(SCT) *scts = X509_get_ext_d2i(leaf, NID_ct_precert_scts, NULL, NULL);
    X509 *pre = X509_dup(leaf);
    unsigned char *tbs = NULL, *spki = NULL, ikh[32];
    int ok = 0, tbslen = -1, sl;
    snprintf(why, why_n, "the certificate has no embedded SCT");
    if (!scts || !pre || !issuer || sk_SCT_num(scts) == 0)
        goto out;
    X509_EXTENSION_free(X509_delete_ext(pre, X509_get_ext_by_NID(pre, NID_ct_precert_scts, -1)));
    tbslen = i2d_re_X509_tbs(pre, &tbs);
    sl = i2d_X509_PUBKEY(X509_get_X509_PUBKEY(issuer), &spki);
    if (tbslen <= 0 || sl <= 0 || EVP_Digest(spki, (size_t)sl, ikh, NULL, EVP_sha256(), NULL) != 1)
        goto out;
    for (int i = 0; i < sk_SCT_num(scts) && !ok; i++) {
        const SCT *sct = sk_SCT_value(scts, i);
        unsigned char *lid = NULL;
        size_t lidlen = SCT_get0_log_id(sct, &lid);
        const struct tkm__tlog *log =
            lidlen == 32 ? tkm__troot_log(tr->ctlog, tr->nctlog, lid) : NULL;
        int64_t t = (int64_t)(SCT_get_timestamp(sct) / 1000);
        if (SCT_get_version(sct) != SCT_VERSION_V1 || !log) {
            snprintf(why, why_n, "no SCT is from a CT log of the trusted root");
            continue;
        }
        if (t < log->start || t > log->end) {
            snprintf(why, why_n, "the SCT's time is outside its CT log's validity");
            continue;
        }
        ok = sct_sig_ok(sct, log, ikh, tbs, (size_t)tbslen);
        if (!ok)
            snprintf(why, why_n, "the SCT's signature does not verify with its CT log's key");
    }
out:
    OPENSSL_free(tbs);
    OPENSSL_free(spki);
    X509_free(pre);
    SCT_LIST_free(scts);
    return ok;
}

static int identity_ok(const struct tkm_sig_policy *pol, const char *san, const char *iss)
{
    for (size_t i = 0; i < pol->nidentities; i++) {
        const struct tkm_sig_identity *id = &pol->identities[i];
        if (!id->issuer || strcmp(id->issuer, iss) != 0)
            continue;
        if (id->subject && id->subject[0] && strcmp(id->subject, san) == 0)
            return 1;
        if (id->subject_regexp && id->subject_regexp[0]) {
            struct tkm_buf re = TKM_BUF_INIT(8192);
            regex_t r;
            int ok = 0;
            if (tkm_buf_printf(&re, "^(%s)$", id->subject_regexp) == 0 &&
                regcomp(&r, re.data, REG_EXTENDED | REG_NOSUB) == 0) {
                ok = regexec(&r, san, 0, NULL, 0) == 0;
                regfree(&r);
            }
            tkm_buf_release(&re);
            if (ok)
                return 1;
        }
    }
    return 0;
}

static X509 *leaf_cert(json_t *material)
{
    struct tkm_buf der = TKM_BUF_INIT(0);
    json_t *c = json_object_get(material, "certificate");
    X509 *x = NULL;
    if (!c)
        c = json_array_get(
            json_object_get(json_object_get(material, "x509CertificateChain"), "certificates"), 0);
    if (tkm__trust_b64(json_string_value(json_object_get(c, "rawBytes")), 65536, &der) == 0) {
        const unsigned char *p = (const unsigned char *)der.data;
        x = d2i_X509(NULL, &p, (long)der.len);
        if (x && p != (const unsigned char *)der.data + der.len) {
            X509_free(x);
            x = NULL;
        }
    }
    tkm_buf_release(&der);
    return x;
}

/* The first of (at most 4) log entries that verifies and records this
 * signature, into e; otherwise the first entry's failure. */
static int first_good_entry(json_t *tl, const struct tkm__signed *s, X509 *leaf,
                            const struct tkm__troot *tr, struct tentry *e, struct tkm_err *err)
{
    struct tkm_err first = {0};
    for (size_t i = 0; i < json_array_size(tl) && i < 4; i++) {
        struct tkm_err ei = {0};
        tentry_release(e);
        memset(e, 0, sizeof *e);
        if (tentry_parse(json_array_get(tl, i), e, &ei) == 0 && tlog_ok(e, tr, &ei) == 0 &&
            body_binds(e, s, leaf, &ei) == 0)
            return 0;
        if (i == 0)
            first = ei;
    }
    return tkm_err_set(err, first.code, "%s%s", first.msg,
                       json_array_size(tl) > 1 ? " (nor does any other log entry)" : "");
}

int tkm__keyless_verify(json_t *material, const struct tkm__signed *s,
                        const struct tkm_sig_policy *pol, struct tkm_sig_result *res,
                        struct tkm_err *err)
{
    struct tkm__troot tr;
    struct tentry e;
    char san[512], iss[512], why[256];
    const EVP_MD *md = NULL;
    json_t *tl = json_object_get(material, "tlogEntries");
    int rc;
    memset(&e, 0, sizeof e);
    X509 *leaf = leaf_cert(material);
    if ((rc = tkm__troot_load(pol->trusted_root, pol->trusted_root_len, &tr, err)) < 0)
        goto out;
    if (!leaf) {
        rc = tkm_err_set(err, -EINVAL, "bundle: the certificate is not DER X.509");
        goto out;
    }
    tkm__trust_cert_identity(leaf, san, sizeof san, iss, sizeof iss);
    EVP_PKEY *k = X509_get0_pubkey(leaf);
    int ok = k && tkm_trust_cosign_md(k, &md, NULL) == 0 &&
             (s->prehashed ? tkm__trust_prehash_ok(k, s->sig, s->sig_len, s->msg, s->msg_len)
                           : tkm__trust_sig_ok(k, md, s->sig, s->sig_len, s->msg, s->msg_len));
    if (!ok) {
        rc = tkm_err_set(err, -EKEYREJECTED,
                         "signature does not verify with the key of the certificate for %s "
                         "(issuer %s)",
                         san, iss);
        goto out;
    }
    if (!json_is_array(tl) || json_array_size(tl) == 0) {
        rc = tkm_err_set(err, -EBADMSG,
                         "keyless signature by %s has no transparency log entry to date it", san);
        goto out;
    }
    if ((rc = first_good_entry(tl, s, leaf, &tr, &e, err)) < 0)
        goto out;
    X509 *issuer = NULL;
    if (!chain_ok(leaf, &tr, e.time, &issuer, why, sizeof why)) {
        rc = tkm_err_set(err, -EKEYREJECTED,
                         "the certificate for %s (issuer %s) is not trusted at the signing time "
                         "(integrated time %lld): %s",
                         san, iss, (long long)e.time, why);
        goto out;
    }
    if (tr.nctlog && !sct_ok(leaf, issuer, &tr, why, sizeof why)) {
        rc = tkm_err_set(err, -EKEYREJECTED,
                         "the certificate for %s (issuer %s) is not publicly logged: %s", san, iss,
                         why);
        goto out;
    }
    if (!identity_ok(pol, san, iss)) {
        rc = tkm_err_set(err, -EKEYREJECTED,
                         "signed by %s (issuer %s), an identity the policy does not allow", san,
                         iss);
        goto out;
    }
    if (res) {
        snprintf(res->identity, sizeof res->identity, "%s", san);
        snprintf(res->issuer, sizeof res->issuer, "%s", iss);
        res->tlog_index = e.index;
    }
    rc = 0;
out:
    tentry_release(&e);
    tkm__troot_release(&tr);
    X509_free(leaf);
    return rc;
}
