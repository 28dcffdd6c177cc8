/* test_mirrors.c - lib/mirrors.c: containerd's hosts.toml directory and
 * CRI-O's registries.conf, resolved to the endpoints a pull tries. The files
 * are written here from the two projects' documented semantics
 * (containerd docs/hosts.md, containers-registries.conf(5)). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <tkm/err.h>
#include <tkm/fs.h>
#include <tkm/mirrors.h>
#include <tkm/oci/registry.h>
#include <tkm/toml.h>

#include "test.h"

#define ALL    (TKM_MIRROR_CAP_PULL | TKM_MIRROR_CAP_RESOLVE)
#define DIGEST 1
#define TAG    0

static char *path_in(const char *rel)
{
    static char p[8][1024];
    static int k;
    char *s = p[k++ % 8];
    snprintf(s, sizeof p[0], "%s/%s", tkm_test_tmpdir(), rel);
    return s;
}

/* Writes rel (under the test's directory), creating its directories. */
static void put(const char *rel, const char *body)
{
    char dir[1024];
    snprintf(dir, sizeof dir, "%s", path_in(rel));
    *strrchr(dir, '/') = '\0';
    if (tkm_mkdir_p(dir, 0755, NULL))
        tkm_test_fail(__FILE__, __LINE__, "mkdir %s", dir);
    FILE *f = fopen(path_in(rel), "w");
    if (!f || fputs(body, f) < 0 || fclose(f))
        tkm_test_fail(__FILE__, __LINE__, "write %s", rel);
}

static struct tkm_mirrors *load(const char *certs, const char *conf)
{
    struct tkm_mirrors *m = NULL;
    struct tkm_err e = {0};
    int rc = tkm_mirrors_load(certs ? path_in(certs) : NULL, conf ? path_in(conf) : NULL, &m, &e);
    if (rc)
        tkm_test_fail(__FILE__, __LINE__, "load: %d %s", rc, e.msg);
    return m;
}

static void load_bad(const char *certs, const char *conf, int code, const char *msg)
{
    struct tkm_mirrors *m = (struct tkm_mirrors *)1;
    struct tkm_err e = {0};
    int rc = tkm_mirrors_load(certs ? path_in(certs) : NULL, conf ? path_in(conf) : NULL, &m, &e);
    if (rc != code || m != NULL || !strstr(e.msg, msg))
        tkm_test_fail(__FILE__, __LINE__, "rc %d, message \"%s\", want %d \"%s\"", rc, e.msg, code,
                      msg);
}

struct res {
    struct tkm_mirror_endpoint *e;
    size_t n;
};

static struct res resolve(const struct tkm_mirrors *m, const char *host, const char *repo,
                          int by_digest)
{
    struct res r = {0};
    struct tkm_err e = {0};
    int rc = tkm_mirrors_resolve(m, host, repo, by_digest, &r.e, &r.n, &e);
    if (rc)
        tkm_test_fail(__FILE__, __LINE__, "resolve %s/%s: %d %s", host, repo, rc, e.msg);
    return r;
}

static const char *nz(const char *s)
{
    return s ? s : "(null)";
}

/* Checks the fields most tests care about; NULL strings compare as "(null)". */
static void check_ep(int line, const struct tkm_mirror_endpoint *e, const char *scheme,
                     const char *host, const char *path, const char *repo, const char *ns,
                     unsigned caps, int upstream)
{
    if (strcmp(nz(e->scheme), nz(scheme)) || strcmp(e->host, host) || strcmp(e->path, path) ||
        strcmp(e->repo, repo) || strcmp(nz(e->ns), nz(ns)) || e->caps != caps ||
        e->upstream != upstream)
        tkm_test_fail(__FILE__, line,
                      "endpoint %s://%s%s repo %s ns %s caps %u upstream %d; want %s://%s%s "
                      "repo %s ns %s caps %u upstream %d",
                      nz(e->scheme), e->host, e->path, e->repo, nz(e->ns), e->caps, e->upstream,
                      nz(scheme), host, path, repo, nz(ns), caps, upstream);
}
#define EP(e, ...) check_ep(__LINE__, e, __VA_ARGS__)

