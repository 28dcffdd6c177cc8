/* reach.c - registry reach: address classes, the admin's policy, the decision
 * and what may be shown of a registry's error reply (see <tkm/reach.h> and
 * docs/registry-reach.md). */
#include <tkm/reach.h>

#include <arpa/inet.h>
#include <errno.h>
#include <stdarg.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <jansson.h>

#include <tkm/util.h>

#define ERROR_BODY_MAX (64 * 1024) /* an error body larger than this names no code */
#define ENTRY_SHOW_MAX 64          /* bytes of a bad entry or host quoted in a message */

/* ---- addresses ----------------------------------------------------------- */

static uint32_t v4_of(const unsigned char *b)
{
    return (uint32_t)b[0] << 24 | (uint32_t)b[1] << 16 | (uint32_t)b[2] << 8 | (uint32_t)b[3];
}

static void v4_set(struct tkm_reach_addr *a, uint32_t x)
{
    memset(a, 0, sizeof *a);
    a->family = 4;
    a->a[0] = (unsigned char)(x >> 24);
    a->a[1] = (unsigned char)(x >> 16);
    a->a[2] = (unsigned char)(x >> 8);
    a->a[3] = (unsigned char)x;
}

static int in_net4(uint32_t x, uint32_t net, unsigned bits)
{
    uint32_t mask = bits ? 0xffffffffu << (32 - bits) : 0;
    return (x & mask) == net;
}

static enum tkm_reach_class classify4(uint32_t x)
{
    static const uint32_t metadata[] = {
        0xa9fea9feu, /* 169.254.169.254: AWS, GCP, Azure, OCI, DigitalOcean, OpenStack */
        0xa9feaa02u, /* 169.254.170.2: AWS ECS task metadata */
        0x646464c8u, /* 100.100.100.200: Alibaba Cloud */
        0xa83f8110u, /* 168.63.129.16: Azure WireServer (a public address) */
    };
    static const struct {
        uint32_t net;
        unsigned bits;
        enum tkm_reach_class c;
    } nets[] = {
        {0x00000000u, 8, TKM_REACH_UNSPECIFIED}, {0x7f000000u, 8, TKM_REACH_LOOPBACK},
        {0xa9fe0000u, 16, TKM_REACH_LINK_LOCAL}, {0x0a000000u, 8, TKM_REACH_PRIVATE},
        {0xac100000u, 12, TKM_REACH_PRIVATE},    {0xc0a80000u, 16, TKM_REACH_PRIVATE},
        {0x64400000u, 10, TKM_REACH_PRIVATE},    {0xc6120000u, 15, TKM_REACH_PRIVATE},
        {0xe0000000u, 4, TKM_REACH_MULTICAST},   {0xc0000000u, 24, TKM_REACH_RESERVED},
        {0xc0000200u, 24, TKM_REACH_RESERVED},   {0xc6336400u, 24, TKM_REACH_RESERVED},
        {0xcb007100u, 24, TKM_REACH_RESERVED},   {0xf0000000u, 4, TKM_REACH_RESERVED},
    };
    if (x == 0xffffffffu)
        return TKM_REACH_BROADCAST;
    for (size_t i = 0; i < TKM_ARRAY_SIZE(metadata); i++)
        if (x == metadata[i])
            return TKM_REACH_METADATA;
    for (size_t i = 0; i < TKM_ARRAY_SIZE(nets); i++)
        if (in_net4(x, nets[i].net, nets[i].bits))
            return nets[i].c;
    return TKM_REACH_PUBLIC;
}

static int all_zero(const unsigned char *b, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (b[i])
            return 0;
    return 1;
}

