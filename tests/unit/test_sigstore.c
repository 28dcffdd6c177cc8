/*
 * test_sigstore.c - keyless verification of Sigstore bundles against a
 * trusted_root.json (bundle.h, lib/trust/sigstore.c, troot.c).
 *
 * The data in tests/unit/data/sigstore was made offline by
 * hack/testbin/sigstore-testca (sigstore-go's virtual Sigstore: a test
 * Fulcio, a test Rekor). Each test breaks one thing and expects its own
 * message.
 */
#include <jansson.h>
#include <openssl/evp.h>

#include <tkm/buf.h>
#include <tkm/trust/bundle.h>
#include <tkm/trust/keys.h>

#include "test.h"

#define IMG      "sha256:ca5028e4e017430615443cd0ec724e48340e283e2c8a7cbf98f83647ad38b440"
#define IDENTITY "signer@example.test"
#define ISSUER   "https://issuer.example.test"
#define DATA(f)  TKM_SOURCE_DIR "/tests/unit/data/sigstore/" f

static char *slurp(const char *path, size_t *len)
{
    char *p = NULL;
    struct tkm_err err = {0};
    ASSERT_OK(tkm_trust_read_file(path, 1 << 20, &p, len, &err));
    return p;
}

struct fx {
    char *bundle, *root;
    size_t blen, rlen;
    struct tkm_sig_identity id;
    struct tkm_sig_policy pol;
};

static void fx_init(struct fx *f, const char *root_file)
{
    memset(f, 0, sizeof *f);
    f->bundle = slurp(DATA("bundle.json"), &f->blen);
    f->root = slurp(root_file, &f->rlen);
    f->id = (struct tkm_sig_identity){ISSUER, IDENTITY, NULL};
    f->pol = (struct tkm_sig_policy){.trusted_root = f->root,
                                     .trusted_root_len = f->rlen,
                                     .identities = &f->id,
                                     .nidentities = 1};
}

static void fx_release(struct fx *f)
{
    free(f->bundle);
    free(f->root);
}

static int fx_verify(struct fx *f, const char *bundle, struct tkm_sig_result *r, struct tkm_err *e)
{
    ASSERT_OK(tkm_sig_policy_check(&f->pol, e));
    int rc =
        tkm_bundle_verify((const unsigned char *)bundle, strlen(bundle), &f->pol, IMG, "t/a", r, e);
    if (rc < 0)
        fprintf(stderr, "# verify: %s\n", e->msg);
    return rc;
}

/* The bundle with one JSON value replaced: path is a list of keys/indexes. */
static char *edit(const char *bundle, json_t *value, const char *const *path)
{
    json_t *root = json_loads(bundle, 0, NULL), *o = root;
    ASSERT_NOT_NULL(root);
    size_t i = 0;
    for (; path[i + 1]; i++) {
        char *end;
        long ix = strtol(path[i], &end, 10);
        o = *end == '\0' ? json_array_get(o, (size_t)ix) : json_object_get(o, path[i]);
        ASSERT_NOT_NULL(o);
    }
    if (value)
        ASSERT_EQ(json_object_set_new(o, path[i], value), 0);
    else
        ASSERT_EQ(json_object_del(o, path[i]), 0);
    char *s = json_dumps(root, JSON_COMPACT);
    json_decref(root);
    return s;
}

TEST(keyless_bundle_verifies)
{
    struct fx f;
    struct tkm_sig_result r;
    struct tkm_err err = {0};
    fx_init(&f, DATA("trusted_root.json"));
    ASSERT_OK(fx_verify(&f, f.bundle, &r, &err));
    ASSERT_STREQ(r.identity, IDENTITY);
    ASSERT_STREQ(r.issuer, ISSUER);
    ASSERT_EQ(r.tlog_index, 5);
    ASSERT_EQ(r.format, TKM_SIG_FMT_BUNDLE_DSSE);
    ASSERT_STREQ(r.key_id, "");
    /* a regexp identity, anchored */
    f.id = (struct tkm_sig_identity){ISSUER, NULL, "[a-z]+@example\\.test"};
    ASSERT_OK(fx_verify(&f, f.bundle, &r, &err));
    f.id.subject_regexp = "signer";
    ASSERT_EQ(fx_verify(&f, f.bundle, &r, &err), -EKEYREJECTED);
    fx_release(&f);
}

