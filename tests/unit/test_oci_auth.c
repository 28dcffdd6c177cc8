/* test_oci_auth.c - WWW-Authenticate, docker config matching, Secret bytes, tokens. */
#include <stdlib.h>
#include <sys/stat.h>

#include <tkm/oci/auth.h>

#include "test.h"

TEST(challenge_bearer_docker_hub)
{
    struct tkm_oci_challenge c;
    ASSERT_OK(tkm_oci_challenge_parse(
        &c,
        "Bearer realm=\"https://auth.docker.io/token\",service=\"registry.docker.io\","
        "scope=\"repository:library/x:pull\"",
        NULL));
    ASSERT_EQ(c.scheme, TKM_OCI_AUTH_BEARER);
    ASSERT_STREQ(c.realm, "https://auth.docker.io/token");
    ASSERT_STREQ(c.service, "registry.docker.io");
    ASSERT_STREQ(c.scope, "repository:library/x:pull");
}

TEST(challenge_variants)
{
    struct tkm_oci_challenge c;
    struct tkm_err e = {0};
    /* quay: no scope; spaces after commas; lower-case scheme */
    ASSERT_OK(tkm_oci_challenge_parse(
        &c, "bearer realm=\"https://quay.io/v2/auth\", service=\"quay.io\"", NULL));
    ASSERT_EQ(c.scheme, TKM_OCI_AUTH_BEARER);
    ASSERT_STREQ(c.service, "quay.io");
    ASSERT_STREQ(c.scope, "");
    /* distribution htpasswd */
    ASSERT_OK(tkm_oci_challenge_parse(&c, "Basic realm=\"tkm-test\"", NULL));
    ASSERT_EQ(c.scheme, TKM_OCI_AUTH_BASIC);
    ASSERT_STREQ(c.realm, "tkm-test");
    /* several challenges: Bearer wins; escapes; an error param; scope with two actions */
    ASSERT_OK(tkm_oci_challenge_parse(
        &c,
        "Basic realm=\"b\", Bearer realm=\"https://a/t\",service=\"s\\\"q\","
        "scope=\"repository:a/b:pull,push\",error=\"insufficient_scope\"",
        NULL));
    ASSERT_EQ(c.scheme, TKM_OCI_AUTH_BEARER);
    ASSERT_STREQ(c.service, "s\"q");
    ASSERT_STREQ(c.scope, "repository:a/b:pull,push");
    ASSERT_STREQ(c.error, "insufficient_scope");
    /* unknown schemes are skipped */
    ASSERT_OK(tkm_oci_challenge_parse(&c, "Negotiate abc=\"1\", Basic realm=\"r\"", NULL));
    ASSERT_EQ(c.scheme, TKM_OCI_AUTH_BASIC);
    ASSERT_EQ(tkm_oci_challenge_parse(&c, "Negotiate", &e), -EINVAL);
    ASSERT_STRCONTAINS(e.msg, "no Basic or Bearer challenge");
    tkm_err_clear(&e);
    ASSERT_EQ(tkm_oci_challenge_parse(&c, "Bearer service=\"x\"", &e), -EINVAL);
    ASSERT_STRCONTAINS(e.msg, "without realm");
    tkm_err_clear(&e);
    ASSERT_EQ(tkm_oci_challenge_parse(&c, "Bearer realm=\"unterminated", &e), -EINVAL);
    ASSERT_STRCONTAINS(e.msg, "malformed");
}

/* user:pass -> dXNlcjpwYXNz ; alice:s3cr:et -> YWxpY2U6czNjcjpldA== */
static const char config[] =
    "{\"auths\":{"
    "\"https://index.docker.io/v1/\":{\"auth\":\"dXNlcjpwYXNz\"},"
    "\"quay.io\":{\"auth\":\"YWxpY2U6czNjcjpldA==\",\"identitytoken\":\"refresh-me\"},"
    "\"http://127.0.0.1:5000\":{\"username\":\"bob\",\"password\":\"pw\"},"
    "\"ghcr.io\":{}},"
    "\"credsStore\":\"desktop\"}";

