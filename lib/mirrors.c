/*
 * mirrors.c - containerd's hosts.toml directory and CRI-O's registries.conf
 * turned into ordered pull endpoints (mirrors.h, docs/mirrors.md).
 */
#include <tkm/mirrors.h>

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <tkm/buf.h>
#include <tkm/err.h>
#include <tkm/fs.h>
#include <tkm/toml.h>

#define MIR_MAX_HOST_DIRS  4096 /* hosts.toml directories read */
#define MIR_MAX_HOSTS      64   /* [host."..."] tables in one file */
#define MIR_MAX_HEADERS    8    /* header lines of one host (TKM_OCI_EXTRA_HEADERS) */
#define MIR_MAX_REGISTRIES 1024 /* [[registry]] tables */
#define MIR_MAX_MIRRORS    64   /* [[registry.mirror]] tables of one registry */
#define MIR_NAME_MAX       255  /* host[:port] */
#define MIR_REPO_MAX       255
#define MIR_DOCKER_IO      "docker.io"
#define MIR_DOCKER_IO_API  "registry-1.docker.io"

enum { PULL_ALL = 0, PULL_DIGEST_ONLY, PULL_TAG_ONLY };

/* One server or [host."..."] of a hosts.toml. */
struct mhost {
    char *scheme, *host, *path; /* path: the prefix that replaces /v2 */
    unsigned caps;
    int skip_verify;
    char *ca, *cert, *key;
    char **headers; /* NULL-terminated */
};

struct hfile {
    char *name; /* the directory's name: the registry host[:port], or _default */
    char *file; /* its hosts.toml */
    int has_server;
    struct mhost server;
    struct mhost *hosts;
    size_t n_hosts;
};

struct cmirror {
    char *location;
    int insecure;
    int mode; /* PULL_* */
};

struct creg {
    char *prefix, *location;
    int insecure, blocked, wildcard;
    struct cmirror *m;
    size_t n_m;
};

struct tkm_mirrors {
    struct hfile *hf;
    size_t n_hf;
    struct creg *reg;
    size_t n_reg;
    char *conf;  /* the registries.conf read, or NULL */
    char *print; /* fingerprint of the files read (tkm_mirrors_changed) */
};

/* ---- small helpers --------------------------------------------------------------------------- */

static char **strv_free(char **v)
{
    for (size_t i = 0; v && v[i]; i++)
        free(v[i]);
    free(v);
    return NULL;
}

static void mhost_release(struct mhost *h)
{
    free(h->scheme);
    free(h->host);
    free(h->path);
    free(h->ca);
    free(h->cert);
    free(h->key);
    strv_free(h->headers);
    memset(h, 0, sizeof *h);
}

void tkm_mirrors_free(struct tkm_mirrors *m)
{
    if (!m)
        return;
    for (size_t i = 0; i < m->n_hf; i++) {
        struct hfile *f = &m->hf[i];
        free(f->name);
        free(f->file);
        mhost_release(&f->server);
        for (size_t k = 0; k < f->n_hosts; k++)
            mhost_release(&f->hosts[k]);
        free(f->hosts);
    }
    free(m->hf);
    for (size_t i = 0; i < m->n_reg; i++) {
        struct creg *r = &m->reg[i];
        free(r->prefix);
        free(r->location);
        for (size_t k = 0; k < r->n_m; k++)
            free(r->m[k].location);
        free(r->m);
    }
    free(m->reg);
    free(m->conf);
    free(m->print);
    free(m);
}

