/* ref.c - see ref.h. */
#include <tkm/oci/ref.h>

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include <tkm/archive.h> /* tkm_digest_valid */
#include <tkm/util.h>

#define REF_INPUT_MAX 1024

int tkm_oci_digest_valid(const char *s)
{
    return tkm_digest_valid(s);
}

static int is_lower_alnum(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
}

/* One repository path component: [a-z0-9]+ joined by '.', '_', '__' or '-'+.
 * Returns NULL when valid, else why not. */
static const char *check_component(const char *c, size_t n)
{
    if (n == 0)
        return "has an empty path component";
    for (size_t i = 0; i < n; i++)
        if (c[i] >= 'A' && c[i] <= 'Z')
            return "must be lower-case";
    if (!is_lower_alnum(c[0]) || !is_lower_alnum(c[n - 1]))
        return "has a path component that does not start and end with [a-z0-9]";
    for (size_t i = 0; i < n;) {
        if (is_lower_alnum(c[i])) {
            i++;
            continue;
        }
        size_t j = i;
        while (j < n && !is_lower_alnum(c[j]))
            j++;
        size_t len = j - i;
        int ok = 0;
        if (len == 1 && (c[i] == '.' || c[i] == '_' || c[i] == '-'))
            ok = 1;
        else if (len == 2 && c[i] == '_' && c[i + 1] == '_')
            ok = 1;
        else {
            ok = 1;
            for (size_t k = i; k < j; k++)
                if (c[k] != '-')
                    ok = 0;
        }
        if (!ok)
            return "may only use [a-z0-9] with single '.', '_', '__' or '-' separators";
        i = j;
    }
    return NULL;
}

static int check_port(const char *p, size_t n)
{
    char buf[8];
    uint64_t v;
    if (n == 0 || n >= sizeof buf)
        return -1;
    memcpy(buf, p, n);
    buf[n] = '\0';
    if (buf[0] == '+' || tkm_parse_u64(buf, 65535, &v) != 0 || v == 0)
        return -1;
    return 0;
}

/* Validates host[:port] (n bytes at h); writes the lower-cased, normalized
 * API host into out. Returns NULL or why it is invalid. */
static const char *check_host(const char *h, size_t n, char *out, size_t outsz)
{
    size_t name_len = n;
    const char *port = NULL;
    if (n == 0)
        return "has an empty registry host";
    if (h[0] == '[') {
        const char *close = memchr(h, ']', n);
        char addr[64];
        struct in6_addr a6;
        if (!close)
            return "has an IPv6 host without ']'";
        size_t alen = (size_t)(close - h - 1);
        if (alen == 0 || alen >= sizeof addr)
            return "has an invalid IPv6 host";
        memcpy(addr, h + 1, alen);
        addr[alen] = '\0';
        if (inet_pton(AF_INET6, addr, &a6) != 1)
            return "has an invalid IPv6 host";
        name_len = (size_t)(close - h + 1);
        if (name_len < n) {
            if (h[name_len] != ':')
                return "has junk after the IPv6 host";
            port = h + name_len + 1;
        }
    } else {
        const char *colon = memchr(h, ':', n);
        if (colon) {
            name_len = (size_t)(colon - h);
            port = colon + 1;
        }
        if (name_len == 0)
            return "has an empty registry host";
        size_t label = 0;
        for (size_t i = 0; i < name_len; i++) {
            char c = h[i];
            if (c == '.') {
                if (label == 0 || h[i - 1] == '-')
                    return "has an invalid registry host name";
                label = 0;
                continue;
            }
            if (!isalnum((unsigned char)c) && c != '-')
                return "has an invalid character in the registry host";
            if (label == 0 && c == '-')
                return "has an invalid registry host name";
            label++;
        }
        if (label == 0 || h[name_len - 1] == '-')
            return "has an invalid registry host name";
    }
    if (port && check_port(port, (size_t)(h + n - port)) != 0)
        return "has an invalid registry port (1-65535)";
    if (n >= outsz)
        return "has a registry host that is too long";
    for (size_t i = 0; i < n; i++)
        out[i] = (char)tolower((unsigned char)h[i]);
    out[n] = '\0';
    if (strcmp(out, "docker.io") == 0 || strcmp(out, "index.docker.io") == 0)
        snprintf(out, outsz, "%s", TKM_OCI_DOCKER_HUB);
    return NULL;
}