TEST(wrong_identity_or_issuer_refused)
{
    struct fx f;
    struct tkm_err err = {0};
    fx_init(&f, DATA("trusted_root.json"));
    f.id.subject = "someone-else@example.test";
    ASSERT_EQ(fx_verify(&f, f.bundle, NULL, &err), -EKEYREJECTED);
    ASSERT_STRCONTAINS(err.msg, "signed by signer@example.test (issuer https://issuer.example."
                                "test), an identity the policy does not allow");
    tkm_err_clear(&err);
    f.id.subject = IDENTITY;
    f.id.issuer = "https://token.actions.githubusercontent.com";
    ASSERT_EQ(fx_verify(&f, f.bundle, NULL, &err), -EKEYREJECTED);
    ASSERT_STRCONTAINS(err.msg, "an identity the policy does not allow");
    fx_release(&f);
}

TEST(untrusted_chain_refused)
{
    struct fx f;
    struct tkm_err err = {0};
    fx_init(&f, DATA("other_trusted_root.json"));
    ASSERT_EQ(fx_verify(&f, f.bundle, NULL, &err), -EKEYREJECTED);
    /* the other root's Rekor does not know this log either: named first */
    ASSERT_STRCONTAINS(err.msg, "is not in the trusted root");
    fx_release(&f);
}

TEST(chain_checked_at_integrated_time)
{
    struct fx f;
    struct tkm_err err = {0};
    fx_init(&f, DATA("trusted_root.json"));
    /* The trusted root's Fulcio CA validity ends before the entry's time. */
    json_t *tr = json_loads(f.root, 0, NULL);
    json_t *ca = json_array_get(json_object_get(tr, "certificateAuthorities"), 0);
    json_object_set_new(json_object_get(ca, "validFor"), "end",
                        json_string("2000-01-01T00:00:00Z"));
    char *root2 = json_dumps(tr, JSON_COMPACT);
    json_decref(tr);
    f.pol.trusted_root = root2;
    f.pol.trusted_root_len = strlen(root2);
    ASSERT_EQ(fx_verify(&f, f.bundle, NULL, &err), -EKEYREJECTED);
    ASSERT_STRCONTAINS(err.msg, "is not trusted at the signing time");
    free(root2);
    fx_release(&f);
}

TEST(tampered_inclusion_proof_refused)
{
    struct fx f;
    struct tkm_err err = {0};
    fx_init(&f, DATA("trusted_root.json"));
    /* one audit-path hash replaced */
    const char *p1[] = {"verificationMaterial", "tlogEntries", "0",
                        "inclusionProof",       "hashes",      NULL};
    json_t *hs = json_array();
    for (int i = 0; i < 3; i++)
        json_array_append_new(hs, json_string("AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA="));
    char *b = edit(f.bundle, hs, p1);
    ASSERT_EQ(fx_verify(&f, b, NULL, &err), -EBADMSG);
    ASSERT_STRCONTAINS(err.msg, "the inclusion proof does not verify");
    free(b);
    /* another leaf index with the same path */
    tkm_err_clear(&err);
    const char *p2[] = {"verificationMaterial", "tlogEntries", "0",
                        "inclusionProof",       "logIndex",    NULL};
    b = edit(f.bundle, json_string("4"), p2);
    ASSERT_EQ(fx_verify(&f, b, NULL, &err), -EBADMSG);
    ASSERT_STRCONTAINS(err.msg, "the inclusion proof does not verify");
    free(b);
    /* a checkpoint for another tree size */
    tkm_err_clear(&err);
    json_t *j = json_loads(f.bundle, 0, NULL);
    json_t *proof = json_object_get(
        json_array_get(json_object_get(json_object_get(j, "verificationMaterial"), "tlogEntries"),
                       0),
        "inclusionProof");
    const char *cp =
        json_string_value(json_object_get(json_object_get(proof, "checkpoint"), "envelope"));
    char *cp2 = strdup(cp);
    char *nl = strchr(cp2, '\n');
    ASSERT(nl && nl[1] == '7');
    nl[1] = '8';
    const char *p3[] = {"verificationMaterial", "tlogEntries", "0", "inclusionProof",
                        "checkpoint",           "envelope",    NULL};
    b = edit(f.bundle, json_string(cp2), p3);
    ASSERT_EQ(fx_verify(&f, b, NULL, &err), -EBADMSG);
    ASSERT_STRCONTAINS(err.msg, "checkpoint");
    free(b);
    free(cp2);
    /* a witness cosignature after the log's: still the log's signature that counts */
    struct tkm_buf w = TKM_BUF_INIT(1 << 16);
    ASSERT_OK(tkm_buf_printf(&w, "%s\xe2\x80\x94 witness.example.test AAAAAAAAAAAAAAAA\n", cp));
    b = edit(f.bundle, json_string(w.data), p3);
    ASSERT_OK(fx_verify(&f, b, NULL, &err));
    free(b);
    tkm_buf_release(&w);
    json_decref(j);
    fx_release(&f);
}

