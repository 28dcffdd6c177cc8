/*
 * exec.c - client.authentication.k8s.io exec credential plugins.
 *
 * The plugin runs through tkm_spawn_run() (<tkm/spawn.h>) with stdin from
 * /dev/null (never interactive), stdout and stderr captured (each capped),
 * KUBERNETES_EXEC_INFO set, and is killed with its whole process group when it
 * outlives its timeout. Blocking: see k8s/config.h.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <jansson.h>

#include <k8s/config.h>
#include <tkm/buf.h>
#include <tkm/spawn.h>

#include "config-int.h"

extern char **environ;

#define EXEC_OUT_MAX (1u << 20)
#define EXEC_ERR_MAX 2048

void k8s_exec_result_release(struct k8s_exec_result *r)
{
    if (!r)
        return;
    free(r->token);
    free(r->cert_pem);
    free(r->key_pem);
    memset(r, 0, sizeof *r);
}

/* KUBERNETES_EXEC_INFO=<ExecCredential with spec.interactive false>. */
static char *exec_info(const struct k8s_config *c)
{
    json_t *spec = json_pack("{s:b}", "interactive", 0);
    json_t *ec = json_pack("{s:s,s:s,s:o}", "apiVersion", c->exec->api_version, "kind",
                           "ExecCredential", "spec", spec);
    char *s = NULL;
    if (ec && c->exec->provide_cluster_info) {
        json_t *cl = json_pack("{s:s?,s:s?,s:b}", "server", c->server, "tls-server-name",
                               c->tls_server_name, "insecure-skip-tls-verify", c->insecure);
        if (cl && c->ca_pem) {
            struct tkm_buf b = TKM_BUF_INIT(4 * c->ca_pem_len + 16);
            /* certificate-authority-data is base64 of the PEM. */
            static const char tbl[] =
                "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
            const unsigned char *p = (const unsigned char *)c->ca_pem;
            for (size_t i = 0; i < c->ca_pem_len; i += 3) {
                unsigned v = p[i] << 16;
                size_t left = c->ca_pem_len - i;
                if (left > 1)
                    v |= p[i + 1] << 8;
                if (left > 2)
                    v |= p[i + 2];
                char q[4] = {tbl[(v >> 18) & 63], tbl[(v >> 12) & 63],
                             left > 1 ? tbl[(v >> 6) & 63] : '=', left > 2 ? tbl[v & 63] : '='};
                tkm_buf_append(&b, q, 4);
            }
            json_object_set_new(cl, "certificate-authority-data", json_string(b.data));
            tkm_buf_release(&b);
        }
        if (cl)
            json_object_set_new(spec, "cluster", cl);
    }
    if (ec)
        s = json_dumps(ec, JSON_COMPACT);
    json_decref(ec);
    return s;
}

/* Builds argv and envp; strings in them are borrowed from c or owned by *info. */
static int build_env(const struct k8s_config *c, char **info, char ***envp)
{
    size_t n = 0;
    while (environ && environ[n])
        n++;
    char **env = calloc(n + c->exec->nenv + 2, sizeof *env);
    char *ei = exec_info(c);
    size_t k = 0;
    if (!env || !ei) {
        free(env);
        free(ei);
        return -ENOMEM;
    }
    size_t pl = strlen("KUBERNETES_EXEC_INFO=") + strlen(ei) + 1;
    *info = malloc(pl);
    if (!*info) {
        free(env);
        free(ei);
        return -ENOMEM;
    }
    snprintf(*info, pl, "KUBERNETES_EXEC_INFO=%s", ei);
    free(ei);
    for (size_t i = 0; i < n; i++)
        if (strncmp(environ[i], "KUBERNETES_EXEC_INFO=", 21) != 0)
            env[k++] = environ[i];
    for (size_t i = 0; i < c->exec->nenv; i++)
        env[k++] = c->exec->env[i];
    env[k++] = *info;
    env[k] = NULL;
    *envp = env;
    return 0;
}

