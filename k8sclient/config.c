/*
 * config.c - kubeconfig (libyaml) and in-cluster configuration. See k8s/config.h.
 *
 * Every error names the source file and the place inside it, e.g.
 *   /x/kubeconfig: users[0] "dev": client-certificate "/x/dev.crt": No such file or directory
 */
#include <k8s/config.h>

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <tkm/util.h>
#include <tkm/fs.h>

#include "config-int.h"
#include "yaml-int.h"

#define PEM_MAX   (1u << 20)
#define TOKEN_MAX (64u * 1024)

#define SA_DIR "var/run/secrets/kubernetes.io/serviceaccount"

/* ---- small helpers -------------------------------------------------------- */

void k8s__trim(struct tkm_buf *b)
{
    size_t s = 0, e = b->len;
    while (s < e && isspace((unsigned char)b->data[s]))
        s++;
    while (e > s && isspace((unsigned char)b->data[e - 1]))
        e--;
    if (s)
        memmove(b->data, b->data + s, e - s);
    b->len = e - s;
    b->data[b->len] = '\0';
}

int k8s__parse_time(const char *s, long long *out)
{
    struct tm tm = {0};
    const char *p = strptime(s, "%Y-%m-%dT%H:%M:%S", &tm);
    if (!p)
        return -EINVAL;
    if (*p == '.')
        for (p++; isdigit((unsigned char)*p); p++)
            ;
    long long off = 0;
    if (*p == 'Z' || *p == 'z') {
        p++;
    } else if ((*p == '+' || *p == '-') && isdigit((unsigned char)p[1]) &&
               isdigit((unsigned char)p[2]) && p[3] == ':' && isdigit((unsigned char)p[4]) &&
               isdigit((unsigned char)p[5])) {
        off =
            ((p[1] - '0') * 10 + (p[2] - '0')) * 3600LL + ((p[4] - '0') * 10 + (p[5] - '0')) * 60LL;
        if (*p == '+')
            off = -off;
        p += 6;
    } else {
        return -EINVAL;
    }
    if (*p)
        return -EINVAL;
    *out = (long long)timegm(&tm) + off;
    return 0;
}

static void free_strv(char **v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(v[i]);
    free(v);
}

static void exec_free(struct k8s_exec_config *e)
{
    if (!e)
        return;
    free(e->command);
    free_strv(e->args, e->nargs);
    free_strv(e->env, e->nenv);
    free(e->api_version);
    free(e);
}

void k8s_config_init(struct k8s_config *c)
{
    memset(c, 0, sizeof *c);
}

void k8s_config_release(struct k8s_config *c)
{
    if (!c)
        return;
    free(c->source);
    free(c->context);
    free(c->server);
    free(c->tls_server_name);
    free(c->ca_file);
    free(c->ca_pem);
    free(c->token);
    free(c->token_file);
    free(c->cert_file);
    free(c->key_file);
    free(c->cert_pem);
    free(c->key_pem);
    exec_free(c->exec);
    free(c->namespace);
    k8s_config_init(c);
}

static int dup_opt(char **dst, const char *src)
{
    *dst = NULL;
    if (src && !(*dst = strdup(src)))
        return -ENOMEM;
    return 0;
}

static int dup_mem(char **dst, const char *src, size_t len)
{
    *dst = NULL;
    if (!src)
        return 0;
    if (!(*dst = malloc(len + 1)))
        return -ENOMEM;
    memcpy(*dst, src, len);
    (*dst)[len] = '\0';
    return 0;
}

static int dup_strv(char ***dst, char *const *src, size_t n)
{
    *dst = NULL;
    if (!n)
        return 0;
    if (!(*dst = calloc(n, sizeof **dst)))
        return -ENOMEM;
    for (size_t i = 0; i < n; i++)
        if (!((*dst)[i] = strdup(src[i])))
            return -ENOMEM;
    return 0;
}

