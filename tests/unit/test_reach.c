/* test_reach.c - registry reach (lib/reach.c): every IP spelling and address
 * class, the policy parser, the decision with an injected resolver, and what
 * may be shown of a registry's error reply. No test here opens a socket or
 * resolves a name: addresses are handed in, and the one getaddrinfo call is
 * on a numeric loopback literal (parsed, never looked up). */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <tkm/buf.h>
#include <tkm/reach.h>
#include <tkm/util.h>

#include "test.h"

/* A failed check naming the table input it failed for. */
#define CHECK(cond, in)                                                                            \
    do {                                                                                           \
        if (!(cond))                                                                               \
            tkm_test_fail(__FILE__, __LINE__, "%s failed for \"%s\"", #cond, (in));                \
    } while (0)

#define CHECK_STR(got, want, in)                                                                   \
    do {                                                                                           \
        const char *g_ = (got), *w_ = (want);                                                      \
        if (strcmp(g_, w_) != 0)                                                                   \
            tkm_test_fail(__FILE__, __LINE__, "%s for \"%s\": \"%s\", want \"%s\"", #got, (in),    \
                          g_, w_);                                                                 \
    } while (0)

static struct tkm_reach_host host_of(const char *s)
{
    struct tkm_reach_host h;
    const char *why = NULL;
    if (tkm_reach_host_parse(s, strlen(s), &h, &why) != 0)
        tkm_test_fail(__FILE__, __LINE__, "host \"%s\" did not parse: %s", s, why ? why : "?");
    return h;
}

/* ---- IPv4 spellings (inet_aton semantics) -------------------------------- */

struct v4case {
    const char *in, *want;
};

static void v4_table(const struct v4case *t, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        struct tkm_reach_addr a;
        char s[TKM_REACH_ADDRSTR_MAX];
        CHECK(tkm_reach_parse_ipv4(t[i].in, strlen(t[i].in), &a) == 0, t[i].in);
        CHECK(a.family == 4, t[i].in);
        CHECK_STR(tkm_reach_addr_str(&a, s, sizeof s), t[i].want, t[i].in);
        /* the same through the host parser: an IP literal, never a name */
        struct tkm_reach_host h = host_of(t[i].in);
        CHECK(h.is_ip, t[i].in);
        CHECK_STR(h.name, t[i].want, t[i].in);
        /* and the glibc parser agrees where it is the same grammar */
        struct in_addr ia;
        CHECK(inet_aton(t[i].in, &ia) == 1 && memcmp(&ia, a.a, 4) == 0, t[i].in);
    }
}

TEST(ipv4_dotted)
{
    static const struct v4case t[] = {
        {"127.0.0.1", "127.0.0.1"},
        {"10.1.2.3", "10.1.2.3"},
        {"255.255.255.255", "255.255.255.255"},
        {"0.0.0.0", "0.0.0.0"},
        {"169.254.169.254", "169.254.169.254"},
    };
    v4_table(t, TKM_ARRAY_SIZE(t));
}

TEST(ipv4_decimal)
{
    static const struct v4case t[] = {
        {"2130706433", "127.0.0.1"},       {"0", "0.0.0.0"},
        {"4294967295", "255.255.255.255"}, {"2852039166", "169.254.169.254"},
        {"167772161", "10.0.0.1"},
    };
    v4_table(t, TKM_ARRAY_SIZE(t));
}

TEST(ipv4_octal)
{
    static const struct v4case t[] = {
        {"0177.0.0.1", "127.0.0.1"},          {"0177.00.000.01", "127.0.0.1"},
        {"017700000001", "127.0.0.1"},        {"0251.0376.0251.0376", "169.254.169.254"},
        {"00000000000000177.1", "127.0.0.1"},
    };
    v4_table(t, TKM_ARRAY_SIZE(t));
}

TEST(ipv4_hex)
{
    static const struct v4case t[] = {
        {"0x7f.1", "127.0.0.1"},
        {"0x7f000001", "127.0.0.1"},
        {"0X7F000001", "127.0.0.1"},
        {"0xa9.0xfe.0xa9.0xfe", "169.254.169.254"},
        {"0xA9FEA9FE", "169.254.169.254"},
        {"0x7f.0x0.0x0.0x1", "127.0.0.1"},
        {"0x0a.0", "10.0.0.0"},
    };
    v4_table(t, TKM_ARRAY_SIZE(t));
}

TEST(ipv4_short_forms)
{
    static const struct v4case t[] = {
        {"127.1", "127.0.0.1"},
        {"127.0.1", "127.0.0.1"},
        {"10.65535", "10.0.255.255"},
        {"10.1.65535", "10.1.255.255"},
        {"169.16689662", "169.254.169.254"},
        {"0x7f.0.0x1", "127.0.0.1"},
        {"0177.1", "127.0.0.1"},
    };
    v4_table(t, TKM_ARRAY_SIZE(t));
}

TEST(ipv4_invalid_spellings)
{
    static const char *const bad[] = {
        "",
        "256.0.0.1",
        "1.2.3.4.5",
        "08.0.0.1",
        "0x",
        "0x.1",
        "1..2",
        ".1",
        "1.",
        "4294967296",
        "1.16777216",
        "1.2.65536",
        "1.2.3.256",
        " 1.2.3.4",
        "1.2.3.4 ",
        "+1",
        "-1",
        "0xg",
        "1.2.3.4x",
        "00x7f",
        "0x100.1",
        "1.0x",
        "99999999999999999999",
        "0xffffffff1",
        "1.2.3.-4",
    };
    for (size_t i = 0; i < TKM_ARRAY_SIZE(bad); i++) {
        struct tkm_reach_addr a;
        CHECK(tkm_reach_parse_ipv4(bad[i], strlen(bad[i]), &a) == -EINVAL, bad[i]);
    }
}

/* ---- hosts ---------------------------------------------------------------- */

struct hostcase {
    const char *in, *name;
    unsigned port;
    int is_ip, family, zone;
};

TEST(host_ip_literals)
{
    static const struct hostcase t[] = {
        {"127.0.0.1:5000", "127.0.0.1", 5000, 1, 4, 0},
        {"2130706433:5000", "127.0.0.1", 5000, 1, 4, 0},
        {"0177.0.0.1", "127.0.0.1", 0, 1, 4, 0},
        {"0x7f.1:443", "127.0.0.1", 443, 1, 4, 0},
        {"127.0.0.1.", "127.0.0.1", 0, 1, 4, 0}, /* a trailing dot does not make it a name */
        {"127.1.:80", "127.0.0.1", 80, 1, 4, 0},
        {"[::1]", "::1", 0, 1, 6, 0},
        {"[::1]:5000", "::1", 5000, 1, 6, 0},
        {"[0:0:0:0:0:0:0:1]:5000", "::1", 5000, 1, 6, 0},
        {"[::ffff:127.0.0.1]:5000", "::ffff:127.0.0.1", 5000, 1, 6, 0},
        {"[::FFFF:7F00:1]", "::ffff:127.0.0.1", 0, 1, 6, 0},
        {"[::127.0.0.1]", "::127.0.0.1", 0, 1, 6, 0},
        {"[64:ff9b::7f00:1]", "64:ff9b::7f00:1", 0, 1, 6, 0},
        {"[fe80::1%eth0]:5000", "fe80::1", 5000, 1, 6, 1},
        {"[fe80::1%25eth0]", "fe80::1", 0, 1, 6, 1},
        {"[FD00:EC2::254]", "fd00:ec2::254", 0, 1, 6, 0},
    };
    for (size_t i = 0; i < TKM_ARRAY_SIZE(t); i++) {
        struct tkm_reach_host h = host_of(t[i].in);
        CHECK_STR(h.name, t[i].name, t[i].in);
        CHECK(h.port == t[i].port, t[i].in);
        CHECK(h.is_ip == t[i].is_ip, t[i].in);
        CHECK(h.addr.family == t[i].family, t[i].in);
        CHECK(h.has_zone == t[i].zone, t[i].in);
    }
}

