/*
 * exec.c - client.authentication.k8s.io exec credential plugins.
 *
 * The plugin runs with stdin from /dev/null (never interactive), stdout and
 * stderr captured through pipes (each capped), KUBERNETES_EXEC_INFO set, and
 * is killed (SIGKILL) when it outlives its timeout. Blocking: see k8s/config.h.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <jansson.h>

#include <k8s/config.h>
#include <tkm/buf.h>
#include <tkm/util.h>

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

/* Reads both pipes until EOF or the deadline. Returns 0 or -ETIMEDOUT. */
static int collect(int ofd, int efd, uint64_t deadline, struct tkm_buf *out, struct tkm_buf *errb,
                   int *overflow)
{
    struct pollfd p[2] = {{.fd = ofd, .events = POLLIN}, {.fd = efd, .events = POLLIN}};
    int open_fds = 2;
    char chunk[4096];
    while (open_fds) {
        uint64_t now = tkm_now_ms();
        if (now >= deadline)
            return -ETIMEDOUT;
        int r = poll(p, 2, (int)(deadline - now));
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return -errno;
        for (int i = 0; i < 2; i++) {
            if (p[i].fd < 0 || !(p[i].revents & (POLLIN | POLLHUP | POLLERR)))
                continue;
            ssize_t n = read(p[i].fd, chunk, sizeof chunk);
            if (n < 0 && errno == EINTR)
                continue;
            if (n <= 0) {
                p[i].fd = -1;
                open_fds--;
                continue;
            }
            struct tkm_buf *b = i == 0 ? out : errb;
            size_t room = b->max - b->len;
            if ((size_t)n > room) {
                if (i == 0)
                    *overflow = 1;
                n = (ssize_t)room;
            }
            if (n > 0 && tkm_buf_append(b, chunk, (size_t)n))
                return -ENOMEM;
        }
    }
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
    int opipe[2] = {-1, -1}, epipe[2] = {-1, -1}, rc, status = 0, overflow = 0, spawned = 0;
    char *info = NULL, **envp = NULL, **argv = NULL;
    pid_t pid = -1;
    struct tkm_buf out = TKM_BUF_INIT(EXEC_OUT_MAX), errb = TKM_BUF_INIT(EXEC_ERR_MAX);
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t attr;
    memset(res, 0, sizeof *res);
    if (!c->exec || !c->exec->command)
        return tkm_err_set(err, -EINVAL, "%s: no exec plugin configured", c->source);
    const char *cmd = c->exec->command;
    posix_spawn_file_actions_init(&fa);
    posix_spawnattr_init(&attr);
    /* Its own process group, so a timeout kills what it started too. */
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);
    posix_spawnattr_setpgroup(&attr, 0);
    if (pipe2(opipe, O_CLOEXEC) || pipe2(epipe, O_CLOEXEC)) {
        rc = tkm_err_set(err, -errno, "exec plugin \"%s\": pipe: %s", cmd, strerror(errno));
        goto out;
    }
    argv = calloc(c->exec->nargs + 2, sizeof *argv);
    if (!argv || build_env(c, &info, &envp)) {
        rc = tkm_err_set(err, -ENOMEM, "exec plugin: out of memory");
        goto out;
    }
    argv[0] = (char *)cmd;
    for (size_t i = 0; i < c->exec->nargs; i++)
        argv[i + 1] = c->exec->args[i];
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_adddup2(&fa, opipe[1], 1);
    posix_spawn_file_actions_adddup2(&fa, epipe[1], 2);
    rc = strchr(cmd, '/') ? posix_spawn(&pid, cmd, &fa, &attr, argv, envp)
                          : posix_spawnp(&pid, cmd, &fa, &attr, argv, envp);
    if (rc) {
        rc = tkm_err_set(err, -rc, "%s: exec plugin \"%s\": cannot run: %s", c->source, cmd,
                         strerror(rc));
        goto out;
    }
    spawned = 1;
    close(opipe[1]);
    close(epipe[1]);
    opipe[1] = epipe[1] = -1;
    uint64_t tmo = c->exec->timeout_ms ? c->exec->timeout_ms : 10000;
    rc = collect(opipe[0], epipe[0], tkm_now_ms() + tmo, &out, &errb, &overflow);
    if (rc == -ETIMEDOUT) {
        kill(-pid, SIGKILL);
        tkm_err_set(err, rc, "%s: exec plugin \"%s\" did not finish within %llu ms (killed)",
                    c->source, cmd, (unsigned long long)tmo);
    } else if (rc) {
        kill(-pid, SIGKILL);
        tkm_err_set(err, rc, "%s: exec plugin \"%s\": %s", c->source, cmd, strerror(-rc));
    }
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    spawned = 0;
    if (rc)
        goto out;
    k8s__trim(&errb);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        rc = tkm_err_set(err, -EIO, "%s: exec plugin \"%s\" %s %d%s%s", c->source, cmd,
                         WIFEXITED(status) ? "exited with status" : "was killed by signal",
                         WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status),
                         errb.len ? ": " : "", errb.data);
        goto out;
    }
    if (overflow) {
        rc = tkm_err_set(err, -E2BIG, "%s: exec plugin \"%s\": output larger than %u bytes",
                         c->source, cmd, EXEC_OUT_MAX);
        goto out;
    }
    rc = parse_reply(c, &out, res, err);
out:
    if (spawned) {
        kill(-pid, SIGKILL);
        waitpid(pid, &status, 0);
    }
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&attr);
    for (int i = 0; i < 2; i++) {
        if (opipe[i] >= 0)
            close(opipe[i]);
        if (epipe[i] >= 0)
            close(epipe[i]);
    }
    free(argv);
    free(envp);
    free(info);
    tkm_buf_release(&out);
    tkm_buf_release(&errb);
    return rc;
}
