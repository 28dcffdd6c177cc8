/* fuzz_reach.c - registry reach (lib/reach.c): the host parser agrees with
 * glibc's inet_aton on every IPv4 spelling and re-parses its own output; the
 * policy parser either succeeds or explains itself in printable text; the
 * decision's tenant message is printable ASCII and an allowed decision holds
 * only addresses the policy allows; an error reply summary is only
 * "HTTP <n>[ <CODE>]". Never resolves a name: the resolver is a fake fed from
 * the input. */
#include <arpa/inet.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tkm/reach.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int printable(const char *s)
{
    for (; *s; s++)
        if ((unsigned char)*s < 0x20 || (unsigned char)*s >= 0x7f)
            return 0;
    return 1;
}

/* Differential: for inputs made only of [0-9a-fA-FxX.], our parser and
 * inet_aton (the grammar getaddrinfo uses) take the same inputs to the same
 * address. */
static void check_ipv4(const char *s, size_t n)
{
    struct tkm_reach_addr a;
    struct in_addr ia;
    if (n == 0)
        return;
    for (size_t i = 0; i < n; i++)
        if (!strchr("0123456789abcdefABCDEFxX.", s[i]) || s[i] == '\0')
            return;
    int ours = tkm_reach_parse_ipv4(s, n, &a) == 0;
    int theirs = inet_aton(s, &ia) == 1;
    if (ours != theirs || (ours && memcmp(&ia, a.a, 4) != 0))
        abort();
}

static void check_host(const char *s, size_t n)
{
    struct tkm_reach_host h, h2;
    char again[TKM_REACH_HOST_MAX + 16];
    if (tkm_reach_host_parse(s, n, &h, NULL) != 0)
        return;
    if (!printable(h.name))
        abort();
    int v6 = h.is_ip && h.addr.family == 6;
    int len = snprintf(again, sizeof again, "%s%s%s", v6 ? "[" : "", h.name, v6 ? "]" : "");
    if (h.port)
        len += snprintf(again + len, sizeof again - (size_t)len, ":%u", h.port);
    if (tkm_reach_host_parse(again, (size_t)len, &h2, NULL) != 0 || h2.is_ip != h.is_ip ||
        h2.port != h.port || strcmp(h2.name, h.name) != 0 ||
        (h.is_ip && memcmp(h2.addr.a, h.addr.a, 16) != 0))
        abort(); /* the canonical form parses to the same host */
}

struct feed {
    const uint8_t *p;
    size_t n;
};

/* Addresses from the input's bytes: 17 bytes each (a family bit, 16 bytes). */
static int feed_resolve(const char *name, struct tkm_reach_addr *out, size_t max, void *data)
{
    struct feed *f = data;
    size_t k = 0;
    (void)name;
    for (size_t off = 0; off + 17 <= f->n && k < max; off += 17, k++) {
        memset(&out[k], 0, sizeof out[k]);
        out[k].family = f->p[off] & 1 ? 6 : 4;
        memcpy(out[k].a, f->p + off + 1, out[k].family == 6 ? 16 : 4);
    }
    return (int)k;
}

static void check_decision(const struct tkm_reach_policy *p, const char *host, struct feed *f)
{
    for (int purpose = TKM_REACH_REGISTRY; purpose <= TKM_REACH_FOLLOW; purpose++) {
        struct tkm_reach_decision d;
        int rc = tkm_reach_decide(p, purpose, host, feed_resolve, f, &d);
        if (!printable(d.message) || !printable(d.resolve) || !printable(d.host))
            abort();
        if ((rc == 0) != d.allowed || (rc != 0 && (!d.message[0] || !d.reason[0])))
            abort();
        for (size_t i = 0; rc == 0 && i < d.n_addrs; i++) {
            enum tkm_reach_class c = tkm_reach_classify(&d.addrs[i]);
            if (c != TKM_REACH_PUBLIC && c != TKM_REACH_PRIVATE && c != TKM_REACH_LOOPBACK)
                abort(); /* never metadata, link-local, unspecified, ... */
        }
    }
}

static void check_summary(const uint8_t *data, size_t size)
{
    char out[64];
    long status = size ? (long)data[0] * 4 : 0;
    tkm_reach_remote_summary(status, (const char *)data, size, out, sizeof out);
    if (strncmp(out, "HTTP ", 5) != 0)
        abort();
    for (const char *c = out + 5; *c; c++)
        if (!((*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') || *c == '_' || *c == ' '))
            abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *s = malloc(size + 1);
    struct tkm_reach_policy fixed, fuzzed;
    struct tkm_err e = {0};
    if (!s)
        return 0;
    memcpy(s, data, size);
    s[size] = '\0';
    check_ipv4(s, size);
    check_host(s, size);
    check_summary(data, size);

    /* the input as a policy list, under each key */
    struct tkm_reach_config c1 = {.allow = s}, c2 = {.private_hosts = s, .plain_http = s};
    if (tkm_reach_policy_parse(&fuzzed, &c1, &e) != 0 && (!e.code || !printable(e.msg)))
        abort();
    tkm_reach_policy_release(&fuzzed);
    struct tkm_err e2 = {0};
    if (tkm_reach_policy_parse(&fuzzed, &c2, &e2) != 0 && (!e2.code || !printable(e2.msg)))
        abort();

    /* the input's first line as a host, its rest as resolved addresses, under
     * a fixed policy and under the fuzzed one */
    size_t line = strcspn(s, "\n");
    struct feed f = {data + (line < size ? line + 1 : size), line < size ? size - line - 1 : 0};
    s[line] = '\0';
    struct tkm_reach_config cf = {"*, 127.0.0.1:5000, [::1]:5000", "localhost:5000 *.internal",
                                  "127.0.0.1:5000"};
    if (tkm_reach_policy_parse(&fixed, &cf, NULL) != 0)
        abort();
    check_decision(&fixed, s, &f);
    if (e2.code == 0)
        check_decision(&fuzzed, s, &f);
    tkm_reach_policy_release(&fixed);
    tkm_reach_policy_release(&fuzzed);
    free(s);
    return 0;
}