void tkm_mirror_endpoints_free(struct tkm_mirror_endpoint *eps, size_t n)
{
    for (size_t i = 0; eps && i < n; i++) {
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

static int oom(struct tkm_err *err)
{
    return tkm_err_set(err, -ENOMEM, "registry mirrors: out of memory");
}

/* A key's value error: "<file>: line L: <key>: <why>". */
static int bad(struct tkm_err *err, const char *file, const struct tkm_toml *v, const char *key,
               const char *why)
{
    return tkm_err_set(err, -EINVAL, "%s: line %u: %s: %s", file, v ? v->line : 0, key, why);
}

/* A string value of key in t (NULL when absent); -EINVAL when of another type. */
static int get_str(const struct tkm_toml *t, const char *key, const char *file, const char **out,
                   struct tkm_err *err)
{
    const struct tkm_toml *v = tkm_toml_get(t, key);
    *out = NULL;
    if (!v)
        return 0;
    if (v->type != TKM_TOML_STRING)
        return bad(err, file, v, key, "must be a string");
    *out = v->s;
    return 0;
}

static int get_bool(const struct tkm_toml *t, const char *key, const char *file, int *out,
                    struct tkm_err *err)
{
    const struct tkm_toml *v = tkm_toml_get(t, key);
    if (!v)
        return 0;
    if (v->type != TKM_TOML_BOOL)
        return bad(err, file, v, key, "must be true or false");
    *out = (int)v->i;
    return 0;
}

/* host[:port] as a URL writes it: letters, digits, '.', '-', '_', ':', '[', ']'. */
static int host_ok(const char *h, size_t n)
{
    if (n == 0 || n > MIR_NAME_MAX)
        return 0;
    for (size_t i = 0; i < n; i++) {
        char c = h[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '-' || c == '_' || c == ':' || c == '[' || c == ']'))
            return 0;
    }
    return 1;
}

/* path: "/" followed by URL path characters, no query, no "..". */
static int path_ok(const char *p)
{
    if (p[0] != '/' || strstr(p, "..") || strlen(p) > 1024)
        return 0;
    for (const char *c = p; *c; c++)
        if ((unsigned char)*c <= ' ' || *c == '?' || *c == '#' || *c == '\\' || *c == 0x7f)
            return 0;
    return 1;
}

/* Splits "scheme://host[:port][/path]" (no scheme: https) into h's scheme, host and
 * the path prefix (the URL's path + "/v2", or the path itself with override). */
static int parse_url(const char *url, int override_path, struct mhost *h, const char *file,
                     const struct tkm_toml *at, const char *what, struct tkm_err *err)
{
    const char *scheme = "https", *rest = url, *slash;
    char path[1100];
    if (strncmp(url, "https://", 8) == 0)
        rest = url + 8;
    else if (strncmp(url, "http://", 7) == 0)
        scheme = "http", rest = url + 7;
    else if (strstr(url, "://"))
        return bad(err, file, at, what, "the scheme must be http or https");
    slash = strchr(rest, '/');
    size_t hn = slash ? (size_t)(slash - rest) : strlen(rest);
    if (!host_ok(rest, hn))
        return bad(err, file, at, what, "not a URL with a host[:port]");
    const char *p = slash ? slash : "";
    size_t pn = strlen(p);
    while (pn > 1 && p[pn - 1] == '/')
        pn--; /* "https://m/" is "https://m" */
    if (pn == 1)
        pn = 0;
    if (override_path)
        snprintf(path, sizeof path, "%.*s", (int)pn, pn ? p : "/v2");
    else
        snprintf(path, sizeof path, "%.*s/v2", (int)pn, p);
    if (strlen(path) > 1024 || !path_ok(path))
        return bad(err, file, at, what, "the URL's path holds characters a URL path cannot");
    if (!(h->scheme = strdup(scheme)) || !(h->host = strndup(rest, hn)) ||
        !(h->path = strdup(path)))
        return oom(err);
    return 0;
}

/* file's directory joined with a relative path (absolute ones as they are). */
static char *rel_path(const char *file, const char *p)
{
    if (p[0] == '/')
        return strdup(p);
    const char *slash = strrchr(file, '/');
    size_t dn = slash ? (size_t)(slash - file) : 1;
    size_t n = dn + strlen(p) + 2;
    char *out = malloc(n);
    if (out)
        snprintf(out, n, "%.*s/%s", (int)dn, slash ? file : ".", p);
    return out;
}

/* ---- hosts.toml ------------------------------------------------------------------------------ */

/* The settings of a server (top level) or a [host."..."] table t into h. */
static int host_settings(const struct tkm_toml *t, const char *file, struct mhost *h,
                         struct tkm_err *err)
{
    const struct tkm_toml *v;
    int rc;
    if ((v = tkm_toml_get(t, "capabilities"))) {
        if (v->type != TKM_TOML_ARRAY)
            return bad(err, file, v, "capabilities", "must be an array of strings");
        h->caps = 0;
        for (size_t i = 0; i < v->n; i++) {
            const struct tkm_toml *c = v->items[i];
            if (c->type != TKM_TOML_STRING)
                return bad(err, file, c, "capabilities", "must be an array of strings");
            if (!strcmp(c->s, "pull"))
                h->caps |= TKM_MIRROR_CAP_PULL;
            else if (!strcmp(c->s, "resolve"))
                h->caps |= TKM_MIRROR_CAP_RESOLVE;
            else if (strcmp(c->s, "push") != 0)
                return bad(err, file, c, "capabilities",
                           "unknown capability (pull, resolve or push)");
        }
    }
    if ((rc = get_bool(t, "skip_verify", file, &h->skip_verify, err)) < 0)
        return rc;
    if ((v = tkm_toml_get(t, "ca"))) {
        const struct tkm_toml *first = v;
        if (v->type == TKM_TOML_ARRAY) {
            for (size_t i = 0; i < v->n; i++)
                if (v->items[i]->type != TKM_TOML_STRING)
                    return bad(err, file, v, "ca", "must be a string or an array of strings");
            first = v->n ? v->items[0] : NULL;
        } else if (v->type != TKM_TOML_STRING) {
            return bad(err, file, v, "ca", "must be a string or an array of strings");
        }
        if (first && !(h->ca = rel_path(file, first->s)))
            return oom(err);
    }
    if ((v = tkm_toml_get(t, "client"))) {
        const char *cert = NULL, *key = NULL;
        if (v->type == TKM_TOML_STRING) {
            cert = v->s;
        } else if (v->type == TKM_TOML_ARRAY && v->n) {
            const struct tkm_toml *c = v->items[0];
            if (c->type == TKM_TOML_STRING) {
                cert = c->s;
            } else if (c->type == TKM_TOML_ARRAY && c->n == 2 &&
                       c->items[0]->type == TKM_TOML_STRING &&
                       c->items[1]->type == TKM_TOML_STRING) {
                cert = c->items[0]->s;
                key = c->items[1]->s;
            }
            for (size_t i = 1; i < v->n; i++)
                if (v->items[i]->type != c->type)
                    cert = NULL;
        }
        if (!cert)
            return bad(err, file, v, "client",
                       "must be a file, an array of files or an array of [cert, key] pairs");
        if (!(h->cert = rel_path(file, cert)) || (key && !(h->key = rel_path(file, key))))
            return oom(err);
    }
    if ((v = tkm_toml_get(t, "header"))) {
        size_t n = 0;
        if (v->type != TKM_TOML_TABLE)
            return bad(err, file, v, "header", "must be a table of strings or arrays of strings");
        if (!(h->headers = calloc(MIR_MAX_HEADERS + 1, sizeof *h->headers)))
            return oom(err);
        for (size_t i = 0; i < v->n; i++) {
            const struct tkm_toml *hv = v->items[i];
            const char *name = v->keys[i];
            size_t nv = hv->type == TKM_TOML_ARRAY ? hv->n : 1;
            if (!name[0] || strpbrk(name, ": \t\r\n"))
                return bad(err, file, hv, "header", "a header name holds no ':' or space");
            for (size_t k = 0; k < nv; k++) {
                const struct tkm_toml *s = hv->type == TKM_TOML_ARRAY ? hv->items[k] : hv;
                if (s->type != TKM_TOML_STRING)
                    return bad(err, file, s, "header",
                               "must be a table of strings or arrays of strings");
                if (strpbrk(s->s, "\r\n") || strlen(name) + strlen(s->s) > 1000)
                    return bad(err, file, s, "header", "a value is one line of at most 1000 bytes");
                if (n >= MIR_MAX_HEADERS)
                    return bad(err, file, s, "header", "at most 8 header lines");
                size_t len = strlen(name) + strlen(s->s) + 3;
                if (!(h->headers[n] = malloc(len)))
                    return oom(err);
                snprintf(h->headers[n++], len, "%s: %s", name, s->s);
            }
        }
    }
    return 0;
}

static int read_hosts_file(const char *file, struct hfile *f, struct tkm_err *err)
{
    struct tkm_buf b = TKM_BUF_INIT(TKM_TOML_MAX_BYTES);
    struct tkm_toml *doc = NULL;
    const struct tkm_toml *hosts;
    const char *server = NULL;
    int override = 0, rc;
    if ((rc = tkm_read_file(file, TKM_TOML_MAX_BYTES, &b, "hosts.toml", err)) < 0)
        goto out;
    if ((rc = tkm_toml_parse(b.data, b.len, file, &doc, err)) < 0)
        goto out;
    if ((rc = get_str(doc, "server", file, &server, err)) < 0 ||
        (rc = get_bool(doc, "override_path", file, &override, err)) < 0)
        goto out;
    f->server.caps = TKM_MIRROR_CAP_PULL | TKM_MIRROR_CAP_RESOLVE;
    if (server) {
        f->has_server = 1;
        if ((rc = parse_url(server, override, &f->server, file, tkm_toml_get(doc, "server"),
                            "server", err)) < 0)
            goto out;
    }
    if ((rc = host_settings(doc, file, &f->server, err)) < 0)
        goto out;
    if ((hosts = tkm_toml_get(doc, "host"))) {
        if (hosts->type != TKM_TOML_TABLE) {
            rc = bad(err, file, hosts, "host", "must be tables [host.\"URL\"]");
            goto out;
        }
        if (hosts->n > MIR_MAX_HOSTS) {
            rc = bad(err, file, hosts, "host", "more than 64 hosts");
            goto out;
        }
        if (hosts->n && !(f->hosts = calloc(hosts->n, sizeof *f->hosts))) {
            rc = oom(err);
            goto out;
        }
        for (size_t i = 0; i < hosts->n; i++) {
            const struct tkm_toml *t = hosts->items[i];
            struct mhost *h = &f->hosts[f->n_hosts++];
            char what[300];
            int ov = 0;
            snprintf(what, sizeof what, "host.\"%.200s\"", hosts->keys[i]);
            if (t->type != TKM_TOML_TABLE) {
                rc = bad(err, file, t, what, "must be a table");
                goto out;
            }
            h->caps = TKM_MIRROR_CAP_PULL | TKM_MIRROR_CAP_RESOLVE;
            if ((rc = get_bool(t, "override_path", file, &ov, err)) < 0 ||
                (rc = parse_url(hosts->keys[i], ov, h, file, t, what, err)) < 0 ||
                (rc = host_settings(t, file, h, err)) < 0)
                goto out;
        }
    }
out:
    tkm_toml_free(doc);
    tkm_buf_release(&b);
    return rc;
}

static int load_hosts_dir(struct tkm_mirrors *m, const char *dir, struct tkm_err *err)
{
    char **names = NULL;
    size_t n = 0;
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC), rc = 0;
    if (fd < 0)
        return errno == ENOENT
                   ? 0
                   : tkm_err_set(err, -errno, "hosts directory %s: %s", dir, strerror(errno));
    rc = tkm_list_dir(fd, TKM_LIST_ALL, MIR_MAX_HOST_DIRS, &names, &n);
    close(fd);
    if (rc < 0)
        return tkm_err_set(err, rc, "hosts directory %s: %s", dir,
                           rc == -E2BIG ? "more than 4096 entries" : strerror(-rc));
    if (n && !(m->hf = calloc(n, sizeof *m->hf))) {
        rc = oom(err);
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        struct stat st;
        size_t len = strlen(dir) + strlen(names[i]) + 13;
        char *file = malloc(len);
        if (!file) {
            rc = oom(err);
            goto out;
        }
        snprintf(file, len, "%s/%s/hosts.toml", dir, names[i]);
        /* a directory without hosts.toml (or not a directory) names no registry */
        if (stat(file, &st) != 0) {
            free(file);
            continue;
        }
        struct hfile *f = &m->hf[m->n_hf++];
        f->file = file;
        if (!(f->name = strdup(names[i]))) {
            rc = oom(err);
            goto out;
        }
        if ((rc = read_hosts_file(file, f, err)) < 0)
            goto out;
    }
out:
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
    return rc;
}

