/*
 * Unit tests for lib/trust/tce: sign and verify a real Triton cache fixture
 * (RSA PKCS#1 v1.5 over SHA-384, one <file>.sig per file except group files),
 * interoperability with `openssl dgst -sha384 -verify`, and failures.
 */
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <sys/stat.h>
#include <unistd.h>

#include <tkm/trust/tce.h>

#include "test.h"

static char *pem_of(EVP_PKEY *k, int priv)
{
    BIO *b = BIO_new(BIO_s_mem());
    ASSERT_EQ(priv ? PEM_write_bio_PrivateKey(b, k, NULL, NULL, 0, NULL, NULL)
                   : PEM_write_bio_PUBKEY(b, k),
              1);
    char *p;
    long n = BIO_get_mem_data(b, &p);
    char *out = strndup(p, (size_t)n);
    BIO_free(b);
    return out;
}

/* Extracts the sm90 fixture; returns the cache dir path (static). */
static const char *fixture_cache(void)
{
    static char dir[600];
    char cmd[1400];
    snprintf(cmd, sizeof cmd, "tar -xzf '%s/triton-cache/triton-3.6.0-cuda-sm90.tar.gz' -C '%s'",
             tkm_test_fixtures(), tkm_test_tmpdir());
    ASSERT_OK(system(cmd));
    snprintf(dir, sizeof dir, "%s/tcache", tkm_test_tmpdir());
    return dir;
}

static size_t count_eligible(const char *dir)
{
    char cmd[1400], out[600];
    snprintf(out, sizeof out, "%s/count", tkm_test_tmpdir());
    snprintf(cmd, sizeof cmd,
             "find '%s' -mindepth 2 -maxdepth 2 -type f ! -name '__grp__*' ! -name '*.sig' | "
             "wc -l > '%s'",
             dir, out);
    ASSERT_OK(system(cmd));
    FILE *f = fopen(out, "r");
    ASSERT_NOT_NULL(f);
    unsigned long n = 0;
    ASSERT_EQ(fscanf(f, "%lu", &n), 1);
    fclose(f);
    return n;
}

TEST_TIMEOUT(sign_then_verify_fixture, 60)
{
    const char *dir = fixture_cache();
    size_t want = count_eligible(dir);
    ASSERT(want > 10);
    EVP_PKEY *k = tkm_test_rsa_key("rsa3072");
    ASSERT_NOT_NULL(k);
    char *priv = pem_of(k, 1), *pub = pem_of(k, 0);
    struct tkm_tce_report rep;
    struct tkm_err err = {0};
    ASSERT_OK(tkm_tce_dir(dir, priv, strlen(priv), 0, &rep, &err));
    ASSERT_EQ(rep.n, want);
    ASSERT_EQ(rep.ok, want);
    ASSERT(rep.kernel_dirs >= 4);
    for (size_t i = 0; i < rep.n; i++)
        ASSERT(strstr(rep.v[i].path, "__grp__") == NULL);
    tkm_tce_report_release(&rep);
    /* group files stay unsigned, as in TCE */
    char cmd[1400];
    snprintf(cmd, sizeof cmd, "test -z \"$(find '%s' -name '__grp__*.sig')\"", dir);
    ASSERT_OK(system(cmd));
    ASSERT_OK(tkm_tce_dir(dir, pub, strlen(pub), 1, &rep, &err));
    ASSERT_EQ(rep.ok, want);
    ASSERT_EQ(rep.failed, 0);
    /* interop: the same bytes openssl dgst -sha384 -verify accepts */
    char pubp[600];
    snprintf(pubp, sizeof pubp, "%s/pub.pem", tkm_test_tmpdir());
    FILE *f = fopen(pubp, "w");
    ASSERT_NOT_NULL(f);
    fputs(pub, f);
    fclose(f);
    snprintf(cmd, sizeof cmd,
             "openssl dgst -sha384 -verify '%s' -signature '%s/%s.sig' '%s/%s' "
             ">/dev/null",
             pubp, dir, rep.v[0].path, dir, rep.v[0].path);
    ASSERT_OK(system(cmd));
    tkm_tce_report_release(&rep);
    free(priv);
    free(pub);
    EVP_PKEY_free(k);
}