TEST(no_config_is_the_upstream_only)
{
    struct res r = resolve(NULL, "registry.example:5000", "team/cache", TAG);
    ASSERT_EQ(r.n, 1);
    EP(&r.e[0], NULL, "registry.example:5000", "/v2", "team/cache", NULL, ALL, 1);
    ASSERT_STREQ(r.e[0].source, "");
    tkm_mirror_endpoints_free(r.e, r.n);
    /* missing directory and file: not an error, no mirrors */
    struct tkm_mirrors *m = load("nope.d", "nope.conf");
    r = resolve(m, "registry-1.docker.io", "library/x", DIGEST);
    ASSERT_EQ(r.n, 1);
    EP(&r.e[0], NULL, "registry-1.docker.io", "/v2", "library/x", NULL, ALL, 1);
    tkm_mirror_endpoints_free(r.e, r.n);
    tkm_mirrors_free(m);
    tkm_mirrors_free(NULL);
}

TEST(docker_hub_mirror_and_capabilities)
{
    /* docs/hosts.md: a pull-through mirror for docker.io in front of the hub,
     * and a second mirror trusted only to pull (never to resolve tags) */
    put("certs.d/docker.io/hosts.toml", "server = \"https://registry-1.docker.io\"\n"
                                        "\n"
                                        "[host.\"https://mirror.local:5000\"]\n"
                                        "  capabilities = [\"pull\", \"resolve\"]\n"
                                        "[host.\"http://10.0.0.9:5000\"]\n"
                                        "  capabilities = [\"pull\"]\n"
                                        "  dial_timeout = \"3s\" # unknown to tkm: ignored\n");
    struct tkm_mirrors *m = load("certs.d", NULL);
    const char *file = path_in("certs.d/docker.io/hosts.toml");
    /* the reference parser names the hub registry-1.docker.io */
    struct res r = resolve(m, "registry-1.docker.io", "library/busybox", TAG);
    ASSERT_EQ(r.n, 2);
    EP(&r.e[0], "https", "mirror.local:5000", "/v2", "library/busybox", "docker.io", ALL, 0);
    EP(&r.e[1], "https", "registry-1.docker.io", "/v2", "library/busybox", NULL, ALL, 1);
    ASSERT_STREQ(r.e[0].source, file);
    ASSERT_STREQ(r.e[1].source, file);
    ASSERT_EQ(r.e[0].skip_verify, 0);
    ASSERT_NULL(r.e[0].headers);
    ASSERT_NULL(r.e[0].ca_file);
    tkm_mirror_endpoints_free(r.e, r.n);
    /* by digest the pull-only mirror serves too, in file order */
    r = resolve(m, "docker.io", "library/busybox", DIGEST);
    ASSERT_EQ(r.n, 3);
    EP(&r.e[0], "https", "mirror.local:5000", "/v2", "library/busybox", "docker.io", ALL, 0);
    EP(&r.e[1], "http", "10.0.0.9:5000", "/v2", "library/busybox", "docker.io", TKM_MIRROR_CAP_PULL,
       0);
    EP(&r.e[2], "https", "registry-1.docker.io", "/v2", "library/busybox", NULL, ALL, 1);
    tkm_mirror_endpoints_free(r.e, r.n);
    /* another registry: no directory, no _default: upstream only */
    r = resolve(m, "quay.io", "a/b", DIGEST);
    ASSERT_EQ(r.n, 1);
    EP(&r.e[0], NULL, "quay.io", "/v2", "a/b", NULL, ALL, 1);
    tkm_mirror_endpoints_free(r.e, r.n);
    tkm_mirrors_free(m);
}