/* ---- registries.conf ------------------------------------------------------------------------- */

static int read_registry(const struct tkm_toml *t, const char *file, struct creg *r,
                         struct tkm_err *err)
{
    const char *prefix = NULL, *location = NULL;
    int digest_only = 0, rc;
    const struct tkm_toml *mv;
    if (t->type != TKM_TOML_TABLE)
        return bad(err, file, t, "registry", "must be tables [[registry]]");
    if ((rc = get_str(t, "prefix", file, &prefix, err)) < 0 ||
        (rc = get_str(t, "location", file, &location, err)) < 0 ||
        (rc = get_bool(t, "insecure", file, &r->insecure, err)) < 0 ||
        (rc = get_bool(t, "blocked", file, &r->blocked, err)) < 0 ||
        (rc = get_bool(t, "mirror-by-digest-only", file, &digest_only, err)) < 0)
        return rc;
    if ((!prefix || !prefix[0]) && (!location || !location[0]))
        return bad(err, file, t, "registry", "needs a prefix or a location");
    if (!prefix || !prefix[0])
        prefix = location;
    r->wildcard = strncmp(prefix, "*.", 2) == 0;
    if (r->wildcard ? !host_ok(prefix + 2, strlen(prefix + 2)) || strchr(prefix, '/')
                    : !strchr(prefix, '/') && !host_ok(prefix, strlen(prefix)))
        return bad(err, file, t, "prefix",
                   "not a registry[/path] or *.domain (a wildcard names hosts only)");
    if (r->wildcard && location && location[0])
        return bad(err, file, t, "location", "a wildcard prefix takes no location");
    if (!(r->prefix = strdup(prefix)) ||
        (location && location[0] && !(r->location = strdup(location))))
        return oom(err);
    if ((mv = tkm_toml_get(t, "mirror"))) {
        if (mv->type != TKM_TOML_ARRAY)
            return bad(err, file, mv, "mirror", "must be tables [[registry.mirror]]");
        if (mv->n > MIR_MAX_MIRRORS)
            return bad(err, file, mv, "mirror", "more than 64 mirrors");
        if (mv->n && !(r->m = calloc(mv->n, sizeof *r->m)))
            return oom(err);
        for (size_t i = 0; i < mv->n; i++) {
            const struct tkm_toml *e = mv->items[i];
            struct cmirror *c = &r->m[r->n_m++];
            const char *loc = NULL, *mode = NULL;
            if (e->type != TKM_TOML_TABLE)
                return bad(err, file, e, "mirror", "must be tables [[registry.mirror]]");
            if ((rc = get_str(e, "location", file, &loc, err)) < 0 ||
                (rc = get_bool(e, "insecure", file, &c->insecure, err)) < 0 ||
                (rc = get_str(e, "pull-from-mirror", file, &mode, err)) < 0)
                return rc;
            if (!loc || !loc[0])
                return bad(err, file, e, "mirror", "needs a location");
            c->mode = digest_only ? PULL_DIGEST_ONLY : PULL_ALL;
            if (mode && !strcmp(mode, "digest-only"))
                c->mode = PULL_DIGEST_ONLY;
            else if (mode && !strcmp(mode, "tag-only"))
                c->mode = PULL_TAG_ONLY;
            else if (mode && strcmp(mode, "all") != 0 && mode[0])
                return bad(err, file, tkm_toml_get(e, "pull-from-mirror"), "pull-from-mirror",
                           "must be all, digest-only or tag-only");
            if (!(c->location = strdup(loc)))
                return oom(err);
        }
    }
    return 0;
}