int k8s_config_copy(struct k8s_config *d, const struct k8s_config *s)
{
    k8s_config_release(d);
    int bad = 0;
    bad |= dup_opt(&d->source, s->source) | dup_opt(&d->context, s->context);
    bad |= dup_opt(&d->server, s->server) | dup_opt(&d->tls_server_name, s->tls_server_name);
    bad |= dup_opt(&d->ca_file, s->ca_file) | dup_mem(&d->ca_pem, s->ca_pem, s->ca_pem_len);
    bad |= dup_opt(&d->token, s->token) | dup_opt(&d->token_file, s->token_file);
    bad |= dup_opt(&d->cert_file, s->cert_file) | dup_opt(&d->key_file, s->key_file);
    bad |= dup_mem(&d->cert_pem, s->cert_pem, s->cert_pem_len);
    bad |= dup_mem(&d->key_pem, s->key_pem, s->key_pem_len);
    bad |= dup_opt(&d->namespace, s->namespace);
    d->insecure = s->insecure;
    d->auth = s->auth;
    d->ca_pem_len = s->ca_pem_len;
    d->cert_pem_len = s->cert_pem_len;
    d->key_pem_len = s->key_pem_len;
    if (s->exec) {
        struct k8s_exec_config *e = calloc(1, sizeof *e);
        d->exec = e;
        if (!e) {
            bad = 1;
        } else {
            *e = *s->exec;
            e->command = NULL, e->args = NULL, e->env = NULL, e->api_version = NULL;
            bad |= dup_opt(&e->command, s->exec->command);
            bad |= dup_opt(&e->api_version, s->exec->api_version);
            bad |= dup_strv(&e->args, s->exec->args, s->exec->nargs);
            bad |= dup_strv(&e->env, s->exec->env, s->exec->nenv);
        }
    }
    if (bad) {
        k8s_config_release(d);
        return -ENOMEM;
    }
    return 0;
}

/* ---- kubeconfig ------------------------------------------------------------ */

/* Context for error messages: "<source>: <where>: ...". */
struct kc {
    const char *source;
    const char *base_dir;
    struct k8s_config *c;
    struct tkm_err *err;
    char where[256];
};

/* A string field: absent -> *out NULL and 0; present but not a scalar -> error. */
static int get_str(struct kc *k, const struct k8s__ynode *m, const char *key, const char **out)
{
    *out = NULL;
    struct k8s__ynode *v = k8s__yaml_get(m, key);
    if (!v)
        return 0;
    if (v->kind != K8S_Y_SCALAR)
        return tkm_err_set(k->err, -EINVAL, "%s: %s: field \"%s\" must be a string (line %d)",
                           k->source, k->where, key, v->line);
    *out = v->len ? v->str : NULL; /* an empty value means unset, as in client-go */
    return 0;
}

static int get_bool(struct kc *k, const struct k8s__ynode *m, const char *key, int *out)
{
    const char *s;
    int rc = get_str(k, m, key, &s);
    if (rc || !s)
        return rc;
    if (strcasecmp(s, "true") == 0)
        *out = 1;
    else if (strcasecmp(s, "false") == 0)
        *out = 0;
    else
        return tkm_err_set(k->err, -EINVAL,
                           "%s: %s: field \"%s\" must be true or false, not \"%s\"", k->source,
                           k->where, key, s);
    return 0;
}

/* An absolute path: p itself, or p under the kubeconfig's directory. */
static int resolve(struct kc *k, const char *p, char **out)
{
    while (p[0] == '.' && p[1] == '/')
        p += 2;
    if (p[0] == '/' || !k->base_dir) {
        *out = strdup(p);
    } else {
        size_t n = strlen(k->base_dir) + strlen(p) + 2;
        if ((*out = malloc(n)))
            snprintf(*out, n, "%s/%s", k->base_dir, p);
    }
    return *out ? 0 : tkm_err_set(k->err, -ENOMEM, "%s: out of memory", k->source);
}

