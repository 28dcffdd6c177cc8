/* mirrors.c - containerd's hosts.toml directory and CRI-O's registries.conf
 * as the node's runtime has them (mirrors.h, docs/mirrors.md). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <tkm/buf.h>
#include <tkm/err.h>
#include <tkm/fs.h>
#include <tkm/mirrors.h>
#include <tkm/oci/registry.h>
#include <tkm/toml.h>

#define MAX_HOST_DIRS 4096 /* entries of the hosts directory */
#define MAX_ENDPOINTS 64   /* per hosts.toml or [[registry]] (mirrors and upstream) */
#define MAX_HEADERS   64   /* header lines per endpoint */
#define HUB           "docker.io"
#define HUB_API       "registry-1.docker.io"

enum { PFM_ALL, PFM_DIGEST_ONLY, PFM_TAG_ONLY };

struct ep_conf { /* one containerd endpoint: a [host."..."] table or the server */
    char *scheme, *host, *path;
    unsigned caps;
    int skip_verify;
    char *ca, *cert, *key;
    char **headers; /* NULL-terminated, or NULL */
};

struct host_dir {
    char *name;          /* the directory's name: "docker.io", "host_5000_", "_default" */
    char *file;          /* its hosts.toml, or "" when it has none */
    int has_server;      /* server set: eps[n-1].scheme is the file's */
    struct ep_conf *eps; /* mirrors in file order, then the upstream (host NULL: the reference's) */
    size_t n;
};

struct crio_ep {
    char *location;
    int insecure, pfm;
};

struct crio_reg {
    char *prefix, *location; /* location NULL: no rewrite (a wildcard prefix) */
    int wildcard, insecure, blocked, digest_only;
    struct crio_ep *mirrors;
    size_t n;
};

struct tkm_mirrors {
    struct host_dir *dirs;
    size_t ndirs;
    char *conf; /* registries.conf path, or NULL */
    struct crio_reg *regs;
    size_t nregs;
    uint64_t fingerprint;
};

/* ---- helpers ------------------------------------------------------------ */

static char *dup_s(const char *s)
{
    return s ? strdup(s) : NULL;
}

static void strv_free(char **v)
{
    if (!v)
        return;
    for (char **p = v; *p; p++)
        free(*p);
    free(v);
}

static void ep_conf_release(struct ep_conf *e)
{
    free(e->scheme);
    free(e->host);
    free(e->path);
    free(e->ca);
    free(e->cert);
    free(e->key);
    strv_free(e->headers);
}

static int is_hub(const char *host)
{
    return strcmp(host, HUB) == 0 || strcmp(host, HUB_API) == 0 ||
           strcmp(host, "index.docker.io") == 0;
}

/* Bytes allowed in a host[:port] or a path: printable ASCII, no space, none
 * of the characters that would end or change a URL. */
static int url_safe(const char *s, size_t n, const char *extra_bad)
{
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c <= 0x20 || c >= 0x7f || strchr("?#@\\\"<>{}|^`", c) || strchr(extra_bad, c))
            return 0;
    }
    return 1;
}

/* ---- the fingerprint (tkm_mirrors_changed) ------------------------------ */

static void fnv(uint64_t *h, const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) {
        *h ^= b[i];
        *h *= 0x100000001b3ULL;
    }
}

static void fp_path(uint64_t *h, const char *path)
{
    struct stat st;
    int64_t v[5] = {-1, -1, -1, -1, -1};
    if (stat(path, &st) == 0) {
        v[0] = (int64_t)st.st_dev;
        v[1] = (int64_t)st.st_ino;
        v[2] = (int64_t)st.st_size;
        v[3] = (int64_t)st.st_mtim.tv_sec;
        v[4] = (int64_t)st.st_mtim.tv_nsec;
    }
    fnv(h, path, strlen(path) + 1);
    fnv(h, v, sizeof v);
}

static int hidden(const char *name)
{
    return name[0] == '.';
}

/* Every path the config depends on, stat()ed (links followed, as the
 * runtimes do): the directory, each entry, each entry's hosts.toml, and
 * registries.conf. Taken before the files are read, so a change during a
 * load shows at the next check. */