static int load_registries_conf(struct tkm_mirrors *m, const char *path, struct tkm_err *err)
{
    struct tkm_buf b = TKM_BUF_INIT(TKM_TOML_MAX_BYTES);
    struct tkm_toml *doc = NULL;
    const struct tkm_toml *regs;
    int rc;
    if (access(path, F_OK) != 0 && errno == ENOENT)
        return 0;
    if ((rc = tkm_read_file(path, TKM_TOML_MAX_BYTES, &b, "registries.conf", err)) < 0 ||
        (rc = tkm_toml_parse(b.data, b.len, path, &doc, err)) < 0)
        goto out;
    if (tkm_toml_get(doc, "registries")) {
        rc = bad(err, path, tkm_toml_get(doc, "registries"), "registries",
                 "the version 1 format ([registries.search], [registries.insecure], "
                 "[registries.block]) is not read: write [[registry]] tables (version 2)");
        goto out;
    }
    if (!(m->conf = strdup(path))) {
        rc = oom(err);
        goto out;
    }
    if ((regs = tkm_toml_get(doc, "registry"))) {
        if (regs->type != TKM_TOML_ARRAY) {
            rc = bad(err, path, regs, "registry", "must be tables [[registry]]");
            goto out;
        }
        if (regs->n > MIR_MAX_REGISTRIES) {
            rc = bad(err, path, regs, "registry", "more than 1024 registries");
            goto out;
        }
        if (regs->n && !(m->reg = calloc(regs->n, sizeof *m->reg))) {
            rc = oom(err);
            goto out;
        }
        for (size_t i = 0; i < regs->n; i++)
            if ((rc = read_registry(regs->items[i], path, &m->reg[m->n_reg++], err)) < 0)
                goto out;
    }
out:
    tkm_toml_free(doc);
    tkm_buf_release(&b);
    return rc;
}