TEST(docker_config_matching)
{
    struct tkm_oci_creds c;
    struct tkm_err e = {0};
    ASSERT_OK(
        tkm_oci_creds_from_config(config, strlen(config), "registry-1.docker.io", "cfg", &c, &e));
    ASSERT_STREQ(c.username, "user");
    ASSERT_STREQ(c.password, "pass");
    ASSERT_STREQ(c.source, "cfg");
    ASSERT_OK(tkm_oci_creds_from_config(config, strlen(config), "quay.io", "cfg", &c, &e));
    ASSERT_STREQ(c.username, "alice");
    ASSERT_STREQ(c.password, "s3cr:et"); /* split at the first ':' only */
    ASSERT_STREQ(c.identity_token, "refresh-me");
    ASSERT_OK(tkm_oci_creds_from_config(config, strlen(config), "127.0.0.1:5000", "cfg", &c, &e));
    ASSERT_STREQ(c.username, "bob");
    ASSERT_STREQ(c.password, "pw");
    /* another port, an empty entry, an unknown host: none */
    ASSERT_EQ(tkm_oci_creds_from_config(config, strlen(config), "127.0.0.1:5001", "cfg", &c, &e),
              -ENOENT);
    ASSERT_EQ(tkm_oci_creds_from_config(config, strlen(config), "ghcr.io", "cfg", &c, &e), -ENOENT);
    ASSERT_EQ(tkm_oci_creds_from_config(config, strlen(config), "example.com", "cfg", &c, &e),
              -ENOENT);
    ASSERT_EQ(e.code, 0);
}

TEST(dockerconfigjson_and_legacy_dockercfg_secret_bytes)
{
    /* .dockerconfigjson value (already base64-decoded from the Secret's data) */
    const char *dcj = "{\"auths\":{\"127.0.0.1:41000\":{\"username\":\"tkm\",\"password\":\"p\","
                      "\"auth\":\"dGttOnA=\"}}}";
    /* .dockercfg (legacy kubernetes.io/dockercfg): no auths wrapper */
    const char *dcfg = "{\"https://127.0.0.1:41000\":{\"auth\":\"dGttOnA=\",\"email\":\"x@y\"}}";
    struct tkm_oci_creds c;
    ASSERT_OK(
        tkm_oci_creds_from_config(dcj, strlen(dcj), "127.0.0.1:41000", "secret ns/pull", &c, NULL));
    ASSERT_STREQ(c.username, "tkm");
    ASSERT_STREQ(c.password, "p");
    memset(&c, 0, sizeof c);
    ASSERT_OK(tkm_oci_creds_from_config(dcfg, strlen(dcfg), "127.0.0.1:41000", "secret ns/old", &c,
                                        NULL));
    ASSERT_STREQ(c.username, "tkm");
    ASSERT_STREQ(c.password, "p");
}

TEST(bad_configs_named)
{
    struct tkm_oci_creds c;
    struct tkm_err e = {0};
    const char *b1 = "{\"auths\":{\"quay.io\":{\"auth\":\"***\"}}}";
    ASSERT_EQ(tkm_oci_creds_from_config(b1, strlen(b1), "quay.io", "/x/config.json", &c, &e),
              -EINVAL);
    ASSERT_STRCONTAINS(e.msg, "/x/config.json: auths entry 'quay.io': 'auth' is not valid base64");
    tkm_err_clear(&e);
    const char *b2 = "{\"auths\":{\"quay.io\":{\"auth\":\"bm9jb2xvbg==\"}}}"; /* "nocolon" */
    ASSERT_EQ(tkm_oci_creds_from_config(b2, strlen(b2), "quay.io", "f", &c, &e), -EINVAL);
    ASSERT_STRCONTAINS(e.msg, "does not decode to user:password");
    tkm_err_clear(&e);
    ASSERT_EQ(tkm_oci_creds_from_config("{", 1, "quay.io", "f", &c, &e), -EINVAL);
    ASSERT_STRCONTAINS(e.msg, "f: not a JSON object");
    tkm_err_clear(&e);
    const char *b3 = "{\"auths\":[]}";
    ASSERT_EQ(tkm_oci_creds_from_config(b3, strlen(b3), "quay.io", "f", &c, &e), -EINVAL);
    ASSERT_STRCONTAINS(e.msg, "'auths' is not an object");
}

