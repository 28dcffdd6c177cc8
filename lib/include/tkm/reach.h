/*
 * reach.h - registry reach: which registries tkm may contact, at which
 * addresses, over which scheme (the admin's decision; issue 23), and what of a
 * registry's error reply may be shown to a tenant.
 *
 * Design and defaults: docs/registry-reach.md. In short:
 *   - A policy (struct tkm_reach_policy) is parsed from three strings, as the
 *     ConfigMap tkm-config (or flags) give them: registryAllow (default "*":
 *     any host name, never an IP literal), registryPrivate (default none: the
 *     hosts that may use loopback or private addresses) and registryPlainHTTP
 *     (default none: the hosts spoken to over http://).
 *   - tkm_reach_decide() checks a registry host[:port] against the policy,
 *     asks an injected resolver for its addresses only when the name itself is
 *     allowed, classifies every address and refuses with reason
 *     "RegistryNotAllowed" when one is not allowed. An allowed decision carries
 *     the checked addresses as a CURLOPT_RESOLVE line, so the connection goes
 *     to exactly the addresses that were checked (no DNS rebinding between
 *     check and connect).
 *   - tkm_reach_remote_summary() turns a registry's error reply into what may
 *     be shown: the HTTP status and, if the body names one, an error code from
 *     the OCI distribution spec's list. Never any other text of the body.
 *
 * Host spellings. A host is an IP literal when curl or getaddrinfo would take
 * it as one: dotted IPv4, and every inet_aton spelling (1 to 4 parts, each
 * decimal, octal with a leading 0, or hex with 0x/0X: "2130706433",
 * "0177.0.0.1", "0x7f.1", "127.1"), or a bracketed IPv6 address (with an
 * optional zone id "%eth0" or "%25eth0"). Any other host whose last label is
 * a number (all digits, or 0x/0X and hex digits: "1.2.3.4.5", "256.0.0.1",
 * "08.0.0.1", "a.0x") is refused as an invalid host and never sent to DNS. A
 * trailing dot is ignored ("127.0.0.1." is a literal); case does not matter.
 *
 * Ownership: a policy owns its heap storage (tkm_reach_policy_release). A
 * decision, an address and a parsed host are plain values (no heap): copy them
 * freely. Strings passed in are borrowed for the duration of the call.
 *
 * Thread safety: a policy is read-only after tkm_reach_policy_parse(), so any
 * number of threads may read it at once (the loop and the resolver's thread
 * pool); the caller keeps it alive until the last reader is done (swap in a
 * new one on a ConfigMap change, release the old one after). Every function
 * here is reentrant; tkm_reach_decide() and tkm_reach_getaddrinfo() may block
 * in the resolver (never call them on the event loop); all others are pure and
 * never block.
 */
#ifndef TKM_REACH_H
#define TKM_REACH_H

#include <stddef.h>
#include <stdint.h>

#include <tkm/err.h>

struct sockaddr;

/* The ConfigMap keys (also the names messages use for the knobs). */
#define TKM_REACH_KEY_ALLOW      "registryAllow"
#define TKM_REACH_KEY_PRIVATE    "registryPrivate"
#define TKM_REACH_KEY_PLAIN_HTTP "registryPlainHTTP"

/* The condition/event reasons. */
#define TKM_REACH_REASON_NOT_ALLOWED "RegistryNotAllowed"
#define TKM_REACH_REASON_UNREACHABLE "RegistryUnreachable"

#define TKM_REACH_HOST_MAX    253 /* a DNS name without its trailing dot */
#define TKM_REACH_ADDRSTR_MAX 46  /* INET6_ADDRSTRLEN */
#define TKM_REACH_MAX_ADDRS   16  /* addresses checked and pinned per host */
#define TKM_REACH_MAX_ENTRIES 256 /* entries per policy list */

/* ---- addresses ----------------------------------------------------------- */

/* One address. family is 4 or 6; a is the address in network order (4 or 16
 * bytes used). */
struct tkm_reach_addr {
    int family;
    unsigned char a[16];
};

/* Address classes, from most to least restricted. An IPv6 address that embeds
 * an IPv4 one (IPv4-mapped ::ffff:0:0/96, IPv4-compatible ::/96, SIIT
 * ::ffff:0:0:0/96, NAT64 64:ff9b::/96, 6to4 2002::/16) has the class of the
 * IPv4 address it reaches. */