/* A file field: resolved and checked readable; the error names the field. */
static int file_field(struct kc *k, const char *field, const char *p, char **out)
{
    int rc = resolve(k, p, out);
    if (rc)
        return rc;
    struct tkm_buf b = TKM_BUF_INIT(PEM_MAX);
    struct tkm_err e = {0};
    rc = tkm_read_file(*out, PEM_MAX, &b, field, &e);
    tkm_buf_release(&b);
    if (rc)
        return tkm_err_set(k->err, rc, "%s: %s: %s", k->source, k->where, e.msg);
    return 0;
}

static int data_field(struct kc *k, const char *field, const char *b64, char **out, size_t *len)
{
    struct tkm_buf b = TKM_BUF_INIT(PEM_MAX);
    int rc = tkm_base64_decode(b64, strlen(b64), &b);
    if (rc == 0 && b.len == 0)
        rc = -EINVAL;
    if (rc) {
        tkm_buf_release(&b);
        return tkm_err_set(k->err, rc, "%s: %s: field \"%s\" is not valid base64", k->source,
                           k->where, field);
    }
    *out = tkm_buf_detach(&b, len);
    return *out ? 0 : tkm_err_set(k->err, -ENOMEM, "%s: out of memory", k->source);
}

/* The entry of list (clusters, users, contexts) named name, and its index. */
static const struct k8s__ynode *find_named(struct kc *k, const struct k8s__ynode *root,
                                           const char *list, const char *name, size_t *idx)
{
    const struct k8s__ynode *l = k8s__yaml_get(root, list);
    if (!l || l->kind != K8S_Y_SEQ)
        return NULL;
    (void)k;
    for (size_t i = 0; i < l->n; i++) {
        const struct k8s__ynode *n = k8s__yaml_get(l->items[i], "name");
        if (n && n->kind == K8S_Y_SCALAR && strcmp(n->str, name) == 0) {
            *idx = i;
            return l->items[i];
        }
    }
    return NULL;
}

static int parse_cluster(struct kc *k, const struct k8s__ynode *cl)
{
    const char *server, *ca, *ca_data, *sni;
    int rc;
    if ((rc = get_str(k, cl, "server", &server)) ||
        (rc = get_str(k, cl, "certificate-authority", &ca)) ||
        (rc = get_str(k, cl, "certificate-authority-data", &ca_data)) ||
        (rc = get_str(k, cl, "tls-server-name", &sni)) ||
        (rc = get_bool(k, cl, "insecure-skip-tls-verify", &k->c->insecure)))
        return rc;
    if (!server)
        return tkm_err_set(k->err, -EINVAL, "%s: %s: field \"server\" is missing", k->source,
                           k->where);
    if (strncmp(server, "https://", 8) != 0 && strncmp(server, "http://", 7) != 0)
        return tkm_err_set(k->err, -EINVAL,
                           "%s: %s: server \"%s\" must start with https:// (or http://)", k->source,
                           k->where, server);
    size_t sl = strlen(server);
    while (sl > 8 && server[sl - 1] == '/')
        sl--;
    if (!(k->c->server = strndup(server, sl)) || (sni && !(k->c->tls_server_name = strdup(sni))))
        return tkm_err_set(k->err, -ENOMEM, "%s: out of memory", k->source);
    if (ca_data)
        return data_field(k, "certificate-authority-data", ca_data, &k->c->ca_pem,
                          &k->c->ca_pem_len);
    if (ca)
        return file_field(k, "certificate-authority", ca, &k->c->ca_file);
    return 0;
}