TEST(server_override_path_and_no_server)
{
    put("certs.d/registry.example/hosts.toml",
        "server = \"https://registry-mirror.example/base/\"\n" /* path gets /v2 */
        "[host.\"https://artifactory.example/artifactory/api/docker/remote/v2\"]\n"
        "  override_path = true\n"
        "[host.\"https://proxy.example/v2\"]\n" /* already ends in /v2 */
        "[host.\"proxy2.example//a//b/\"]\n");  /* no scheme: https; path cleaned */
    put("certs.d/nosrv.example/hosts.toml", "[host.\"https://m.example\"]\n");
    struct tkm_mirrors *m = load("certs.d", NULL);
    struct res r = resolve(m, "registry.example", "ns/img", TAG);
    ASSERT_EQ(r.n, 4);
    EP(&r.e[0], "https", "artifactory.example", "/artifactory/api/docker/remote/v2", "ns/img",
       "registry.example", ALL, 0);
    EP(&r.e[1], "https", "proxy.example", "/v2", "ns/img", "registry.example", ALL, 0);
    EP(&r.e[2], "https", "proxy2.example", "/a/b/v2", "ns/img", "registry.example", ALL, 0);
    /* the upstream moved to another host: it gets ns too */
    EP(&r.e[3], "https", "registry-mirror.example", "/base/v2", "ns/img", "registry.example", ALL,
       1);
    tkm_mirror_endpoints_free(r.e, r.n);
    /* no server: the upstream is the registry itself, scheme by the client's rule */
    r = resolve(m, "nosrv.example", "x", DIGEST);
    ASSERT_EQ(r.n, 2);
    EP(&r.e[0], "https", "m.example", "/v2", "x", "nosrv.example", ALL, 0);
    EP(&r.e[1], NULL, "nosrv.example", "/v2", "x", NULL, ALL, 1);
    tkm_mirror_endpoints_free(r.e, r.n);
    tkm_mirrors_free(m);
}

TEST(ca_client_skip_verify_headers)
{
    put("certs.d/secure.example/hosts.toml",
        "server = \"https://secure.example\"\n"
        "ca = \"upstream-ca.crt\"\n"
        "client = \"/etc/pki/both.pem\"\n"
        "header = { Authorization = \"Basic dXA=\" }\n"
        "[host.\"https://mirror.example:8443\"]\n"
        "  ca = [\"certs/mirror-ca.pem\", \"/other.pem\"]\n"
        "  client = [[\"client.cert\", \"client.key\"], [\"/b.cert\", \"/b.key\"]]\n"
        "  skip_verify = true\n"
        "  [host.\"https://mirror.example:8443\".header]\n"
        "    x-custom-1 = \"one\"\n"
        "    x-custom-2 = [\"a\", \"b\"]\n"
        "[host.\"https://m2.example\"]\n"
        "  client = [\"/only-cert.pem\"]\n");
    struct tkm_mirrors *m = load("certs.d", NULL);
    char dir[1024];
    snprintf(dir, sizeof dir, "%s", path_in("certs.d/secure.example"));
    char want[1200];
    struct res r = resolve(m, "secure.example", "r", DIGEST);
    ASSERT_EQ(r.n, 3);
    snprintf(want, sizeof want, "%s/certs/mirror-ca.pem", dir);
    ASSERT_STREQ(r.e[0].ca_file, want);
    snprintf(want, sizeof want, "%s/client.cert", dir);
    ASSERT_STREQ(r.e[0].client_cert, want);
    snprintf(want, sizeof want, "%s/client.key", dir);
    ASSERT_STREQ(r.e[0].client_key, want);
    ASSERT_EQ(r.e[0].skip_verify, 1);
    ASSERT_STREQ(r.e[0].headers[0], "x-custom-1: one");
    ASSERT_STREQ(r.e[0].headers[1], "x-custom-2: a");
    ASSERT_STREQ(r.e[0].headers[2], "x-custom-2: b");
    ASSERT_NULL(r.e[0].headers[3]);
    ASSERT_STREQ(r.e[1].client_cert, "/only-cert.pem");
    ASSERT_NULL(r.e[1].client_key);
    ASSERT_NULL(r.e[1].ca_file);
    ASSERT_NULL(r.e[1].headers);
    ASSERT_EQ(r.e[1].skip_verify, 0);
    /* top-level keys belong to the upstream */
    EP(&r.e[2], "https", "secure.example", "/v2", "r", NULL, ALL, 1);
    snprintf(want, sizeof want, "%s/upstream-ca.crt", dir);
    ASSERT_STREQ(r.e[2].ca_file, want);
    ASSERT_STREQ(r.e[2].client_cert, "/etc/pki/both.pem");
    ASSERT_NULL(r.e[2].client_key);
    ASSERT_STREQ(r.e[2].headers[0], "Authorization: Basic dXA=");
    ASSERT_NULL(r.e[2].headers[1]);
    tkm_mirror_endpoints_free(r.e, r.n);
    tkm_mirrors_free(m);
}

