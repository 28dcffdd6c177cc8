/* test_oci_ref.c - reference parsing, normalization and the plain-HTTP rule. */
#include <tkm/oci/ref.h>

#include "test.h"

struct good {
    const char *in, *host, *repo, *tag, *digest, *canonical;
};

#define D64 "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

static const struct good goods[] = {
    {"busybox", "registry-1.docker.io", "library/busybox", "latest", "",
     "docker.io/library/busybox:latest"},
    {"docker.io/busybox:1.36", "registry-1.docker.io", "library/busybox", "1.36", "",
     "docker.io/library/busybox:1.36"},
    {"index.docker.io/user/img", "registry-1.docker.io", "user/img", "latest", "",
     "docker.io/user/img:latest"},
    {"user/img:v1", "registry-1.docker.io", "user/img", "v1", "", "docker.io/user/img:v1"},
    {"quay.io/gkm/cache-examples:vector-add-cache-cuda", "quay.io", "gkm/cache-examples",
     "vector-add-cache-cuda", "", "quay.io/gkm/cache-examples:vector-add-cache-cuda"},
    {"Quay.IO/gkm/x", "quay.io", "gkm/x", "latest", "", "quay.io/gkm/x:latest"},
    {"127.0.0.1:5000/tkm/cache:v1", "127.0.0.1:5000", "tkm/cache", "v1", "",
     "127.0.0.1:5000/tkm/cache:v1"},
    {"localhost/a", "localhost", "a", "latest", "", "localhost/a:latest"},
    {"localhost:5000/a/b/c", "localhost:5000", "a/b/c", "latest", "",
     "localhost:5000/a/b/c:latest"},
    {"[::1]:5000/tkm/c:t", "[::1]:5000", "tkm/c", "t", "", "[::1]:5000/tkm/c:t"},
    {"[fe80::1]/x", "[fe80::1]", "x", "latest", "", "[fe80::1]/x:latest"},
    {"quay.io/a/b@sha256:" D64, "quay.io", "a/b", "", "sha256:" D64, "quay.io/a/b@sha256:" D64},
    {"quay.io/a/b:v2@sha256:" D64, "quay.io", "a/b", "v2", "sha256:" D64,
     "quay.io/a/b:v2@sha256:" D64},
    {"r.io/a_b/c__d/e-f/g--h/i.j:T_a.g-1", "r.io", "a_b/c__d/e-f/g--h/i.j", "T_a.g-1", "",
     "r.io/a_b/c__d/e-f/g--h/i.j:T_a.g-1"},
    {"localhost:5000", "registry-1.docker.io", "library/localhost", "5000", "",
     "docker.io/library/localhost:5000"},
};

TEST(parse_valid_table)
{
    for (size_t i = 0; i < sizeof goods / sizeof goods[0]; i++) {
        struct tkm_oci_ref r;
        struct tkm_err e = {0};
        char out[600];
        int rc = tkm_oci_ref_parse(&r, goods[i].in, &e);
        if (rc)
            fprintf(stderr, "input %s: %s\n", goods[i].in, e.msg);
        ASSERT_OK(rc);
        ASSERT_STREQ(r.host, goods[i].host);
        ASSERT_STREQ(r.repo, goods[i].repo);
        ASSERT_STREQ(r.tag, goods[i].tag);
        ASSERT_STREQ(r.digest, goods[i].digest);
        ASSERT(tkm_oci_ref_format(&r, out, sizeof out) > 0);
        ASSERT_STREQ(out, goods[i].canonical);
    }
}

struct bad {
    const char *in, *why;
};

static const struct bad bads[] = {
    {"", "invalid reference '': it is empty"},
    {"Busybox", "invalid reference 'Busybox': repository 'Busybox' must be lower-case"},
    {"quay.io/Gkm/x", "repository 'Gkm/x' must be lower-case"},
    {"quay.io/a/b:", "tag '' is empty"},
    {"quay.io/a/b:-x", "tag '-x' must start with [A-Za-z0-9_]"},
    {"quay.io/a/b:x!y", "tag 'x!y' may only contain [A-Za-z0-9_.-]"},
    {"quay.io/a/b@sha256:abc", "digest 'sha256:abc' is not sha256:<64 lower-case hex digits>"},
    {"quay.io/a/b@md5:" D64, "digest 'md5:"},
    {"quay.io/a/b@sha256:" D64 "00", "is not sha256"},
    {"quay.io/a//b", "has an empty path component"},
    {"quay.io/a/b/", "has an empty path component"},
    {"quay.io/a/-b", "does not start and end with [a-z0-9]"},
    {"quay.io/a/b...c", "separators"},
    {"quay.io:0/a", "invalid registry port"},
    {"quay.io:65536/a", "invalid registry port"},
    {"quay.io:x/a", "invalid registry port"},
    {"[::1/a", "IPv6 host without ']'"},
    {"[zz::1]:5000/a", "invalid IPv6 host"},
    {"-bad.io/a", "invalid registry host name"},
    {"bad_host.io/a", "invalid character in the registry host"},
    {"quay.io/a b", "contains a space"},
    {"/a", "has an empty path component"},
    {":tag", "no repository name"},
};

