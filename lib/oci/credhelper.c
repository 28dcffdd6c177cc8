/* credhelper.c - docker credential helpers (docker-credential-<name> get); see auth.h. */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <openssl/crypto.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <tkm/buf.h>
#include <tkm/oci/auth.h>
#include <tkm/oci/ref.h>
#include <tkm/util.h>

#define HELPER_OUT_MAX    (64u << 10)
#define HELPER_TIMEOUT_MS 10000

extern char **environ;

static int helper_name_ok(const char *s)
{
    if (!*s || strlen(s) > 64)
        return 0;
    for (; *s; s++)
        if (!isalnum((unsigned char)*s) && *s != '-' && *s != '_' && *s != '.')
            return 0;
    return 1;
}

/* Reads the child's stdout into out until EOF or the deadline. */
static int read_output(int fd, struct tkm_buf *out, uint64_t deadline)
{
    char chunk[4096];
    for (;;) {
        uint64_t now = tkm_now_ms();
        if (now >= deadline)
            return -ETIMEDOUT;
        struct pollfd p = {.fd = fd, .events = POLLIN};
        int pr = poll(&p, 1, (int)(deadline - now));
        if (pr < 0 && errno == EINTR)
            continue;
        if (pr < 0)
            return -errno;
        if (pr == 0)
            return -ETIMEDOUT;
        ssize_t r = read(fd, chunk, sizeof chunk);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return -errno;
        if (r == 0)
            return 0;
        if (tkm_buf_append(out, chunk, (size_t)r) != 0)
            return -E2BIG;
    }
}

/* write() that turns a SIGPIPE (the helper exited early) into -EPIPE without
 * touching the process's signal dispositions. */