/* ---- fingerprint ----------------------------------------------------------------------------- */

static void print_stat(struct tkm_buf *b, const char *path)
{
    struct stat st;
    if (stat(path, &st) != 0)
        tkm_buf_printf(b, "%s:-\n", path);
    else
        tkm_buf_printf(b, "%s:%llu:%lld.%09ld:%lld\n", path, (unsigned long long)st.st_ino,
                       (long long)st.st_mtim.tv_sec, st.st_mtim.tv_nsec, (long long)st.st_size);
}

static char *fingerprint(const char *dir, const char *conf)
{
    struct tkm_buf b;
    tkm_buf_init(&b, 4u << 20);
    if (dir) {
        int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        char **names = NULL;
        size_t n = 0;
        print_stat(&b, dir);
        if (fd >= 0 && tkm_list_dir(fd, TKM_LIST_ALL, MIR_MAX_HOST_DIRS, &names, &n) == 0) {
            for (size_t i = 0; i < n; i++) {
                char path[PATH_MAX];
                snprintf(path, sizeof path, "%s/%s/hosts.toml", dir, names[i]);
                print_stat(&b, path);
                free(names[i]);
            }
            free(names);
        }
        if (fd >= 0)
            close(fd);
    }
    if (conf)
        print_stat(&b, conf);
    return tkm_buf_detach(&b, NULL);
}