TEST(tampered_set_refused)
{
    struct fx f;
    struct tkm_err err = {0};
    fx_init(&f, DATA("trusted_root.json"));
    /* the integrated time is covered by the SET */
    const char *p[] = {"verificationMaterial", "tlogEntries", "0", "integratedTime", NULL};
    char *b = edit(f.bundle, json_string("1795429000"), p);
    ASSERT_EQ(fx_verify(&f, b, NULL, &err), -EBADMSG);
    ASSERT_STRCONTAINS(err.msg, "signed entry timestamp (SET) does not verify");
    free(b);
    /* a Rekor v2 entry is named, not misread */
    tkm_err_clear(&err);
    const char *pv[] = {"verificationMaterial", "tlogEntries", "0", "kindVersion", NULL};
    b = edit(f.bundle, json_pack("{s:s,s:s}", "kind", "dsse", "version", "0.0.2"), pv);
    ASSERT_EQ(fx_verify(&f, b, NULL, &err), -EPROTONOSUPPORT);
    ASSERT_STRCONTAINS(err.msg, "kind dsse version 0.0.2 (Rekor v2) is not one tkm reads");
    free(b);
    tkm_err_clear(&err);
    b = edit(f.bundle, json_pack("{s:s,s:s}", "kind", "intoto", "version", "0.0.2"), pv);
    ASSERT_EQ(fx_verify(&f, b, NULL, &err), -EPROTONOSUPPORT);
    ASSERT_STRCONTAINS(err.msg, "kind intoto is not one tkm reads (dsse, hashedrekord)");
    free(b);
    /* no SET: nothing vouches for the integrated time, even with a proof */
    tkm_err_clear(&err);
    const char *p1[] = {"verificationMaterial", "tlogEntries", "0", "inclusionPromise", NULL};
    b = edit(f.bundle, NULL, p1);
    ASSERT_EQ(fx_verify(&f, b, NULL, &err), -EBADMSG);
    ASSERT_STRCONTAINS(err.msg, "has no signed entry timestamp (SET), so nothing vouches for its "
                                "integrated time");
    free(b);
    /* the SET alone suffices (v0.1 bundles have no proof) */
    const char *p2[] = {"verificationMaterial", "tlogEntries", "0", "inclusionProof", NULL};
    b = edit(f.bundle, NULL, p2);
    ASSERT_OK(fx_verify(&f, b, NULL, &err));
    free(b);
    fx_release(&f);
}