TEST(host_names)
{
    static const struct hostcase t[] = {
        {"quay.io", "quay.io", 0, 0, 0, 0},
        {"Quay.IO", "quay.io", 0, 0, 0, 0},
        {"registry-1.docker.io:443", "registry-1.docker.io", 443, 0, 0, 0},
        {"example.com.", "example.com", 0, 0, 0, 0},
        {"Example.COM.:5000", "example.com", 5000, 0, 0, 0},
        {"localhost:5000", "localhost", 5000, 0, 0, 0},
        {"1.2.3.0x1g", "1.2.3.0x1g", 0, 0, 0, 0}, /* inet_aton refuses it too: a name */
        {"0x7f.example", "0x7f.example", 0, 0, 0, 0},
        {"123.example", "123.example", 0, 0, 0, 0},
        {"a:05000", "a", 5000, 0, 0, 0},
    };
    for (size_t i = 0; i < TKM_ARRAY_SIZE(t); i++) {
        struct tkm_reach_host h = host_of(t[i].in);
        CHECK_STR(h.name, t[i].name, t[i].in);
        CHECK(h.port == t[i].port, t[i].in);
        CHECK(!h.is_ip, t[i].in);
    }
}

TEST(host_invalid)
{
    static const struct {
        const char *in, *why;
    } t[] = {
        {"", "is empty"},
        {":5000", "empty host name"},
        {".", "empty host name"},
        {"a..b", "invalid host name"},
        {"-a.com", "invalid host name"},
        {"a-.com", "invalid host name"},
        {"a_b.com", "invalid character"},
        {"a b", "invalid character"},
        {"a@b", "invalid character"},
        {"1.2.3.4.5", "looks like an IPv4 address"},
        {"256.1.1.1", "looks like an IPv4 address"},
        {"example.123", "looks like an IPv4 address"},
        {"a.0x", "looks like an IPv4 address"},
        {"09.1.1.1", "looks like an IPv4 address"},
        {"1.2.3.4..", "invalid host name"},
        {"::1", "not in brackets"},
        {"fe80::1%eth0", "not in brackets"},
        {"[::1", "without ']'"},
        {"[::1]x", "junk after"},
        {"[::1]:", "invalid port"},
        {"[::1]:0", "invalid port"},
        {"a:65536", "invalid port"},
        {"a:+5", "invalid port"},
        {"a:5 ", "invalid port"},
        {"a:123456", "invalid port"},
        {"[fe80::1%]", "empty IPv6 zone id"},
        {"[fe80::1%a/b]", "invalid IPv6 zone id"},
        {"[::g]", "invalid IPv6 address"},
        {"[1.2.3.4]", "invalid IPv6 address"},
        {"[]", "invalid IPv6 address"},
        {"a\x01.com", "invalid character"},
    };
    for (size_t i = 0; i < TKM_ARRAY_SIZE(t); i++) {
        struct tkm_reach_host h;
        const char *why = NULL;
        CHECK(tkm_reach_host_parse(t[i].in, strlen(t[i].in), &h, &why) == -EINVAL, t[i].in);
        CHECK(why && strstr(why, t[i].why), t[i].in);
    }
    /* length limits: a 63-byte label is fine, 64 is not; 253 bytes in all */
    char name[300];
    memset(name, 'a', 63);
    memcpy(name + 63, ".io", 4);
    ASSERT_OK(tkm_reach_host_parse(name, strlen(name), &(struct tkm_reach_host){0}, NULL));
    memset(name, 'a', 64);
    memcpy(name + 64, ".io", 4);
    ASSERT_EQ(tkm_reach_host_parse(name, strlen(name), &(struct tkm_reach_host){0}, NULL), -EINVAL);
    for (size_t i = 0; i < 254; i++)
        name[i] = i % 2 ? '.' : 'a';
    name[253] = '\0'; /* 253 bytes: a.a.....a */
    ASSERT_OK(tkm_reach_host_parse(name, strlen(name), &(struct tkm_reach_host){0}, NULL));
    name[253] = '.'; /* with a trailing dot: still 253 */
    name[254] = '\0';
    ASSERT_OK(tkm_reach_host_parse(name, strlen(name), &(struct tkm_reach_host){0}, NULL));
    name[254] = 'a';
    name[255] = '\0';
    ASSERT_EQ(tkm_reach_host_parse(name, strlen(name), &(struct tkm_reach_host){0}, NULL), -EINVAL);
}

/* ---- address classes ------------------------------------------------------- */

static void class_table(const char *const *hosts, size_t n, enum tkm_reach_class want)
{
    for (size_t i = 0; i < n; i++) {
        struct tkm_reach_host h = host_of(hosts[i]);
        CHECK(h.is_ip, hosts[i]);
        enum tkm_reach_class c = tkm_reach_classify(&h.addr);
        if (c != want)
            tkm_test_fail(__FILE__, __LINE__, "\"%s\" is %s, want %s", hosts[i],
                          tkm_reach_class_name(c), tkm_reach_class_name(want));
    }
}

TEST(class_loopback)
{
    static const char *const t[] = {
        "127.0.0.1",
        "127.255.255.254",
        "2130706433",
        "0177.0.0.1",
        "0x7f.1",
        "127.1",
        "[::1]",
        "[::ffff:127.0.0.1]",
        "[::ffff:7f00:1]",
        "[::127.0.0.1]",
        "[::ffff:0:127.0.0.1]",
        "[64:ff9b::127.0.0.1]",
        "[2002:7f00:1::]",
    };
    class_table(t, TKM_ARRAY_SIZE(t), TKM_REACH_LOOPBACK);
}

TEST(class_link_local)
{
    static const char *const t[] = {
        "169.254.0.1",    "169.254.255.255", "169.254.169.253",      "169.254.20.10", "[fe80::1]",
        "[fe80::1%eth0]", "[febf:ffff::1]",  "[::ffff:169.254.1.1]", "0xa9fe0001",
    };
    class_table(t, TKM_ARRAY_SIZE(t), TKM_REACH_LINK_LOCAL);
}

TEST(class_metadata)
{
    static const char *const t[] = {
        "169.254.169.254",     "2852039166",           "0251.0376.0251.0376",
        "0xa9.0xfe.0xa9.0xfe", "169.16689662",         "[::ffff:169.254.169.254]",
        "[::ffff:a9fe:a9fe]",  "[64:ff9b::a9fe:a9fe]", "169.254.170.2",
        "100.100.100.200",     "[fd00:ec2::254]",      "[2002:a9fe:a9fe::1]",
    };
    class_table(t, TKM_ARRAY_SIZE(t), TKM_REACH_METADATA);
}

TEST(class_private)
{
    static const char *const t[] = {
        "10.0.0.1",          "10.255.255.255",     "172.16.0.1",      "172.31.255.255",
        "192.168.1.1",       "100.64.0.1",         "100.127.255.255", "198.18.0.1",
        "198.19.255.255",    "[fc00::1]",          "[fd12:3456::1]",  "[fec0::1]",
        "[::ffff:10.0.0.1]", "[64:ff9b:1::a00:1]", "012.1",           "0xc0a80101",
    };
    class_table(t, TKM_ARRAY_SIZE(t), TKM_REACH_PRIVATE);
}

TEST(class_unspecified)
{
    static const char *const t[] = {
        "0.0.0.0", "0", "0.1.2.3", "[::]", "[::ffff:0.0.0.0]", "[::0.0.0.2]",
    };
    class_table(t, TKM_ARRAY_SIZE(t), TKM_REACH_UNSPECIFIED);
}