TEST(default_dir_ports_and_symlinks)
{
    put("certs.d/_default/hosts.toml", "[host.\"http://127.0.0.1:5001\"]\n"
                                       "  capabilities = [\"pull\"]\n");
    /* containerd looks for host_port_ before host:port */
    put("certs.d/reg.example_5000_/hosts.toml", "[host.\"https://a.example\"]\n");
    put("certs.d/reg.example:5000/hosts.toml", "[host.\"https://b.example\"]\n");
    put("certs.d/other.example:6000/hosts.toml", "[host.\"https://c.example\"]\n");
    put("certs.d/[::1]_5000_/hosts.toml", "[host.\"http://[::1]:6000\"]\n");
    put("real/linked.example/hosts.toml", "[host.\"https://d.example\"]\n");
    put("certs.d/empty.example/README", "no hosts.toml: upstream only, _default not used\n");
    ASSERT_EQ(symlink(path_in("real/linked.example"), path_in("certs.d/linked.example")), 0);
    put("certs.d/..data/hosts.toml", "this = is not = read\n"); /* hidden: skipped */
    struct tkm_mirrors *m = load("certs.d", NULL);
    struct res r = resolve(m, "reg.example:5000", "r", TAG);
    ASSERT_EQ(r.n, 2);
    EP(&r.e[0], "https", "a.example", "/v2", "r", "reg.example:5000", ALL, 0);
    EP(&r.e[1], NULL, "reg.example:5000", "/v2", "r", NULL, ALL, 1);
    tkm_mirror_endpoints_free(r.e, r.n);
    r = resolve(m, "other.example:6000", "r", TAG);
    EP(&r.e[0], "https", "c.example", "/v2", "r", "other.example:6000", ALL, 0);
    tkm_mirror_endpoints_free(r.e, r.n);
    r = resolve(m, "[::1]:5000", "r", DIGEST);
    ASSERT_EQ(r.n, 2);
    EP(&r.e[0], "http", "[::1]:6000", "/v2", "r", "[::1]:5000", ALL, 0);
    tkm_mirror_endpoints_free(r.e, r.n);
    r = resolve(m, "linked.example", "r", DIGEST);
    EP(&r.e[0], "https", "d.example", "/v2", "r", "linked.example", ALL, 0);
    tkm_mirror_endpoints_free(r.e, r.n);
    r = resolve(m, "empty.example", "r", DIGEST);
    ASSERT_EQ(r.n, 1);
    EP(&r.e[0], NULL, "empty.example", "/v2", "r", NULL, ALL, 1);
    tkm_mirror_endpoints_free(r.e, r.n);
    /* _default: the pull-only mirror serves digests, never tags */
    r = resolve(m, "elsewhere.example", "r", DIGEST);
    ASSERT_EQ(r.n, 2);
    EP(&r.e[0], "http", "127.0.0.1:5001", "/v2", "r", "elsewhere.example", TKM_MIRROR_CAP_PULL, 0);
    ASSERT_STREQ(r.e[0].source, path_in("certs.d/_default/hosts.toml"));
    EP(&r.e[1], NULL, "elsewhere.example", "/v2", "r", NULL, ALL, 1);
    tkm_mirror_endpoints_free(r.e, r.n);
    r = resolve(m, "elsewhere.example", "r", TAG);
    ASSERT_EQ(r.n, 1);
    ASSERT_EQ(r.e[0].upstream, 1);
    tkm_mirror_endpoints_free(r.e, r.n);
    tkm_mirrors_free(m);
}

