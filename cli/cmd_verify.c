/*
 * cmd_verify.c - tkmctl verify: finds an image's cosign signatures the way
 * cosign v3 does (OCI referrers, the "sha256-<hex>" tag schema, the classic
 * "sha256-<hex>.sig" tag), verifies them with public keys and prints the
 * digest that was verified and which signature satisfied the policy.
 */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include <tkm/oci/ref.h>
#include <tkm/oci/registry.h>
#include <tkm/trust/bundle.h>
#include <tkm/trust/cosign.h>
#include <tkm/trust/keys.h>

#include "ctl_args.h"
#include "ctl_oci.h"
#include "tkmctl.h"
#include "ctl_json.h"

static void usage(FILE *f)
{
    fprintf(f,
            "Usage: tkmctl verify REF --key cosign.pub[,other.pub...] [flags]\n"
            "       tkmctl verify REF --trusted-root trusted_root.json\n"
            "           --certificate-oidc-issuer URL --certificate-identity[-regexp] S [flags]\n\n"
            "Verifies an image's cosign signature with public keys, offline from any\n"
            "transparency log (like cosign verify --key K --insecure-ignore-tlog):\n"
            "  1. the tag is resolved once: the manifest is fetched and its sha256 is the\n"
            "     digest D (a REF with @sha256:... is fetched by that digest and checked);\n"
            "  2. signatures are looked for as cosign v3 writes them: Sigstore bundles in the\n"
            "     OCI referrers API (GET /v2/REPO/referrers/D), or, on registries without\n"
            "     it, in the index tagged sha256-<hex of D>; then classic signatures in the\n"
            "     manifest tagged sha256-<hex of D>.sig (cosign v2, or\n"
            "     --new-bundle-format=false);\n"
            "  3. each signature is checked with the keys (ECDSA P-256/384/521, RSA, Ed25519)\n"
            "     before its payload is read: a bundle's in-toto statement must have\n"
            "     predicateType https://sigstore.dev/cosign/sign/v1 and subject digest D; a\n"
            "     classic payload must claim D, and its docker-reference must name REPO\n"
            "     unless --allow-cross-repository.\n"
            "Any one signature that verifies is enough; tkmctl says which and where. Prints\n"
            "REF@D; pull by that digest only. Exit status 1 with the reason otherwise: not\n"
            "signed (and where it looked), a format tkm does not read, another key (its id),\n"
            "a signature for another digest or repository.\n\n"
            "Keyless (Sigstore bundles with a Fulcio certificate), offline: the certificate\n"
            "must chain to a CA of the trusted root at the Rekor entry's integrated time, the\n"
            "entry's SET and/or inclusion proof (with its signed checkpoint) must verify with\n"
            "the trusted root's Rekor key, and the certificate's identity must match.\n\n"
            "Flags:\n"
            "  --key FILE[,FILE]         cosign public keys (cosign.pub, PEM); any one may sign\n"
            "  --trusted-root FILE       Sigstore trusted_root.json (keyless)\n"
            "  --certificate-identity S  keyless: the certificate's SAN, exactly\n"
            "  --certificate-identity-regexp RE  keyless: the SAN, a POSIX ERE (anchored)\n"
            "  --certificate-oidc-issuer URL     keyless: the OIDC issuer, exactly (required)\n"
            "  --bundle FILE             verify this bundle file for the image (no lookup)\n"
            "  --allow-cross-repository  accept a docker-reference naming another repository\n"
            "  -o json                   print the result as JSON\n\n"
            "%s\n"
            "Examples:\n"
            "  tkmctl verify 127.0.0.1:5000/tkm/cache:sm90 --key cosign.pub\n"
            "  tkmctl verify quay.io/org/cache@sha256:bf6f... --key cosign.pub -o json\n"
            "  tkmctl verify quay.io/org/cache:v1 --trusted-root trusted_root.json \\\n"
            "    --certificate-oidc-issuer https://token.actions.githubusercontent.com \\\n"
            "    --certificate-identity-regexp 'https://github.com/org/.*'\n",
            ctl_oci_flags_help);
}