TEST(signature_and_subject_checked)
{
    struct fx f;
    struct tkm_err err = {0};
    fx_init(&f, DATA("trusted_root.json"));
    /* a signature by another key than the certificate's */
    const char *p[] = {"dsseEnvelope", "signatures", "0", "sig", NULL};
    char *b = edit(f.bundle,
                   json_string("MEUCIQCyReV4APmxnGVF6G7mkmFHL0ebTA9L1ej30QPoYvHgLgIgbG/"
                               "PVEItcYd9dGyqWcQ0gEqTHmIzvnTtLDoHJ5lvnY8="),
                   p);
    ASSERT_EQ(fx_verify(&f, b, NULL, &err), -EKEYREJECTED);
    ASSERT_STRCONTAINS(err.msg, "does not verify with the key of the certificate for "
                                "signer@example.test");
    free(b);
    /* verified for another image */
    tkm_err_clear(&err);
    ASSERT_EQ(tkm_bundle_verify((const unsigned char *)f.bundle, f.blen, &f.pol,
                                "sha256:1111111111111111111111111111111111111111111111111111111111"
                                "111111",
                                NULL, NULL, &err),
              -EBADMSG);
    ASSERT_STRCONTAINS(err.msg, "signature is for " IMG);
    fx_release(&f);
}

TEST(no_trusted_root_named)
{
    struct fx f;
    struct tkm_err err = {0};
    fx_init(&f, DATA("trusted_root.json"));
    static const char pub[] = "-----BEGIN PUBLIC KEY-----\n"
                              "MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAErG5Xnr3E4G9Pdatajn51qBRjWb/w\n"
                              "js2xr881Xuy3PoD2Y9T75Ej3IlwlSP/XBm2eP90RakmH1cFF2mZ3HBBu+g==\n"
                              "-----END PUBLIC KEY-----\n";
    struct tkm_sig_key k = {pub, strlen(pub)};
    struct tkm_sig_policy keys = {.keys = &k, .nkeys = 1};
    ASSERT_EQ(
        tkm_bundle_verify((const unsigned char *)f.bundle, f.blen, &keys, IMG, NULL, NULL, &err),
        -ENOTSUP);
    ASSERT_STRCONTAINS(err.msg, "keyless signature by signer@example.test (issuer "
                                "https://issuer.example.test), and the policy has no trusted root");
    /* a trusted root that is not one */
    tkm_err_clear(&err);
    f.pol.trusted_root = "{\"mediaType\":\"x\"}";
    f.pol.trusted_root_len = strlen(f.pol.trusted_root);
    ASSERT_EQ(fx_verify(&f, f.bundle, NULL, &err), -EINVAL);
    ASSERT_STRCONTAINS(err.msg, "is not a Sigstore trusted root");
    fx_release(&f);
}

/* The trusted root with its ctlogs replaced by those of other_root (or removed when NULL). */
static char *root_with_ctlogs(const char *root, const char *other_root, const char *end)
{
    json_t *tr = json_loads(root, 0, NULL),
           *o = other_root ? json_loads(other_root, 0, NULL) : NULL;
    ASSERT_NOT_NULL(tr);
    if (end) {
        json_t *pk = json_object_get(json_array_get(json_object_get(tr, "ctlogs"), 0), "publicKey");
        json_object_set_new(json_object_get(pk, "validFor"), "end", json_string(end));
    } else if (o) {
        json_object_set(tr, "ctlogs", json_object_get(o, "ctlogs"));
    } else {
        json_object_del(tr, "ctlogs");
    }
    char *s = json_dumps(tr, JSON_COMPACT);
    json_decref(tr);
    json_decref(o);
    return s;
}