TEST(registries_conf_prefix_location_mirrors)
{
    /* containers-registries.conf(5): prefix rewritten to location; mirrors
     * rewrite the same prefix; digest-only mirrors never serve tags */
    put("registries.conf",
        "unqualified-search-registries = [\"docker.io\"]\n"
        "[[registry]]\n"
        "prefix = \"example.com/foo\"\n"
        "location = \"internal-registry-for-example.com/bar\"\n"
        "[[registry.mirror]]\n"
        "location = \"mirror-1.example/x\"\n"
        "pull-from-mirror = \"digest-only\"\n"
        "[[registry.mirror]]\n"
        "location = \"127.0.0.1:5000/y\"\n"
        "insecure = true\n"
        "[[registry.mirror]]\n"
        "location = \"tags.example\"\n"
        "pull-from-mirror = \"tag-only\"\n"
        "[[registry]]\n"
        "location = \"example.com\"\n" /* shorter prefix: loses to example.com/foo */
        "[[registry.mirror]]\n"
        "location = \"short.example\"\n"
        "[[registry]]\n"
        "location = \"docker.io\"\n"
        "mirror-by-digest-only = true\n"
        "[[registry.mirror]]\n"
        "location = \"hub-mirror.example\"\n");
    struct tkm_mirrors *m = load(NULL, "registries.conf");
    const char *conf = path_in("registries.conf");
    struct res r = resolve(m, "example.com", "foo/myimage", DIGEST);
    ASSERT_EQ(r.n, 4);
    EP(&r.e[0], "https", "mirror-1.example", "/v2", "x/myimage", NULL, TKM_MIRROR_CAP_PULL, 0);
    EP(&r.e[1], "https", "127.0.0.1:5000", "/v2", "y/myimage", NULL, ALL, 0);
    ASSERT_EQ(r.e[1].skip_verify, 1);
    EP(&r.e[2], "http", "127.0.0.1:5000", "/v2", "y/myimage", NULL, ALL, 0);
    EP(&r.e[3], NULL, "internal-registry-for-example.com", "/v2", "bar/myimage", NULL, ALL, 1);
    ASSERT_EQ(r.e[3].skip_verify, 0);
    ASSERT_STREQ(r.e[3].source, conf);
    tkm_mirror_endpoints_free(r.e, r.n);
    r = resolve(m, "example.com", "foo/myimage", TAG);
    ASSERT_EQ(r.n, 4);
    EP(&r.e[0], "https", "127.0.0.1:5000", "/v2", "y/myimage", NULL, ALL, 0);
    EP(&r.e[2], "https", "tags.example", "/v2", "myimage", NULL, ALL, 0);
    EP(&r.e[3], NULL, "internal-registry-for-example.com", "/v2", "bar/myimage", NULL, ALL, 1);
    tkm_mirror_endpoints_free(r.e, r.n);
    /* "example.com/foobar" is not under "example.com/foo" */
    r = resolve(m, "example.com", "foobar/img", DIGEST);
    ASSERT_EQ(r.n, 2);
    EP(&r.e[0], "https", "short.example", "/v2", "foobar/img", NULL, ALL, 0);
    EP(&r.e[1], NULL, "example.com", "/v2", "foobar/img", NULL, ALL, 1);
    tkm_mirror_endpoints_free(r.e, r.n);
    /* mirror-by-digest-only: the hub mirror for digests only */
    r = resolve(m, "registry-1.docker.io", "library/busybox", TAG);
    ASSERT_EQ(r.n, 1);
    EP(&r.e[0], NULL, "registry-1.docker.io", "/v2", "library/busybox", NULL, ALL, 1);
    tkm_mirror_endpoints_free(r.e, r.n);
    r = resolve(m, "registry-1.docker.io", "library/busybox", DIGEST);
    ASSERT_EQ(r.n, 2);
    EP(&r.e[0], "https", "hub-mirror.example", "/v2", "library/busybox", NULL, TKM_MIRROR_CAP_PULL,
       0);
    tkm_mirror_endpoints_free(r.e, r.n);
    tkm_mirrors_free(m);
}