static int parse_reply(const struct k8s_config *c, const struct tkm_buf *out,
                       struct k8s_exec_result *res, struct tkm_err *err)
{
    const char *cmd = c->exec->command;
    json_error_t je;
    json_t *o = json_loadb(out->data, out->len, JSON_REJECT_DUPLICATES, &je);
    int rc = -EINVAL;
    if (!json_is_object(o)) {
        tkm_err_set(err, -EINVAL,
                    "%s: exec plugin \"%s\": output is not an ExecCredential JSON object (%s)",
                    c->source, cmd, o ? "not an object" : je.text);
        goto out;
    }
    json_t *st = json_object_get(o, "status");
    const char *kind = json_string_value(json_object_get(o, "kind"));
    if (!kind || strcmp(kind, "ExecCredential") != 0 || !json_is_object(st)) {
        tkm_err_set(err, -EINVAL,
                    "%s: exec plugin \"%s\": output lacks kind ExecCredential with a status",
                    c->source, cmd);
        goto out;
    }
    const char *tok = json_string_value(json_object_get(st, "token"));
    const char *crt = json_string_value(json_object_get(st, "clientCertificateData"));
    const char *key = json_string_value(json_object_get(st, "clientKeyData"));
    const char *exp = json_string_value(json_object_get(st, "expirationTimestamp"));
    if ((crt && *crt) != (key && *key)) {
        tkm_err_set(err, -EINVAL,
                    "%s: exec plugin \"%s\": status has %s but not %s; both are required",
                    c->source, cmd, crt && *crt ? "clientCertificateData" : "clientKeyData",
                    crt && *crt ? "clientKeyData" : "clientCertificateData");
        goto out;
    }
    if (!(tok && *tok) && !(crt && *crt)) {
        tkm_err_set(err, -EINVAL,
                    "%s: exec plugin \"%s\": status has neither token nor clientCertificateData",
                    c->source, cmd);
        goto out;
    }
    if (exp && k8s__parse_time(exp, &res->expires_unix)) {
        tkm_err_set(err, -EINVAL, "%s: exec plugin \"%s\": bad expirationTimestamp \"%s\"",
                    c->source, cmd, exp);
        goto out;
    }
    if ((tok && *tok && !(res->token = strdup(tok))) ||
        (crt && *crt && (!(res->cert_pem = strdup(crt)) || !(res->key_pem = strdup(key))))) {
        tkm_err_set(err, -ENOMEM, "exec plugin: out of memory");
        rc = -ENOMEM;
        goto out;
    }
    res->cert_pem_len = res->cert_pem ? strlen(res->cert_pem) : 0;
    res->key_pem_len = res->key_pem ? strlen(res->key_pem) : 0;
    rc = 0;
out:
    json_decref(o);
    if (rc)
        k8s_exec_result_release(res);
    return rc;
}

int k8s_exec_run(const struct k8s_config *c, struct k8s_exec_result *res, struct tkm_err *err)
{
    char *info = NULL, **envp = NULL, **argv = NULL, name[512], what[64];
    struct tkm_spawn_result out;
    struct tkm_err se = {0};
    int rc, ran = 0;
    memset(res, 0, sizeof *res);
    if (!c->exec || !c->exec->command)
        return tkm_err_set(err, -EINVAL, "%s: no exec plugin configured", c->source);
    const char *cmd = c->exec->command;
    snprintf(name, sizeof name, "%s: exec plugin \"%s\"", c->source, cmd);
    argv = calloc(c->exec->nargs + 2, sizeof *argv);
    if (!argv || build_env(c, &info, &envp)) {
        rc = tkm_err_set(err, -ENOMEM, "exec plugin: out of memory");
        goto out;
    }
    argv[0] = (char *)cmd;
    for (size_t i = 0; i < c->exec->nargs; i++)
        argv[i + 1] = c->exec->args[i];
    /* stdin is /dev/null: never interactive. */
    struct tkm_spawn_opts so = {.argv = argv,
                                .envp = envp,
                                .name = name,
                                .stdout_max = EXEC_OUT_MAX,
                                .stderr_max = EXEC_ERR_MAX,
                                .timeout_ms = c->exec->timeout_ms ? c->exec->timeout_ms : 10000};
    rc = tkm_spawn_run(&so, &out, &se);
    ran = 1;
    if (rc) {
        rc = tkm_err_set(err, rc, "%s", se.msg);
        goto out;
    }
    k8s__trim(&out.err);
    if (!out.exited || out.exit_status != 0) {
        rc =
            tkm_err_set(err, -EIO, "%s %s%s%s", name, tkm_spawn_status_str(&out, what, sizeof what),
                        out.err.len ? ": " : "", out.err.data);
        goto out;
    }
    rc = parse_reply(c, &out.out, res, err);
out:
    if (ran)
        tkm_spawn_result_release(&out);
    free(argv);
    free(envp);
    free(info);
    return rc;
}