static const char *check_tag(const char *t)
{
    size_t n = strlen(t);
    if (n == 0)
        return "is empty";
    if (n > TKM_OCI_TAG_MAX)
        return "is longer than 128 characters";
    if (!isalnum((unsigned char)t[0]) && t[0] != '_')
        return "must start with [A-Za-z0-9_]";
    for (size_t i = 0; i < n; i++)
        if (!isalnum((unsigned char)t[i]) && t[i] != '_' && t[i] != '.' && t[i] != '-')
            return "may only contain [A-Za-z0-9_.-]";
    return NULL;
}

/* Splits name (no tag, no digest) into host and repo. */
static int split_name(struct tkm_oci_ref *ref, const char *in, char *name, struct tkm_err *err)
{
    const char *why;
    char *slash = strchr(name, '/');
    char *repo = name;
    if (slash &&
        (memchr(name, '.', (size_t)(slash - name)) || memchr(name, ':', (size_t)(slash - name)) ||
         name[0] == '[' || (slash - name == 9 && strncmp(name, "localhost", 9) == 0))) {
        why = check_host(name, (size_t)(slash - name), ref->host, sizeof ref->host);
        if (why)
            return tkm_err_set(err, -EINVAL, "invalid reference '%.300s': %s", in, why);
        repo = slash + 1;
    } else {
        snprintf(ref->host, sizeof ref->host, "%s", TKM_OCI_DOCKER_HUB);
    }
    for (const char *c = repo;;) {
        const char *end = strchr(c, '/');
        size_t n = end ? (size_t)(end - c) : strlen(c);
        why = check_component(c, n);
        if (why)
            return tkm_err_set(err, -EINVAL, "invalid reference '%.300s': repository '%.300s' %s",
                               in, repo, why);
        if (!end)
            break;
        c = end + 1;
    }
    int hub = strcmp(ref->host, TKM_OCI_DOCKER_HUB) == 0;
    int w = snprintf(ref->repo, sizeof ref->repo, "%s%s",
                     hub && !strchr(repo, '/') ? "library/" : "", repo);
    if (w < 0 || (size_t)w >= sizeof ref->repo ||
        strlen(hub ? "docker.io" : ref->host) + 1 + (size_t)w > TKM_OCI_NAME_MAX)
        return tkm_err_set(err, -EINVAL,
                           "invalid reference '%.300s': name is longer than %d characters", in,
                           TKM_OCI_NAME_MAX);
    return 0;
}