static uint64_t fingerprint(const char *hosts_dir, const char *conf)
{
    uint64_t h = 0xcbf29ce484222325ULL;
    char path[4096];
    if (hosts_dir) {
        fp_path(&h, hosts_dir);
        int fd = open(hosts_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        char **names = NULL;
        size_t n = 0;
        if (fd >= 0 && tkm_list_dir(fd, TKM_LIST_ALL, MAX_HOST_DIRS, &names, &n) == 0) {
            for (size_t i = 0; i < n; i++) {
                if (hidden(names[i]))
                    continue;
                snprintf(path, sizeof path, "%s/%s", hosts_dir, names[i]);
                fp_path(&h, path);
                snprintf(path, sizeof path, "%s/%s/hosts.toml", hosts_dir, names[i]);
                fp_path(&h, path);
            }
            tkm_names_free(names, n);
        }
        if (fd >= 0)
            close(fd);
    }
    fnv(&h, "|", 1);
    if (conf)
        fp_path(&h, conf);
    return h;
}

/* ---- typed lookups with errors naming file, line and key ----------------- */

struct ctx {
    const char *what; /* "hosts.toml" or "registries.conf" */
    const char *file;
    struct tkm_err *err;
};

static const char *a_type(enum tkm_toml_type t)
{
    switch (t) {
    case TKM_TOML_STRING:
        return "a string";
    case TKM_TOML_INT:
        return "an integer";
    case TKM_TOML_BOOL:
        return "a boolean";
    case TKM_TOML_ARRAY:
        return "an array";
    case TKM_TOML_TABLE:
        return "a table";
    }
    return "a value";
}

static int bad_type(const struct ctx *c, const struct tkm_toml *v, const char *key,
                    const char *want)
{
    return tkm_err_set(c->err, -EINVAL, "%s \"%s\": line %u: key \"%s\" must be %s, not %s",
                       c->what, c->file, v->line, key, want, a_type(v->type));
}

static int bad_value(const struct ctx *c, const struct tkm_toml *v, const char *key,
                     const char *why)
{
    return tkm_err_set(c->err, -EINVAL, "%s \"%s\": line %u: key \"%s\": %s", c->what, c->file,
                       v->line, key, why);
}

/* 1 with *out (borrowed) when key is a string, 0 when absent, <0 otherwise. */
static int get_str(const struct ctx *c, const struct tkm_toml *t, const char *key,
                   const struct tkm_toml **out)
{
    const struct tkm_toml *v = tkm_toml_get(t, key);
    *out = v;
    if (!v)
        return 0;
    if (v->type != TKM_TOML_STRING)
        return bad_type(c, v, key, "a string");
    return 1;
}

static int get_bool(const struct ctx *c, const struct tkm_toml *t, const char *key, int *out)
{
    const struct tkm_toml *v = tkm_toml_get(t, key);
    if (!v)
        return 0;
    if (v->type != TKM_TOML_BOOL)
        return bad_type(c, v, key, "a boolean");
    *out = (int)v->i;
    return 1;
}

/* p relative to dir (containerd: relative to the hosts.toml's directory). */
static int abs_path(const struct ctx *c, const char *dir, const struct tkm_toml *v, const char *key,
                    char **out)
{
    const char *p = v->s;
    if (!*p)
        return bad_value(c, v, key, "empty path");
    if (p[0] == '/')
        *out = dup_s(p);
    else {
        size_t n = strlen(dir) + 1 + strlen(p) + 1;
        *out = malloc(n);
        if (*out)
            snprintf(*out, n, "%s/%s", dir, p);
    }
    return *out ? 0 : -ENOMEM;
}

/* containerd's URL rule: no scheme means https; the path is cleaned and gets
 * "/v2" unless it ends with it or override_path is set. */
static int parse_url(const struct ctx *c, const struct tkm_toml *v, const char *key, int override,
                     struct ep_conf *e)
{
    const char *u = v->s, *rest;
    const char *scheme = "https";
    if (strncmp(u, "https://", 8) == 0)
        rest = u + 8;
    else if (strncmp(u, "http://", 7) == 0) {
        rest = u + 7;
        scheme = "http";
    } else if (strstr(u, "://"))
        return bad_value(c, v, key, "the scheme must be http or https");
    else
        rest = u;
    size_t hl = strcspn(rest, "/");
    if (hl == 0 || !url_safe(rest, hl, "/"))
        return bad_value(c, v, key, "not a URL with a host[:port]");
    const char *path = rest + hl;
    if (!url_safe(path, strlen(path), ""))
        return bad_value(c, v, key, "the URL's path has a character not allowed here");
    struct tkm_buf b = TKM_BUF_INIT(4096);
    int rc = 0;
    for (const char *p = path; *p && rc == 0;) { /* "/a//b/" -> "/a/b" */
        while (*p == '/')
            p++;
        size_t sl = strcspn(p, "/");
        if (sl == 0)
            break;
        if ((sl == 1 && p[0] == '.') || (sl == 2 && p[0] == '.' && p[1] == '.')) {
            tkm_buf_release(&b);
            return bad_value(c, v, key, "the URL's path has a \".\" or \"..\" segment");
        }
        rc = tkm_buf_putc(&b, '/');
        if (rc == 0)
            rc = tkm_buf_append(&b, p, sl);
        p += sl;
    }
    if (rc == 0 && !override && !(b.len >= 3 && memcmp(b.data + b.len - 3, "/v2", 3) == 0))
        rc = tkm_buf_puts(&b, "/v2");
    e->scheme = dup_s(scheme);
    e->host = strndup(rest, hl);
    e->path = rc == 0 ? tkm_buf_detach(&b, NULL) : NULL;
    tkm_buf_release(&b);
    if (rc)
        return rc == -E2BIG ? bad_value(c, v, key, "the URL's path is too long") : rc;
    return e->scheme && e->host && e->path ? 0 : -ENOMEM;
}

static int caps_of(const struct ctx *c, const struct tkm_toml *t, unsigned def, unsigned *out)
{
    const struct tkm_toml *v = tkm_toml_get(t, "capabilities");
    *out = def;
    if (!v)
        return 0;
    if (v->type != TKM_TOML_ARRAY)
        return bad_type(c, v, "capabilities", "an array of strings");
    *out = 0;
    for (size_t i = 0; i < v->n; i++) {
        const struct tkm_toml *s = v->items[i];
        if (s->type != TKM_TOML_STRING)
            return bad_type(c, s, "capabilities", "an array of strings");
        if (strcmp(s->s, "pull") == 0)
            *out |= TKM_MIRROR_CAP_PULL;
        else if (strcmp(s->s, "resolve") == 0)
            *out |= TKM_MIRROR_CAP_RESOLVE;
        /* "push" and anything else: tkm only pulls */
    }
    return 0;
}

/* ca: a string or an array of strings; the first is used. */
static int ca_of(const struct ctx *c, const char *dir, const struct tkm_toml *t, char **out)
{
    const struct tkm_toml *v = tkm_toml_get(t, "ca");
    if (!v)
        return 0;
    if (v->type == TKM_TOML_ARRAY) {
        for (size_t i = 0; i < v->n; i++)
            if (v->items[i]->type != TKM_TOML_STRING)
                return bad_type(c, v->items[i], "ca", "a string or an array of strings");
        return v->n ? abs_path(c, dir, v->items[0], "ca", out) : 0;
    }
    if (v->type != TKM_TOML_STRING)
        return bad_type(c, v, "ca", "a string or an array of strings");
    return abs_path(c, dir, v, "ca", out);
}

/* client: "cert", ["cert", ...] or [["cert", "key"], ...] (mixed allowed);
 * the first pair is used. */
static int client_of(const struct ctx *c, const char *dir, const struct tkm_toml *t,
                     struct ep_conf *e)
{
    const struct tkm_toml *v = tkm_toml_get(t, "client");
    static const char want[] = "a string, an array of strings or of [cert, key] pairs";
    if (!v)
        return 0;
    if (v->type == TKM_TOML_STRING)
        return abs_path(c, dir, v, "client", &e->cert);
    if (v->type != TKM_TOML_ARRAY)
        return bad_type(c, v, "client", want);
    for (size_t i = 0; i < v->n; i++) {
        const struct tkm_toml *it = v->items[i];
        if (it->type == TKM_TOML_ARRAY) {
            if (it->n != 2 || it->items[0]->type != TKM_TOML_STRING ||
                it->items[1]->type != TKM_TOML_STRING)
                return bad_value(c, it, "client", "a pair must be two strings: [cert, key]");
        } else if (it->type != TKM_TOML_STRING)
            return bad_type(c, it, "client", want);
    }
    if (v->n == 0)
        return 0;
    const struct tkm_toml *first = v->items[0];
    if (first->type == TKM_TOML_STRING)
        return abs_path(c, dir, first, "client", &e->cert);
    int rc = abs_path(c, dir, first->items[0], "client", &e->cert);
    if (rc == 0 && first->items[1]->s[0])
        rc = abs_path(c, dir, first->items[1], "client", &e->key);
    return rc;
}

static int header_ok(const char *s, int name)
{
    if (name && !*s)
        return 0;
    for (const unsigned char *p = (const unsigned char *)s; *p; p++)
        if (*p == '\r' || *p == '\n' || (name && (*p <= ' ' || *p == ':' || *p >= 0x7f)))
            return 0;
    return 1;
}

/* header: a table of "Name" = "value" or ["v1", "v2"] -> "Name: value" lines. */
static int headers_of(const struct ctx *c, const struct tkm_toml *t, char ***out)
{
    const struct tkm_toml *h = tkm_toml_get(t, "header");
    static const char want[] = "a string or an array of strings";
    if (!h)
        return 0;
    if (h->type != TKM_TOML_TABLE)
        return bad_type(c, h, "header", "a table");
    size_t n = 0;
    for (size_t k = 0; k < h->n; k++) {
        const struct tkm_toml *v = h->items[k];
        if (!header_ok(h->keys[k], 1))
            return bad_value(c, v, "header", "a header name must be a token");
        if (v->type == TKM_TOML_STRING) {
            if (!header_ok(v->s, 0))
                return bad_value(c, v, h->keys[k], "a header value must be one line");
            n++;
            continue;
        }
        if (v->type != TKM_TOML_ARRAY)
            return bad_type(c, v, h->keys[k], want);
        for (size_t i = 0; i < v->n; i++) {
            if (v->items[i]->type != TKM_TOML_STRING)
                return bad_type(c, v->items[i], h->keys[k], want);
            if (!header_ok(v->items[i]->s, 0))
                return bad_value(c, v->items[i], h->keys[k], "a header value must be one line");
            n++;
        }
    }
    if (n > MAX_HEADERS)
        return tkm_err_set(c->err, -E2BIG, "%s \"%s\": line %u: more than %d header lines", c->what,
                           c->file, h->line, MAX_HEADERS);
    if (n == 0)
        return 0;
    char **v = calloc(n + 1, sizeof *v);
    if (!v)
        return -ENOMEM;
    size_t j = 0;
    struct tkm_buf b = TKM_BUF_INIT(64 * 1024);
    for (size_t k = 0; k < h->n; k++) {
        const struct tkm_toml *val = h->items[k];
        size_t m = val->type == TKM_TOML_STRING ? 1 : val->n;
        for (size_t i = 0; i < m; i++) {
            const char *s = val->type == TKM_TOML_STRING ? val->s : val->items[i]->s;
            tkm_buf_reset(&b);
            if (tkm_buf_printf(&b, "%s: %s", h->keys[k], s) < 0 || !(v[j++] = dup_s(b.data))) {
                tkm_buf_release(&b);
                strv_free(v);
                return -ENOMEM;
            }
        }
    }
    tkm_buf_release(&b);
    *out = v;
    return 0;
}

/* The keys every endpoint has; t is a [host."..."] table or the top level. */
static int endpoint_of(const struct ctx *c, const char *dir, const struct tkm_toml *t,
                       unsigned def_caps, struct ep_conf *e)
{
    int rc = caps_of(c, t, def_caps, &e->caps);
    if (rc == 0) {
        int r = get_bool(c, t, "skip_verify", &e->skip_verify);
        rc = r < 0 ? r : 0;
    }
    if (rc == 0)
        rc = ca_of(c, dir, t, &e->ca);
    if (rc == 0)
        rc = client_of(c, dir, t, e);
    if (rc == 0)
        rc = headers_of(c, t, &e->headers);
    return rc;
}

static int override_of(const struct ctx *c, const struct tkm_toml *t, int *override)
{
    *override = 0;
    int r = get_bool(c, t, "override_path", override);
    return r < 0 ? r : 0;
}

/* The TOML of c->file; errors read `hosts.toml "/x/hosts.toml": line L, ...`. */
static int parse_named(const struct ctx *c, const char *data, size_t len, struct tkm_toml **t)
{
    char what[4200];
    snprintf(what, sizeof what, "%s \"%s\"", c->what, c->file);
    return tkm_toml_parse(data, len, what, t, c->err);
}

static void host_dir_release(struct host_dir *d)
{
    for (size_t i = 0; i < d->n; i++)
        ep_conf_release(&d->eps[i]);
    free(d->eps);
    free(d->name);
    free(d->file);
}

/* Parses one hosts.toml body (data, len) read from file, in directory dir. */
static int parse_hosts_toml(const char *data, size_t len, const char *file, const char *dir,
                            struct host_dir *d, struct tkm_err *err)
{
    struct ctx c = {"hosts.toml", file, err};
    struct tkm_toml *t = NULL;
    int rc = parse_named(&c, data, len, &t);
    if (rc)
        return rc;
    const struct tkm_toml *hosts = tkm_toml_get(t, "host");
    size_t nm = 0;
    if (hosts && hosts->type != TKM_TOML_TABLE)
        rc = bad_type(&c, hosts, "host", "a table of [host.\"URL\"] tables");
    else if (hosts)
        nm = hosts->n;
    if (rc == 0 && nm + 1 > MAX_ENDPOINTS)
        rc = tkm_err_set(err, -E2BIG, "hosts.toml \"%s\": line %u: more than %d hosts", file,
                         hosts->line, MAX_ENDPOINTS - 1);
    if (rc == 0 && !(d->eps = calloc(nm + 1, sizeof *d->eps)))
        rc = -ENOMEM;
    for (size_t i = 0; rc == 0 && i < nm; i++) {
        const struct tkm_toml *h = hosts->items[i];
        int override;
        struct ep_conf *e = &d->eps[d->n++];
        if (h->type != TKM_TOML_TABLE) {
            rc = bad_type(&c, h, hosts->keys[i], "a table");
            break;
        }
        struct tkm_toml key = *h; /* the URL with the table's line, for errors */
        key.type = TKM_TOML_STRING;
        key.s = hosts->keys[i];
        rc = override_of(&c, h, &override);
        if (rc == 0)
            rc = parse_url(&c, &key, "host", override, e);
        if (rc == 0)
            rc = endpoint_of(&c, dir, h, TKM_MIRROR_CAP_PULL | TKM_MIRROR_CAP_RESOLVE, e);
    }
    if (rc == 0) {
        struct ep_conf *e = &d->eps[d->n++];
        const struct tkm_toml *server;
        int override;
        rc = override_of(&c, t, &override);
        int has = rc == 0 ? get_str(&c, t, "server", &server) : rc;
        if (has < 0)
            rc = has;
        else if (has) {
            d->has_server = 1;
            rc = parse_url(&c, server, "server", override, e);
        }
        if (rc == 0)
            rc = endpoint_of(&c, dir, t, TKM_MIRROR_CAP_PULL | TKM_MIRROR_CAP_RESOLVE, e);
    }
    tkm_toml_free(t);
    return rc;
}

/* Reads every <hosts_dir>/<name>/hosts.toml (links followed, names starting
 * with '.' skipped: a ConfigMap volume's ..data). */
static int load_hosts_dir(struct tkm_mirrors *m, const char *hosts_dir, struct tkm_err *err)
{
    int fd = open(hosts_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) {
        if (errno == ENOENT)
            return 0;
        return tkm_err_set(err, -errno, "hosts directory \"%s\": %s", hosts_dir, strerror(errno));
    }
    char **names = NULL;
    size_t n = 0;
    int rc = tkm_list_dir(fd, TKM_LIST_ALL, MAX_HOST_DIRS, &names, &n);
    close(fd);
    if (rc)
        return tkm_err_set(err, rc, "hosts directory \"%s\": %s", hosts_dir,
                           rc == -E2BIG ? "more than 4096 entries" : strerror(-rc));
    m->dirs = calloc(n ? n : 1, sizeof *m->dirs);
    if (!m->dirs)
        rc = -ENOMEM;
    struct tkm_buf b = TKM_BUF_INIT(TKM_TOML_MAX_BYTES);
    char dir[4096], file[4096 + 16];
    for (size_t i = 0; rc == 0 && i < n; i++) {
        struct stat st;
        if (hidden(names[i]))
            continue;
        snprintf(dir, sizeof dir, "%s/%s", hosts_dir, names[i]);
        if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
            continue;
        snprintf(file, sizeof file, "%s/hosts.toml", dir);
        struct host_dir *d = &m->dirs[m->ndirs++];
        if (!(d->name = dup_s(names[i]))) {
            rc = -ENOMEM;
            break;
        }
        if (access(file, F_OK) != 0 && errno == ENOENT) {
            /* the directory wins the lookup (containerd): upstream only */
            d->file = dup_s("");
            d->eps = calloc(1, sizeof *d->eps);
            d->n = 1;
            if (!d->file || !d->eps)
                rc = -ENOMEM;
            else
                d->eps[0].caps = TKM_MIRROR_CAP_PULL | TKM_MIRROR_CAP_RESOLVE;
            continue;
        }
        if (!(d->file = dup_s(file)))
            rc = -ENOMEM;
        if (rc == 0)
            rc = tkm_read_file(file, TKM_TOML_MAX_BYTES, &b, "hosts.toml", err);
        if (rc == 0)
            rc = parse_hosts_toml(b.data, b.len, file, dir, d, err);
    }
    tkm_buf_release(&b);
    tkm_names_free(names, n);
    return rc;
}

/* ---- CRI-O registries.conf ---------------------------------------------- */

static void crio_reg_release(struct crio_reg *r)
{
    for (size_t i = 0; i < r->n; i++)
        free(r->mirrors[i].location);
    free(r->mirrors);
    free(r->prefix);
    free(r->location);
}

/* host[:port][/path], no scheme, no wildcard. */
static int location_ok(const struct ctx *c, const struct tkm_toml *v, const char *key)
{
    const char *s = v->s;
    size_t hl = strcspn(s, "/");
    if (strstr(s, "://"))
        return bad_value(c, v, key, "a location is host[:port][/path], without a scheme");
    if (hl == 0 || !url_safe(s, strlen(s), "*") || s[strlen(s) - 1] == '/')
        return bad_value(c, v, key, "not a host[:port][/path]");
    return 0;
}

static int parse_crio_mirror(const struct ctx *c, const struct tkm_toml *t, struct crio_ep *e)
{
    const struct tkm_toml *v;
    if (t->type != TKM_TOML_TABLE)
        return bad_type(c, t, "mirror", "an array of tables");
    int rc = get_str(c, t, "location", &v);
    if (rc == 0)
        return tkm_err_set(c->err, -EINVAL,
                           "%s \"%s\": line %u: [[registry.mirror]] without a "
                           "location",
                           c->what, c->file, t->line);
    if (rc < 0 || (rc = location_ok(c, v, "location")) < 0)
        return rc;
    if (!(e->location = dup_s(v->s)))
        return -ENOMEM;
    if ((rc = get_bool(c, t, "insecure", &e->insecure)) < 0)
        return rc;
    if ((rc = get_str(c, t, "pull-from-mirror", &v)) < 0)
        return rc;
    if (rc == 0 || strcmp(v->s, "all") == 0)
        e->pfm = PFM_ALL;
    else if (strcmp(v->s, "digest-only") == 0)
        e->pfm = PFM_DIGEST_ONLY;
    else if (strcmp(v->s, "tag-only") == 0)
        e->pfm = PFM_TAG_ONLY;
    else
        return bad_value(c, v, "pull-from-mirror",
                         "must be \"all\", \"digest-only\" or "
                         "\"tag-only\"");
    return 0;
}

static int parse_crio_reg(const struct ctx *c, const struct tkm_toml *t, struct crio_reg *r)
{
    const struct tkm_toml *pv, *lv;
    if (t->type != TKM_TOML_TABLE)
        return bad_type(c, t, "registry", "an array of tables");
    int hp = get_str(c, t, "prefix", &pv);
    int hl = hp < 0 ? hp : get_str(c, t, "location", &lv);
    if (hl < 0)
        return hl;
    if (!hp && !hl)
        return tkm_err_set(c->err, -EINVAL,
                           "%s \"%s\": line %u: [[registry]] needs a prefix or "
                           "a location",
                           c->what, c->file, t->line);
    if (hl && lv->s[0]) {
        int rc = location_ok(c, lv, "location");
        if (rc)
            return rc;
        if (!(r->location = dup_s(lv->s)))
            return -ENOMEM;
    }
    const struct tkm_toml *p = hp ? pv : lv;
    if (strncmp(p->s, "*.", 2) == 0) {
        r->wildcard = 1;
        if (!url_safe(p->s + 2, strlen(p->s + 2), "*/:") || !p->s[2])
            return bad_value(c, p, "prefix", "a wildcard prefix is *.domain, no path or port");
        if (r->location)
            return bad_value(c, p, "prefix", "a wildcard prefix takes no location");
    } else {
        int rc = location_ok(c, p, "prefix");
        if (rc)
            return rc;
        if (!r->location)
            return bad_value(c, p, "prefix", "a prefix other than *.domain needs a location");
    }
    if (!(r->prefix = dup_s(p->s)))
        return -ENOMEM;
    int rc;
    if ((rc = get_bool(c, t, "insecure", &r->insecure)) < 0 ||
        (rc = get_bool(c, t, "blocked", &r->blocked)) < 0 ||
        (rc = get_bool(c, t, "mirror-by-digest-only", &r->digest_only)) < 0)
        return rc;
    const struct tkm_toml *mv = tkm_toml_get(t, "mirror");
    if (!mv)
        return 0;
    if (mv->type != TKM_TOML_ARRAY)
        return bad_type(c, mv, "mirror", "an array of tables");
    if (mv->n + 1 > MAX_ENDPOINTS)
        return tkm_err_set(c->err, -E2BIG, "%s \"%s\": line %u: more than %d mirrors", c->what,
                           c->file, mv->line, MAX_ENDPOINTS - 1);
    if (mv->n && !(r->mirrors = calloc(mv->n, sizeof *r->mirrors)))
        return -ENOMEM;
    for (size_t i = 0; i < mv->n; i++) {
        r->n++;
        if ((rc = parse_crio_mirror(c, mv->items[i], &r->mirrors[i])) < 0)
            return rc;
    }
    return 0;
}

static int parse_registries_conf(struct tkm_mirrors *m, const char *data, size_t len,
                                 const char *file, struct tkm_err *err)
{
    struct ctx c = {"registries.conf", file, err};
    struct tkm_toml *t = NULL;
    int rc = parse_named(&c, data, len, &t);
    if (rc)
        return rc;
    const struct tkm_toml *v1 = tkm_toml_get(t, "registries");
    const struct tkm_toml *regs = tkm_toml_get(t, "registry");
    if (v1)
        rc = tkm_err_set(err, -EINVAL,
                         "registries.conf \"%s\": line %u: the version 1 format "
                         "([registries.search], [registries.insecure], [registries.block]) is "
                         "not supported: write [[registry]] tables (version 2)",
                         file, v1->line);
    else if (regs && regs->type != TKM_TOML_ARRAY)
        rc = bad_type(&c, regs, "registry", "an array of tables ([[registry]])");
    if (rc == 0 && regs && regs->n && !(m->regs = calloc(regs->n, sizeof *m->regs)))
        rc = -ENOMEM;
    for (size_t i = 0; rc == 0 && regs && i < regs->n; i++) {
        struct crio_reg *r = &m->regs[m->nregs++];
        rc = parse_crio_reg(&c, regs->items[i], r);
        for (size_t j = 0; rc == 0 && j < i; j++)
            if (strcmp(m->regs[j].prefix, r->prefix) == 0)
                rc = tkm_err_set(err, -EINVAL,
                                 "registries.conf \"%s\": line %u: prefix \"%s\" "
                                 "is defined twice (also line %u)",
                                 file, regs->items[i]->line, r->prefix, regs->items[j]->line);
    }
    tkm_toml_free(t);
    return rc;
}

/* ---- load, free, changed ------------------------------------------------- */

void tkm_mirrors_free(struct tkm_mirrors *m)
{
    if (!m)
        return;
    for (size_t i = 0; i < m->ndirs; i++)
        host_dir_release(&m->dirs[i]);
    free(m->dirs);
    for (size_t i = 0; i < m->nregs; i++)
        crio_reg_release(&m->regs[i]);
    free(m->regs);
    free(m->conf);
    free(m);
}

int tkm_mirrors_load(const char *hosts_dir, const char *registries_conf, struct tkm_mirrors **out,
                     struct tkm_err *err)
{
    *out = NULL;
    struct tkm_mirrors *m = calloc(1, sizeof *m);
    if (!m)
        return tkm_err_set(err, -ENOMEM, "out of memory");
    m->fingerprint = fingerprint(hosts_dir, registries_conf);
    int rc = hosts_dir ? load_hosts_dir(m, hosts_dir, err) : 0;
    if (rc == 0 && registries_conf) {
        struct tkm_buf b = TKM_BUF_INIT(TKM_TOML_MAX_BYTES);
        struct tkm_err e2 = {0};
        rc = tkm_read_file(registries_conf, TKM_TOML_MAX_BYTES, &b, "registries.conf", &e2);
        if (rc == -ENOENT)
            rc = 0;
        else if (rc)
            tkm_err_set(err, rc, "%s", e2.msg);
        else if (!(m->conf = dup_s(registries_conf)))
            rc = -ENOMEM;
        else
            rc = parse_registries_conf(m, b.data, b.len, registries_conf, err);
        tkm_buf_release(&b);
    }
    if (rc) {
        tkm_mirrors_free(m);
        return rc == -ENOMEM ? tkm_err_set(err, rc, "out of memory reading mirrors") : rc;
    }
    *out = m;
    return 0;
}

int tkm_mirrors_changed(const struct tkm_mirrors *m, const char *hosts_dir,
                        const char *registries_conf)
{
    return !m || fingerprint(hosts_dir, registries_conf) != m->fingerprint;
}

/* ---- resolve -------------------------------------------------------------- */

void tkm_mirror_endpoints_free(struct tkm_mirror_endpoint *eps, size_t n)
{
    if (!eps)
        return;
    for (size_t i = 0; i < n; i++) {
        struct tkm_mirror_endpoint *e = &eps[i];
        free(e->host);
        free(e->scheme);
        free(e->path);
        free(e->repo);
        free(e->ns);
        free(e->ca_file);
        free(e->client_cert);
        free(e->client_key);
        strv_free(e->headers);
    }
    free(eps);
}

static char **strv_dup(char *const *v)
{
    size_t n = 0;
    if (!v)
        return NULL;
    while (v[n])
        n++;
    char **d = calloc(n + 1, sizeof *d);
    for (size_t i = 0; d && i < n; i++)
        if (!(d[i] = dup_s(v[i]))) {
            strv_free(d);
            return NULL;
        }
    return d;
}

struct out {
    struct tkm_mirror_endpoint *eps;
    size_t n, cap;
    int nomem;
};

static struct tkm_mirror_endpoint *push(struct out *o, const char *host, const char *repo,
                                        const char *source)
{
    if (o->nomem)
        return NULL;
    if (o->n == o->cap) {
        size_t cap = o->cap ? o->cap * 2 : 4;
        struct tkm_mirror_endpoint *p = realloc(o->eps, cap * sizeof *p);
        if (!p) {
            o->nomem = 1;
            return NULL;
        }
        o->eps = p;
        o->cap = cap;
    }
    struct tkm_mirror_endpoint *e = &o->eps[o->n++];
    memset(e, 0, sizeof *e);
    e->host = dup_s(host);
    e->repo = dup_s(repo);
    e->source = source;
    if (!e->host || !e->repo)
        o->nomem = 1;
    return e;
}

static void set_str(struct out *o, char **dst, const char *s)
{
    if (s && !(*dst = dup_s(s)))
        o->nomem = 1;
}

/* The registry itself as no file configured it. */
static void push_upstream(struct out *o, const char *host, const char *repo)
{
    struct tkm_mirror_endpoint *e = push(o, host, repo, "");
    if (e) {
        set_str(o, &e->path, "/v2");
        e->caps = TKM_MIRROR_CAP_PULL | TKM_MIRROR_CAP_RESOLVE;
        e->upstream = 1;
    }
}

/* The containerd directory for host: <host_port_>, <host:port>, then the
 * other name of Docker Hub, then _default. */
static const struct host_dir *find_dir(const struct tkm_mirrors *m, const char *host)
{
    char names[5][300];
    size_t nn = 0;
    const char *hub[] = {HUB, HUB_API};
    const char *hosts[2] = {host, NULL};
    if (is_hub(host)) {
        hosts[0] = hub[0];
        hosts[1] = hub[1];
    }
    for (size_t h = 0; h < 2 && hosts[h]; h++) {
        const char *s = hosts[h];
        const char *colon = strrchr(s, ':');
        if (colon && colon > s)
            snprintf(names[nn++], sizeof names[0], "%.*s_%s_", (int)(colon - s), s, colon + 1);
        snprintf(names[nn++], sizeof names[0], "%s", s);
    }
    snprintf(names[nn++], sizeof names[0], "_default");
    for (size_t k = 0; k < nn; k++)
        for (size_t i = 0; i < m->ndirs; i++)
            if (strcmp(m->dirs[i].name, names[k]) == 0)
                return &m->dirs[i];
    return NULL;
}

static void from_conf(struct out *o, struct tkm_mirror_endpoint *e, const struct ep_conf *c)
{
    set_str(o, &e->scheme, c->scheme);
    set_str(o, &e->path, c->path ? c->path : "/v2");
    set_str(o, &e->ca_file, c->ca);
    set_str(o, &e->client_cert, c->cert);
    set_str(o, &e->client_key, c->key);
    if (c->headers && !(e->headers = strv_dup(c->headers)))
        o->nomem = 1;
    e->caps = c->caps;
    e->skip_verify = c->skip_verify;
}

static void resolve_containerd(const struct host_dir *d, const char *host, const char *repo,
                               int by_digest, struct out *o)
{
    const char *ns = is_hub(host) ? HUB : host;
    const char *api = is_hub(host) ? HUB_API : host;
    unsigned need = TKM_MIRROR_CAP_PULL | (by_digest ? 0 : TKM_MIRROR_CAP_RESOLVE);
    for (size_t i = 0; i < d->n; i++) {
        const struct ep_conf *c = &d->eps[i];
        int up = i + 1 == d->n;
        if (!up && (c->caps & need) != need)
            continue;
        const char *h = c->host ? c->host : api;
        struct tkm_mirror_endpoint *e = push(o, h, repo, d->file);
        if (!e)
            return;
        from_conf(o, e, c);
        e->upstream = up;
        if (strcmp(h, api) != 0 && strcmp(h, host) != 0)
            set_str(o, &e->ns, ns);
    }
}

/* How well prefix r matches name ("host/repo"): its length, 0 for none. */
static size_t crio_match(const struct crio_reg *r, const char *name)
{
    size_t pl = strlen(r->prefix);
    if (r->wildcard) {
        size_t hl = strcspn(name, "/");
        size_t dl = pl - 1; /* ".example.com" */
        if (hl > dl && memcmp(name + hl - dl, r->prefix + 1, dl) == 0 &&
            memchr(name, ':', hl) == NULL)
            return pl;
        return 0;
    }
    if (strncmp(name, r->prefix, pl) == 0 && (name[pl] == '/' || name[pl] == '\0'))
        return pl;
    return 0;
}

/* location + the part of name after the matched prefix -> host and repo. */
static int crio_push(struct out *o, const char *loc, const char *rest, const char *source,
                     const char *orig, struct tkm_err *err, struct tkm_mirror_endpoint **e1)
{
    struct tkm_buf b = TKM_BUF_INIT(1024);
    *e1 = NULL;
    if (tkm_buf_printf(&b, "%s%s", loc, rest) < 0) {
        tkm_buf_release(&b);
        return tkm_err_set(err, -E2BIG, "registries.conf \"%s\": %s rewritten is too long", source,
                           orig);
    }
    char *slash = strchr(b.data, '/');
    if (!slash || !slash[1]) {
        int rc = tkm_err_set(err, -EINVAL,
                             "registries.conf \"%s\": %s rewritten to %s has no "
                             "repository",
                             source, orig, b.data);
        tkm_buf_release(&b);
        return rc;
    }
    *slash = '\0';
    *e1 = push(o, is_hub(b.data) ? HUB_API : b.data, slash + 1, source);
    tkm_buf_release(&b);
    return 0;
}

/* One CRI-O endpoint; insecure: https without verification, then http. */
static int crio_endpoint(struct out *o, const char *loc, const char *rest, int insecure,
                         unsigned caps, int up, const char *source, const char *orig,
                         struct tkm_err *err)
{
    for (int k = 0; k < (insecure ? 2 : 1); k++) {
        struct tkm_mirror_endpoint *e;
        int rc = crio_push(o, loc, rest, source, orig, err, &e);
        if (rc || !e)
            return rc;
        set_str(o, &e->path, "/v2");
        if (!up || insecure)
            set_str(o, &e->scheme, k == 0 ? "https" : "http");
        e->skip_verify = insecure;
        e->caps = caps;
        e->upstream = up;
    }
    return 0;
}

static int resolve_crio(const struct tkm_mirrors *m, const char *host, const char *repo,
                        int by_digest, struct out *o, struct tkm_err *err)
{
    char name[1024];
    if (snprintf(name, sizeof name, "%s/%s", is_hub(host) ? HUB : host, repo) >= (int)sizeof name)
        return tkm_err_set(err, -ENAMETOOLONG, "%s/%s: name too long", host, repo);
    const struct crio_reg *best = NULL;
    size_t bl = 0;
    for (size_t i = 0; i < m->nregs; i++) {
        size_t l = crio_match(&m->regs[i], name);
        if (l > bl || (l && l == bl && best->wildcard && !m->regs[i].wildcard)) {
            best = &m->regs[i];
            bl = l;
        }
    }
    if (!best) {
        push_upstream(o, host, repo);
        return 0;
    }
    if (best->blocked)
        return tkm_err_set(err, -EACCES, "%s is blocked by registries.conf \"%s\" (prefix \"%s\")",
                           name, m->conf, best->prefix);
    /* a wildcard rewrites the host only; a prefix, itself */
    size_t cut = best->wildcard ? strcspn(name, "/") : strlen(best->prefix);
    char matched[1024];
    snprintf(matched, sizeof matched, "%.*s", (int)cut, name);
    const char *rest = name + cut;
    const unsigned all = TKM_MIRROR_CAP_PULL | TKM_MIRROR_CAP_RESOLVE;
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < best->n; i++) {
        const struct crio_ep *c = &best->mirrors[i];
        int tags = !best->digest_only && c->pfm != PFM_DIGEST_ONLY;
        if (by_digest ? c->pfm == PFM_TAG_ONLY : !tags)
            continue;
        rc = crio_endpoint(o, c->location, rest, c->insecure, tags ? all : TKM_MIRROR_CAP_PULL, 0,
                           m->conf, name, err);
    }
    if (rc == 0)
        rc = crio_endpoint(o, best->location ? best->location : matched, rest, best->insecure, all,
                           1, m->conf, name, err);
    return rc;
}