TEST(class_multicast_broadcast)
{
    static const char *const m[] = {"224.0.0.1", "239.255.255.250", "[ff02::1]", "[ff05::2]",
                                    "[::ffff:224.0.0.251]"};
    static const char *const b[] = {"255.255.255.255", "4294967295", "0xffffffff",
                                    "[::ffff:255.255.255.255]"};
    class_table(m, TKM_ARRAY_SIZE(m), TKM_REACH_MULTICAST);
    class_table(b, TKM_ARRAY_SIZE(b), TKM_REACH_BROADCAST);
}

TEST(class_reserved)
{
    static const char *const t[] = {
        "240.0.0.1",   "255.255.255.254", "192.0.0.192", "192.0.2.1", "198.51.100.1",
        "203.0.113.9", "[2001:db8::1]",   "[2001::1]",   "[100::1]",
    };
    class_table(t, TKM_ARRAY_SIZE(t), TKM_REACH_RESERVED);
}

TEST(class_public)
{
    static const char *const t[] = {
        "8.8.8.8",           "1.1.1.1",           "172.15.255.255",   "172.32.0.0",
        "192.169.0.1",       "100.63.255.255",    "100.128.0.0",      "169.253.255.255",
        "169.255.0.0",       "198.20.0.0",        "11.0.0.1",         "126.255.255.255",
        "128.0.0.1",         "[2606:4700::1111]", "[::ffff:8.8.8.8]", "[64:ff9b::808:808]",
        "[2002:808:808::1]", "[fbff::1]",         "[fe7f::1]",
    };
    class_table(t, TKM_ARRAY_SIZE(t), TKM_REACH_PUBLIC);
}

TEST(addr_from_sockaddr)
{
    struct sockaddr_in s4 = {.sin_family = AF_INET};
    struct sockaddr_in6 s6 = {.sin6_family = AF_INET6};
    struct sockaddr un = {.sa_family = AF_UNIX};
    struct tkm_reach_addr a;
    char s[TKM_REACH_ADDRSTR_MAX];
    ASSERT_EQ(inet_pton(AF_INET, "169.254.169.254", &s4.sin_addr), 1);
    ASSERT_OK(tkm_reach_addr_from_sockaddr((struct sockaddr *)&s4, &a));
    ASSERT_EQ(tkm_reach_classify(&a), TKM_REACH_METADATA);
    ASSERT_EQ(inet_pton(AF_INET6, "::ffff:127.0.0.1", &s6.sin6_addr), 1);
    ASSERT_OK(tkm_reach_addr_from_sockaddr((struct sockaddr *)&s6, &a));
    ASSERT_EQ(tkm_reach_classify(&a), TKM_REACH_LOOPBACK);
    ASSERT_STREQ(tkm_reach_addr_str(&a, s, sizeof s), "::ffff:127.0.0.1");
    ASSERT_EQ(tkm_reach_addr_from_sockaddr(&un, &a), -EAFNOSUPPORT);
    ASSERT_EQ(tkm_reach_addr_from_sockaddr(NULL, &a), -EAFNOSUPPORT);
}

/* ---- the policy parser ------------------------------------------------------ */

TEST(policy_defaults)
{
    struct tkm_reach_policy p;
    struct tkm_err e = {0};
    ASSERT_OK(tkm_reach_policy_parse(&p, NULL, &e));
    ASSERT_EQ(p.allow.n, 1);
    ASSERT_EQ(p.allow.v[0].kind, TKM_REACH_ENTRY_ANY);
    ASSERT_EQ(p.allow.v[0].port, 0);
    ASSERT_EQ(p.private_hosts.n, 0);
    ASSERT_EQ(p.plain_http.n, 0);
    tkm_reach_policy_release(&p);
    /* empty private and plain-HTTP lists are the defaults, not errors */
    struct tkm_reach_config c = {.private_hosts = "  # none\n", .plain_http = ""};
    ASSERT_OK(tkm_reach_policy_parse(&p, &c, &e));
    ASSERT_EQ(p.private_hosts.n, 0);
    tkm_reach_policy_release(&p);
    tkm_reach_policy_release(NULL);
}

TEST(policy_entries)
{
    struct tkm_reach_policy p;
    struct tkm_err e = {0};
    struct tkm_reach_config c = {
        .allow = "ghcr.io,quay.io:443\n"
                 "  *.Corp.Example.   # the mirrors\n"
                 "*:5000, 127.0.0.1:5000,[::1]:5000,,\t0177.0.0.2 \r\n",
    };
    ASSERT_OK(tkm_reach_policy_parse(&p, &c, &e));
    ASSERT_EQ(p.allow.n, 7);
    ASSERT_EQ(p.allow.v[0].kind, TKM_REACH_ENTRY_NAME);
    ASSERT_STREQ(p.allow.v[0].name, "ghcr.io");
    ASSERT_EQ(p.allow.v[1].port, 443);
    ASSERT_EQ(p.allow.v[2].kind, TKM_REACH_ENTRY_SUFFIX);
    ASSERT_STREQ(p.allow.v[2].name, "corp.example");
    ASSERT_EQ(p.allow.v[3].kind, TKM_REACH_ENTRY_ANY);
    ASSERT_EQ(p.allow.v[3].port, 5000);
    ASSERT_EQ(p.allow.v[4].kind, TKM_REACH_ENTRY_IP);
    ASSERT_EQ(p.allow.v[5].addr.family, 6);
    ASSERT_STREQ(p.allow.v[6].name, "127.0.0.2");
    tkm_reach_policy_release(&p);
    ASSERT_EQ(p.allow.n, 0);
    ASSERT_NULL(p.allow.v);
}

TEST(policy_bad_inputs)
{
    static const struct {
        const char *allow, *private_hosts, *plain, *want;
    } t[] = {
        {"", NULL, NULL, "registryAllow: no entry"},
        {" # nothing\n, ", NULL, NULL, "registryAllow: no entry"},
        {"https://ghcr.io", NULL, NULL,
         "entry 1 \"https://ghcr.io\" write a host[:port], not a URL"},
        {"ghcr.io/org", NULL, NULL, "not a repository"},
        {"a.io *foo.com", NULL, NULL, "entry 2 \"*foo.com\" may use '*' only"},
        {"a.*.com", NULL, NULL, "may use '*' only"},
        {"*.*.com", NULL, NULL, "may use '*' only"},
        {"**", NULL, NULL, "may use '*' only"},
        {"*.", NULL, NULL, "may use '*' only"},
        {"*.1.2.3.4", NULL, NULL, "a wildcard needs a domain name"},
        {"*.[::1]", NULL, NULL, "a wildcard needs a domain name"},
        {"*:x", NULL, NULL, "invalid port"},
        {"*:0", NULL, NULL, "invalid port"},
        {"a:0", NULL, NULL, "registryAllow: entry 1 \"a:0\" has an invalid port"},
        {"a:99999", NULL, NULL, "invalid port"},
        {"a_b.io", NULL, NULL, "invalid character"},
        {"::1", NULL, NULL, "not in brackets"},
        {"1.2.3.4.5", NULL, NULL, "looks like an IPv4 address"},
        {NULL, "[fe80::1%eth0]:5000", NULL,
         "registryPrivate: entry 1 \"[fe80::1%eth0]:5000\" has "
         "an IPv6 zone id"},
        {NULL, "ok.io bad..io", NULL, "registryPrivate: entry 2"},
        {NULL, NULL, "localhost:5000 x:", "registryPlainHTTP: entry 2 \"x:\" has an invalid port"},
        {"a\x01\x1b[31m.io", NULL, NULL, "\"a\\x01\\x1b[31m.io\" has an invalid character"},
    };
    for (size_t i = 0; i < TKM_ARRAY_SIZE(t); i++) {
        struct tkm_reach_policy p;
        struct tkm_err e = {0};
        struct tkm_reach_config c = {t[i].allow, t[i].private_hosts, t[i].plain};
        const char *in = t[i].allow           ? t[i].allow
                         : t[i].private_hosts ? t[i].private_hosts
                                              : t[i].plain;
        CHECK(tkm_reach_policy_parse(&p, &c, &e) == -EINVAL, in);
        CHECK(e.code == -EINVAL, in);
        if (!strstr(e.msg, t[i].want))
            tkm_test_fail(__FILE__, __LINE__, "for \"%s\": \"%s\" lacks \"%s\"", in, e.msg,
                          t[i].want);
        for (const char *m = e.msg; *m; m++)
            CHECK((unsigned char)*m >= 0x20 && *m != 0x7f, in);
        tkm_reach_policy_release(&p);
    }
}