static int write_nosigpipe(int fd, const char *p, size_t n)
{
    sigset_t pipe_set, old;
    int rc = 0;
    sigemptyset(&pipe_set);
    sigaddset(&pipe_set, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe_set, &old);
    ssize_t w = write(fd, p, n);
    if (w < 0)
        rc = -errno;
    else if ((size_t)w != n)
        rc = -EIO;
    if (rc == -EPIPE) {
        struct timespec zero = {0, 0};
        while (sigtimedwait(&pipe_set, NULL, &zero) < 0 && errno == EINTR)
            ;
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return rc;
}

static int parse_reply(const struct tkm_buf *b, const char *prog, struct tkm_oci_creds *out,
                       struct tkm_err *err)
{
    json_t *j = json_loadb(b->data, b->len, JSON_REJECT_DUPLICATES, NULL);
    const char *user = json_string_value(json_object_get(j, "Username"));
    const char *secret = json_string_value(json_object_get(j, "Secret"));
    int rc = 0;
    memset(out, 0, sizeof *out);
    if (!user || !secret || !*secret) {
        rc = tkm_err_set(err, -EINVAL, "%s: reply has no Username/Secret", prog);
        goto out;
    }
    if (strcmp(user, "<token>") == 0) { /* an identity token, as docker login stores them */
        if (strlen(secret) >= sizeof out->identity_token)
            rc = tkm_err_set(err, -EINVAL, "%s: identity token too long", prog);
        else
            memcpy(out->identity_token, secret, strlen(secret) + 1);
    } else if (strlen(user) >= sizeof out->username || strlen(secret) >= sizeof out->password) {
        rc = tkm_err_set(err, -EINVAL, "%s: user or secret too long", prog);
    } else {
        memcpy(out->username, user, strlen(user) + 1);
        memcpy(out->password, secret, strlen(secret) + 1);
    }
    snprintf(out->source, sizeof out->source, "credential helper %s", prog);
out:
    json_decref(j);
    if (rc)
        tkm_oci_creds_wipe(out);
    return rc;
}

int tkm_oci_creds_from_helper(const char *helper, const char *host, struct tkm_oci_creds *out,
                              struct tkm_err *err)
{
    struct tkm_buf reply = TKM_BUF_INIT(HELPER_OUT_MAX);
    posix_spawn_file_actions_t fa;
    int in[2] = {-1, -1}, outp[2] = {-1, -1}, rc = 0, fa_ready = 0, st = 0;
    pid_t pid = -1;
    char prog[96], url[TKM_OCI_NAME_MAX + 16];
    if (!helper_name_ok(helper))
        return tkm_err_set(err, -EINVAL, "credential helper name '%.80s' is not [A-Za-z0-9._-]+",
                           helper);
    snprintf(prog, sizeof prog, "docker-credential-%s", helper);
    /* Docker stores Docker Hub under its v1 index URL; other registries by host. */
    int hub = strcmp(host, TKM_OCI_DOCKER_HUB) == 0;
    snprintf(url, sizeof url, "%s", hub ? "https://index.docker.io/v1/" : host);
    if (pipe2(in, O_CLOEXEC) != 0 || pipe2(outp, O_CLOEXEC) != 0) {
        rc = tkm_err_set(err, -errno, "%s: pipe: %s", prog, strerror(errno));
        goto out;
    }
    if ((rc = -posix_spawn_file_actions_init(&fa)) != 0)
        goto out;
    fa_ready = 1;
    posix_spawn_file_actions_adddup2(&fa, in[0], 0);
    posix_spawn_file_actions_adddup2(&fa, outp[1], 1);
    posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
    char *argv[] = {prog, "get", NULL};
    int sr = posix_spawnp(&pid, prog, &fa, NULL, argv, environ);
    if (sr != 0) {
        pid = -1;
        /* Not -ENOENT: that would read as "no credentials" and go on anonymously. */
        rc = tkm_err_set(err, -ENOEXEC, "%s (credsStore/credHelpers in the docker config): %s",
                         prog, strerror(sr));
        goto out;
    }
    close(in[0]);
    close(outp[1]);
    in[0] = outp[1] = -1;
    /* EPIPE: the helper exited without reading (e.g. exec failed: status 127 below). */
    if ((rc = write_nosigpipe(in[1], url, strlen(url))) != 0 && rc != -EPIPE)
        rc = tkm_err_set(err, rc, "%s: write: %s", prog, strerror(-rc));
    else
        rc = 0;
    close(in[1]);
    in[1] = -1;
    if (rc == 0 && (rc = read_output(outp[0], &reply, tkm_now_ms() + HELPER_TIMEOUT_MS)) != 0)
        rc = tkm_err_set(err, rc, "%s get: %s", prog,
                         rc == -ETIMEDOUT ? "no answer within 10 s" : strerror(-rc));
out:
    if (pid > 0) {
        if (rc)
            kill(pid, SIGKILL);
        while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
            ;
        while (reply.len > 0 && isspace((unsigned char)reply.data[reply.len - 1]))
            reply.data[--reply.len] = '\0';
        if (rc == 0 && WIFEXITED(st) && WEXITSTATUS(st) == 127)
            rc = tkm_err_set(err, -ENOEXEC,
                             "%s (credsStore/credHelpers in the docker config): not found on PATH",
                             prog);
        else if (rc == 0 && !(WIFEXITED(st) && WEXITSTATUS(st) == 0))
            rc = strstr(reply.data, "not found")
                     ? -ENOENT
                     : tkm_err_set(err, -EIO, "%s get %s failed: %.200s", prog, url, reply.data);
        if (rc == 0)
            rc = parse_reply(&reply, prog, out, err);
    }
    if (fa_ready)
        posix_spawn_file_actions_destroy(&fa);
    for (int i = 0; i < 2; i++) {
        if (in[i] >= 0)
            close(in[i]);
        if (outp[i] >= 0)
            close(outp[i]);
    }
    OPENSSL_cleanse(reply.data, reply.len);
    tkm_buf_release(&reply);
    return rc;
}