TEST(embedded_sct_checked)
{
    struct fx f;
    struct tkm_err err = {0};
    size_t olen;
    fx_init(&f, DATA("trusted_root.json"));
    char *other = slurp(DATA("other_trusted_root.json"), &olen);
    /* another CT log: the certificate's SCT is from none of the trusted ones */
    char *r = root_with_ctlogs(f.root, other, NULL);
    f.pol.trusted_root = r;
    f.pol.trusted_root_len = strlen(r);
    ASSERT_EQ(fx_verify(&f, f.bundle, NULL, &err), -EKEYREJECTED);
    ASSERT_STRCONTAINS(err.msg,
                       "is not publicly logged: no SCT is from a CT log of the trusted root");
    free(r);
    /* the CT log's validity ended before the SCT's time */
    tkm_err_clear(&err);
    r = root_with_ctlogs(f.root, NULL, "2001-01-01T00:00:00Z");
    f.pol.trusted_root = r;
    f.pol.trusted_root_len = strlen(r);
    ASSERT_EQ(fx_verify(&f, f.bundle, NULL, &err), -EKEYREJECTED);
    ASSERT_STRCONTAINS(err.msg, "the SCT's time is outside its CT log's validity");
    free(r);
    /* a trusted root without CT logs: no SCT is required (documented) */
    r = root_with_ctlogs(f.root, NULL, NULL);
    f.pol.trusted_root = r;
    f.pol.trusted_root_len = strlen(r);
    ASSERT_OK(fx_verify(&f, f.bundle, NULL, &err));
    free(r);
    free(other);
    fx_release(&f);
}

/* Found by fuzz_bundle: a bundle whose log entry does not record its
 * signature (the message used to read the entry's kind after freeing it). */
TEST(log_entry_must_record_the_signature)
{
    struct fx f;
    struct tkm_err err = {0};
    size_t n;
    fx_init(&f, DATA("regress_trusted_root.json")); /* the root the fuzzer's bundle was made for */
    char *b = slurp(TKM_SOURCE_DIR "/tests/fuzz/corpus/bundle/regress-kind-after-free.json", &n);
    f.id.subject = NULL;
    f.id.subject_regexp = ".*";
    ASSERT_EQ(fx_verify(&f, b, NULL, &err), -EBADMSG);
    ASSERT_STRCONTAINS(err.msg, "(kind dsse) does not record this signature and certificate");
    free(b);
    fx_release(&f);
}

TEST(keyless_message_signature_v02)
{
    struct fx f;
    struct tkm_sig_result r;
    struct tkm_err err = {0};
    size_t n;
    fx_init(&f, DATA("trusted_root.json"));
    char *b = slurp(DATA("bundle-message.json"), &n);
    ASSERT_OK(fx_verify(&f, b, &r, &err));
    ASSERT_EQ(r.format, TKM_SIG_FMT_BUNDLE_MESSAGE);
    ASSERT_STREQ(r.bundle_media_type, "application/vnd.dev.sigstore.bundle+json;version=0.2");
    ASSERT_STREQ(r.identity, IDENTITY);
    /* another image */
    ASSERT_EQ(tkm_bundle_verify((const unsigned char *)b, n, &f.pol,
                                "sha256:1111111111111111111111111111111111111111111111111111111111"
                                "111111",
                                NULL, NULL, &err),
              -EBADMSG);
    f.id.subject = "other@example.test";
    ASSERT_EQ(fx_verify(&f, b, NULL, &err), -EKEYREJECTED);
    free(b);
    fx_release(&f);
}

TEST(any_good_log_entry)
{
    struct fx f;
    struct tkm_err err = {0};
    fx_init(&f, DATA("trusted_root.json"));
    json_t *j = json_loads(f.bundle, 0, NULL);
    json_t *tl = json_object_get(json_object_get(j, "verificationMaterial"), "tlogEntries");
    json_t *bad = json_deep_copy(json_array_get(tl, 0));
    json_object_set_new(bad, "integratedTime", json_string("1"));
    json_array_insert_new(tl, 0, bad); /* a bad entry first, the good one second */
    char *b = json_dumps(j, JSON_COMPACT);
    ASSERT_OK(fx_verify(&f, b, NULL, &err));
    free(b);
    json_array_remove(tl, 1); /* only bad ones */
    json_array_append(tl, json_array_get(tl, 0));
    b = json_dumps(j, JSON_COMPACT);
    ASSERT_EQ(fx_verify(&f, b, NULL, &err), -EKEYREJECTED);
    ASSERT_STRCONTAINS(err.msg,
                       "was not valid at the entry's integrated time 1 (nor does any other "
                       "log entry)");
    free(b);
    json_decref(j);
    fx_release(&f);
}