TEST(policy_limits)
{
    struct tkm_reach_policy p;
    struct tkm_err e = {0};
    struct tkm_buf b = TKM_BUF_INIT(1 << 20);
    for (int i = 0; i < TKM_REACH_MAX_ENTRIES; i++)
        ASSERT_OK(tkm_buf_printf(&b, "h%d.io ", i));
    struct tkm_reach_config c = {.allow = b.data};
    ASSERT_OK(tkm_reach_policy_parse(&p, &c, &e));
    ASSERT_EQ(p.allow.n, TKM_REACH_MAX_ENTRIES);
    tkm_reach_policy_release(&p);
    ASSERT_OK(tkm_buf_puts(&b, "one-more.io"));
    c.allow = b.data;
    ASSERT_EQ(tkm_reach_policy_parse(&p, &c, &e), -E2BIG);
    ASSERT_STRCONTAINS(e.msg, "registryAllow: more than 256 entries");
    tkm_reach_policy_release(&p);
    tkm_buf_release(&b);
    /* a long bad entry is quoted cut short */
    char big[2000];
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    big[10] = '_';
    struct tkm_err e2 = {0};
    c.allow = big;
    ASSERT_EQ(tkm_reach_policy_parse(&p, &c, &e2), -EINVAL);
    ASSERT_STRCONTAINS(e2.msg, "xxx...\" has a host name longer than 253 characters");
    ASSERT(strlen(e2.msg) < 200);
    tkm_reach_policy_release(&p);
}

TEST(policy_matching)
{
    static const struct {
        const char *list, *host;
        int want;
    } t[] = {
        {"*", "quay.io", 1},
        {"*", "quay.io:5000", 1},
        {"*", "127.0.0.1", 0}, /* "*" is any name, never an IP literal */
        {"*", "[::1]", 0},
        {"*:5000", "quay.io:5000", 1},
        {"*:5000", "quay.io", 0},
        {"*.example.com", "a.example.com", 1},
        {"*.example.com", "a.b.example.com", 1},
        {"*.example.com", "A.Example.COM.", 1},
        {"*.example.com", "example.com", 0},
        {"*.example.com", "badexample.com", 0},
        {"*.example.com", "example.com.evil.io", 0},
        {"*.example.com:443", "a.example.com", 0},
        {"*.example.com:443", "a.example.com:443", 1},
        {"ghcr.io", "GHCR.IO", 1},
        {"ghcr.io", "ghcr.io.", 1},
        {"ghcr.io.", "ghcr.io", 1},
        {"ghcr.io", "ghcr.io:5000", 1}, /* no port in the entry: every port */
        {"ghcr.io:443", "ghcr.io", 0},  /* a port in the entry: only that written port */
        {"ghcr.io:443", "ghcr.io:443", 1},
        {"ghcr.io", "a.ghcr.io", 0},
        {"127.0.0.1:5000", "127.0.0.1:5000", 1},
        {"127.0.0.1:5000", "2130706433:5000", 1}, /* the same address, however spelt */
        {"127.0.0.1:5000", "0177.1:5000", 1},
        {"127.0.0.1:5000", "127.0.0.1:5001", 0},
        {"127.0.0.1:5000", "127.0.0.1", 0},
        {"127.0.0.1", "[::ffff:127.0.0.1]", 0}, /* another literal: listed on its own */
        {"[::1]:5000", "[0::1]:5000", 1},
        {"[::1]", "127.0.0.1", 0},
        {"localhost:5000", "localhost:5000", 1},
        {"localhost:5000", "127.0.0.1:5000", 0},
    };
    for (size_t i = 0; i < TKM_ARRAY_SIZE(t); i++) {
        struct tkm_reach_policy p;
        struct tkm_err e = {0};
        struct tkm_reach_config c = {.allow = t[i].list};
        struct tkm_reach_host h = host_of(t[i].host);
        ASSERT_OK(tkm_reach_policy_parse(&p, &c, &e));
        if (tkm_reach_list_match(&p.allow, &h) != t[i].want)
            tkm_test_fail(__FILE__, __LINE__, "\"%s\" against \"%s\": want %d", t[i].host,
                          t[i].list, t[i].want);
        tkm_reach_policy_release(&p);
    }
}

/* ---- the decision, with an injected resolver -------------------------------- */

struct fake_dns {
    const char *const *addrs; /* address texts to answer, NULL-terminated */
    int rc;                   /* < 0: fail with this */
    int calls;
    char last[300];
};

static int fake_resolve(const char *name, struct tkm_reach_addr *out, size_t max, void *data)
{
    struct fake_dns *f = data;
    size_t n = 0;
    f->calls++;
    snprintf(f->last, sizeof f->last, "%s", name);
    if (f->rc < 0)
        return f->rc;
    for (; f->addrs && f->addrs[n] && n < max; n++) {
        struct tkm_reach_host h = host_of(f->addrs[n]);
        out[n] = h.addr;
    }
    return (int)n;
}

static struct tkm_reach_policy policy(const char *allow, const char *priv, const char *plain)
{
    struct tkm_reach_policy p;
    struct tkm_err e = {0};
    struct tkm_reach_config c = {allow, priv, plain};
    if (tkm_reach_policy_parse(&p, &c, &e) != 0)
        tkm_test_fail(__FILE__, __LINE__, "policy: %s", e.msg);
    return p;
}

/* A refused decision's message is for the tenant: one line, printable, naming
 * the host and never an address the name resolved to. */
static void check_message(const struct tkm_reach_decision *d, const char *in)
{
    CHECK(strncmp(d->message, "registry \"", 10) == 0, in);
    for (const char *m = d->message; *m; m++)
        CHECK((unsigned char)*m >= 0x20 && (unsigned char)*m < 0x7f, in);
}

TEST(decide_default_refuses_ip_literals)
{
    static const char *const t[] = {
        "127.0.0.1:5000",
        "2130706433",
        "0177.0.0.1:5000",
        "0x7f.1",
        "127.1",
        "[::1]:5000",
        "[::ffff:127.0.0.1]",
        "[::127.0.0.1]",
        "169.254.169.254",
        "[fd00:ec2::254]",
        "100.100.100.200",
        "10.0.0.1",
        "8.8.8.8",
        "[2606:4700::1111]",
        "0.0.0.0",
        "[::]",
        "[64:ff9b::7f00:1]",
    };
    struct tkm_reach_policy p = policy(NULL, NULL, NULL);
    for (size_t i = 0; i < TKM_ARRAY_SIZE(t); i++) {
        for (int purpose = TKM_REACH_REGISTRY; purpose <= TKM_REACH_FOLLOW; purpose++) {
            struct fake_dns f = {0};
            struct tkm_reach_decision d;
            CHECK(tkm_reach_decide(&p, purpose, t[i], fake_resolve, &f, &d) == -EACCES, t[i]);
            CHECK(f.calls == 0, t[i]);
            CHECK(!d.allowed, t[i]);
            CHECK_STR(d.reason, "RegistryNotAllowed", t[i]);
            CHECK_STR(d.rule, "registryAllow", t[i]);
            CHECK(strstr(d.message, "an IP address must be listed in registryAllow"), t[i]);
            check_message(&d, t[i]);
            CHECK(d.n_addrs == 0 && d.resolve[0] == '\0', t[i]);
            /* the pure check agrees */
            CHECK(tkm_reach_check(&p, purpose, t[i], NULL, 0, &d) == -EACCES, t[i]);
        }
    }
    tkm_reach_policy_release(&p);
}

