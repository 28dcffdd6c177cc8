/* spawn.c - run a helper program with captured output and a timeout; see spawn.h. */
#include <tkm/spawn.h>

#include <errno.h>
#include <fcntl.h>
#include <openssl/crypto.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <tkm/util.h>

extern char **environ;

/* One run: the descriptors the parent holds and what it has written. */
struct run {
    const struct tkm_spawn_opts *o;
    struct tkm_spawn_result *r;
    const char *name;
    int in, out, err; /* parent ends; -1 once closed */
    size_t in_off;
    size_t out_max;
    int got_epipe;
};

static void close_fd(int *fd)
{
    if (*fd >= 0)
        close(*fd);
    *fd = -1;
}

/* Writes what stdin can take now; closes it when all is written or the
 * child stopped reading. */
static int feed_stdin(struct run *s)
{
    const char *p = s->o->stdin_data;
    while (s->in_off < s->o->stdin_len) {
        ssize_t w = write(s->in, p + s->in_off, s->o->stdin_len - s->in_off);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return 0;
        if (w < 0 && errno == EPIPE) { /* it exited or closed stdin: not our error */
            s->got_epipe = 1;
            break;
        }
        if (w < 0)
            return -errno;
        s->in_off += (size_t)w;
    }
    close_fd(&s->in);
    return 0;
}

/* Reads one chunk from *fd into b; closes *fd at EOF. */
static int drain(struct run *s, int *fd, struct tkm_buf *b, int is_out)
{
    char chunk[4096];
    ssize_t n = read(*fd, chunk, sizeof chunk);
    if (n < 0 && (errno == EINTR || errno == EAGAIN))
        return 0;
    if (n <= 0) {
        close_fd(fd);
        return 0;
    }
    size_t room = b->max - b->len;
    if (is_out && (size_t)n > room)
        return -E2BIG;
    if ((size_t)n > room) {
        s->r->stderr_truncated = 1;
        n = (ssize_t)room;
    }
    return n > 0 ? tkm_buf_append(b, chunk, (size_t)n) : 0;
}

/* Moves bytes until stdout and stderr are both closed, or the deadline. */
static int pump(struct run *s, uint64_t deadline)
{
    int rc = 0;
    while (rc == 0 && (s->out >= 0 || s->err >= 0)) {
        struct pollfd p[3] = {{.fd = s->out, .events = POLLIN},
                              {.fd = s->err, .events = POLLIN},
                              {.fd = s->in, .events = POLLOUT}};
        uint64_t now = tkm_now_ms();
        if (now >= deadline)
            return -ETIMEDOUT;
        int pr = poll(p, 3, (int)(deadline - now));
        if (pr < 0 && errno == EINTR)
            continue;
        if (pr < 0)
            return -errno;
        if (s->in >= 0 && (p[2].revents & (POLLOUT | POLLERR | POLLHUP)))
            rc = feed_stdin(s);
        if (rc == 0 && s->out >= 0 && (p[0].revents & (POLLIN | POLLHUP | POLLERR)))
            rc = drain(s, &s->out, &s->r->out, 1);
        if (rc == 0 && s->err >= 0 && (p[1].revents & (POLLIN | POLLHUP | POLLERR)))
            rc = drain(s, &s->err, &s->r->err, 0);
    }
    return rc;
}

/* Waits for the child to exit by the deadline (it may close its output and
 * go on running). Returns 0 with *st set, or -ETIMEDOUT. */
static int wait_exit(pid_t pid, uint64_t deadline, int *st)
{
    for (;;) {
        pid_t w = waitpid(pid, st, WNOHANG);
        if (w == pid)
            return 0;
        if (w < 0 && errno != EINTR)
            return -errno;
        uint64_t now = tkm_now_ms();
        if (now >= deadline)
            return -ETIMEDOUT;
        uint64_t left = deadline - now;
        struct timespec ts = {0, (long)(left < 10 ? left : 10) * 1000000L};
        nanosleep(&ts, NULL);
    }
}

static void reap(pid_t pid, int *st)
{
    while (waitpid(pid, st, 0) < 0 && errno == EINTR)
        ;
}

/* The program's path: argv[0] itself when it has a '/', else the first
 * executable regular file named so in a $PATH directory (looked up here, in
 * the parent, so that the child only calls async-signal-safe functions). */