static int parse_exec(struct kc *k, const struct k8s__ynode *ex)
{
    const char *cmd, *api, *mode;
    int rc, pci = 0;
    if ((rc = get_str(k, ex, "command", &cmd)) || (rc = get_str(k, ex, "apiVersion", &api)) ||
        (rc = get_str(k, ex, "interactiveMode", &mode)) ||
        (rc = get_bool(k, ex, "provideClusterInfo", &pci)))
        return rc;
    if (!cmd)
        return tkm_err_set(k->err, -EINVAL, "%s: %s: exec: field \"command\" is missing", k->source,
                           k->where);
    if (api && strcmp(api, "client.authentication.k8s.io/v1") != 0 &&
        strcmp(api, "client.authentication.k8s.io/v1beta1") != 0)
        return tkm_err_set(k->err, -EINVAL,
                           "%s: %s: exec: apiVersion \"%s\" is not supported (use "
                           "client.authentication.k8s.io/v1)",
                           k->source, k->where, api);
    if (mode && strcmp(mode, "Always") == 0)
        return tkm_err_set(k->err, -EINVAL,
                           "%s: %s: exec: interactiveMode Always needs a terminal; tkm never "
                           "prompts (use Never or IfAvailable)",
                           k->source, k->where);
    struct k8s_exec_config *e = calloc(1, sizeof *e);
    if (!e)
        return tkm_err_set(k->err, -ENOMEM, "%s: out of memory", k->source);
    k->c->exec = e;
    e->timeout_ms = 10000;
    e->provide_cluster_info = pci;
    if (strchr(cmd, '/') ? resolve(k, cmd, &e->command) : dup_opt(&e->command, cmd))
        return tkm_err_set(k->err, -ENOMEM, "%s: out of memory", k->source);
    if (dup_opt(&e->api_version, api ? api : "client.authentication.k8s.io/v1"))
        return tkm_err_set(k->err, -ENOMEM, "%s: out of memory", k->source);
    const struct k8s__ynode *args = k8s__yaml_get(ex, "args");
    if (args && args->kind != K8S_Y_SEQ)
        return tkm_err_set(k->err, -EINVAL, "%s: %s: exec: \"args\" must be a list", k->source,
                           k->where);
    if (args && args->n) {
        if (!(e->args = calloc(args->n, sizeof *e->args)))
            return tkm_err_set(k->err, -ENOMEM, "%s: out of memory", k->source);
        for (size_t i = 0; i < args->n; i++) {
            if (args->items[i]->kind != K8S_Y_SCALAR)
                return tkm_err_set(k->err, -EINVAL, "%s: %s: exec: args[%zu] must be a string",
                                   k->source, k->where, i);
            if (!(e->args[e->nargs++] = strdup(args->items[i]->str)))
                return tkm_err_set(k->err, -ENOMEM, "%s: out of memory", k->source);
        }
    }
    const struct k8s__ynode *env = k8s__yaml_get(ex, "env");
    if (env && env->kind != K8S_Y_SEQ)
        return tkm_err_set(k->err, -EINVAL, "%s: %s: exec: \"env\" must be a list", k->source,
                           k->where);
    if (env && env->n) {
        if (!(e->env = calloc(env->n, sizeof *e->env)))
            return tkm_err_set(k->err, -ENOMEM, "%s: out of memory", k->source);
        for (size_t i = 0; i < env->n; i++) {
            const char *name, *value;
            if ((rc = get_str(k, env->items[i], "name", &name)) ||
                (rc = get_str(k, env->items[i], "value", &value)))
                return rc;
            if (!name || strchr(name, '='))
                return tkm_err_set(k->err, -EINVAL,
                                   "%s: %s: exec: env[%zu] needs a \"name\" without '='", k->source,
                                   k->where, i);
            size_t n = strlen(name) + (value ? strlen(value) : 0) + 2;
            if (!(e->env[e->nenv] = malloc(n)))
                return tkm_err_set(k->err, -ENOMEM, "%s: out of memory", k->source);
            snprintf(e->env[e->nenv++], n, "%s=%s", name, value ? value : "");
        }
    }
    return 0;
}