TEST(registries_conf_blocked_wildcard_and_hosts_dir_first)
{
    put("registries.conf", "[[registry]]\n"
                           "prefix = \"*.example.com\"\n"
                           "insecure = true\n"
                           "[[registry.mirror]]\n"
                           "location = \"wild-mirror.local\"\n"
                           "[[registry]]\n"
                           "location = \"blocked.example.com\"\n"
                           "blocked = true\n"
                           "[[registry]]\n"
                           "prefix = \"blocked.example.com/ok\"\n"
                           "location = \"blocked.example.com/ok\"\n"
                           "[[registry]]\n"
                           "location = \"viacontainerd.example\"\n"
                           "blocked = true\n");
    put("certs.d/viacontainerd.example/hosts.toml", "[host.\"https://ctd.example\"]\n");
    struct tkm_mirrors *m = load("certs.d", "registries.conf");
    struct res r = resolve(m, "a.b.example.com", "repo", DIGEST);
    /* the registry's insecure is its own; each mirror has one */
    ASSERT_EQ(r.n, 3);
    EP(&r.e[0], "https", "wild-mirror.local", "/v2", "repo", NULL, ALL, 0);
    ASSERT_EQ(r.e[0].skip_verify, 0);
    EP(&r.e[1], "https", "a.b.example.com", "/v2", "repo", NULL, ALL, 1);
    ASSERT_EQ(r.e[1].skip_verify, 1);
    EP(&r.e[2], "http", "a.b.example.com", "/v2", "repo", NULL, ALL, 1);
    tkm_mirror_endpoints_free(r.e, r.n);
    /* the wildcard matches subdomains only */
    r = resolve(m, "example.com", "repo", DIGEST);
    ASSERT_EQ(r.n, 1);
    EP(&r.e[0], NULL, "example.com", "/v2", "repo", NULL, ALL, 1);
    tkm_mirror_endpoints_free(r.e, r.n);
    /* an exact prefix beats the wildcard; blocked: -EACCES naming file and prefix */
    struct tkm_mirror_endpoint *eps = (void *)1;
    size_t n = 7;
    struct tkm_err e = {0};
    ASSERT_EQ(tkm_mirrors_resolve(m, "blocked.example.com", "x/y", TAG, &eps, &n, &e), -EACCES);
    ASSERT_NULL(eps);
    ASSERT_EQ(n, 0);
    ASSERT_STRCONTAINS(e.msg, "blocked.example.com/x/y is blocked by registries.conf");
    ASSERT_STRCONTAINS(e.msg, path_in("registries.conf"));
    ASSERT_STRCONTAINS(e.msg, "(prefix \"blocked.example.com\")");
    /* the longest prefix wins: not blocked under /ok */
    r = resolve(m, "blocked.example.com", "ok/img", TAG);
    ASSERT_EQ(r.n, 1);
    EP(&r.e[0], NULL, "blocked.example.com", "/v2", "ok/img", NULL, ALL, 1);
    tkm_mirror_endpoints_free(r.e, r.n);
    /* a matching hosts.toml directory wins over registries.conf */
    r = resolve(m, "viacontainerd.example", "x", DIGEST);
    ASSERT_EQ(r.n, 2);
    EP(&r.e[0], "https", "ctd.example", "/v2", "x", "viacontainerd.example", ALL, 0);
    tkm_mirror_endpoints_free(r.e, r.n);
    tkm_mirrors_free(m);
}

TEST(bad_hosts_toml_names_file_line_key)
{
    put("a/h.example/hosts.toml", "server = \"https://h.example\"\n"
                                  "[host.\"https://m.example\"]\n"
                                  "  skip_verify = \"yes\"\n");
    load_bad("a", NULL, -EINVAL, "");
    char want[1200];
    snprintf(want, sizeof want,
             "hosts.toml \"%s\": line 3: key \"skip_verify\" must be a boolean, not a string",
             path_in("a/h.example/hosts.toml"));
    load_bad("a", NULL, -EINVAL, want);
    put("b/h.example/hosts.toml", "capabilities = \"pull\"\n");
    load_bad("b", NULL, -EINVAL, "line 1: key \"capabilities\" must be an array of strings");
    put("c/h.example/hosts.toml", "[host.\"ftp://m.example\"]\n");
    load_bad("c", NULL, -EINVAL, "line 1: key \"host\": the scheme must be http or https");
    put("d/h.example/hosts.toml", "[host.\"https://m.example\"]\nheader = { \"X-A\" = 1 }\n");
    load_bad("d", NULL, -EINVAL, "line 2: key \"X-A\" must be a string or an array of strings");
    put("e/h.example/hosts.toml", "[host.\"https://m.example\"]\nclient = [[\"only-cert\"]]\n");
    load_bad("e", NULL, -EINVAL, "key \"client\": a pair must be two strings");
    /* bad TOML: the parser's line and column, with the file */
    put("f/h.example/hosts.toml", "server = \"https://h.example\"\nserver = \"x\"\n");
    snprintf(want, sizeof want, "\"%s\": line 2, column 1", path_in("f/h.example/hosts.toml"));
    load_bad("f", NULL, -EPROTO, want);
    /* more mirrors than an endpoint list holds */
    char many[64 * 40 + 1] = "";
    for (int i = 0; i < 64; i++)
        snprintf(many + strlen(many), sizeof many - strlen(many), "[host.\"https://m%d.x\"]\n", i);
    put("h/h.example/hosts.toml", many);
    load_bad("h", NULL, -E2BIG, "line 1: more than 63 hosts");
    /* over the size bound */
    char *big = malloc(TKM_TOML_MAX_BYTES + 2);
    ASSERT_NOT_NULL(big);
    memset(big, '#', TKM_TOML_MAX_BYTES + 1);
    big[TKM_TOML_MAX_BYTES + 1] = '\0';
    put("g/h.example/hosts.toml", big);
    free(big);
    load_bad("g", NULL, -E2BIG, path_in("g/h.example/hosts.toml"));
    load_bad("g", NULL, -E2BIG, "larger than 1048576 bytes");
}