TEST(load_from_docker_config_env)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/config.json", tkm_test_tmpdir());
    FILE *f = fopen(path, "w");
    ASSERT_NOT_NULL(f);
    fputs(config, f);
    fclose(f);
    setenv("DOCKER_CONFIG", tkm_test_tmpdir(), 1);
    unsetenv("REGISTRY_AUTH_FILE");
    unsetenv("XDG_RUNTIME_DIR");
    struct tkm_oci_creds c;
    ASSERT_OK(tkm_oci_creds_load("quay.io", &c, NULL));
    ASSERT_STREQ(c.username, "alice");
    ASSERT_STREQ(c.source, path);
    ASSERT_EQ(tkm_oci_creds_load("nothere.io", &c, NULL), -ENOENT);
    setenv("DOCKER_CONFIG", "/nonexistent-dir", 1);
    ASSERT_EQ(tkm_oci_creds_load("quay.io", &c, NULL), -ENOENT);
}

TEST(basic_header_and_base64)
{
    struct tkm_oci_creds c;
    char h[128];
    unsigned char out[16];
    size_t n = 0;
    memset(&c, 0, sizeof c);
    snprintf(c.username, sizeof c.username, "user");
    snprintf(c.password, sizeof c.password, "pass");
    ASSERT_OK(tkm_oci_basic_header(&c, h, sizeof h));
    ASSERT_STREQ(h, "Basic dXNlcjpwYXNz");
    ASSERT_EQ(tkm_oci_basic_header(&c, h, 10), -ENOSPC);
    ASSERT_OK(tkm_oci_base64_decode("YQ", 2, out, sizeof out, &n));
    ASSERT_EQ(n, 1);
    ASSERT_EQ(out[0], 'a');
    ASSERT_EQ(tkm_oci_base64_decode("Y", 1, out, sizeof out, &n), -EINVAL);
    ASSERT_EQ(tkm_oci_base64_decode("YWJj", 4, out, 2, &n), -ENOSPC);
    tkm_oci_creds_wipe(&c);
    ASSERT_EQ(c.username[0], 0);
}

TEST(token_reply)
{
    char tok[64];
    long ex = 0;
    struct tkm_err e = {0};
    const char *a = "{\"token\":\"abc\",\"expires_in\":300}";
    const char *b = "{\"access_token\":\"xyz\"}";
    ASSERT_OK(tkm_oci_token_parse(a, strlen(a), "realm", tok, sizeof tok, &ex, NULL));
    ASSERT_STREQ(tok, "abc");
    ASSERT_EQ(ex, 300);
    ASSERT_OK(tkm_oci_token_parse(b, strlen(b), "realm", tok, sizeof tok, &ex, NULL));
    ASSERT_STREQ(tok, "xyz");
    ASSERT_EQ(ex, 60);
    ASSERT_EQ(tkm_oci_token_parse("{}", 2, "https://a/t", tok, sizeof tok, &ex, &e), -EINVAL);
    ASSERT_STRCONTAINS(e.msg, "https://a/t: token reply has neither");
}

static void write_file(const char *path, const char *text, int mode)
{
    FILE *f = fopen(path, "w");
    ASSERT_NOT_NULL(f);
    fputs(text, f);
    fclose(f);
    ASSERT_EQ(chmod(path, (mode_t)mode), 0);
}