int tkm_mirrors_changed(const struct tkm_mirrors *m, const char *hosts_dir,
                        const char *registries_conf)
{
    if (!m)
        return 1;
    char *now = fingerprint(hosts_dir, registries_conf);
    int changed = !now || !m->print || strcmp(now, m->print) != 0;
    free(now);
    return changed;
}

int tkm_mirrors_load(const char *hosts_dir, const char *registries_conf, struct tkm_mirrors **out,
                     struct tkm_err *err)
{
    struct tkm_mirrors *m = calloc(1, sizeof *m);
    int rc;
    *out = NULL;
    if (!m)
        return oom(err);
    /* the fingerprint first: a file changed while it is read is read again next time */
    if (!(m->print = fingerprint(hosts_dir, registries_conf))) {
        rc = oom(err);
        goto fail;
    }
    if ((hosts_dir && (rc = load_hosts_dir(m, hosts_dir, err)) < 0) ||
        (registries_conf && (rc = load_registries_conf(m, registries_conf, err)) < 0))
        goto fail;
    *out = m;
    return 0;
fail:
    tkm_mirrors_free(m);
    return rc;
}

/* ---- resolve --------------------------------------------------------------------------------- */

static int ep_add(struct tkm_mirror_endpoint **eps, size_t *n, size_t *cap,
                  struct tkm_mirror_endpoint **out)
{
    if (*n == *cap) {
        size_t nc = *cap ? *cap * 2 : 8;
        struct tkm_mirror_endpoint *p = realloc(*eps, nc * sizeof *p);
        if (!p)
            return -ENOMEM;
        *eps = p;
        *cap = nc;
    }
    *out = &(*eps)[(*n)++];
    memset(*out, 0, sizeof **out);
    return 0;
}

static int dup_or_null(char **dst, const char *s)
{
    return s && !(*dst = strdup(s)) ? -ENOMEM : 0;
}

/* An endpoint from a hosts.toml host (h NULL: the plain upstream). */
static int ep_from_host(struct tkm_mirror_endpoint *e, const struct mhost *h, const char *regname,
                        const char *api_host, const char *repo, int upstream, const char *source)
{
    const char *host = h && h->host ? h->host : api_host;
    e->upstream = upstream;
    e->caps = h ? h->caps : TKM_MIRROR_CAP_PULL | TKM_MIRROR_CAP_RESOLVE;
    e->skip_verify = h ? h->skip_verify : 0;
    e->source = source;
    if (dup_or_null(&e->host, host) || dup_or_null(&e->scheme, h ? h->scheme : NULL) ||
        dup_or_null(&e->path, h && h->path ? h->path : "/v2") || dup_or_null(&e->repo, repo) ||
        (strcmp(host, api_host) != 0 && dup_or_null(&e->ns, regname)) ||
        dup_or_null(&e->ca_file, h ? h->ca : NULL) ||
        dup_or_null(&e->client_cert, h ? h->cert : NULL) ||
        dup_or_null(&e->client_key, h ? h->key : NULL))
        return -ENOMEM;
    if (h && h->headers) {
        size_t k = 0;
        while (h->headers[k])
            k++;
        if (!(e->headers = calloc(k + 1, sizeof *e->headers)))
            return -ENOMEM;
        for (size_t i = 0; i < k; i++)
            if (!(e->headers[i] = strdup(h->headers[i])))
                return -ENOMEM;
    }
    return 0;
}