TEST(bad_registries_conf_names_file_line_key)
{
    put("v1.conf", "[registries.search]\nregistries = ['docker.io']\n");
    load_bad(NULL, "v1.conf", -EINVAL, "line 1: the version 1 format");
    put("t.conf", "[[registry]]\nlocation = \"r.example\"\nblocked = 1\n");
    char want[1200];
    snprintf(want, sizeof want,
             "registries.conf \"%s\": line 3: key \"blocked\" must be a boolean, not an integer",
             path_in("t.conf"));
    load_bad(NULL, "t.conf", -EINVAL, want);
    put("p.conf", "[[registry]]\nlocation = \"r.example\"\n[[registry.mirror]]\n"
                  "location = \"m\"\npull-from-mirror = \"sometimes\"\n");
    load_bad(NULL, "p.conf", -EINVAL, "line 5: key \"pull-from-mirror\": must be \"all\"");
    put("s.conf", "[[registry]]\nlocation = \"https://r.example\"\n");
    load_bad(NULL, "s.conf", -EINVAL, "line 2: key \"location\": a location is host[:port]");
    put("w.conf", "[[registry]]\nprefix = \"*.x.example\"\nlocation = \"r.example\"\n");
    load_bad(NULL, "w.conf", -EINVAL, "a wildcard prefix takes no location");
    put("d.conf", "[[registry]]\nlocation = \"r.example\"\n[[registry]]\nprefix = \"r.example\"\n"
                  "location = \"q.example\"\n");
    load_bad(NULL, "d.conf", -EINVAL,
             "line 3: prefix \"r.example\" is defined twice (also line 1)");
    put("n.conf", "[[registry]]\ninsecure = true\n");
    load_bad(NULL, "n.conf", -EINVAL, "line 1: [[registry]] needs a prefix or a location");
    put("bad.conf", "[[registry]\n");
    load_bad(NULL, "bad.conf", -EPROTO, "line 1, column");
    /* the prefix rewrite must leave a repository */
    put("r.conf", "[[registry]]\nprefix = \"r.example/a/b\"\nlocation = \"q.example\"\n");
    struct tkm_mirrors *m = load(NULL, "r.conf");
    struct tkm_mirror_endpoint *eps;
    size_t n;
    struct tkm_err e = {0};
    ASSERT_EQ(tkm_mirrors_resolve(m, "r.example", "a/b", DIGEST, &eps, &n, &e), -EINVAL);
    ASSERT_STRCONTAINS(e.msg, "r.example/a/b rewritten to q.example has no repository");
    tkm_mirrors_free(m);
}