TEST(decide_default_refuses_localhost_without_lookup)
{
    static const char *const t[] = {"localhost", "localhost:5000", "LOCALHOST.", "a.localhost:80",
                                    "x.y.LocalHost"};
    struct tkm_reach_policy p = policy(NULL, NULL, NULL);
    for (size_t i = 0; i < TKM_ARRAY_SIZE(t); i++) {
        struct fake_dns f = {0};
        struct tkm_reach_decision d;
        CHECK(tkm_reach_decide(&p, TKM_REACH_REGISTRY, t[i], fake_resolve, &f, &d) == -EACCES,
              t[i]);
        CHECK(f.calls == 0, t[i]);
        CHECK_STR(d.rule, "registryPrivate", t[i]);
        CHECK(strstr(d.message, "a loopback name and not in registryPrivate"), t[i]);
        check_message(&d, t[i]);
    }
    tkm_reach_policy_release(&p);
}

TEST(decide_resolved_address_classes)
{
    static const struct {
        const char *addr, *rule, *phrase;
    } t[] = {
        {"127.0.0.1", "registryPrivate",
         "resolves to a loopback address and not in registryPrivate"},
        {"[::1]", "registryPrivate", "resolves to a loopback address"},
        {"[::ffff:127.0.0.1]", "registryPrivate", "resolves to a loopback address"},
        {"10.0.0.5", "registryPrivate", "resolves to a private address and not in registryPrivate"},
        {"100.64.1.1", "registryPrivate", "resolves to a private address"},
        {"[fd12::5]", "registryPrivate", "resolves to a private address"},
        {"169.254.1.1", "never", "resolves to a link-local address, which is never allowed"},
        {"[fe80::1]", "never", "resolves to a link-local address, which is never allowed"},
        {"169.254.169.254", "never",
         "resolves to a cloud metadata address, which is never allowed"},
        {"100.100.100.200", "never", "cloud metadata address"},
        {"[fd00:ec2::254]", "never", "cloud metadata address"},
        {"[fd20:ce::254]", "never", "cloud metadata address"},
        {"168.63.129.16", "never", "cloud metadata address"},
        {"[::ffff:169.254.169.254]", "never", "cloud metadata address"},
        {"0.0.0.0", "never", "resolves to an unspecified address, which is never allowed"},
        {"[::]", "never", "an unspecified address"},
        {"224.0.0.1", "never", "a multicast address"},
        {"255.255.255.255", "never", "a broadcast address"},
        {"240.0.0.1", "never", "a reserved address"},
    };
    struct tkm_reach_policy p = policy(NULL, NULL, NULL);
    for (size_t i = 0; i < TKM_ARRAY_SIZE(t); i++) {
        const char *const addrs[] = {t[i].addr, NULL};
        struct fake_dns f = {.addrs = addrs};
        struct tkm_reach_decision d;
        char shown[64];
        CHECK(tkm_reach_decide(&p, TKM_REACH_REGISTRY, "reg.example:5000", fake_resolve, &f, &d) ==
                  -EACCES,
              t[i].addr);
        CHECK(f.calls == 1, t[i].addr);
        CHECK_STR(f.last, "reg.example", t[i].addr);
        CHECK_STR(d.reason, "RegistryNotAllowed", t[i].addr);
        CHECK_STR(d.rule, t[i].rule, t[i].addr);
        CHECK(strstr(d.message, "registry \"reg.example:5000\" is not allowed: it "), t[i].addr);
        CHECK(strstr(d.message, t[i].phrase), t[i].addr);
        check_message(&d, t[i].addr);
        /* the address stays out of the tenant's message, but the log gets it */
        struct tkm_reach_host h = host_of(t[i].addr);
        CHECK(!strstr(d.message, h.name), t[i].addr);
        CHECK_STR(tkm_reach_addr_str(&d.refused_addr, shown, sizeof shown), h.name, t[i].addr);
        CHECK(d.n_addrs == 0 && d.resolve[0] == '\0', t[i].addr);
    }
    tkm_reach_policy_release(&p);
}

TEST(decide_public_name_is_pinned)
{
    const char *const addrs[] = {"203.0.114.7", "[2606:4700::1111]", "203.0.114.7", "8.8.8.8",
                                 NULL};
    struct fake_dns f = {.addrs = addrs};
    struct tkm_reach_policy p = policy(NULL, NULL, NULL);
    struct tkm_reach_decision d;
    ASSERT_OK(tkm_reach_decide(&p, TKM_REACH_REGISTRY, "Ghcr.IO.", fake_resolve, &f, &d));
    ASSERT_EQ(f.calls, 1);
    ASSERT(d.allowed);
    ASSERT_STREQ(d.reason, "");
    ASSERT_STREQ(d.message, "");
    ASSERT_STREQ(d.host, "ghcr.io");
    ASSERT_EQ(d.port, 443);
    ASSERT_EQ(d.plain_http, 0);
    ASSERT_EQ(d.ip_literal, 0);
    ASSERT_EQ(d.n_addrs, 3); /* the duplicate once */
    ASSERT_STREQ(d.resolve, "ghcr.io:443:203.0.114.7,[2606:4700::1111],8.8.8.8");
    /* the socket guard: only a checked address */
    struct tkm_reach_host ok = host_of("8.8.8.8"), other = host_of("127.0.0.1");
    ASSERT(tkm_reach_decision_has(&d, &ok.addr));
    ASSERT(!tkm_reach_decision_has(&d, &other.addr));
    tkm_reach_policy_release(&p);
}

TEST(decide_every_address_must_pass)
{
    /* a name that answers a public and a private address is refused whole:
     * curl would try them all, and a rebinding resolver mixes them */
    const char *const addrs[] = {"8.8.8.8", "[2606:4700::1111]", "10.1.2.3", NULL};
    struct fake_dns f = {.addrs = addrs};
    struct tkm_reach_policy p = policy(NULL, NULL, NULL);
    struct tkm_reach_decision d;
    ASSERT_EQ(tkm_reach_decide(&p, TKM_REACH_REGISTRY, "mixed.example", fake_resolve, &f, &d),
              -EACCES);
    ASSERT_STREQ(d.rule, "registryPrivate");
    ASSERT_EQ(d.n_addrs, 0);
    ASSERT_STREQ(d.resolve, "");
    /* the pure check gives the same with the same addresses */
    struct tkm_reach_addr a[3] = {host_of("8.8.8.8").addr, host_of("10.1.2.3").addr,
                                  host_of("1.1.1.1").addr};
    ASSERT_EQ(tkm_reach_check(&p, TKM_REACH_REGISTRY, "mixed.example", a, 3, &d), -EACCES);
    ASSERT_OK(tkm_reach_check(&p, TKM_REACH_REGISTRY, "mixed.example", a, 1, &d));
    ASSERT_STREQ(d.resolve, "mixed.example:443:8.8.8.8");
    tkm_reach_policy_release(&p);
}