/* Counts the auth methods a user sets; names them for the error. */
static int parse_user(struct kc *k, const struct k8s__ynode *u)
{
    const char *tok, *tokf, *cert, *key, *cert_d, *key_d, *basic, *pass;
    int rc;
    if ((rc = get_str(k, u, "token", &tok)) || (rc = get_str(k, u, "tokenFile", &tokf)) ||
        (rc = get_str(k, u, "client-certificate", &cert)) ||
        (rc = get_str(k, u, "client-key", &key)) ||
        (rc = get_str(k, u, "client-certificate-data", &cert_d)) ||
        (rc = get_str(k, u, "client-key-data", &key_d)) ||
        (rc = get_str(k, u, "username", &basic)) || (rc = get_str(k, u, "password", &pass)))
        return rc;
    const struct k8s__ynode *ex = k8s__yaml_get(u, "exec");
    const struct k8s__ynode *ap = k8s__yaml_get(u, "auth-provider");
    const char *m[8];
    int nm = 0;
    if (tok)
        m[nm++] = "token";
    if (tokf)
        m[nm++] = "tokenFile";
    if (cert || key || cert_d || key_d)
        m[nm++] = cert || key ? "client-certificate/client-key" : "client-certificate-data";
    if (ex && ex->kind != K8S_Y_SCALAR)
        m[nm++] = "exec";
    if (basic || pass)
        m[nm++] = "username/password";
    if (ap && ap->kind != K8S_Y_SCALAR)
        m[nm++] = "auth-provider";
    if (nm > 1)
        return tkm_err_set(k->err, -EINVAL,
                           "%s: %s: both \"%s\" and \"%s\" are set; use one authentication method",
                           k->source, k->where, m[0], m[1]);
    if (basic || pass || (ap && ap->kind != K8S_Y_SCALAR))
        return tkm_err_set(k->err, -ENOTSUP, "%s: %s: \"%s\" authentication is not supported",
                           k->source, k->where, m[0]);
    struct k8s_config *c = k->c;
    if (tok) {
        c->auth = K8S_AUTH_TOKEN;
        return dup_opt(&c->token, tok) ? tkm_err_set(k->err, -ENOMEM, "out of memory") : 0;
    }
    if (tokf) {
        c->auth = K8S_AUTH_TOKEN_FILE;
        return file_field(k, "tokenFile", tokf, &c->token_file);
    }
    if (ex && ex->kind != K8S_Y_SCALAR) {
        c->auth = K8S_AUTH_EXEC;
        return parse_exec(k, ex);
    }
    if (!(cert || cert_d) && !(key || key_d))
        return 0;
    if (!(cert || cert_d) || !(key || key_d))
        return tkm_err_set(k->err, -EINVAL, "%s: %s: \"%s\" is set but \"%s\" is missing",
                           k->source, k->where,
                           cert || cert_d ? "client-certificate" : "client-key",
                           cert || cert_d ? "client-key" : "client-certificate");
    c->auth = K8S_AUTH_CERT;
    if ((rc = cert_d
                  ? data_field(k, "client-certificate-data", cert_d, &c->cert_pem, &c->cert_pem_len)
                  : file_field(k, "client-certificate", cert, &c->cert_file)))
        return rc;
    return key_d ? data_field(k, "client-key-data", key_d, &c->key_pem, &c->key_pem_len)
                 : file_field(k, "client-key", key, &c->key_file);
}