static enum tkm_reach_class classify6(const unsigned char *b)
{
    static const unsigned char ec2_metadata[16] = {0xfd, 0x00, 0x0e, 0xc2, 0, 0, 0,    0,
                                                   0,    0,    0,    0,    0, 0, 0x02, 0x54};
    static const unsigned char gce_metadata[16] = {0xfd, 0x20, 0x00, 0xce, 0, 0, 0,    0,
                                                   0,    0,    0,    0,    0, 0, 0x02, 0x54};
    if (memcmp(b, ec2_metadata, 16) == 0 || memcmp(b, gce_metadata, 16) == 0)
        return TKM_REACH_METADATA;
    if (all_zero(b, 15) && b[15] <= 1)
        return b[15] ? TKM_REACH_LOOPBACK : TKM_REACH_UNSPECIFIED;
    /* Forms that reach an IPv4 address: that address's class. */
    if ((all_zero(b, 10) && b[10] == 0xff && b[11] == 0xff) ||           /* ::ffff:a.b.c.d mapped */
        (all_zero(b, 8) && b[8] == 0xff && b[9] == 0xff &&               /* ::ffff:0:a.b.c.d SIIT */
         b[10] == 0 && b[11] == 0) ||                                    /* */
        all_zero(b, 12) ||                                               /* ::a.b.c.d compatible */
        (b[0] == 0x00 && b[1] == 0x64 && b[2] == 0xff && b[3] == 0x9b && /* 64:ff9b::/96 */
         all_zero(b + 4, 8)))
        return classify4(v4_of(b + 12));
    if (b[0] == 0x20 && b[1] == 0x02) /* 2002::/16 6to4 */
        return classify4(v4_of(b + 2));
    if (b[0] == 0x00 && b[1] == 0x64 && b[2] == 0xff && b[3] == 0x9b && b[4] == 0 && b[5] == 1)
        return TKM_REACH_PRIVATE; /* 64:ff9b:1::/48 local-use NAT64 */
    if ((b[0] == 0x20 && b[1] == 0x01 && b[2] == 0x0d && b[3] == 0xb8) || /* 2001:db8::/32 */
        (b[0] == 0x20 && b[1] == 0x01 && b[2] == 0 && b[3] == 0) ||       /* Teredo 2001::/32 */
        (b[0] == 0x01 && all_zero(b + 1, 7)))                             /* 100::/64 discard */
        return TKM_REACH_RESERVED;
    if (b[0] == 0xfe && (b[1] & 0xc0) == 0x80)
        return TKM_REACH_LINK_LOCAL;
    if ((b[0] == 0xfe && (b[1] & 0xc0) == 0xc0) || (b[0] & 0xfe) == 0xfc)
        return TKM_REACH_PRIVATE; /* fec0::/10 site-local, fc00::/7 unique local */
    if (b[0] == 0xff)
        return TKM_REACH_MULTICAST;
    return TKM_REACH_PUBLIC;
}

enum tkm_reach_class tkm_reach_classify(const struct tkm_reach_addr *a)
{
    if (a->family == 4)
        return classify4(v4_of(a->a));
    if (a->family == 6)
        return classify6(a->a);
    return TKM_REACH_RESERVED;
}

const char *tkm_reach_class_name(enum tkm_reach_class c)
{
    switch (c) {
    case TKM_REACH_PUBLIC:
        return "public";
    case TKM_REACH_PRIVATE:
        return "private";
    case TKM_REACH_LOOPBACK:
        return "loopback";
    case TKM_REACH_LINK_LOCAL:
        return "link-local";
    case TKM_REACH_METADATA:
        return "cloud metadata";
    case TKM_REACH_UNSPECIFIED:
        return "unspecified";
    case TKM_REACH_MULTICAST:
        return "multicast";
    case TKM_REACH_BROADCAST:
        return "broadcast";
    case TKM_REACH_RESERVED:
        break;
    }
    return "reserved";
}