TEST(decide_test_registries_listed)
{
    /* what the test setup and the demo will write into tkm-config */
    struct tkm_reach_policy p =
        policy("*, 127.0.0.1:5000, [::1]:5000", "127.0.0.1:5000 localhost:5000 [::1]:5000",
               "127.0.0.1:5000, localhost:5000, [::1]:5000");
    struct tkm_reach_decision d;
    struct fake_dns f = {0};
    static const char *const same[] = {"127.0.0.1:5000", "2130706433:5000", "0177.1:5000",
                                       "0x7f000001:5000"};
    for (size_t i = 0; i < TKM_ARRAY_SIZE(same); i++) {
        CHECK(tkm_reach_decide(&p, TKM_REACH_REGISTRY, same[i], fake_resolve, &f, &d) == 0,
              same[i]);
        CHECK(d.allowed && d.ip_literal && d.plain_http && d.port == 5000, same[i]);
        CHECK_STR(d.host, "127.0.0.1", same[i]);
        CHECK_STR(d.resolve, "", same[i]); /* curl does not resolve a literal */
        CHECK(d.n_addrs == 1, same[i]);
    }
    ASSERT_OK(tkm_reach_decide(&p, TKM_REACH_REGISTRY, "[::1]:5000", fake_resolve, &f, &d));
    ASSERT_STREQ(d.host, "[::1]");
    ASSERT_EQ(f.calls, 0);
    const char *const lo[] = {"127.0.0.1", "[::1]", NULL};
    f.addrs = lo;
    ASSERT_OK(tkm_reach_decide(&p, TKM_REACH_REGISTRY, "localhost:5000", fake_resolve, &f, &d));
    ASSERT_EQ(f.calls, 1);
    ASSERT(d.plain_http);
    ASSERT_STREQ(d.resolve, "localhost:5000:127.0.0.1,[::1]");
    /* another port of the same address is not listed */
    ASSERT_EQ(tkm_reach_decide(&p, TKM_REACH_REGISTRY, "127.0.0.1:5001", fake_resolve, &f, &d),
              -EACCES);
    ASSERT_STRCONTAINS(d.message, "registry \"127.0.0.1:5001\" is not allowed: an IP address");
    ASSERT_EQ(tkm_reach_decide(&p, TKM_REACH_REGISTRY, "localhost:5001", fake_resolve, &f, &d),
              -EACCES);
    ASSERT_STREQ(d.rule, "registryPrivate");
    /* a public name stays https and is not allowed private addresses */
    const char *const priv[] = {"192.168.0.9", NULL};
    f.addrs = priv;
    ASSERT_EQ(tkm_reach_decide(&p, TKM_REACH_REGISTRY, "quay.io", fake_resolve, &f, &d), -EACCES);
    ASSERT_STREQ(d.rule, "registryPrivate");
    tkm_reach_policy_release(&p);
}

TEST(decide_private_list_never_unlocks_metadata_or_link_local)
{
    struct tkm_reach_policy p = policy("*, 169.254.169.254, [fe80::1]", "*", "*");
    static const char *const addrs_t[] = {"169.254.169.254", "169.254.1.1",    "[fe80::1]",
                                          "100.100.100.200", "0.0.0.0",        "224.0.0.1",
                                          "[fd00:ec2::254]", "[fd20:ce::254]", "168.63.129.16"};
    for (size_t i = 0; i < TKM_ARRAY_SIZE(addrs_t); i++) {
        const char *const a[] = {addrs_t[i], NULL};
        struct fake_dns f = {.addrs = a};
        struct tkm_reach_decision d;
        CHECK(tkm_reach_decide(&p, TKM_REACH_REGISTRY, "reg.internal", fake_resolve, &f, &d) ==
                  -EACCES,
              addrs_t[i]);
        CHECK_STR(d.rule, "never", addrs_t[i]);
    }
    struct tkm_reach_decision d;
    ASSERT_EQ(tkm_reach_check(&p, TKM_REACH_REGISTRY, "169.254.169.254", NULL, 0, &d), -EACCES);
    ASSERT_STREQ(d.rule, "never");
    ASSERT_STRCONTAINS(d.message, "it is a cloud metadata address, which is never allowed");
    ASSERT_EQ(tkm_reach_check(&p, TKM_REACH_REGISTRY, "[fe80::1]", NULL, 0, &d), -EACCES);
    ASSERT_STRCONTAINS(d.message, "it is a link-local address");
    /* private and loopback are what registryPrivate unlocks */
    const char *const ok[] = {"10.0.0.5", "127.0.0.1", "[fd12::1]", NULL};
    struct fake_dns f = {.addrs = ok};
    ASSERT_OK(tkm_reach_decide(&p, TKM_REACH_REGISTRY, "reg.internal", fake_resolve, &f, &d));
    ASSERT_EQ(d.port, 80); /* plain HTTP: "*" */
    ASSERT_STREQ(d.resolve, "reg.internal:80:10.0.0.5,127.0.0.1,[fd12::1]");
    tkm_reach_policy_release(&p);
}

TEST(decide_allow_list)
{
    struct tkm_reach_policy p = policy("ghcr.io, *.corp.example, quay.io:8443", NULL, NULL);
    const char *const pub[] = {"8.8.4.4", NULL};
    static const struct {
        const char *host;
        int ok;
    } t[] = {
        {"ghcr.io", 1},         {"GHCR.io:5000", 1}, {"a.corp.example", 1}, {"x.y.corp.example", 1},
        {"corp.example", 0},    {"quay.io:8443", 1}, {"quay.io", 0},        {"evil.io", 0},
        {"ghcr.io.evil.io", 0}, {"8.8.4.4", 0},
    };
    for (size_t i = 0; i < TKM_ARRAY_SIZE(t); i++) {
        struct fake_dns f = {.addrs = pub};
        struct tkm_reach_decision d;
        int rc = tkm_reach_decide(&p, TKM_REACH_REGISTRY, t[i].host, fake_resolve, &f, &d);
        CHECK(rc == (t[i].ok ? 0 : -EACCES), t[i].host);
        CHECK(f.calls == t[i].ok, t[i].host); /* a refused name is never looked up */
        if (!t[i].ok) {
            CHECK_STR(d.rule, "registryAllow", t[i].host);
            check_message(&d, t[i].host);
        }
    }
    struct tkm_reach_decision d;
    ASSERT_EQ(tkm_reach_check(&p, TKM_REACH_REGISTRY, "evil.io:5000", NULL, 0, &d), -EACCES);
    ASSERT_STREQ(d.message, "registry \"evil.io:5000\" is not allowed: it is not in registryAllow");
    tkm_reach_policy_release(&p);
}

TEST(decide_follow_skips_only_the_allow_list)
{
    struct tkm_reach_policy p = policy("ghcr.io", NULL, NULL);
    const char *const cdn[] = {"185.199.108.154", NULL};
    const char *const meta[] = {"169.254.169.254", NULL};
    struct fake_dns f = {.addrs = cdn};
    struct tkm_reach_decision d;
    /* a blob redirect to a CDN: not in registryAllow, still allowed, pinned */
    ASSERT_OK(tkm_reach_decide(&p, TKM_REACH_FOLLOW, "pkg-containers.githubusercontent.com",
                               fake_resolve, &f, &d));
    ASSERT_STREQ(d.resolve, "pkg-containers.githubusercontent.com:443:185.199.108.154");
    ASSERT_EQ(tkm_reach_decide(&p, TKM_REACH_REGISTRY, "pkg-containers.githubusercontent.com",
                               fake_resolve, &f, &d),
              -EACCES);
    /* a token realm or redirect to a metadata name or literal: refused */
    f.addrs = meta;
    ASSERT_EQ(
        tkm_reach_decide(&p, TKM_REACH_FOLLOW, "metadata.google.internal", fake_resolve, &f, &d),
        -EACCES);
    ASSERT_STREQ(d.rule, "never");
    f.calls = 0;
    ASSERT_EQ(tkm_reach_decide(&p, TKM_REACH_FOLLOW, "169.254.169.254:80", fake_resolve, &f, &d),
              -EACCES);
    ASSERT_EQ(f.calls, 0);
    ASSERT_EQ(tkm_reach_decide(&p, TKM_REACH_FOLLOW, "localhost", fake_resolve, &f, &d), -EACCES);
    ASSERT_EQ(f.calls, 0);
    tkm_reach_policy_release(&p);
}