enum tkm_reach_class {
    TKM_REACH_PUBLIC = 0,
    TKM_REACH_PRIVATE,     /* 10/8, 172.16/12, 192.168/16, 100.64/10 (CGNAT), 198.18/15,
                              fc00::/7, fec0::/10, 64:ff9b:1::/48 */
    TKM_REACH_LOOPBACK,    /* 127/8, ::1 */
    TKM_REACH_LINK_LOCAL,  /* 169.254/16, fe80::/10 */
    TKM_REACH_METADATA,    /* 169.254.169.254, 169.254.170.2, 100.100.100.200, 168.63.129.16,
                              fd00:ec2::254, fd20:ce::254 */
    TKM_REACH_UNSPECIFIED, /* 0/8 (0.0.0.0 reaches the local host on Linux), :: */
    TKM_REACH_MULTICAST,   /* 224/4, ff00::/8 */
    TKM_REACH_BROADCAST,   /* 255.255.255.255 */
    TKM_REACH_RESERVED,    /* 240/4, 192.0.0/24, documentation ranges (192.0.2/24,
                              198.51.100/24, 203.0.113/24, 2001:db8::/32), 100::/64,
                              Teredo 2001::/32 */
};

enum tkm_reach_class tkm_reach_classify(const struct tkm_reach_addr *a);
/* "public", "private", "loopback", "link-local", "cloud metadata", "unspecified",
 * "multicast", "broadcast", "reserved" (static). */
const char *tkm_reach_class_name(enum tkm_reach_class c);

/* Parses an IPv4 address in any inet_aton spelling (see above; whole string,
 * no trailing junk or whitespace). Returns 0, or -EINVAL. */
int tkm_reach_parse_ipv4(const char *s, size_t n, struct tkm_reach_addr *out);

/* The canonical text of a ("127.0.0.1", "::ffff:127.0.0.1"; no brackets) into
 * out (TKM_REACH_ADDRSTR_MAX bytes at least). Returns out. */
char *tkm_reach_addr_str(const struct tkm_reach_addr *a, char *out, size_t n);

/* From a struct sockaddr_in or sockaddr_in6 (as getaddrinfo or curl's
 * CURLOPT_OPENSOCKETFUNCTION give it). Returns 0, or -EAFNOSUPPORT. */
int tkm_reach_addr_from_sockaddr(const struct sockaddr *sa, struct tkm_reach_addr *out);

/* ---- hosts --------------------------------------------------------------- */

/* A host[:port] as an image reference or a URL gives it, taken apart. */
struct tkm_reach_host {
    char name[TKM_REACH_HOST_MAX + 1]; /* lower-case name without trailing dot, or the
                                          canonical address text (no brackets) */
    unsigned port;                     /* 0 when none was written */
    int is_ip;                         /* 1: an IP literal (addr is set) */
    int has_zone;                      /* 1: an IPv6 literal with a zone id */
    struct tkm_reach_addr addr;
};

/* Parses host[:port] (n bytes at s; IPv6 in brackets). Returns 0, or -EINVAL
 * with *why (optional) set to a static phrase ("has an invalid port"). */
int tkm_reach_host_parse(const char *s, size_t n, struct tkm_reach_host *out, const char **why);

/* ---- the admin's policy -------------------------------------------------- */

/* One list entry: "*" (any name), "*.suffix" (a name with one or more labels
 * before ".suffix"), an exact name, or an IP literal (IPv6 in brackets); each
 * with an optional ":port" (then only that written port matches). */
struct tkm_reach_entry {
    char name[TKM_REACH_HOST_MAX + 1]; /* the name or suffix, lower-case, no trailing dot */
    unsigned port;                     /* 0: any port */
    int kind;                          /* TKM_REACH_ENTRY_* */
    struct tkm_reach_addr addr;        /* for TKM_REACH_ENTRY_IP */
};
enum { TKM_REACH_ENTRY_NAME, TKM_REACH_ENTRY_SUFFIX, TKM_REACH_ENTRY_ANY, TKM_REACH_ENTRY_IP };

struct tkm_reach_list {
    struct tkm_reach_entry *v; /* owned */
    size_t n;
};

struct tkm_reach_policy {
    struct tkm_reach_list allow;         /* registryAllow: "*" when not given */
    struct tkm_reach_list private_hosts; /* registryPrivate */
    struct tkm_reach_list plain_http;    /* registryPlainHTTP */
};

/* The strings as tkm-config (or flags) give them; NULL = not given. Each is a
 * list of entries separated by commas and/or white space; '#' starts a
 * comment that runs to the end of the line. */
struct tkm_reach_config {
    const char *allow;
    const char *private_hosts;
    const char *plain_http;
};

/* Parses cfg (NULL: all defaults) into *out (always initialised; release it
 * on success and failure alike). Returns 0, or -EINVAL/-E2BIG/-ENOMEM with err
 * saying `<key>: entry N "<entry>" <why>` (the entry quoted as in a
 * decision's message, cut at 64 bytes). An empty or comment-only
 * registryAllow is refused (leave the key out for the default). */
int tkm_reach_policy_parse(struct tkm_reach_policy *out, const struct tkm_reach_config *cfg,
                           struct tkm_err *err);
/* Frees the lists and leaves an empty policy. NULL is a no-op. */
void tkm_reach_policy_release(struct tkm_reach_policy *p);