static int digit_in(char c, unsigned base)
{
    if (c >= '0' && c <= '9')
        return (unsigned)(c - '0') < base ? c - '0' : -1;
    if (base == 16 && c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (base == 16 && c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* inet_aton's grammar, exactly (glibc inet_aton_exact, which getaddrinfo
 * uses): 1 to 4 parts split by '.', each starting with a digit and read as C
 * reads an integer (0x/0X hex, leading 0 octal, else decimal); every part but
 * the last at most 255, the last filling the remaining bytes. */
int tkm_reach_parse_ipv4(const char *s, size_t n, struct tkm_reach_addr *out)
{
    uint32_t parts[4];
    size_t np = 0, i = 0;
    for (;;) {
        unsigned base = 10;
        uint64_t v = 0;
        if (np == 4 || i >= n || s[i] < '0' || s[i] > '9')
            return -EINVAL;
        if (s[i] == '0' && i + 1 < n && (s[i + 1] == 'x' || s[i + 1] == 'X')) {
            base = 16;
            i += 2;
            if (i >= n || digit_in(s[i], 16) < 0)
                return -EINVAL; /* "0x" alone: strtoul stops before the x */
        } else if (s[i] == '0') {
            base = 8;
        }
        for (int d; i < n && (d = digit_in(s[i], base)) >= 0; i++)
            if ((v = v * base + (unsigned)d) > 0xffffffffu)
                return -EINVAL;
        parts[np++] = (uint32_t)v;
        if (i == n)
            break;
        if (s[i++] != '.')
            return -EINVAL;
    }
    uint32_t x = 0;
    for (size_t k = 0; k + 1 < np; k++) {
        if (parts[k] > 0xff)
            return -EINVAL;
        x |= parts[k] << (24 - 8 * k);
    }
    uint32_t last = parts[np - 1];
    if (np > 1 && last >> (8 * (4 - (np - 1))))
        return -EINVAL;
    v4_set(out, x | last);
    return 0;
}

char *tkm_reach_addr_str(const struct tkm_reach_addr *a, char *out, size_t n)
{
    if (!inet_ntop(a->family == 6 ? AF_INET6 : AF_INET, a->a, out, (socklen_t)n) && n)
        snprintf(out, n, "?");
    return out;
}

int tkm_reach_addr_from_sockaddr(const struct sockaddr *sa, struct tkm_reach_addr *out)
{
    memset(out, 0, sizeof *out);
    if (sa && sa->sa_family == AF_INET) {
        const struct sockaddr_in *s4 = (const struct sockaddr_in *)(const void *)sa;
        out->family = 4;
        memcpy(out->a, &s4->sin_addr, 4);
        return 0;
    }
    if (sa && sa->sa_family == AF_INET6) {
        const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)(const void *)sa;
        out->family = 6;
        memcpy(out->a, &s6->sin6_addr, 16);
        return 0;
    }
    return -EAFNOSUPPORT;
}

/* ---- hosts --------------------------------------------------------------- */

static int parse_port(const char *s, size_t n, unsigned *out)
{
    unsigned v = 0;
    if (n == 0 || n > 5)
        return -EINVAL;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return -EINVAL;
        v = v * 10 + (unsigned)(s[i] - '0');
    }
    if (v == 0 || v > 65535)
        return -EINVAL;
    *out = v;
    return 0;
}

static char lower(char c)
{
    return c >= 'A' && c <= 'Z' ? (char)(c - 'A' + 'a') : c;
}

static int is_alnum(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}

/* 1 when the label (n bytes) is what WHATWG's "ends in a number" calls a
 * number: all decimal digits, or 0x/0X followed by hex digits (or nothing). */
static int label_numeric(const char *l, size_t n)
{
    size_t i = 0;
    if (n >= 2 && l[0] == '0' && (l[1] == 'x' || l[1] == 'X')) {
        for (i = 2; i < n; i++)
            if (digit_in(l[i], 16) < 0)
                return 0;
        return 1;
    }
    for (; i < n; i++)
        if (l[i] < '0' || l[i] > '9')
            return 0;
    return n > 0;
}

static int set_why(const char **why, const char *w)
{
    if (why)
        *why = w;
    return -EINVAL;
}

static int parse_ipv6(const char *s, size_t n, struct tkm_reach_host *h, const char **why)
{
    char buf[TKM_REACH_ADDRSTR_MAX];
    const char *pct = memchr(s, '%', n);
    size_t alen = pct ? (size_t)(pct - s) : n;
    if (pct) {
        size_t zl = n - alen - 1;
        if (zl == 0)
            return set_why(why, "has an empty IPv6 zone id");
        for (size_t i = 1; i <= zl; i++)
            if (!is_alnum(pct[i]) && pct[i] != '-' && pct[i] != '_' && pct[i] != '.' &&
                pct[i] != '~')
                return set_why(why, "has an invalid IPv6 zone id");
        h->has_zone = 1;
    }
    if (alen == 0 || alen >= sizeof buf)
        return set_why(why, "has an invalid IPv6 address");
    memcpy(buf, s, alen);
    buf[alen] = '\0';
    if (inet_pton(AF_INET6, buf, h->addr.a) != 1)
        return set_why(why, "has an invalid IPv6 address");
    h->addr.family = 6;
    h->is_ip = 1;
    tkm_reach_addr_str(&h->addr, h->name, sizeof h->name);
    return 0;
}