TEST(decide_zone_ids_never)
{
    struct tkm_reach_policy p = policy("*, [fe80::1]:5000", "*", NULL);
    struct fake_dns f = {0};
    struct tkm_reach_decision d;
    ASSERT_EQ(tkm_reach_decide(&p, TKM_REACH_REGISTRY, "[fe80::1%eth0]:5000", fake_resolve, &f, &d),
              -EACCES);
    ASSERT_STREQ(d.rule, "never");
    ASSERT_STRCONTAINS(d.message, "an IPv6 zone id is never allowed");
    ASSERT_EQ(f.calls, 0);
    tkm_reach_policy_release(&p);
}

TEST(decide_invalid_host_is_escaped)
{
    static const char *const t[] = {
        "",     "a b:5000", "evil\x1b[2J.io",  "x\r\nSet-Cookie: a=b", "1.2.3.4.5",
        "a..b", "[::1",     "\xe2\x80\xae.io", "09.0.0.1:80",
    };
    struct tkm_reach_policy p = policy(NULL, "*", "*");
    for (size_t i = 0; i < TKM_ARRAY_SIZE(t); i++) {
        struct fake_dns f = {0};
        struct tkm_reach_decision d;
        CHECK(tkm_reach_decide(&p, TKM_REACH_REGISTRY, t[i], fake_resolve, &f, &d) == -EACCES,
              t[i]);
        CHECK(f.calls == 0, t[i]);
        CHECK_STR(d.rule, "invalid-host", t[i]);
        CHECK(strstr(d.message, "is not allowed: the host "), t[i]);
        check_message(&d, t[i]);
    }
    struct tkm_reach_decision d;
    /* every byte outside printable ASCII is \xHH (UTF-8 included), quotes are escaped */
    ASSERT_EQ(tkm_reach_check(&p, TKM_REACH_REGISTRY, "\xe2\x80\xae\xd1\x96\".io\\", NULL, 0, &d),
              -EACCES);
    ASSERT_STREQ(d.message, "registry \"\\xe2\\x80\\xae\\xd1\\x96\\\".io\\\\\" is not allowed: the "
                            "host has an invalid character");
    ASSERT_EQ(tkm_reach_check(&p, TKM_REACH_REGISTRY, NULL, NULL, 0, &d), -EACCES);
    char huge[5000];
    memset(huge, 'a', sizeof huge - 1);
    huge[sizeof huge - 1] = '\0';
    ASSERT_EQ(tkm_reach_check(&p, TKM_REACH_REGISTRY, huge, NULL, 0, &d), -EACCES);
    ASSERT_STRCONTAINS(d.message, "longer than 253");
    ASSERT(strlen(d.message) < 200);
    tkm_reach_policy_release(&p);
}

TEST(decide_resolver_failures)
{
    struct tkm_reach_policy p = policy(NULL, NULL, NULL);
    struct tkm_reach_decision d;
    struct fake_dns f = {.rc = -ENOENT};
    ASSERT_EQ(tkm_reach_decide(&p, TKM_REACH_REGISTRY, "nx.example", fake_resolve, &f, &d),
              -ENOENT);
    ASSERT_STREQ(d.reason, "RegistryUnreachable");
    ASSERT_STREQ(d.rule, "resolve");
    ASSERT_STREQ(d.message, "registry \"nx.example\": no such host name");
    ASSERT(!d.allowed);
    f.rc = -EAGAIN;
    ASSERT_EQ(tkm_reach_decide(&p, TKM_REACH_REGISTRY, "nx.example", fake_resolve, &f, &d),
              -EAGAIN);
    ASSERT_STRCONTAINS(d.message, "temporary failure");
    f.rc = 0; /* no address at all */
    ASSERT_EQ(tkm_reach_decide(&p, TKM_REACH_REGISTRY, "nx.example", fake_resolve, &f, &d),
              -ENOENT);
    ASSERT_STREQ(d.reason, "RegistryUnreachable");
    ASSERT(!d.allowed);
    tkm_reach_policy_release(&p);
}

static int many_resolve(const char *name, struct tkm_reach_addr *out, size_t max, void *data)
{
    (void)name;
    (void)data;
    for (size_t i = 0; i < max; i++) {
        memset(&out[i], 0, sizeof out[i]);
        out[i].family = 6;
        out[i].a[0] = 0x26;
        out[i].a[1] = 0x06;
        out[i].a[15] = (unsigned char)(i + 1);
        memset(out[i].a + 2, 0xab, 12); /* long texts: the pin must still fit */
    }
    return (int)max + 5; /* a resolver that claims more than it may write */
}

TEST(decide_pin_capacity)
{
    struct tkm_reach_policy p = policy(NULL, NULL, NULL);
    struct tkm_reach_decision d;
    char name[260];
    for (size_t i = 0; i < 253; i++)
        name[i] = i % 64 == 63 ? '.' : 'a';
    name[253] = '\0';
    ASSERT_OK(tkm_reach_decide(&p, TKM_REACH_REGISTRY, name, many_resolve, NULL, &d));
    ASSERT_EQ(d.n_addrs, TKM_REACH_MAX_ADDRS);
    ASSERT(strlen(d.resolve) < sizeof d.resolve - 1); /* nothing cut */
    ASSERT(strncmp(d.resolve, name, 253) == 0);
    ASSERT_STRCONTAINS(d.resolve, ":443:[2606:abab:");
    size_t commas = 0;
    for (const char *c = d.resolve; *c; c++)
        commas += *c == ',';
    ASSERT_EQ(commas, TKM_REACH_MAX_ADDRS - 1);
    tkm_reach_policy_release(&p);
}

TEST(getaddrinfo_numeric_loopback_only)
{
    /* a numeric loopback literal: glibc parses it, no lookup, no packet */
    struct tkm_reach_addr a[4];
    ASSERT_EQ(tkm_reach_getaddrinfo("127.0.0.1", a, 4, NULL), 1);
    ASSERT_EQ(a[0].family, 4);
    ASSERT_EQ(tkm_reach_classify(&a[0]), TKM_REACH_LOOPBACK);
    ASSERT_EQ(tkm_reach_getaddrinfo("::1", a, 4, NULL), 1);
    ASSERT_EQ(a[0].family, 6);
    ASSERT_EQ(tkm_reach_classify(&a[0]), TKM_REACH_LOOPBACK);
}

/* ---- registry error replies -------------------------------------------------- */