static int find_program(const char *prog, char *out, size_t size)
{
    const char *path = getenv("PATH");
    struct stat st;
    int rc = -ENOENT;
    if (strchr(prog, '/'))
        return snprintf(out, size, "%s", prog) < (int)size ? 0 : -ENAMETOOLONG;
    if (!path || !*path)
        path = "/usr/local/bin:/usr/bin:/bin";
    while (*path) {
        size_t n = strcspn(path, ":");
        int w = snprintf(out, size, "%.*s/%s", (int)n, n ? path : ".", prog);
        path += n + (path[n] == ':');
        if (w < 0 || (size_t)w >= size || stat(out, &st) != 0 || !S_ISREG(st.st_mode))
            continue;
        if (access(out, X_OK) == 0)
            return 0;
        rc = -EACCES;
    }
    return rc;
}

/* In the child, between fork() and execve(): async-signal-safe calls only.
 * Reports a failure as its errno on the report pipe. */
static _Noreturn void child_exec(const char *path, const struct run *s, const int kid[3],
                                 const sigset_t *mask, int report)
{
    struct sigaction dfl;
    int e, null_fd = -1;
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    sigaction(SIGPIPE, &dfl, NULL);
    setpgid(0, 0);
    if (kid[0] < 0 && (null_fd = open("/dev/null", O_RDONLY | O_CLOEXEC)) < 0)
        goto fail;
    if (dup2(kid[0] >= 0 ? kid[0] : null_fd, 0) < 0 || dup2(kid[1], 1) < 0 || dup2(kid[2], 2) < 0)
        goto fail;
    sigprocmask(SIG_SETMASK, mask, NULL);
    execve(path, s->o->argv, s->o->envp ? s->o->envp : environ);
fail:
    e = errno;
    if (write(report, &e, sizeof e) < 0)
        e = 0;
    _exit(127);
}

/* Starts the child with its pipe ends on 0/1/2, in a process group of its
 * own; fails (the child reaped) when it could not exec. */
static int start(struct run *s, const int kid[3], const sigset_t *mask, pid_t *pid,
                 struct tkm_err *err)
{
    char path[4096];
    int rep[2] = {-1, -1}, e = 0, st;
    int rc = find_program(s->o->argv[0], path, sizeof path);
    if (rc == -ENOENT)
        return tkm_err_set(err, rc, "%s: cannot run: %s", s->name,
                           strchr(s->o->argv[0], '/') ? "no such file"
                                                      : "program not found on PATH");
    if (rc)
        return tkm_err_set(err, rc, "%s: cannot run: %s", s->name, strerror(-rc));
    if (pipe2(rep, O_CLOEXEC) != 0)
        return tkm_err_set(err, -errno, "%s: pipe: %s", s->name, strerror(errno));
    *pid = fork();
    if (*pid == 0)
        child_exec(path, s, kid, mask, rep[1]);
    if (*pid < 0) {
        rc = tkm_err_set(err, -errno, "%s: fork: %s", s->name, strerror(errno));
        goto out;
    }
    setpgid(*pid, *pid); /* also here: no window in which kill(-pid) misses */
    close(rep[1]);
    rep[1] = -1;
    ssize_t n;
    while ((n = read(rep[0], &e, sizeof e)) < 0 && errno == EINTR)
        ;
    if (n == (ssize_t)sizeof e) { /* exec failed: the child has exited */
        reap(*pid, &st);
        *pid = -1;
        if (e == ENOENT)
            rc = tkm_err_set(err, -ENOENT, "%s: cannot run %s: no such file", s->name, path);
        else
            rc = tkm_err_set(err, -e, "%s: cannot run %s: %s", s->name, path, strerror(e));
    }
out:
    if (rep[0] >= 0)
        close(rep[0]);
    if (rep[1] >= 0)
        close(rep[1]);
    return rc;
}

/* Creates the pipes, all close-on-exec: s->in/out/err get the parent's ends
 * (stdin's only with stdin_data, non-blocking), kids[0..2] the child's. */
