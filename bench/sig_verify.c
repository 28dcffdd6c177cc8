/*
 * sig_verify.c - how long one signature check takes, to decide where the
 * signature search (tkm_sig_job_verify) runs it: on the loop or the thread
 * pool. Side by side, alternating per round:
 *   classic  tkm_cosign_verify of the real cosign v2 signature in
 *            tests/unit/data/cosign (manifest JSON, payload JSON, ECDSA
 *            P-256 with the caller's key, PEM parsed each time);
 *   keyless  tkm_bundle_verify of the keyless bundle in
 *            tests/unit/data/sigstore (certificate chain at the log's time,
 *            SET and inclusion proof, the signature, the identity policy,
 *            trusted_root.json parsed each time);
 *   baseline one bare EVP_DigestVerify (ECDSA P-256, SHA-256) of the same
 *            payload with a key parsed once.
 * Prints the median and the worst of ROUNDS rounds (each the mean of N calls,
 * in microseconds) and each side's ratio to the baseline.
 *
 * Usage: bench_sig_verify SOURCE_DIR [ROUNDS] [N]
 */
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <tkm/archive.h>
#include <tkm/trust/bundle.h>
#include <tkm/trust/cosign.h>
#include <tkm/trust/keys.h>
#include <tkm/util.h>

#define ROUNDS_MAX 31
#define IMG        "sha256:ca5028e4e017430615443cd0ec724e48340e283e2c8a7cbf98f83647ad38b440"

struct in {
    char *sig, *payload, *pub, *pdigest, *bundle, *root;
    size_t sig_n, payload_n, pub_n, pdigest_n, bundle_n, root_n;
    EVP_PKEY *key;
    unsigned char rawsig[128];
    size_t rawsig_n;
};

static double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static int load(const char *dir, const char *name, char **p, size_t *n)
{
    char path[1024];
    struct tkm_err err = {0};
    snprintf(path, sizeof path, "%s/tests/unit/data/%s", dir, name);
    if (tkm_trust_read_file(path, 1 << 20, p, n, &err) < 0) {
        fprintf(stderr, "bench_sig_verify: %s\n", tkm_err_str(&err));
        return -1;
    }
    return 0;
}

static int run_classic(struct in *in)
{
    struct tkm_cosign_blob b = {in->pdigest, (const unsigned char *)in->payload, in->payload_n};
    struct tkm_cosign_result r;
    struct tkm_err err = {0};
    int rc = tkm_cosign_verify(in->sig, in->sig_n, &b, 1, in->pub, in->pub_n, IMG, &r, &err);
    if (rc)
        fprintf(stderr, "classic: %s\n", tkm_err_str(&err));
    return rc;
}

static int run_keyless(struct in *in)
{
    struct tkm_sig_identity id = {"https://issuer.example.test", "signer@example.test", NULL};
    struct tkm_sig_policy pol = {.trusted_root = in->root,
                                 .trusted_root_len = in->root_n,
                                 .identities = &id,
                                 .nidentities = 1};
    struct tkm_sig_result r;
    struct tkm_err err = {0};
    int rc = tkm_bundle_verify((const unsigned char *)in->bundle, in->bundle_n, &pol, IMG, "t/a",
                               &r, &err);
    if (rc)
        fprintf(stderr, "keyless: %s\n", tkm_err_str(&err));
    return rc;
}

static int run_baseline(struct in *in)
{
    EVP_MD_CTX *c = EVP_MD_CTX_new();
    int ok = c && EVP_DigestVerifyInit(c, NULL, EVP_sha256(), NULL, in->key) == 1 &&
             EVP_DigestVerify(c, in->rawsig, in->rawsig_n, (const unsigned char *)in->payload,
                              in->payload_n) == 1;
    EVP_MD_CTX_free(c);
    if (!ok)
        fprintf(stderr, "baseline: the signature does not verify\n");
    return ok ? 0 : -1;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The cosign signature annotation of the fixture's one layer, decoded. */
static int raw_signature(struct in *in)
{
    const char *k = "\"dev.cosignproject.cosign/signature\":\"";
    const char *p = strstr(in->sig, k);
    if (!p)
        return -1;
    p += strlen(k);
    const char *e = strchr(p, '"');
    unsigned char buf[256];
    int n = e ? EVP_DecodeBlock(buf, (const unsigned char *)p, (int)(e - p)) : -1;
    if (n <= 0)
        return -1;
    while (n > 0 && e[-1] == '=') { /* EVP_DecodeBlock counts the padding */
        n--;
        e--;
    }
    in->rawsig_n = (size_t)n;
    memcpy(in->rawsig, buf, in->rawsig_n);
    return 0;
}

int main(int argc, char **argv)
{
    struct in in = {0};
    const char *dir = argc > 1 ? argv[1] : ".";
    int64_t rounds = 15, n = 200;
    int (*side[3])(struct in *) = {run_classic, run_keyless, run_baseline};
    const char *name[3] = {"classic (cosign v2, ECDSA P-256)", "keyless bundle (Fulcio + Rekor)",
                           "baseline (one EVP_DigestVerify)"};
    double t[3][ROUNDS_MAX];
    if ((argc > 2 && tkm_parse_i64(argv[2], 1, ROUNDS_MAX, &rounds) < 0) ||
        (argc > 3 && tkm_parse_i64(argv[3], 1, 1000000, &n) < 0)) {
        fprintf(stderr, "usage: bench_sig_verify SOURCE_DIR [ROUNDS 1..%d] [N]\n", ROUNDS_MAX);
        return 2;
    }
    if (load(dir, "cosign/sig.json", &in.sig, &in.sig_n) ||
        load(dir, "cosign/payload.json", &in.payload, &in.payload_n) ||
        load(dir, "cosign/cosign.pub", &in.pub, &in.pub_n) ||
        load(dir, "cosign/payload-digest", &in.pdigest, &in.pdigest_n) ||
        load(dir, "sigstore/bundle.json", &in.bundle, &in.bundle_n) ||
        load(dir, "sigstore/trusted_root.json", &in.root, &in.root_n))
        return 1;
    in.pdigest[strcspn(in.pdigest, "\n")] = '\0';
    if (tkm_trust_load_pubkey(in.pub, in.pub_n, &in.key, NULL) < 0 || raw_signature(&in) < 0) {
        fprintf(stderr, "bench_sig_verify: the fixture's key or signature does not parse\n");
        return 1;
    }
    for (int r = 0; r < (int)rounds; r++) {
        for (int k = 0; k < 3; k++) {
            int s = (k + r) % 3; /* each side goes first in turn */
            double t0 = now_us();
            for (int64_t i = 0; i < n; i++)
                if (side[s](&in) != 0)
                    return 1;
            t[s][r] = (now_us() - t0) / (double)n;
        }
    }
    double med[3], worst[3];
    for (int s = 0; s < 3; s++) {
        qsort(t[s], (size_t)rounds, sizeof t[s][0], cmp);
        med[s] = t[s][rounds / 2];
        worst[s] = t[s][rounds - 1];
    }
    printf("%-36s %12s %12s %8s\n", "one check", "median us", "worst us", "ratio");
    for (int s = 0; s < 3; s++)
        printf("%-36s %12.1f %12.1f %8.1f\n", name[s], med[s], worst[s], med[s] / med[2]);
    EVP_PKEY_free(in.key);
    free(in.sig);
    free(in.payload);
    free(in.pub);
    free(in.pdigest);
    free(in.bundle);
    free(in.root);
    return 0;
}