/* A host name (n bytes, no port): LDH labels of 1-63 bytes, at most 253 in
 * all after one trailing dot is dropped; one whose last label is a number is
 * an IPv4 literal or invalid (never a name for DNS). */
static int parse_name(const char *s, size_t n, struct tkm_reach_host *h, const char **why)
{
    size_t label = 0, last = 0;
    if (n > 0 && s[n - 1] == '.')
        n--;
    if (n == 0)
        return set_why(why, "has an empty host name");
    if (n > TKM_REACH_HOST_MAX)
        return set_why(why, "has a host name longer than 253 characters");
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (c == '.') {
            if (label == 0 || s[i - 1] == '-')
                return set_why(why, "has an invalid host name");
            label = 0;
            last = i + 1;
            continue;
        }
        if (!is_alnum(c) && c != '-')
            return set_why(why, "has an invalid character");
        if ((label == 0 && c == '-') || ++label > 63)
            return set_why(why, "has an invalid host name");
    }
    if (label == 0 || s[n - 1] == '-')
        return set_why(why, "has an invalid host name");
    if (label_numeric(s + last, n - last)) {
        if (tkm_reach_parse_ipv4(s, n, &h->addr) != 0)
            return set_why(why, "looks like an IPv4 address but is not one");
        h->is_ip = 1;
        tkm_reach_addr_str(&h->addr, h->name, sizeof h->name);
        return 0;
    }
    for (size_t i = 0; i < n; i++)
        h->name[i] = lower(s[i]);
    h->name[n] = '\0';
    return 0;
}

int tkm_reach_host_parse(const char *s, size_t n, struct tkm_reach_host *out, const char **why)
{
    const char *port = NULL;
    size_t plen = 0;
    int rc;
    memset(out, 0, sizeof *out);
    if (!s || n == 0)
        return set_why(why, "is empty");
    if (s[0] == '[') {
        const char *close = memchr(s, ']', n);
        if (!close)
            return set_why(why, "has an IPv6 address without ']'");
        size_t after = (size_t)(close - s) + 1;
        if (after < n) {
            if (s[after] != ':')
                return set_why(why, "has junk after the IPv6 address");
            port = s + after + 1;
            plen = n - after - 1;
        }
        rc = parse_ipv6(s + 1, (size_t)(close - s) - 1, out, why);
    } else {
        const char *colon = memchr(s, ':', n);
        if (colon && memchr(colon + 1, ':', n - (size_t)(colon - s) - 1))
            return set_why(why, "has an IPv6 address that is not in brackets");
        if (colon) {
            port = colon + 1;
            plen = n - (size_t)(colon - s) - 1;
        }
        rc = parse_name(s, colon ? (size_t)(colon - s) : n, out, why);
    }
    if (rc)
        return rc;
    if (port && parse_port(port, plen, &out->port) != 0)
        return set_why(why, "has an invalid port (1-65535)");
    return 0;
}

/* The host as messages and URLs show it: name or literal (IPv6 bracketed),
 * ":port" when with_port and one was written. */
static void host_show(const struct tkm_reach_host *h, int with_port, char *out, size_t n)
{
    int v6 = h->is_ip && h->addr.family == 6;
    if (with_port && h->port)
        snprintf(out, n, "%s%s%s:%u", v6 ? "[" : "", h->name, v6 ? "]" : "", h->port);
    else
        snprintf(out, n, "%s%s%s", v6 ? "[" : "", h->name, v6 ? "]" : "");
}

/* ---- the admin's policy -------------------------------------------------- */

void tkm_reach_policy_release(struct tkm_reach_policy *p)
{
    if (!p)
        return;
    free(p->allow.v);
    free(p->private_hosts.v);
    free(p->plain_http.v);
    memset(p, 0, sizeof *p);
}