/* 1 when h matches an entry of l (see docs/registry-reach.md for the rules). */
int tkm_reach_list_match(const struct tkm_reach_list *l, const struct tkm_reach_host *h);

/* ---- the decision -------------------------------------------------------- */

/* What the host is contacted for. A REGISTRY host (from an image reference)
 * must be in registryAllow. A FOLLOW host (a redirect's Location, a token
 * realm, handed out by an allowed registry) is not checked against
 * registryAllow, but every other rule applies to it. */
enum tkm_reach_purpose { TKM_REACH_REGISTRY, TKM_REACH_FOLLOW };

/* Resolves name (a host name, never an IP literal) into up to max addresses.
 * Returns how many (>= 0), or a negative errno (-ENOENT: no such name,
 * -EAGAIN: a temporary failure). May block. */
typedef int (*tkm_reach_resolve_fn)(const char *name, struct tkm_reach_addr *out, size_t max,
                                    void *data);

/* The real resolver: getaddrinfo(AF_UNSPEC, SOCK_STREAM), duplicates dropped.
 * Blocks: call it from a worker thread (uv_queue_work), never on the loop. */
int tkm_reach_getaddrinfo(const char *name, struct tkm_reach_addr *out, size_t max, void *data);

struct tkm_reach_decision {
    int allowed;
    const char *reason; /* static: "" when allowed, else TKM_REACH_REASON_* */
    const char *rule;   /* static: the rule that refused ("registryAllow", "registryPrivate",
                           "ip-literal", "never", "invalid-host", "resolve"), "" when allowed */
    char message[384];  /* tenant-safe: names the host and the rule, never an address a name
                           resolved to ("" when allowed) */
    char host[TKM_REACH_HOST_MAX + 3]; /* the host to put in the URL: lower-case name, or the
                                          canonical literal (IPv6 in brackets) */
    unsigned port;                     /* the port connected to: written, else 80 or 443 */
    int plain_http;                    /* 1: http://, 0: https:// */
    int ip_literal;
    struct tkm_reach_addr addrs[TKM_REACH_MAX_ADDRS]; /* the checked addresses */
    size_t n_addrs;
    struct tkm_reach_addr refused_addr; /* the first refused address, for the daemon's log
                                           only (never for the tenant); family 0 if none */
    /* CURLOPT_RESOLVE's "host:port:addr[,addr...]" (IPv6 in brackets) pinning the checked
     * addresses; "" for an IP literal (curl does not resolve those). */
    char resolve[TKM_REACH_HOST_MAX + 8 + TKM_REACH_MAX_ADDRS * (TKM_REACH_ADDRSTR_MAX + 3)];
};

/* Decides for hostport (a registry's host[:port] as in an image reference, or
 * the host[:port] of a URL) with the addresses a resolver returned (addrs, n;
 * ignored for an IP literal). Pure: no I/O. Returns 0 when allowed, -EACCES
 * when refused, -ENOENT (reason RegistryUnreachable) for a name with no
 * address; *d is filled either way. */
int tkm_reach_check(const struct tkm_reach_policy *p, enum tkm_reach_purpose purpose,
                    const char *hostport, const struct tkm_reach_addr *addrs, size_t n,
                    struct tkm_reach_decision *d);

/* tkm_reach_check() with the addresses from resolve (NULL: getaddrinfo). The
 * resolver is called only for a host name that passes every rule that does
 * not need its addresses: a refused name is never looked up. Returns 0,
 * -EACCES (refused by the policy), or the resolver's error with reason
 * RegistryUnreachable (*d says which host could not be resolved). May block. */
int tkm_reach_decide(const struct tkm_reach_policy *p, enum tkm_reach_purpose purpose,
                     const char *hostport, tkm_reach_resolve_fn resolve, void *data,
                     struct tkm_reach_decision *d);

/* 1 when a is one of the decision's checked addresses (for a
 * CURLOPT_OPENSOCKETFUNCTION guard: a connection to any other address is
 * refused, whatever curl resolved or was redirected to). */
int tkm_reach_decision_has(const struct tkm_reach_decision *d, const struct tkm_reach_addr *a);

/* ---- registry error replies ---------------------------------------------- */

/* The first errors[].code of an OCI error body (len bytes, untrusted; at
 * most 64 KiB is looked at) that is one of the distribution spec's 14 codes
 * (BLOB_UNKNOWN ... TOOMANYREQUESTS), as a static string; NULL otherwise. */
const char *tkm_reach_oci_error_code(const char *body, size_t len);

/* What may be shown of an error reply: "HTTP <status>" and, when the body
 * names one, " <CODE>" from the spec's list; nothing else of the body. status
 * outside 0..999 shows as 0. Always NUL-terminates out (n > 0); returns the
 * length that was (or would have been) written, as snprintf. */
int tkm_reach_remote_summary(long status, const char *body, size_t len, char *out, size_t n);

#endif