static int make_pipes(struct run *s, int kids[3], struct tkm_err *err)
{
    int p[2];
    if (s->o->stdin_data) {
        if (pipe2(p, O_CLOEXEC) != 0)
            goto fail;
        kids[0] = p[0];
        s->in = p[1];
        if (fcntl(s->in, F_SETFL, O_NONBLOCK) != 0)
            goto fail;
    }
    if (pipe2(p, O_CLOEXEC) != 0)
        goto fail;
    s->out = p[0];
    kids[1] = p[1];
    if (pipe2(p, O_CLOEXEC) != 0)
        goto fail;
    s->err = p[0];
    kids[2] = p[1];
    return 0;
fail:
    return tkm_err_set(err, -errno, "%s: pipe: %s", s->name, strerror(errno));
}

static void fill_status(struct tkm_spawn_result *r, int st)
{
    if (WIFEXITED(st)) {
        r->exited = 1;
        r->exit_status = WEXITSTATUS(st);
    } else if (WIFSIGNALED(st)) {
        r->signaled = 1;
        r->term_signal = WTERMSIG(st);
    }
}

int tkm_spawn_run(const struct tkm_spawn_opts *o, struct tkm_spawn_result *r, struct tkm_err *err)
{
    struct run s = {.o = o, .r = r, .in = -1, .out = -1, .err = -1};
    int kids[3] = {-1, -1, -1}, rc, st = 0;
    pid_t pid = -1;
    sigset_t pipe_set, old;
    memset(r, 0, sizeof *r);
    tkm_buf_init(&r->out, o && o->stdout_max ? o->stdout_max : TKM_SPAWN_STDOUT_MAX_DEFAULT);
    tkm_buf_init(&r->err, o && o->stderr_max ? o->stderr_max : TKM_SPAWN_STDERR_MAX_DEFAULT);
    if (!o || !o->argv || !o->argv[0] || !o->argv[0][0])
        return tkm_err_set(err, -EINVAL, "spawn: no program to run");
    s.name = o->name ? o->name : o->argv[0];
    uint64_t tmo = o->timeout_ms ? o->timeout_ms : TKM_SPAWN_TIMEOUT_MS_DEFAULT;
    sigemptyset(&pipe_set);
    sigaddset(&pipe_set, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe_set, &old);
    if ((rc = make_pipes(&s, kids, err)) != 0 || (rc = start(&s, kids, &old, &pid, err)) != 0) {
        pid = -1;
        goto out;
    }
    for (int i = 0; i < 3; i++)
        close_fd(&kids[i]);
    uint64_t deadline = tkm_now_ms() + tmo;
    if ((rc = pump(&s, deadline)) == 0 && (rc = wait_exit(pid, deadline, &st)) == 0)
        pid = -1; /* reaped */
    if (rc == -ETIMEDOUT) {
        r->timed_out = 1;
        tkm_err_set(err, rc, "%s did not finish within %llu ms (killed with its process group)",
                    s.name, (unsigned long long)tmo);
    } else if (rc == -E2BIG) {
        tkm_err_set(err, rc, "%s: output larger than %zu bytes (killed with its process group)",
                    s.name, r->out.max);
    } else if (rc) {
        tkm_err_set(err, rc, "%s: %s", s.name, strerror(-rc));
    }
out:
    if (pid > 0) { /* failed while it runs: end the group, then reap */
        kill(-pid, SIGKILL);
        reap(pid, &st);
    }
    if (pid > 0 || rc == 0)
        fill_status(r, st);
    for (int i = 0; i < 3; i++)
        close_fd(&kids[i]);
    close_fd(&s.in);
    close_fd(&s.out);
    close_fd(&s.err);
    if (s.got_epipe) { /* the SIGPIPE our write raised: consume it before unblocking */
        struct timespec zero = {0, 0};
        while (sigtimedwait(&pipe_set, NULL, &zero) < 0 && errno == EINTR)
            ;
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return rc;
}

void tkm_spawn_result_release(struct tkm_spawn_result *r)
{
    if (!r)
        return;
    OPENSSL_cleanse(r->out.data, r->out.len);
    tkm_buf_release(&r->out);
    tkm_buf_release(&r->err);
}

const char *tkm_spawn_status_str(const struct tkm_spawn_result *r, char *out, size_t size)
{
    if (r->exited)
        snprintf(out, size, "exited with status %d", r->exit_status);
    else if (r->signaled)
        snprintf(out, size, "was killed by signal %d (%s)", r->term_signal,
                 strsignal(r->term_signal));
    else
        snprintf(out, size, "did not end normally");
    return out;
}