int tkm_oci_ref_parse(struct tkm_oci_ref *ref, const char *s, struct tkm_err *err)
{
    char name[REF_INPUT_MAX + 1];
    struct tkm_oci_ref r;
    memset(&r, 0, sizeof r);
    if (!s || !*s)
        return tkm_err_set(err, -EINVAL, "invalid reference '': it is empty");
    size_t n = strlen(s);
    if (n > REF_INPUT_MAX)
        return tkm_err_set(err, -EINVAL, "invalid reference '%.60s...': longer than %d characters",
                           s, REF_INPUT_MAX);
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)s[i] <= ' ' || (unsigned char)s[i] >= 0x7f)
            return tkm_err_set(err, -EINVAL,
                               "invalid reference '%.300s': contains a space, control or non-ASCII "
                               "character at offset %zu",
                               s, i);
    memcpy(name, s, n + 1);
    char *at = strchr(name, '@');
    if (at) {
        *at = '\0';
        if (!tkm_oci_digest_valid(at + 1))
            return tkm_err_set(err, -EINVAL,
                               "invalid reference '%.300s': digest '%.100s' is not "
                               "sha256:<64 lower-case hex digits>",
                               s, at + 1);
        memcpy(r.digest, at + 1, TKM_OCI_DIGEST_LEN + 1);
    }
    char *last_slash = strrchr(name, '/');
    char *colon = strrchr(last_slash ? last_slash : name, ':');
    if (colon && !(name[0] == '[' && !last_slash)) {
        *colon = '\0';
        const char *why = check_tag(colon + 1);
        if (why)
            return tkm_err_set(err, -EINVAL, "invalid reference '%.300s': tag '%.200s' %s", s,
                               colon + 1, why);
        memcpy(r.tag, colon + 1, strlen(colon + 1) + 1);
    }
    if (!name[0])
        return tkm_err_set(err, -EINVAL, "invalid reference '%.300s': no repository name", s);
    int rc = split_name(&r, s, name, err);
    if (rc)
        return rc;
    if (!r.tag[0] && !r.digest[0])
        memcpy(r.tag, "latest", 7);
    *ref = r;
    return 0;
}

int tkm_oci_ref_format(const struct tkm_oci_ref *ref, char *out, size_t n)
{
    const char *host = strcmp(ref->host, TKM_OCI_DOCKER_HUB) == 0 ? "docker.io" : ref->host;
    int w = snprintf(out, n, "%s/%s%s%s%s%s", host, ref->repo, ref->tag[0] ? ":" : "", ref->tag,
                     ref->digest[0] ? "@" : "", ref->digest);
    if (w < 0 || (size_t)w >= n)
        return -ENOSPC;
    return w;
}

const char *tkm_oci_ref_reference(const struct tkm_oci_ref *ref)
{
    return ref->digest[0] ? ref->digest : ref->tag;
}

/* Copies the host part of "host[:port]" (brackets removed) into out. */
static void host_only(const char *host, char *out, size_t n)
{
    size_t len;
    if (host[0] == '[') {
        const char *close = strchr(host, ']');
        len = close ? (size_t)(close - host - 1) : strlen(host + 1);
        host++;
    } else {
        const char *colon = strchr(host, ':');
        len = colon ? (size_t)(colon - host) : strlen(host);
    }
    if (len >= n)
        len = n - 1;
    memcpy(out, host, len);
    out[len] = '\0';
}

int tkm_oci_host_is_loopback(const char *host)
{
    char h[TKM_OCI_NAME_MAX + 1];
    struct in_addr a4;
    struct in6_addr a6;
    if (!host)
        return 0;
    host_only(host, h, sizeof h);
    if (strcasecmp(h, "localhost") == 0)
        return 1;
    if (inet_pton(AF_INET, h, &a4) == 1)
        return (ntohl(a4.s_addr) >> 24) == 127;
    if (inet_pton(AF_INET6, h, &a6) == 1)
        return IN6_IS_ADDR_LOOPBACK(&a6);
    return 0;
}

int tkm_oci_host_plain_http(const char *host, const char *const *insecure)
{
    char h[TKM_OCI_NAME_MAX + 1];
    if (tkm_oci_host_is_loopback(host))
        return 1;
    if (!host || !insecure)
        return 0;
    host_only(host, h, sizeof h);
    for (size_t i = 0; insecure[i]; i++) {
        if (strcasecmp(insecure[i], host) == 0)
            return 1;
        /* An entry without a port matches every port of the host. */
        char e[TKM_OCI_NAME_MAX + 1];
        host_only(insecure[i], e, sizeof e);
        int has_port = insecure[i][0] == '[' ? strstr(insecure[i], "]:") != NULL
                                             : strchr(insecure[i], ':') != NULL;
        if (!has_port && strcasecmp(e, h) == 0)
            return 1;
    }
    return 0;
}