static const struct hfile *find_hfile(const struct tkm_mirrors *m, const char *name)
{
    for (size_t i = 0; i < m->n_hf; i++)
        if (strcmp(m->hf[i].name, name) == 0)
            return &m->hf[i];
    return NULL;
}

/* "host/rest" -> an endpoint's host and repo; 0 or -EINVAL. */
static int split_location(const char *loc, const char *suffix, char **host, char **repo)
{
    const char *slash = strchr(loc, '/');
    size_t hn = slash ? (size_t)(slash - loc) : strlen(loc);
    if (!host_ok(loc, hn))
        return -EINVAL;
    struct tkm_buf b;
    tkm_buf_init(&b, 2 * MIR_REPO_MAX);
    if (slash && slash[1])
        tkm_buf_printf(&b, "%s", slash + 1);
    if (suffix[0])
        tkm_buf_printf(&b, "%s%s", b.len ? "/" : "", suffix);
    if (!b.len || b.len > MIR_REPO_MAX) {
        tkm_buf_release(&b);
        return -EINVAL;
    }
    *repo = tkm_buf_detach(&b, NULL);
    /* docker.io's API host, as references resolve it */
    *host = hn == strlen(MIR_DOCKER_IO) && !memcmp(loc, MIR_DOCKER_IO, hn)
                ? strdup(MIR_DOCKER_IO_API)
                : strndup(loc, hn);
    return *repo && *host ? 0 : -ENOMEM;
}

/* The [[registry]] whose prefix matches name ("host/repo") best, and the length matched. */
static const struct creg *find_creg(const struct tkm_mirrors *m, const char *name, size_t hn,
                                    size_t *matched)
{
    const struct creg *best = NULL;
    size_t best_len = 0;
    for (size_t i = 0; i < m->n_reg; i++) {
        const struct creg *r = &m->reg[i];
        size_t pl = strlen(r->prefix), len = 0;
        if (r->wildcard) {
            /* "*.example.com" matches a.example.com, b.a.example.com (the host only) */
            size_t dl = pl - 1; /* ".example.com" */
            if (hn > dl && memcmp(name + hn - dl, r->prefix + 1, dl) == 0)
                len = hn;
        } else if (strncmp(name, r->prefix, pl) == 0 && (name[pl] == '/' || name[pl] == 0)) {
            len = pl;
        }
        if (len &&
            (len > best_len || (len == best_len && best && best->wildcard && !r->wildcard))) {
            best = r;
            best_len = len;
        }
    }
    *matched = best_len;
    return best;
}