TEST(remote_summary_never_echoes_the_body)
{
    static const struct {
        long status;
        const char *body, *want;
    } t[] = {
        {403,
         "{\"errors\":[{\"code\":\"X\",\"message\":\"INTERNAL-SECRET-abc\"},"
         "{\"code\":\"DENIED\",\"message\":\"token=hunter2\\u0007\\r\\n\\u001b[31m\","
         "\"detail\":{\"aws_secret\":\"AKIA...\"}}]}",
         "HTTP 403 DENIED"},
        {403, "{\"errors\":[{\"code\":\"X\",\"message\":\"INTERNAL-SECRET-abc\"}]}", "HTTP 403"},
        {401, "{\"errors\":[{\"code\":\"UNAUTHORIZED\"}]}", "HTTP 401 UNAUTHORIZED"},
        {429, "{\"errors\":[{\"code\":\"TOOMANYREQUESTS\",\"message\":\"slow\"}]}",
         "HTTP 429 TOOMANYREQUESTS"},
        {404, "{\"errors\":[{\"code\":\"denied\"}]}", "HTTP 404"},    /* case matters */
        {404, "{\"errors\":[{\"code\":\"DENIED \"}]}", "HTTP 404"},   /* exact */
        {404, "{\"errors\":[{\"code\":\"DENIED\\n\"}]}", "HTTP 404"}, /* exact */
        {404, "{\"errors\":[{\"code\":\"MANIFEST_UNKNOWN\\u0000x\"}]}", "HTTP 404"},
        {404, "{\"errors\":{\"code\":\"DENIED\"}}", "HTTP 404"}, /* not an array */
        {404, "{\"errors\":[{\"code\":7}]}", "HTTP 404"},
        {404, "{\"errors\":[\"DENIED\"]}", "HTTP 404"},
        {500, "<html>SECRET internal stack trace\r\n\x1b[0m</html>", "HTTP 500"},
        {502, "", "HTTP 502"},
        {200, "{\"errors\":[{\"code\":\"NAME_UNKNOWN\"}]} trailing", "HTTP 200"}, /* not JSON */
        {9999, "{\"errors\":[{\"code\":\"DENIED\"}]}", "HTTP 0 DENIED"},
        {-1, "x", "HTTP 0"},
    };
    for (size_t i = 0; i < TKM_ARRAY_SIZE(t); i++) {
        char out[128];
        int n =
            tkm_reach_remote_summary(t[i].status, t[i].body, strlen(t[i].body), out, sizeof out);
        CHECK_STR(out, t[i].want, t[i].body);
        CHECK(n == (int)strlen(t[i].want), t[i].body);
        for (const char *c = out; *c; c++)
            CHECK((*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') || *c == ' ' || *c == '_',
                  t[i].body);
    }
    /* NUL bytes in the body, and a NULL body */
    static const char nul[] = "{\"errors\":[{\"code\":\"DENIED\",\"message\":\"a\0b\"}]}";
    char out[64];
    tkm_reach_remote_summary(403, nul, sizeof nul - 1, out, sizeof out);
    ASSERT_STREQ(out, "HTTP 403");
    tkm_reach_remote_summary(403, NULL, 0, out, sizeof out);
    ASSERT_STREQ(out, "HTTP 403");
    /* a short buffer is cut, NUL-terminated, and the full length is returned */
    char small[8];
    static const char denied[] = "{\"errors\":[{\"code\":\"DENIED\"}]}";
    ASSERT_EQ(tkm_reach_remote_summary(403, denied, strlen(denied), small, sizeof small), 15);
    ASSERT_STREQ(small, "HTTP 40");
}

TEST(remote_code_spec_list)
{
    static const char *const spec[] = {
        "BLOB_UNKNOWN",          "BLOB_UPLOAD_INVALID", "BLOB_UPLOAD_UNKNOWN", "DIGEST_INVALID",
        "MANIFEST_BLOB_UNKNOWN", "MANIFEST_INVALID",    "MANIFEST_UNKNOWN",    "NAME_INVALID",
        "NAME_UNKNOWN",          "SIZE_INVALID",        "UNAUTHORIZED",        "DENIED",
        "UNSUPPORTED",           "TOOMANYREQUESTS",
    };
    static const char *const others[] = {
        "UNKNOWN", "UNAVAILABLE", "TAG_INVALID", "MANIFEST_UNVERIFIED", "RANGE_INVALID", ""};
    char body[256];
    for (size_t i = 0; i < TKM_ARRAY_SIZE(spec); i++) {
        snprintf(body, sizeof body, "{\"errors\":[{\"code\":\"%s\",\"message\":\"m\"}]}", spec[i]);
        const char *c = tkm_reach_oci_error_code(body, strlen(body));
        CHECK(c && strcmp(c, spec[i]) == 0, spec[i]);
        CHECK(c < body || c >= body + sizeof body, spec[i]); /* static, never the body's bytes */
    }
    for (size_t i = 0; i < TKM_ARRAY_SIZE(others); i++) {
        snprintf(body, sizeof body, "{\"errors\":[{\"code\":\"%s\"}]}", others[i]);
        CHECK(tkm_reach_oci_error_code(body, strlen(body)) == NULL, others[i]);
    }
    /* the first spec code wins; an unknown one before it is skipped */
    snprintf(
        body, sizeof body,
        "{\"errors\":[{\"code\":\"EVIL\"},{\"code\":\"NAME_UNKNOWN\"},{\"code\":\"DENIED\"}]}");
    ASSERT_STREQ(tkm_reach_oci_error_code(body, strlen(body)), "NAME_UNKNOWN");
}

TEST(remote_code_large_or_deep_bodies)
{
    /* a body over 64 KiB names no code, even a valid one */
    struct tkm_buf b = TKM_BUF_INIT(1 << 20);
    ASSERT_OK(tkm_buf_puts(&b, "{\"errors\":[{\"code\":\"DENIED\",\"message\":\""));
    for (int i = 0; i < 70000; i++)
        ASSERT_OK(tkm_buf_putc(&b, 'S'));
    ASSERT_OK(tkm_buf_puts(&b, "\"}]}"));
    ASSERT_NULL(tkm_reach_oci_error_code(b.data, b.len));
    /* deep nesting is refused by the parser, not a crash */
    tkm_buf_reset(&b);
    for (int i = 0; i < 20000; i++)
        ASSERT_OK(tkm_buf_putc(&b, '['));
    ASSERT_NULL(tkm_reach_oci_error_code(b.data, b.len));
    tkm_buf_release(&b);
}

TEST(docs_examples_parse)
{
    /* the values docs/registry-reach.md shows, as a YAML block string gives them */
    struct tkm_reach_policy p = policy("*                       # any public registry by name\n"
                                       "127.0.0.1:5000 [::1]:5000\n",
                                       "127.0.0.1:5000, localhost:5000, [::1]:5000",
                                       "127.0.0.1:5000, localhost:5000, [::1]:5000");
    struct tkm_reach_decision d;
    ASSERT_EQ(p.allow.n, 3);
    ASSERT_OK(tkm_reach_check(&p, TKM_REACH_REGISTRY, "127.0.0.1:5000", NULL, 0, &d));
    ASSERT(d.plain_http);
    tkm_reach_policy_release(&p);
    p = policy("ghcr.io, *.registry.corp.example", "*.registry.corp.example", NULL);
    struct tkm_reach_addr ten = host_of("10.2.3.4").addr;
    ASSERT_OK(tkm_reach_check(&p, TKM_REACH_REGISTRY, "eu.registry.corp.example", &ten, 1, &d));
    ASSERT_STREQ(d.resolve, "eu.registry.corp.example:443:10.2.3.4");
    ASSERT_EQ(tkm_reach_check(&p, TKM_REACH_REGISTRY, "ghcr.io", &ten, 1, &d), -EACCES);
    ASSERT_EQ(tkm_reach_check(&p, TKM_REACH_REGISTRY, "registry-1.docker.io", &ten, 1, &d),
              -EACCES);
    ASSERT_STREQ(d.rule, "registryAllow");
    tkm_reach_policy_release(&p);
}

TEST(class_names_distinct)
{
    for (int a = TKM_REACH_PUBLIC; a <= TKM_REACH_RESERVED; a++)
        for (int b = a + 1; b <= TKM_REACH_RESERVED; b++)
            ASSERT(strcmp(tkm_reach_class_name(a), tkm_reach_class_name(b)) != 0);
    struct tkm_reach_addr none = {0};
    ASSERT_EQ(tkm_reach_classify(&none), TKM_REACH_RESERVED); /* no family: never allowed */
}