TEST_TIMEOUT(tampered_missing_and_wrong_key, 60)
{
    const char *dir = fixture_cache();
    EVP_PKEY *k = tkm_test_rsa_key("rsa2048-a");
    EVP_PKEY *k2 = tkm_test_rsa_key("rsa2048-b");
    char *priv = pem_of(k, 1), *pub = pem_of(k, 0), *pub2 = pem_of(k2, 0);
    struct tkm_tce_report rep;
    struct tkm_err err = {0};
    ASSERT_OK(tkm_tce_dir(dir, priv, strlen(priv), 0, &rep, &err));
    size_t total = rep.n;
    char victim[1200], cmd[2600];
    snprintf(victim, sizeof victim, "%s/%s", dir, rep.v[0].path);
    char sigv[1200];
    snprintf(sigv, sizeof sigv, "%s/%s.sig", dir, rep.v[1].path);
    tkm_tce_report_release(&rep);
    snprintf(cmd, sizeof cmd, "printf x >> '%s'", victim);
    ASSERT_OK(system(cmd));
    ASSERT_OK(unlink(sigv));
    ASSERT_EQ(tkm_tce_dir(dir, pub, strlen(pub), 1, &rep, &err), -EKEYREJECTED);
    ASSERT_STRCONTAINS(err.msg, "2 of ");
    ASSERT_EQ(rep.failed, 2);
    ASSERT_EQ(rep.v[0].status, TKM_TCE_BAD_SIG);
    ASSERT_STRCONTAINS(rep.v[0].msg, "does not verify");
    ASSERT_EQ(rep.v[1].status, TKM_TCE_MISSING_SIG);
    ASSERT_STRCONTAINS(rep.v[1].msg, "no signature file");
    ASSERT_EQ(rep.ok, total - 2);
    tkm_tce_report_release(&rep);
    tkm_err_clear(&err);
    ASSERT_EQ(tkm_tce_dir(dir, pub2, strlen(pub2), 1, &rep, &err), -EKEYREJECTED);
    ASSERT_EQ(rep.ok, 0);
    tkm_tce_report_release(&rep);
    free(priv);
    free(pub);
    free(pub2);
    EVP_PKEY_free(k);
    EVP_PKEY_free(k2);
}

TEST(non_rsa_key_and_bad_dir)
{
    EVP_PKEY *k = EVP_PKEY_Q_keygen(NULL, NULL, "EC", "P-256");
    char *pub = pem_of(k, 0);
    struct tkm_tce_report rep;
    struct tkm_err err = {0};
    ASSERT_EQ(tkm_tce_dir(tkm_test_tmpdir(), pub, strlen(pub), 1, &rep, &err), -EINVAL);
    ASSERT_STRCONTAINS(err.msg, "TCE signatures are RSA; this key is ECDSA P-256");
    EVP_PKEY_free(k);
    free(pub);
    k = tkm_test_rsa_key("rsa2048-a");
    pub = pem_of(k, 0);
    tkm_err_clear(&err);
    ASSERT_EQ(tkm_tce_dir("/nonexistent-tkm", pub, strlen(pub), 1, &rep, &err), -ENOENT);
    ASSERT_STRCONTAINS(err.msg, "cannot open cache dir /nonexistent-tkm");
    tkm_err_clear(&err);
    ASSERT_EQ(tkm_tce_dir(tkm_test_tmpdir(), pub, strlen(pub), 1, &rep, &err), -ENOENT);
    ASSERT_STRCONTAINS(err.msg, "has no kernel files");
    tkm_tce_report_release(&rep);
    EVP_PKEY_free(k);
    free(pub);
}