TEST(parse_invalid_table)
{
    for (size_t i = 0; i < sizeof bads / sizeof bads[0]; i++) {
        struct tkm_oci_ref r;
        struct tkm_err e = {0};
        int rc = tkm_oci_ref_parse(&r, bads[i].in, &e);
        if (rc == 0)
            fprintf(stderr, "input '%s' parsed\n", bads[i].in);
        ASSERT_EQ(rc, -EINVAL);
        ASSERT_STRCONTAINS(e.msg, bads[i].why);
        ASSERT_STRCONTAINS(e.msg, "invalid reference '");
    }
}

TEST(length_bounds)
{
    char tag[200], in[1200];
    struct tkm_oci_ref r;
    struct tkm_err e = {0};
    memset(tag, 'a', 128);
    tag[128] = '\0';
    snprintf(in, sizeof in, "r.io/x:%s", tag);
    ASSERT_OK(tkm_oci_ref_parse(&r, in, NULL));
    ASSERT_EQ(strlen(r.tag), 128);
    snprintf(in, sizeof in, "r.io/x:%sa", tag);
    ASSERT_EQ(tkm_oci_ref_parse(&r, in, &e), -EINVAL);
    ASSERT_STRCONTAINS(e.msg, "longer than 128");
    /* host/repo at 255 is fine, 256 is not */
    char repo[300];
    memset(repo, 'b', sizeof repo);
    repo[255 - 5] = '\0'; /* "r.io/" is 5 */
    snprintf(in, sizeof in, "r.io/%s", repo);
    ASSERT_OK(tkm_oci_ref_parse(&r, in, NULL));
    snprintf(in, sizeof in, "r.io/%sb", repo);
    tkm_err_clear(&e);
    ASSERT_EQ(tkm_oci_ref_parse(&r, in, &e), -EINVAL);
    ASSERT_STRCONTAINS(e.msg, "longer than 255");
    memset(in, 'a', 1100);
    in[1100] = '\0';
    tkm_err_clear(&e);
    ASSERT_EQ(tkm_oci_ref_parse(&r, in, &e), -EINVAL);
    ASSERT_STRCONTAINS(e.msg, "longer than 1024");
}

TEST(reference_for_manifest_url)
{
    struct tkm_oci_ref r;
    ASSERT_OK(tkm_oci_ref_parse(&r, "quay.io/a/b:v1", NULL));
    ASSERT_STREQ(tkm_oci_ref_reference(&r), "v1");
    ASSERT_OK(tkm_oci_ref_parse(&r, "quay.io/a/b:v1@sha256:" D64, NULL));
    ASSERT_STREQ(tkm_oci_ref_reference(&r), "sha256:" D64);
}

TEST(plain_http_only_loopback_or_listed)
{
    ASSERT_EQ(tkm_oci_host_plain_http("127.0.0.1:5000", NULL), 1);
    ASSERT_EQ(tkm_oci_host_plain_http("127.8.9.10", NULL), 1);
    ASSERT_EQ(tkm_oci_host_plain_http("localhost:443", NULL), 1);
    ASSERT_EQ(tkm_oci_host_plain_http("[::1]:5000", NULL), 1);
    ASSERT_EQ(tkm_oci_host_plain_http("128.0.0.1:5000", NULL), 0);
    ASSERT_EQ(tkm_oci_host_plain_http("10.0.0.1:5000", NULL), 0);
    ASSERT_EQ(tkm_oci_host_plain_http("quay.io", NULL), 0);
    ASSERT_EQ(tkm_oci_host_plain_http("[::2]:5000", NULL), 0);
    ASSERT_EQ(tkm_oci_host_plain_http("localhost.evil.io", NULL), 0);
    const char *const list[] = {"reg.lan:5000", "other.lan", NULL};
    ASSERT_EQ(tkm_oci_host_plain_http("reg.lan:5000", list), 1);
    ASSERT_EQ(tkm_oci_host_plain_http("reg.lan:5001", list), 0);
    ASSERT_EQ(tkm_oci_host_plain_http("other.lan:8080", list), 1);
    ASSERT_EQ(tkm_oci_host_plain_http("quay.io", list), 0);
}

TEST(digest_valid)
{
    ASSERT_EQ(tkm_oci_digest_valid("sha256:" D64), 1);
    ASSERT_EQ(tkm_oci_digest_valid("sha256:" D64 "0"), 0);
    ASSERT_EQ(tkm_oci_digest_valid("sha256:0123456789ABCDEF0123456789abcdef0123456789abcdef01234567"
                                   "89abcdef"),
              0);
    ASSERT_EQ(tkm_oci_digest_valid("sha512:" D64), 0);
    ASSERT_EQ(tkm_oci_digest_valid(NULL), 0);
}