static int kc_select(struct kc *k, const struct k8s__ynode *root, const char *context)
{
    const char *cur = context, *cname, *uname, *ns;
    size_t i = 0;
    int rc;
    snprintf(k->where, sizeof k->where, "top level");
    if (!cur && (rc = get_str(k, root, "current-context", &cur)))
        return rc;
    if (!cur)
        return tkm_err_set(k->err, -EINVAL, "%s: no current-context set and no context chosen",
                           k->source);
    const struct k8s__ynode *ctx = find_named(k, root, "contexts", cur, &i);
    if (!ctx)
        return tkm_err_set(k->err, -ENOENT, "%s: context \"%s\" not found in \"contexts\"",
                           k->source, cur);
    snprintf(k->where, sizeof k->where, "contexts[%zu] \"%s\"", i, cur);
    const struct k8s__ynode *cx = k8s__yaml_get(ctx, "context");
    if ((rc = get_str(k, cx, "cluster", &cname)) || (rc = get_str(k, cx, "user", &uname)) ||
        (rc = get_str(k, cx, "namespace", &ns)))
        return rc;
    if (!cname)
        return tkm_err_set(k->err, -EINVAL, "%s: %s: field \"cluster\" is missing", k->source,
                           k->where);
    if (dup_opt(&k->c->context, cur) || dup_opt(&k->c->namespace, ns ? ns : "default"))
        return tkm_err_set(k->err, -ENOMEM, "%s: out of memory", k->source);
    const struct k8s__ynode *cl = find_named(k, root, "clusters", cname, &i);
    if (!cl)
        return tkm_err_set(k->err, -ENOENT, "%s: %s: cluster \"%s\" not found in \"clusters\"",
                           k->source, k->where, cname);
    snprintf(k->where, sizeof k->where, "clusters[%zu] \"%s\"", i, cname);
    if ((rc = parse_cluster(k, k8s__yaml_get(cl, "cluster"))))
        return rc;
    if (!uname)
        return 0; /* anonymous */
    const struct k8s__ynode *u = find_named(k, root, "users", uname, &i);
    if (!u)
        return tkm_err_set(k->err, -ENOENT,
                           "%s: contexts \"%s\": user \"%s\" not found in \"users\"", k->source,
                           cur, uname);
    snprintf(k->where, sizeof k->where, "users[%zu] \"%s\"", i, uname);
    return parse_user(k, k8s__yaml_get(u, "user"));
}

int k8s_config_load_yaml(struct k8s_config *c, const char *yaml, size_t len, const char *base_dir,
                         const char *source, const char *context, struct tkm_err *err)
{
    struct k8s__yaml y;
    const char *src = source ? source : "kubeconfig";
    k8s_config_release(c);
    int rc = k8s__yaml_parse(&y, yaml, len, src, err);
    if (rc)
        return rc;
    struct kc k = {.source = src, .base_dir = base_dir, .c = c, .err = err};
    if (!y.root || y.root->kind != K8S_Y_MAP) {
        rc = tkm_err_set(err, -EINVAL, "%s: not a kubeconfig (expected a YAML mapping)", src);
        goto out;
    }
    if ((rc = kc_select(&k, y.root, context)))
        goto out;
    if (dup_opt(&c->source, src))
        rc = tkm_err_set(err, -ENOMEM, "%s: out of memory", src);
out:
    k8s__yaml_release(&y);
    if (rc)
        k8s_config_release(c);
    return rc;
}

int k8s_config_load_file(struct k8s_config *c, const char *path, const char *context,
                         struct tkm_err *err)
{
    struct tkm_buf b = TKM_BUF_INIT(K8S_YAML_MAX_INPUT);
    char *abs = NULL, *dir = NULL;
    k8s_config_release(c);
    int rc = tkm_read_file(path, K8S_YAML_MAX_INPUT, &b, "kubeconfig", err);
    if (rc)
        goto out;
    if (path[0] == '/') {
        abs = strdup(path);
    } else {
        char cwd[PATH_MAX];
        if (!getcwd(cwd, sizeof cwd)) {
            rc = tkm_err_set(err, -errno, "kubeconfig \"%s\": getcwd: %s", path, strerror(errno));
            goto out;
        }
        size_t n = strlen(cwd) + strlen(path) + 2;
        if ((abs = malloc(n)))
            snprintf(abs, n, "%s/%s", cwd, path);
    }
    if (!abs || !(dir = strdup(abs))) {
        rc = tkm_err_set(err, -ENOMEM, "kubeconfig \"%s\": out of memory", path);
        goto out;
    }
    char *slash = strrchr(dir, '/');
    if (slash == dir)
        slash[1] = '\0';
    else
        *slash = '\0';
    rc = k8s_config_load_yaml(c, b.data, b.len, dir, path, context, err);
out:
    tkm_buf_release(&b);
    free(abs);
    free(dir);
    return rc;
}