TEST(credential_helpers_from_config_files)
{
    char path[1200], bin[1024], env[4096];
    struct tkm_oci_creds c;
    struct tkm_err e = {0};
    snprintf(bin, sizeof bin, "%s/bin", tkm_test_tmpdir());
    ASSERT_EQ(mkdir(bin, 0755), 0);
    snprintf(path, sizeof path, "%s/docker-credential-tkmfake", bin);
    write_file(
        path,
        "#!/bin/sh\n"
        "[ \"$1\" = get ] || exit 2\n"
        "read -r url\n"
        "case $url in\n"
        "quay.io) echo '{\"ServerURL\":\"quay.io\",\"Username\":\"hu\",\"Secret\":\"hs\"}';;\n"
        "https://index.docker.io/v1/) echo '{\"Username\":\"<token>\",\"Secret\":\"idt\"}';;\n"
        "*) echo 'credentials not found in native keychain'; exit 1;;\n"
        "esac\n",
        0755);
    snprintf(env, sizeof env, "%s:%s", bin, getenv("PATH") ? getenv("PATH") : "/usr/bin:/bin");
    setenv("PATH", env, 1);
    snprintf(path, sizeof path, "%s/config.json", tkm_test_tmpdir());
    write_file(path,
               "{\"auths\":{\"ghcr.io\":{}},\"credHelpers\":{\"https://quay.io\":\"tkmfake\"},"
               "\"credsStore\":\"tkmfake\"}",
               0644);
    ASSERT_OK(tkm_oci_creds_load_file(path, "quay.io", &c, &e));
    ASSERT_STREQ(c.username, "hu");
    ASSERT_STREQ(c.password, "hs");
    ASSERT_STREQ(c.source, "credential helper docker-credential-tkmfake");
    ASSERT_OK(tkm_oci_creds_load_file(path, "registry-1.docker.io", &c, &e));
    ASSERT_STREQ(c.identity_token, "idt");
    ASSERT_STREQ(c.username, "");
    ASSERT_EQ(tkm_oci_creds_load_file(path, "example.com", &c, &e), -ENOENT);
    ASSERT_EQ(e.code, 0);
    /* a helper that is not installed: no credentials (with a warning), as for no entry */
    write_file(path, "{\"credsStore\":\"not-installed-xyz\"}", 0644);
    ASSERT_EQ(tkm_oci_creds_load_file(path, "quay.io", &c, &e), -ENOENT);
    ASSERT_EQ(tkm_oci_creds_from_helper("not-installed-xyz", "quay.io", &c, &e), -ENOEXEC);
    ASSERT_STRCONTAINS(e.msg, "docker-credential-not-installed-xyz");
    /* a helper that fails for another reason is an error naming the config file */
    snprintf(path, sizeof path, "%s/docker-credential-tkmbroken", bin);
    write_file(path, "#!/bin/sh\necho 'keychain locked'\nexit 3\n", 0755);
    snprintf(path, sizeof path, "%s/config.json", tkm_test_tmpdir());
    write_file(path, "{\"credsStore\":\"tkmbroken\"}", 0644);
    tkm_err_clear(&e);
    ASSERT_EQ(tkm_oci_creds_load_file(path, "quay.io", &c, &e), -EIO);
    ASSERT_STRCONTAINS(e.msg, "docker-credential-tkmbroken get quay.io failed: keychain locked");
    ASSERT_STRCONTAINS(e.msg, path);
    /* helper names cannot be paths */
    tkm_err_clear(&e);
    ASSERT_EQ(tkm_oci_creds_from_helper("../x", "quay.io", &c, &e), -EINVAL);
    ASSERT_STRCONTAINS(e.msg, "is not [A-Za-z0-9._-]+");
    /* Secret bytes never run helpers */
    const char *sec = "{\"credsStore\":\"tkmfake\"}";
    ASSERT_EQ(tkm_oci_creds_from_config(sec, strlen(sec), "quay.io", "secret", &c, NULL), -ENOENT);
}
