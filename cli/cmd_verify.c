/*
 * cmd_verify.c - tkmctl verify: checks an image's cosign key signature in
 * its registry (classic "sha256-<hex>.sig" format) and prints the digest
 * that was verified.
 */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include <tkm/oci/ref.h>
#include <tkm/oci/registry.h>
#include <tkm/trust/cosign.h>
#include <tkm/trust/keys.h>

#include "ctl_args.h"
#include "ctl_oci.h"
#include "tkmctl.h"

static void usage(FILE *f)
{
    fprintf(f,
            "Usage: tkmctl verify REF --key cosign.pub [flags]\n\n"
            "Verifies a cosign key-based signature of an image, offline from any\n"
            "transparency log (like cosign verify --key K --insecure-ignore-tlog):\n"
            "  1. the tag is resolved once: the manifest is fetched and its sha256 is the\n"
            "     digest D (a REF with @sha256:... is fetched by that digest and checked);\n"
            "  2. the signature manifest REPO:sha256-<hex of D>.sig is fetched (at most %d\n"
            "     layers), and each signature payload (at most %d bytes, digest checked);\n"
            "  3. each signature is checked with the key (ECDSA P-256/384/521, RSA, Ed25519)\n"
            "     over the payload bytes, and only then the payload is read: its type must be\n"
            "     'cosign container image signature' and its docker-manifest-digest must be D.\n"
            "Prints REF@D when a signature verifies; pull by that digest only. Exit status 1\n"
            "with the reason otherwise (unsigned, wrong key, signature for another digest).\n\n"
            "Flags:\n"
            "  --key FILE         the cosign public key (cosign.pub, PEM)\n"
            "  -o json            print the result as JSON\n\n"
            "%s\n"
            "Examples:\n"
            "  tkmctl verify 127.0.0.1:5000/tkm/cache:sm90 --key cosign.pub\n"
            "  tkmctl verify quay.io/org/cache@sha256:bf6f... --key cosign.pub -o json\n",
            TKM_COSIGN_MAX_LAYERS, TKM_COSIGN_MAX_PAYLOAD, ctl_oci_flags_help);
}

static void print_ok(const char *canon, const char *digest, const struct tkm_cosign_result *r,
                     const char *keydesc, int json)
{
    if (json) {
        json_t *j = json_pack("{s:s,s:s,s:b,s:s,s:s,s:I,s:s}", "reference", canon, "digest", digest,
                              "verified", 1, "key", r->key_id, "keyType", keydesc, "signatureLayer",
                              (json_int_t)r->layer, "dockerReference", r->docker_reference);
        char *s = j ? json_dumps(j, JSON_INDENT(2)) : NULL;
        if (s)
            printf("%s\n", s);
        free(s);
        json_decref(j);
        return;
    }
    printf("%s@%s\n", canon, digest);
    fprintf(stderr, "verified: signature layer %zu, key %s (%s)%s%s\n", r->layer, r->key_id,
            keydesc, r->docker_reference[0] ? ", docker-reference " : "", r->docker_reference);
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

static int parse_args(int argc, char **argv, struct ctl_oci_flags *f, const char **refstr,
                      const char **key)
{
    const struct ctl_arg args[] = {{"--key", key, NULL}, {0}};
    const struct ctl_args_spec spec = {"verify", args, refstr, 1, usage, f};
    int st = ctl_args_parse(&spec, argc, argv);
    if (st >= 0)
        return st;
    if (!*refstr || !*key) {
        fprintf(stderr, "tkmctl verify: need REF and --key FILE\n\n");
        usage(stderr);
        return 2;
    }
    return -1;
}

static int cmd_verify(int argc, char **argv)
{
    struct ctl_oci_flags f;
    struct tkm_oci_ref ref;
    struct tkm_oci_registry_opts ro;
    struct tkm_oci_registry *reg = NULL;
    struct tkm_cosign_result res;
    struct tkm_err err = {0};
    const char *refstr = NULL, *key = NULL;
    char *pem = NULL, canon[600], digest[TKM_OCI_DIGEST_LEN + 1], kdesc[80] = "";
    size_t pem_len = 0;
    int st;
    ctl_oci_flags_init(&f, "verify");
    if ((st = parse_args(argc, argv, &f, &refstr, &key)) >= 0)
        return st;
    if (tkm_oci_ref_parse(&ref, refstr, &err) != 0) {
        fprintf(stderr, "tkmctl verify: %s\n", tkm_err_str(&err));
        return 2;
    }
    st = 1;
    if (tkm_trust_read_file(key, 1 << 20, &pem, &pem_len, &err) < 0) {
        fprintf(stderr, "tkmctl verify: key: %s\n", tkm_err_str(&err));
        goto out;
    }
    ctl_oci_registry_opts(&f, &ro);
    if (tkm_oci_registry_new(ref.host, &ro, &reg, &err) < 0 || resolve(reg, &ref, digest, &err) < 0)
        goto fail;
    struct tkm_oci_ref bare = ref;
    bare.digest[0] = '\0';
    tkm_oci_ref_format(&bare, canon, sizeof canon);
    if (tkm_cosign_verify_registry(reg, ref.repo, digest, pem, pem_len, &res, &err) < 0) {
        tkm_err_prefix(&err, "%s@%s", canon, digest);
        goto fail;
    }
    EVP_PKEY *k = NULL;
    if (tkm_trust_load_pubkey(pem, pem_len, &k, NULL) == 0)
        tkm_trust_key_desc(k, kdesc, sizeof kdesc);
    EVP_PKEY_free(k);
    print_ok(canon, digest, &res, kdesc, f.json);
    st = 0;
    goto out;
fail:
    fprintf(stderr, "tkmctl verify: %s\n", tkm_err_str(&err));
out:
    tkm_oci_registry_free(reg);
    free(pem);
    return st;
}

TKMCTL_COMMAND_ORDERED(verify, "check an image's cosign key signature; print the verified digest",
                       cmd_verify, 30);