TEST(changed_when_files_change)
{
    put("certs.d/h.example/hosts.toml", "[host.\"https://m.example\"]\n");
    put("registries.conf", "");
    /* copies: path_in() returns one of 8 rotating buffers, which later calls reuse (in an
     * argument order the compiler picks) */
    char dir[1024], conf[1024];
    snprintf(dir, sizeof dir, "%s", path_in("certs.d"));
    snprintf(conf, sizeof conf, "%s", path_in("registries.conf"));
    struct tkm_mirrors *m = load("certs.d", "registries.conf");
    ASSERT_EQ(tkm_mirrors_changed(m, dir, conf), 0);
    ASSERT_EQ(tkm_mirrors_changed(NULL, dir, conf), 1);
    ASSERT_EQ(tkm_mirrors_changed(m, dir, NULL), 1); /* other inputs */
    /* a file rewritten with the same size: the mtime (ns) or inode differs */
    put("certs.d/h.example/hosts.toml", "[host.\"https://n.example\"]\n");
    struct timespec ts[2] = {{0, UTIME_OMIT}, {1000, 0}};
    ASSERT_EQ(utimensat(AT_FDCWD, path_in("certs.d/h.example/hosts.toml"), ts, 0), 0);
    ASSERT_EQ(tkm_mirrors_changed(m, dir, conf), 1);
    tkm_mirrors_free(m);
    m = load("certs.d", "registries.conf");
    ASSERT_EQ(tkm_mirrors_changed(m, dir, conf), 0);
    /* a new host directory */
    put("certs.d/new.example/hosts.toml", "");
    ASSERT_EQ(tkm_mirrors_changed(m, dir, conf), 1);
    tkm_mirrors_free(m);
    m = load("certs.d", "registries.conf");
    /* registries.conf touched */
    put("registries.conf", "# now a comment\n");
    ASSERT_EQ(tkm_mirrors_changed(m, dir, conf), 1);
    tkm_mirrors_free(m);
    m = load("certs.d", "registries.conf");
    /* registries.conf removed */
    ASSERT_EQ(unlink(conf), 0);
    ASSERT_EQ(tkm_mirrors_changed(m, dir, conf), 1);
    tkm_mirrors_free(m);
}

/* The two helpers the agent and tkmctl share: which endpoint is the registry
 * itself, and a mirror's client settings (never the registry's credentials). */
TEST(endpoint_is_registry_and_opts)
{
    char *headers[] = {"X-Token: t", NULL};
    struct tkm_mirror_endpoint up = {
        .host = "r.example", .repo = "a/b", .path = "/v2", .upstream = 1};
    struct tkm_mirror_endpoint mir = {.host = "m.example",
                                      .scheme = "http",
                                      .path = "/cache/v2",
                                      .repo = "a/b",
                                      .ns = "r.example",
                                      .ca_file = "/ca.pem",
                                      .client_cert = "/c.pem",
                                      .skip_verify = 1,
                                      .headers = headers};
    ASSERT_EQ(tkm_mirror_endpoint_is_registry(&up, "r.example", "a/b"), 1);
    ASSERT_EQ(tkm_mirror_endpoint_is_registry(&up, "r.example", "a/c"), 0);
    up.path = "/moved/v2";
    ASSERT_EQ(tkm_mirror_endpoint_is_registry(&up, "r.example", "a/b"), 0);
    ASSERT_EQ(tkm_mirror_endpoint_is_registry(&mir, "m.example", "a/b"), 0); /* not upstream */
    struct tkm_oci_registry_opts o = {.auth_file = "/root/.docker/config.json",
                                      .auth_json = "{}",
                                      .auth_json_len = 2,
                                      .timeout_ms = 7};
    tkm_mirror_endpoint_opts(&mir, &o);
    ASSERT_EQ(o.anonymous, 1);
    ASSERT_NULL(o.auth_file);
    ASSERT_NULL(o.auth_json);
    ASSERT_EQ(o.auth_json_len, 0);
    ASSERT_EQ(o.timeout_ms, 7);
    ASSERT_STREQ(o.scheme, "http");
    ASSERT_STREQ(o.path_prefix, "/cache/v2");
    ASSERT_STREQ(o.ns, "r.example");
    ASSERT_STREQ(o.ca_file, "/ca.pem");
    ASSERT_STREQ(o.client_cert, "/c.pem");
    ASSERT_NULL(o.client_key);
    ASSERT_EQ(o.skip_verify, 1);
    ASSERT_STREQ(o.headers[0], "X-Token: t");
}