/* Quotes n bytes of untrusted s for a message: printable ASCII is copied,
 * '"' and '\\' are escaped, every other byte is \xHH (no UTF-8 passes: a
 * condition message stays plain ASCII). At most ENTRY_SHOW_MAX input bytes,
 * then "...". out holds ENTRY_SHOW_MAX * 4 + 4 bytes. */
static void show(const char *s, size_t n, char *out, size_t outlen)
{
    size_t o = 0, lim = n < ENTRY_SHOW_MAX ? n : ENTRY_SHOW_MAX;
    for (size_t i = 0; i < lim && o + 5 < outlen; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\')
            o += (size_t)snprintf(out + o, outlen - o, "\\%c", c);
        else if (c >= 0x20 && c < 0x7f)
            out[o++] = (char)c;
        else
            o += (size_t)snprintf(out + o, outlen - o, "\\x%02x", c);
    }
    out[o] = '\0';
    if (n > lim && o + 4 <= outlen)
        memcpy(out + o, "...", 4);
}

static int is_sep(char c)
{
    return c == ',' || c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

/* One entry (n bytes at s) into *e. Returns NULL, or why it is invalid. */
static const char *parse_entry(const char *s, size_t n, struct tkm_reach_entry *e)
{
    struct tkm_reach_host h;
    const char *why = NULL;
    memset(e, 0, sizeof *e);
    for (size_t i = 0; i + 2 < n; i++)
        if (s[i] == ':' && s[i + 1] == '/' && s[i + 2] == '/')
            return "write a host[:port], not a URL";
    if (memchr(s, '/', n))
        return "write a host[:port], not a repository (rules are per host)";
    if (s[0] == '*' && (n == 1 || s[1] == ':')) {
        e->kind = TKM_REACH_ENTRY_ANY;
        if (n > 1 && parse_port(s + 2, n - 2, &e->port) != 0)
            return "has an invalid port (1-65535)";
        return NULL;
    }
    int suffix = n > 2 && s[0] == '*' && s[1] == '.';
    if (memchr(s + (suffix ? 1 : 0), '*', n - (suffix ? 1 : 0)))
        return "may use '*' only as the whole entry or as a whole first label (\"*.example.com\")";
    if (tkm_reach_host_parse(s + (suffix ? 2 : 0), n - (suffix ? 2 : 0), &h, &why) != 0)
        return why;
    if (h.has_zone)
        return "has an IPv6 zone id (never allowed)";
    if (suffix && h.is_ip)
        return "has an IP address after \"*.\" (a wildcard needs a domain name)";
    e->kind = suffix ? TKM_REACH_ENTRY_SUFFIX : h.is_ip ? TKM_REACH_ENTRY_IP : TKM_REACH_ENTRY_NAME;
    e->port = h.port;
    e->addr = h.addr;
    memcpy(e->name, h.name, sizeof e->name);
    return NULL;
}

static int parse_list(const char *key, const char *s, struct tkm_reach_list *l, struct tkm_err *err)
{
    size_t cap = 0, idx = 0;
    while (*s) {
        if (is_sep(*s)) {
            s++;
            continue;
        }
        if (*s == '#') {
            s += strcspn(s, "\n");
            continue;
        }
        size_t n = 0;
        while (s[n] && !is_sep(s[n]) && s[n] != '#')
            n++;
        idx++;
        if (l->n == TKM_REACH_MAX_ENTRIES)
            return tkm_err_set(err, -E2BIG, "%s: more than %d entries", key, TKM_REACH_MAX_ENTRIES);
        if (l->n == cap) {
            size_t nc = cap ? cap * 2 : 8;
            struct tkm_reach_entry *v = realloc(l->v, nc * sizeof *v);
            if (!v)
                return tkm_err_set(err, -ENOMEM, "%s: out of memory", key);
            l->v = v;
            cap = nc;
        }
        const char *why = parse_entry(s, n, &l->v[l->n]);
        if (why) {
            char shown[ENTRY_SHOW_MAX * 4 + 4];
            show(s, n, shown, sizeof shown);
            return tkm_err_set(err, -EINVAL, "%s: entry %zu \"%s\" %s", key, idx, shown, why);
        }
        l->n++;
        s += n;
    }
    return 0;
}

int tkm_reach_policy_parse(struct tkm_reach_policy *out, const struct tkm_reach_config *cfg,
                           struct tkm_err *err)
{
    static const struct tkm_reach_config none = {0};
    int rc;
    memset(out, 0, sizeof *out);
    if (!cfg)
        cfg = &none;
    if ((rc = parse_list(TKM_REACH_KEY_ALLOW, cfg->allow ? cfg->allow : "*", &out->allow, err)) ||
        (rc = parse_list(TKM_REACH_KEY_PRIVATE, cfg->private_hosts ? cfg->private_hosts : "",
                         &out->private_hosts, err)) ||
        (rc = parse_list(TKM_REACH_KEY_PLAIN_HTTP, cfg->plain_http ? cfg->plain_http : "",
                         &out->plain_http, err)))
        return rc;
    if (out->allow.n == 0)
        return tkm_err_set(err, -EINVAL,
                           "%s: no entry (leave the key out for the default \"*\", any public "
                           "host name; or list the registries tkm may contact)",
                           TKM_REACH_KEY_ALLOW);
    return 0;
}

static int entry_match(const struct tkm_reach_entry *e, const struct tkm_reach_host *h)
{
    if (e->port && e->port != h->port)
        return 0;
    switch (e->kind) {
    case TKM_REACH_ENTRY_ANY:
        return !h->is_ip;
    case TKM_REACH_ENTRY_NAME:
        return !h->is_ip && strcmp(e->name, h->name) == 0;
    case TKM_REACH_ENTRY_SUFFIX: {
        size_t hl = strlen(h->name), sl = strlen(e->name);
        return !h->is_ip && hl > sl + 1 && h->name[hl - sl - 1] == '.' &&
               strcmp(h->name + hl - sl, e->name) == 0;
    }
    case TKM_REACH_ENTRY_IP:
        return h->is_ip && e->addr.family == h->addr.family &&
               memcmp(e->addr.a, h->addr.a, e->addr.family == 4 ? 4 : 16) == 0;
    }
    return 0;
}

int tkm_reach_list_match(const struct tkm_reach_list *l, const struct tkm_reach_host *h)
{
    for (size_t i = 0; l && i < l->n; i++)
        if (entry_match(&l->v[i], h))
            return 1;
    return 0;
}

/* ---- the decision -------------------------------------------------------- */

static int same_addr(const struct tkm_reach_addr *a, const struct tkm_reach_addr *b)
{
    return a->family == b->family && memcmp(a->a, b->a, a->family == 4 ? 4 : 16) == 0;
}

int tkm_reach_decision_has(const struct tkm_reach_decision *d, const struct tkm_reach_addr *a)
{
    for (size_t i = 0; i < d->n_addrs; i++)
        if (same_addr(&d->addrs[i], a))
            return 1;
    return 0;
}

__attribute__((format(printf, 4, 5))) static int
refuse(struct tkm_reach_decision *d, const char *shown, const char *rule, const char *fmt, ...)
{
    char why[256];
    va_list ap;
    d->allowed = 0;
    d->reason = TKM_REACH_REASON_NOT_ALLOWED;
    d->rule = rule;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    snprintf(d->message, sizeof d->message, "registry \"%s\" is not allowed: %s", shown, why);
    return -EACCES;
}

static int is_localhost_name(const char *name)
{
    size_t n = strlen(name);
    return strcmp(name, "localhost") == 0 || (n > 10 && strcmp(name + n - 10, ".localhost") == 0);
}

/* The rules that need no address: parses hostport into *h and fills d's
 * host, port and scheme. Returns 0 when the host may be looked up (or, for
 * an IP literal, checked), -EACCES when refused. */
static int pre_check(const struct tkm_reach_policy *p, enum tkm_reach_purpose purpose,
                     const char *hostport, struct tkm_reach_host *h, char *shown, size_t shown_n,
                     struct tkm_reach_decision *d)
{
    const char *why = "is empty";
    memset(d, 0, sizeof *d);
    d->reason = d->rule = "";
    if (!hostport || tkm_reach_host_parse(hostport, strlen(hostport), h, &why) != 0) {
        show(hostport ? hostport : "", hostport ? strlen(hostport) : 0, shown, shown_n);
        return refuse(d, shown, "invalid-host", "the host %s", why);
    }
    host_show(h, 1, shown, shown_n);
    host_show(h, 0, d->host, sizeof d->host);
    d->ip_literal = h->is_ip;
    d->plain_http = tkm_reach_list_match(&p->plain_http, h);
    d->port = h->port ? h->port : d->plain_http ? 80 : 443;
    if (h->has_zone)
        return refuse(d, shown, "never", "%s", "an IPv6 zone id is never allowed");
    if (h->is_ip && !tkm_reach_list_match(&p->allow, h))
        return refuse(d, shown, TKM_REACH_KEY_ALLOW, "an IP address must be listed in %s",
                      TKM_REACH_KEY_ALLOW);
    if (purpose == TKM_REACH_REGISTRY && !tkm_reach_list_match(&p->allow, h))
        return refuse(d, shown, TKM_REACH_KEY_ALLOW, "it is not in %s", TKM_REACH_KEY_ALLOW);
    if (!h->is_ip && is_localhost_name(h->name) && !tkm_reach_list_match(&p->private_hosts, h))
        return refuse(d, shown, TKM_REACH_KEY_PRIVATE, "it is a loopback name and not in %s",
                      TKM_REACH_KEY_PRIVATE);
    return 0;
}

static int addr_ok(enum tkm_reach_class c, int private_ok)
{
    return c == TKM_REACH_PUBLIC ||
           (private_ok && (c == TKM_REACH_PRIVATE || c == TKM_REACH_LOOPBACK));
}

/* The rules on the addresses; on success the pin. */
static int post_check(const struct tkm_reach_policy *p, const struct tkm_reach_host *h,
                      const char *shown, const struct tkm_reach_addr *addrs, size_t n,
                      struct tkm_reach_decision *d)
{
    int private_ok = tkm_reach_list_match(&p->private_hosts, h);
    if (h->is_ip) {
        addrs = &h->addr;
        n = 1;
    }
    if (n == 0) {
        d->reason = TKM_REACH_REASON_UNREACHABLE;
        d->rule = "resolve";
        snprintf(d->message, sizeof d->message, "registry \"%s\": the name has no address", shown);
        return -ENOENT;
    }
    for (size_t i = 0; i < n; i++) {
        enum tkm_reach_class c = tkm_reach_classify(&addrs[i]);
        char what[96];
        if (addr_ok(c, private_ok)) {
            if (!tkm_reach_decision_has(d, &addrs[i]) && d->n_addrs < TKM_REACH_MAX_ADDRS)
                d->addrs[d->n_addrs++] = addrs[i];
            continue;
        }
        d->refused_addr = addrs[i];
        d->n_addrs = 0;
        snprintf(what, sizeof what, "%s %s %s address", h->is_ip ? "it is" : "it resolves to",
                 c == TKM_REACH_UNSPECIFIED ? "an" : "a", tkm_reach_class_name(c));
        if (c == TKM_REACH_PRIVATE || c == TKM_REACH_LOOPBACK)
            return refuse(d, shown, TKM_REACH_KEY_PRIVATE, "%s and not in " TKM_REACH_KEY_PRIVATE,
                          what);
        return refuse(d, shown, "never", "%s, which is never allowed", what);
    }
    d->allowed = 1;
    if (h->is_ip)
        return 0;
    size_t used = (size_t)snprintf(d->resolve, sizeof d->resolve, "%s:%u:", h->name, d->port);
    for (size_t i = 0; i < d->n_addrs && used < sizeof d->resolve; i++) {
        char a[TKM_REACH_ADDRSTR_MAX];
        int v6 = d->addrs[i].family == 6;
        tkm_reach_addr_str(&d->addrs[i], a, sizeof a);
        used += (size_t)snprintf(d->resolve + used, sizeof d->resolve - used, "%s%s%s%s",
                                 i ? "," : "", v6 ? "[" : "", a, v6 ? "]" : "");
    }
    return 0;
}

int tkm_reach_check(const struct tkm_reach_policy *p, enum tkm_reach_purpose purpose,
                    const char *hostport, const struct tkm_reach_addr *addrs, size_t n,
                    struct tkm_reach_decision *d)
{
    struct tkm_reach_host h;
    char shown[ENTRY_SHOW_MAX * 4 + 8];
    int rc = pre_check(p, purpose, hostport, &h, shown, sizeof shown, d);
    return rc ? rc : post_check(p, &h, shown, addrs, n, d);
}

int tkm_reach_decide(const struct tkm_reach_policy *p, enum tkm_reach_purpose purpose,
                     const char *hostport, tkm_reach_resolve_fn resolve, void *data,
                     struct tkm_reach_decision *d)
{
    struct tkm_reach_host h;
    struct tkm_reach_addr addrs[TKM_REACH_MAX_ADDRS];
    char shown[ENTRY_SHOW_MAX * 4 + 8];
    int n = 0;
    int rc = pre_check(p, purpose, hostport, &h, shown, sizeof shown, d);
    if (rc)
        return rc;
    if (!h.is_ip) {
        n = (resolve ? resolve : tkm_reach_getaddrinfo)(h.name, addrs, TKM_REACH_MAX_ADDRS, data);
        if (n < 0) {
            d->reason = TKM_REACH_REASON_UNREACHABLE;
            d->rule = "resolve";
            snprintf(d->message, sizeof d->message, "registry \"%s\": %s", shown,
                     n == -ENOENT   ? "no such host name"
                     : n == -EAGAIN ? "the name could not be resolved now (a temporary failure)"
                                    : "the name could not be resolved");
            return n;
        }
        if ((size_t)n > TKM_REACH_MAX_ADDRS)
            n = TKM_REACH_MAX_ADDRS;
    }
    return post_check(p, &h, shown, addrs, (size_t)n, d);
}

int tkm_reach_getaddrinfo(const char *name, struct tkm_reach_addr *out, size_t max, void *data)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res = NULL;
    size_t n = 0;
    (void)data;
    int rc = getaddrinfo(name, NULL, &hints, &res);
    if (rc != 0)
        return rc == EAI_NONAME || rc == EAI_NODATA ? -ENOENT
               : rc == EAI_AGAIN                    ? -EAGAIN
               : rc == EAI_MEMORY                   ? -ENOMEM
                                                    : -EIO;
    for (const struct addrinfo *ai = res; ai && n < max; ai = ai->ai_next) {
        struct tkm_reach_addr a;
        int dup = 0;
        if (tkm_reach_addr_from_sockaddr(ai->ai_addr, &a) != 0)
            continue;
        for (size_t i = 0; i < n; i++)
            dup |= same_addr(&out[i], &a);
        if (!dup)
            out[n++] = a;
    }
    freeaddrinfo(res);
    return (int)n;
}