static void print_ok(const char *canon, const char *digest, const struct tkm_sig_result *r,
                     int json)
{
    if (json) {
        const char *idn = r->identity[0] ? r->identity : NULL; /* s*, o*: NULL leaves it out */
        ctl_json_print(json_pack(
            "{s:s,s:s,s:b,s:s,s:s,s:s,s:s,s:s,s:s,s:I,s:s*,s:s*,s:s*,s:o*}", "reference", canon,
            "digest", digest, "verified", 1, "source", tkm_sig_source_name(r->source), "format",
            tkm_sig_format_name(r->format), "location", r->location, "key", r->key_id, "keyType",
            r->key_desc, "dockerReference", r->docker_reference, "signaturesFound",
            (json_int_t)r->found, "bundleMediaType",
            r->bundle_media_type[0] ? r->bundle_media_type : NULL, "certificateIdentity", idn,
            "certificateOidcIssuer", idn ? r->issuer : NULL, "tlogIndex",
            r->tlog_index >= 0 ? json_integer(r->tlog_index) : NULL));
        return;
    }
    char who[1200];
    if (r->identity[0])
        snprintf(who, sizeof who, "certificate for %s (issuer %s), tlog index %lld", r->identity,
                 r->issuer, (long long)r->tlog_index);
    else
        snprintf(who, sizeof who, "key %s (%s)", r->key_id, r->key_desc);
    printf("%s@%s\n", canon, digest);
    fprintf(stderr, "verified: %s from the %s at %s, %s%s%s; %zu signature%s found\n",
            tkm_sig_format_name(r->format), tkm_sig_source_name(r->source), r->location, who,
            r->docker_reference[0] ? ", docker-reference " : "", r->docker_reference, r->found,
            r->found == 1 ? "" : "s");
}

/* D: the sha256 of the manifest bytes the registry serves for REF. */
static int resolve(struct tkm_oci_registry *reg, const struct tkm_oci_ref *ref,
                   char digest[TKM_OCI_DIGEST_LEN + 1], struct tkm_err *err)
{
    struct tkm_buf body = TKM_BUF_INIT(4 << 20);
    char ct[256];
    int rc = tkm_oci_registry_get_manifest(reg, ref->repo, tkm_oci_ref_reference(ref), &body, ct,
                                           sizeof ct, digest, err);
    tkm_buf_release(&body);
    return rc;
}

struct vflags {
    const char *key, *root, *identity, *identity_re, *issuer, *bundle;
    int cross;
};

static int parse_args(int argc, char **argv, struct ctl_oci_flags *f, const char **refstr,
                      struct vflags *v)
{
    const struct ctl_arg args[] = {{"--key", &v->key, NULL},
                                   {"--allow-cross-repository", NULL, &v->cross},
                                   {"--trusted-root", &v->root, NULL},
                                   {"--certificate-identity", &v->identity, NULL},
                                   {"--certificate-identity-regexp", &v->identity_re, NULL},
                                   {"--certificate-oidc-issuer", &v->issuer, NULL},
                                   {"--bundle", &v->bundle, NULL},
                                   {0}};
    const struct ctl_args_spec spec = {"verify", args, refstr, 1, usage, f};
    int st = ctl_args_parse(&spec, argc, argv);
    if (st >= 0)
        return st;
    if (!*refstr || (!v->key && !v->root)) {
        fprintf(stderr, "tkmctl verify: need REF and --key FILE or --trusted-root FILE\n\n");
        usage(stderr);
        return 2;
    }
    return -1;
}

#define MAX_KEYS 8

struct keyset {
    char *pem[MAX_KEYS];
    struct tkm_sig_key keys[MAX_KEYS];
    size_t n;
};

/* "a.pub,b.pub" -> the keys' PEM bytes (owned by ks). */
static int load_keys(const char *list, struct keyset *ks, struct tkm_err *err)
{
    char path[4096];
    const char *p = list ? list : "";
    while (*p) {
        const char *c = strchr(p, ',');
        size_t n = c ? (size_t)(c - p) : strlen(p);
        if (n == 0 || n >= sizeof path)
            return tkm_err_set(err, -EINVAL, "--key: empty or too long file name in '%s'", list);
        if (ks->n == MAX_KEYS)
            return tkm_err_set(err, -EINVAL, "--key: at most %d keys", MAX_KEYS);
        memcpy(path, p, n);
        path[n] = '\0';
        size_t len = 0;
        int rc = tkm_trust_read_file(path, 1 << 20, &ks->pem[ks->n], &len, err);
        if (rc < 0)
            return rc;
        ks->keys[ks->n] = (struct tkm_sig_key){ks->pem[ks->n], len};
        ks->n++;
        p = c ? c + 1 : p + n;
    }
    return 0;
}