int k8s_config_load_incluster(struct k8s_config *c, const char *root, struct tkm_err *err)
{
    const char *host = getenv("KUBERNETES_SERVICE_HOST");
    const char *port = getenv("KUBERNETES_SERVICE_PORT");
    char path[PATH_MAX], server[512];
    struct tkm_buf b = TKM_BUF_INIT(TOKEN_MAX);
    int rc;
    k8s_config_release(c);
    if (!host || !*host || !port || !*port)
        return tkm_err_set(err, -ENOENT,
                           "in-cluster: KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT must "
                           "be set (not running in a pod?)");
    if (!root || !*root)
        root = "/";
    snprintf(server, sizeof server, strchr(host, ':') ? "https://[%s]:%s" : "https://%s:%s", host,
             port);
    snprintf(path, sizeof path, "%s/%s/token", root, SA_DIR);
    if ((rc = tkm_read_file(path, TOKEN_MAX, &b, "in-cluster service-account token", err)))
        goto out;
    k8s__trim(&b);
    if (b.len == 0) {
        rc = tkm_err_set(err, -EINVAL, "in-cluster: service-account token \"%s\" is empty", path);
        goto out;
    }
    c->auth = K8S_AUTH_TOKEN_FILE;
    if (dup_opt(&c->token_file, path) || !(c->token = tkm_buf_detach(&b, NULL)) ||
        dup_opt(&c->server, server) || dup_opt(&c->source, "in-cluster"))
        goto nomem;
    snprintf(path, sizeof path, "%s/%s/ca.crt", root, SA_DIR);
    if ((rc = tkm_read_file(path, PEM_MAX, &b, "in-cluster CA", err)))
        goto out;
    tkm_buf_release(&b);
    if (dup_opt(&c->ca_file, path))
        goto nomem;
    snprintf(path, sizeof path, "%s/%s/namespace", root, SA_DIR);
    if (tkm_read_file(path, 256, &b, "namespace", NULL) == 0) {
        k8s__trim(&b);
        if (b.len && !(c->namespace = tkm_buf_detach(&b, NULL)))
            goto nomem;
    }
    if (!c->namespace && dup_opt(&c->namespace, "default"))
        goto nomem;
    rc = 0;
    goto out;
nomem:
    rc = tkm_err_set(err, -ENOMEM, "in-cluster config: out of memory");
out:
    tkm_buf_release(&b);
    if (rc)
        k8s_config_release(c);
    return rc;
}

int k8s_config_load_default(struct k8s_config *c, const char *kubeconfig_arg, struct tkm_err *err)
{
    if (kubeconfig_arg && *kubeconfig_arg)
        return k8s_config_load_file(c, kubeconfig_arg, NULL, err);
    const char *env = getenv("KUBECONFIG");
    if (env && *env) {
        const char *p = env;
        while (*p) {
            const char *e = strchr(p, ':');
            size_t n = e ? (size_t)(e - p) : strlen(p);
            char path[PATH_MAX];
            if (n && n < sizeof path) {
                memcpy(path, p, n);
                path[n] = '\0';
                if (access(path, F_OK) == 0)
                    return k8s_config_load_file(c, path, NULL, err);
            }
            p += n + (e ? 1 : 0);
        }
        return tkm_err_set(err, -ENOENT, "KUBECONFIG=\"%s\": none of its files exists", env);
    }
    if (getenv("KUBERNETES_SERVICE_HOST"))
        return k8s_config_load_incluster(c, NULL, err);
    const char *home = getenv("HOME");
    char path[PATH_MAX];
    if (home && *home) {
        snprintf(path, sizeof path, "%s/.kube/config", home);
        if (access(path, F_OK) == 0)
            return k8s_config_load_file(c, path, NULL, err);
    }
    return tkm_err_set(err, -ENOENT,
                       "no Kubernetes configuration: pass --kubeconfig, set KUBECONFIG, run in a "
                       "pod, or create ~/.kube/config");
}