/* ---- registry error replies ---------------------------------------------- */

/* The distribution spec's error codes (spec.md, "Error Codes", code-1..code-14). */
static const char *const oci_codes[] = {
    "BLOB_UNKNOWN",          "BLOB_UPLOAD_INVALID", "BLOB_UPLOAD_UNKNOWN", "DIGEST_INVALID",
    "MANIFEST_BLOB_UNKNOWN", "MANIFEST_INVALID",    "MANIFEST_UNKNOWN",    "NAME_INVALID",
    "NAME_UNKNOWN",          "SIZE_INVALID",        "UNAUTHORIZED",        "DENIED",
    "UNSUPPORTED",           "TOOMANYREQUESTS",
};

const char *tkm_reach_oci_error_code(const char *body, size_t len)
{
    const char *found = NULL;
    json_t *root, *e;
    size_t i;
    if (!body || len == 0 || len > ERROR_BODY_MAX)
        return NULL;
    if (!(root = json_loadb(body, len, 0, NULL)))
        return NULL;
    json_array_foreach(json_object_get(root, "errors"), i, e)
    {
        const char *code = json_string_value(json_object_get(e, "code"));
        for (size_t k = 0; code && !found && k < TKM_ARRAY_SIZE(oci_codes); k++)
            if (strcmp(code, oci_codes[k]) == 0)
                found = oci_codes[k];
        if (found)
            break;
    }
    json_decref(root);
    return found;
}

int tkm_reach_remote_summary(long status, const char *body, size_t len, char *out, size_t n)
{
    const char *code = tkm_reach_oci_error_code(body, len);
    if (status < 0 || status > 999)
        status = 0;
    return snprintf(out, n, "HTTP %ld%s%s", status, code ? " " : "", code ? code : "");
}