int tkm_mirrors_resolve(const struct tkm_mirrors *m, const char *host, const char *repo,
                        int by_digest, struct tkm_mirror_endpoint **eps, size_t *n,
                        struct tkm_err *err)
{
    struct out o = {0};
    int rc = 0;
    *eps = NULL;
    *n = 0;
    if (!host || !*host || !repo || !*repo)
        return tkm_err_set(err, -EINVAL, "mirrors: empty host or repository");
    const struct host_dir *d = m ? find_dir(m, host) : NULL;
    if (d)
        resolve_containerd(d, host, repo, by_digest, &o);
    else if (m && m->nregs)
        rc = resolve_crio(m, host, repo, by_digest, &o, err);
    else
        push_upstream(&o, host, repo);
    if (rc == 0 && o.nomem)
        rc = tkm_err_set(err, -ENOMEM, "out of memory resolving mirrors for %s", host);
    if (rc) {
        tkm_mirror_endpoints_free(o.eps, o.n);
        return rc;
    }
    *eps = o.eps;
    *n = o.n;
    return 0;
}

int tkm_mirror_endpoint_is_registry(const struct tkm_mirror_endpoint *ep, const char *host,
                                    const char *repo)
{
    return ep->upstream && strcmp(ep->host, host) == 0 && strcmp(ep->repo, repo) == 0 &&
           (!ep->path || strcmp(ep->path, "/v2") == 0);
}

void tkm_mirror_endpoint_opts(const struct tkm_mirror_endpoint *ep, struct tkm_oci_registry_opts *o)
{
    o->anonymous = 1;
    o->auth_file = NULL;
    o->auth_json = NULL;
    o->auth_json_len = 0;
    o->scheme = ep->scheme;
    o->path_prefix = ep->path;
    o->ns = ep->ns;
    o->ca_file = ep->ca_file;
    o->client_cert = ep->client_cert;
    o->client_key = ep->client_key;
    o->skip_verify = ep->skip_verify;
    o->headers = (const char *const *)ep->headers;
}