/* The policy from the flags; what it points to is owned by ks / *root. */
static int build_policy(const struct vflags *v, struct keyset *ks, char **root,
                        struct tkm_sig_identity *id, struct tkm_sig_policy *pol,
                        struct tkm_err *err)
{
    size_t rlen = 0;
    int rc = load_keys(v->key, ks, err);
    if (rc < 0)
        return rc;
    if (v->root && (rc = tkm_trust_read_file(v->root, 16 << 20, root, &rlen, err)) < 0)
        return rc;
    *id = (struct tkm_sig_identity){v->issuer, v->identity, v->identity_re};
    *pol = (struct tkm_sig_policy){.mode = TKM_SIG_MODE_ENFORCE,
                                   .keys = ks->keys,
                                   .nkeys = ks->n,
                                   .trusted_root = *root,
                                   .trusted_root_len = rlen,
                                   .identities = id,
                                   .nidentities = (v->identity || v->identity_re || v->issuer),
                                   .allow_cross_repository = v->cross};
    return tkm_sig_policy_check(pol, err);
}

/* --bundle FILE: that bundle, verified for the image's digest (no discovery). */
static int verify_bundle_file(const char *path, const struct tkm_sig_policy *pol, const char *repo,
                              const char *digest, struct tkm_sig_result *res, struct tkm_err *err)
{
    char *b = NULL;
    size_t len = 0;
    int rc = tkm_trust_read_file(path, TKM_BUNDLE_MAX, &b, &len, err);
    if (rc == 0)
        rc = tkm_bundle_verify((const unsigned char *)b, len, pol, digest, repo, res, err);
    if (rc == 0) {
        res->found = 1;
        snprintf(res->location, sizeof res->location, "%s", path);
    } else {
        tkm_err_prefix(err, "%s", path);
    }
    free(b);
    return rc;
}

static int cmd_verify(int argc, char **argv)
{
    struct ctl_oci_flags f;
    struct tkm_oci_ref ref;
    struct tkm_oci_registry_opts ro;
    struct tkm_oci_registry *reg = NULL;
    struct tkm_sig_result res;
    struct tkm_sig_policy pol;
    struct tkm_sig_identity id;
    struct tkm_err err = {0};
    struct keyset ks = {0};
    struct vflags v = {0};
    const char *refstr = NULL;
    char canon[600], digest[TKM_OCI_DIGEST_LEN + 1], *root = NULL;
    int st;
    ctl_oci_flags_init(&f, "verify");
    if ((st = parse_args(argc, argv, &f, &refstr, &v)) >= 0)
        return st;
    if (tkm_oci_ref_parse(&ref, refstr, &err) != 0) {
        fprintf(stderr, "tkmctl verify: %s\n", tkm_err_str(&err));
        return 2;
    }
    st = 1;
    if (build_policy(&v, &ks, &root, &id, &pol, &err) < 0) {
        fprintf(stderr, "tkmctl verify: %s\n", tkm_err_str(&err));
        goto out;
    }
    ctl_oci_registry_opts(&f, &ro);
    if (tkm_oci_registry_new(ref.host, &ro, &reg, &err) < 0 || resolve(reg, &ref, digest, &err) < 0)
        goto fail;
    struct tkm_oci_ref bare = ref;
    bare.digest[0] = '\0';
    tkm_oci_ref_format(&bare, canon, sizeof canon);
    int rc = v.bundle ? verify_bundle_file(v.bundle, &pol, ref.repo, digest, &res, &err)
                      : tkm_sig_verify_registry(reg, ref.repo, digest, &pol, &res, &err);
    if (rc < 0) {
        tkm_err_prefix(&err, "%s@%s", canon, digest);
        goto fail;
    }
    print_ok(canon, digest, &res, f.json);
    st = 0;
    goto out;
fail:
    fprintf(stderr, "tkmctl verify: %s\n", tkm_err_str(&err));
out:
    tkm_oci_registry_free(reg);
    for (size_t i = 0; i < ks.n; i++)
        free(ks.pem[i]);
    free(root);
    return st;
}

TKMCTL_COMMAND_ORDERED(verify,
                       "check an image's cosign signature (bundle or classic); print the digest",
                       cmd_verify, 30);
