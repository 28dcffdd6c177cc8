/*
 * spawn.h - run a helper program to completion: docker credential helpers
 * (lib/oci/credhelper.c) and kubeconfig exec plugins (k8sclient/exec.c).
 *
 * tkm_spawn_run() starts argv[0] with fork + execve (a name without '/' is
 * looked up on the caller's $PATH before the fork; an exec failure comes back
 * from the child through a close-on-exec pipe, so "not found" is an error
 * code, not an exit status 127) with the argv and envp given, writes
 * stdin_data to its stdin (or gives it /dev/null), captures stdout and stderr
 * up to their caps, and waits at most timeout_ms for it to close both and
 * exit. The child leads a process group of its own: on a timeout, or when
 * stdout outgrows its cap, the WHOLE group is killed (kill(-pgid, SIGKILL))
 * and the child reaped, so what it started in the background dies with it.
 * Every descriptor is O_CLOEXEC and closed before returning; the child is
 * always reaped (no zombie). SIGPIPE from a child that exits without reading
 * its stdin is blocked in the calling thread for the duration of the call
 * and never reaches the process.
 *
 * BLOCKING: it waits for the child. Daemons call it from the libuv thread
 * pool (uv_queue_work), never on the loop thread. Thread-safe.
 *
 * Ownership: opts and every string it points to are borrowed for the call.
 * struct tkm_spawn_result is caller-owned; its buffers are owned by it and
 * freed by tkm_spawn_result_release(), which must be called after every
 * tkm_spawn_run() whatever it returned (on a failure the result holds what
 * was captured before it, e.g. the output of a program that timed out).
 */
#ifndef TKM_SPAWN_H
#define TKM_SPAWN_H

#include <stddef.h>
#include <stdint.h>

#include <tkm/buf.h>
#include <tkm/err.h>

#define TKM_SPAWN_STDOUT_MAX_DEFAULT (1u << 20)
#define TKM_SPAWN_STDERR_MAX_DEFAULT (4u << 10)
#define TKM_SPAWN_TIMEOUT_MS_DEFAULT 10000u

struct tkm_spawn_opts {
    char *const *argv;      /* NULL-terminated; argv[0] is the program. Required. */
    char *const *envp;      /* NULL-terminated environment; NULL: the caller's environ */
    const char *name;       /* how messages name the program; NULL: argv[0] */
    const void *stdin_data; /* written to stdin, then closed; NULL: stdin is /dev/null */
    size_t stdin_len;
    size_t stdout_max;   /* stdout cap; more fails the run with -E2BIG. 0: 1 MiB */
    size_t stderr_max;   /* stderr cap; more is dropped (stderr_truncated). 0: 4 KiB */
    uint64_t timeout_ms; /* 0: 10 s */
};

struct tkm_spawn_result {
    struct tkm_buf out;   /* stdout, NUL-terminated */
    struct tkm_buf err;   /* stderr, NUL-terminated, at most stderr_max bytes */
    int exited;           /* 1: the program exited; exit_status is its status */
    int exit_status;      /* 0..255 */
    int signaled;         /* 1: the program was killed by term_signal */
    int term_signal;      /* e.g. SIGKILL after a timeout */
    int timed_out;        /* 1: killed (with its group) at the timeout */
    int stderr_truncated; /* 1: stderr was longer than stderr_max */
};

/* Runs the program to its end. Returns 0 when it ran and ended (whatever its
 * exit status: read r->exited/exit_status/signaled), else a negative code
 * with err naming the program:
 *   -EINVAL     no argv[0];
 *   -ENOENT     the program was not found (on PATH, or at its path);
 *   -EACCES / another exec errno: it could not be started;
 *   -ETIMEDOUT  it did not finish within timeout_ms (its group was killed);
 *   -E2BIG      its stdout outgrew stdout_max (its group was killed);
 *   -ENOMEM, -EMFILE, -EIO and the like for local failures.
 * r is initialised by the call in every case. */
int tkm_spawn_run(const struct tkm_spawn_opts *o, struct tkm_spawn_result *r, struct tkm_err *err);

/* Frees r's buffers (the stdout buffer is wiped first: it may hold a secret).
 * NULL is a no-op. */
void tkm_spawn_result_release(struct tkm_spawn_result *r);

/* "exited with status 3", "was killed by signal 9 (Killed)" into out (for
 * messages). Returns out. */
const char *tkm_spawn_status_str(const struct tkm_spawn_result *r, char *out, size_t size);

#endif