static int resolve_crio(const struct tkm_mirrors *m, const char *regname, const char *api_host,
                        const char *repo, int by_digest, struct tkm_mirror_endpoint **eps,
                        size_t *n, size_t *cap, int *done, struct tkm_err *err)
{
    char name[MIR_NAME_MAX + MIR_REPO_MAX + 2];
    size_t matched;
    *done = 0;
    snprintf(name, sizeof name, "%s/%s", regname, repo);
    const struct creg *r = find_creg(m, name, strlen(regname), &matched);
    if (!r)
        return 0;
    if (r->blocked)
        return tkm_err_set(err, -EACCES,
                           "registry %s is blocked by %s ([[registry]] prefix \"%s\")", regname,
                           m->conf, r->prefix);
    const char *suffix = name + matched + (name[matched] == '/');
    for (size_t i = 0; i < r->n_m; i++) {
        const struct cmirror *c = &r->m[i];
        struct tkm_mirror_endpoint *e;
        if ((by_digest && c->mode == PULL_TAG_ONLY) || (!by_digest && c->mode == PULL_DIGEST_ONLY))
            continue;
        if (ep_add(eps, n, cap, &e) < 0)
            return oom(err);
        int rc = split_location(c->location, r->wildcard ? repo : suffix, &e->host, &e->repo);
        if (rc == -EINVAL)
            return tkm_err_set(err, -EINVAL, "%s: mirror location \"%.200s\" is not host[/path]",
                               m->conf, c->location);
        if (rc < 0 || dup_or_null(&e->path, "/v2"))
            return oom(err);
        e->caps = TKM_MIRROR_CAP_PULL | (c->mode == PULL_DIGEST_ONLY ? 0 : TKM_MIRROR_CAP_RESOLVE);
        e->skip_verify = c->insecure;
        e->source = m->conf;
    }
    struct tkm_mirror_endpoint *e;
    if (ep_add(eps, n, cap, &e) < 0)
        return oom(err);
    e->upstream = 1;
    e->caps = TKM_MIRROR_CAP_PULL | TKM_MIRROR_CAP_RESOLVE;
    e->skip_verify = r->insecure;
    e->source = m->conf;
    if (r->location) {
        int rc = split_location(r->location, suffix, &e->host, &e->repo);
        if (rc == -EINVAL)
            return tkm_err_set(err, -EINVAL, "%s: location \"%.200s\" is not host[/path]", m->conf,
                               r->location);
        if (rc < 0)
            return oom(err);
    } else if (dup_or_null(&e->host, api_host) || dup_or_null(&e->repo, repo)) {
        return oom(err);
    }
    if (!e->host || dup_or_null(&e->path, "/v2"))
        return oom(err);
    *done = 1;
    return 0;
}

int tkm_mirrors_resolve(const struct tkm_mirrors *m, const char *host, const char *repo,
                        int by_digest, struct tkm_mirror_endpoint **eps, size_t *n,
                        struct tkm_err *err)
{
    struct tkm_mirror_endpoint *out = NULL, *e;
    size_t cap = 0;
    int rc = 0, done = 0;
    *eps = NULL;
    *n = 0;
    if (!host || !repo || !host_ok(host, strlen(host)) || !repo[0] || strlen(repo) > MIR_REPO_MAX)
        return tkm_err_set(err, -EINVAL,
                           "registry mirrors: not a host and repository: %.100s/%.100s",
                           host ? host : "", repo ? repo : "");
    /* the registry's name as the runtimes spell it: docker.io, not its API host */
    const char *regname = !strcmp(host, MIR_DOCKER_IO_API) ? MIR_DOCKER_IO : host;
    const char *api_host = !strcmp(host, MIR_DOCKER_IO) ? MIR_DOCKER_IO_API : host;
    const struct hfile *f = NULL;
    if (m) {
        f = find_hfile(m, regname);
        if (!f && strcmp(regname, api_host) != 0)
            f = find_hfile(m, api_host);
        if (!f)
            f = find_hfile(m, "_default");
    }
    if (f) {
        for (size_t i = 0; i < f->n_hosts; i++) {
            const struct mhost *h = &f->hosts[i];
            if (!(h->caps & TKM_MIRROR_CAP_PULL) ||
                (!by_digest && !(h->caps & TKM_MIRROR_CAP_RESOLVE)))
                continue;
            if (ep_add(&out, n, &cap, &e) < 0 ||
                ep_from_host(e, h, regname, api_host, repo, 0, f->file) < 0) {
                rc = oom(err);
                goto fail;
            }
        }
        if (ep_add(&out, n, &cap, &e) < 0 ||
            ep_from_host(e, &f->server, regname, api_host, repo, 1, f->file) < 0) {
            rc = oom(err);
            goto fail;
        }
        if (!f->has_server) { /* the registry itself, by the client's usual rule */
            free(e->scheme);
            e->scheme = NULL;
        }
        done = 1;
    } else if (m && m->n_reg) {
        if ((rc = resolve_crio(m, regname, api_host, repo, by_digest, &out, n, &cap, &done, err)) <
            0)
            goto fail;
    }
    if (!done) {
        if (ep_add(&out, n, &cap, &e) < 0 ||
            ep_from_host(e, NULL, regname, api_host, repo, 1, "") < 0) {
            rc = oom(err);
            goto fail;
        }
    }
    *eps = out;
    return 0;
fail:
    tkm_mirror_endpoints_free(out, *n);
    *n = 0;
    return rc;
}
