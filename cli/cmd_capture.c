/*
 * cmd_capture.c - tkmctl capture: run a workload with fresh, empty cache
 * directories, then build (and push) the image of what it compiled.
 *
 * The run: a private directory (mkdtemp under $TMPDIR, mode 0700) holds
 * triton/, inductor/ and vllm/; the command gets TRITON_CACHE_DIR,
 * TORCHINDUCTOR_CACHE_DIR and VLLM_CACHE_ROOT (names overridable) pointing
 * there, with tkmctl's stdio, and SIGINT/SIGTERM/SIGHUP reaching tkmctl
 * are passed on (run_child: to the command's own process group, or on a
 * terminal where a Ctrl-C reaches both, only what the terminal did not send;
 * tkmctl waits for them with sigwaitinfo: nothing runs in a handler). tkmctl
 * returns the command's exit status (128+N for a signal N) when it failed
 * or was interrupted, and then builds nothing. After a successful run the
 * filled directories are built with tkmctl build's code (ctl_publish.h); a
 * new --output layout is written next to it under a temporary name and
 * renamed into place at the end, so an interrupt leaves no half layout. The
 * private directory is removed on every path but SIGKILL.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <tkm/archive.h>
#include <tkm/gpu/probe.h>
#include <tkm/triton/cache.h>
#include <tkm/triton/parts.h>
#include <tkm/util.h>

#include "ctl_args.h"
#include "ctl_oci.h"
#include "ctl_publish.h"
#include "ctl_signal.h"
#include "tkmctl.h"

extern char **environ;

#define CAPTURE_LABEL_PREFIX "io.tkm.capture/"
#define CAPTURE_DEPTH_MAX    64

static void usage(FILE *f)
{
    fprintf(f,
            "Usage: tkmctl capture (--output DIR | --push REF) [flags] -- COMMAND [ARGS...]\n\n"
            "Runs COMMAND with fresh, empty cache directories (TRITON_CACHE_DIR,\n"
            "TORCHINDUCTOR_CACHE_DIR, VLLM_CACHE_ROOT point into a private temporary directory),\n"
            "then packs what it compiled into an image as 'tkmctl build' does: the Triton part,\n"
            "the Inductor part and the vLLM part, each only when the command filled it (the\n"
            "Triton part is not needed when Inductor's or vLLM's is there). The config gets\n"
            "io.tkm.capture/ labels: the GPU and driver the run saw (the probe of 'tkmctl\n"
            "check') and the torch/Triton versions the caches record (docs/images.md).\n\n"
            "SIGINT, SIGTERM and SIGHUP are passed to the command (its process group; on a\n"
            "terminal a Ctrl-C reaches it directly). When the command fails (or is\n"
            "interrupted) nothing is built and tkmctl exits with its status\n"
            "(128+N for a signal N); the temporary directories are always removed. Nothing\n"
            "written into any cache directory, or one that cannot be read, is an error.\n\n"
            "Flags:\n"
            "  --output DIR       write an OCI image layout to DIR (a new DIR appears complete)\n"
            "  --tag TAG          tag in the layout (default: the --push tag, else latest)\n"
            "  --push REF         push the image to REF\n"
            "  --add-variant      add the image to the variant index at --push REF and/or --tag\n"
            "                     in --output (as 'tkmctl build --add-variant'; one GPU type)\n"
            "  --sign-key KEY     after the push, print the cosign command that signs the pushed\n"
            "                     digest with KEY (a cosign key file or KMS URI): tkm verifies\n"
            "                     signatures but does not sign images itself\n"
            "  --allow-failure    build and publish even when the command failed\n"
            "  --env-triton NAME, --env-inductor NAME, --env-vllm NAME\n"
            "                     the variables that name the cache directories (defaults\n"
            "                     TRITON_CACHE_DIR, TORCHINDUCTOR_CACHE_DIR, VLLM_CACHE_ROOT)\n"
            "  --title TEXT, --level N, --platform OS/ARCH, --torch-version V,\n"
            "  --cuda-version V, --triton-version V, --arch A, --vllm-root-env E\n"
            "                     as for 'tkmctl build'\n"
            "  --sysfs-root DIR, --procfs-root DIR, --nvml-lib LIB, --no-nvml\n"
            "                     the GPU probe, as for 'tkmctl check'\n"
            "  -o json            print the result as JSON (with commandStatus, captured per\n"
            "                     part, signCommand); the command's stdout then goes to stderr\n\n"
            "%s\n"
            "Examples:\n"
            "  tkmctl capture --push quay.io/me/cache:sm90 -- python3 warmup.py\n"
            "  tkmctl capture --output ./img -- vllm serve my-model --max-model-len 4096\n"
            "  tkmctl capture --push quay.io/me/cache:v1 --add-variant --sign-key cosign.key \\\n"
            "      -- python3 warmup.py\n",
            ctl_oci_flags_help);
}

/* One cache directory the command may fill. */
struct capture_part {
    const char *what; /* "triton" */
    const char *env;  /* the variable naming it */
    char dir[1100];   /* <private>/<what> */
    uint64_t files, bytes;
    int filled; /* holds a regular file */
};

/* Counts the regular files and their bytes under the directory at fd
 * (closed here). -errno with path named in msg when one cannot be read. */
static int count_tree(int fd, const char *path, int depth, struct capture_part *p, char *msg,
                      size_t msize)
{
    DIR *d = fdopendir(fd);
    struct dirent *e;
    int rc = 0;
    if (!d) {
        rc = -errno;
        close(fd);
        snprintf(msg, msize, "%s: %s", path, strerror(-rc));
        return rc;
    }
    errno = 0;
    while (rc == 0 && (e = readdir(d)) != NULL) {
        struct stat st;
        char sub[4096];
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        snprintf(sub, sizeof sub, "%s/%s", path, e->d_name);
        if (fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) {
            rc = -errno;
            snprintf(msg, msize, "%s: %s", sub, strerror(errno));
        } else if (S_ISREG(st.st_mode)) {
            p->files++;
            p->bytes += (uint64_t)st.st_size;
        } else if (S_ISDIR(st.st_mode)) {
            int c;
            if (depth >= CAPTURE_DEPTH_MAX) {
                snprintf(msg, msize, "%s: more than %d directories deep", sub, CAPTURE_DEPTH_MAX);
                rc = -ELOOP;
            } else if ((c = openat(dirfd(d), e->d_name,
                                   O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0) {
                rc = -errno;
                snprintf(msg, msize, "%s: %s", sub, strerror(errno));
            } else {
                rc = count_tree(c, sub, depth + 1, p, msg, msize);
            }
        }
        errno = 0;
    }
    if (rc == 0 && errno) {
        rc = -errno;
        snprintf(msg, msize, "%s: %s", path, strerror(errno));
    }
    closedir(d);
    return rc;
}

/* environ with the parts' variables set to their directories (malloc'd
 * array; the strings are the parts' and environ's). NULL: out of memory. */
static char **child_env(struct capture_part *parts, size_t n, char (*defs)[1200])
{
    size_t ne = 0;
    while (environ[ne])
        ne++;
    char **env = calloc(ne + n + 1, sizeof *env);
    size_t k = 0;
    if (!env)
        return NULL;
    for (size_t i = 0; i < ne; i++) {
        int ours = 0;
        for (size_t j = 0; j < n; j++) {
            size_t l = strlen(parts[j].env);
            ours |= strncmp(environ[i], parts[j].env, l) == 0 && environ[i][l] == '=';
        }
        if (!ours)
            env[k++] = environ[i];
    }
    for (size_t j = 0; j < n; j++) {
        snprintf(defs[j], sizeof defs[j], "%s=%s", parts[j].env, parts[j].dir);
        env[k++] = defs[j];
    }
    return env;
}

/* Runs argv until it ends, passing INT/TERM/HUP on. Without a terminal
 * (a Job, a script) it runs in a process group of its own and tkmctl sends
 * each signal to that group. On a terminal where tkmctl is the foreground
 * group, it stays in tkmctl's group (so it may read the terminal): a
 * terminal's Ctrl-C reaches it and tkmctl together, and tkmctl only passes on
 * what the terminal did not send (si_code other than SI_KERNEL). *status: its
 * exit status, 128+N for a signal N; *forwarded: the last signal tkmctl got
 * (0: none). stdout_to_stderr: the command's stdout is tkmctl's stderr (-o
 * json keeps stdout for tkmctl's JSON). Returns 0, or a negative errno when
 * it could not be started (printed, *status 127 or 126). Leaves
 * INT/TERM/HUP/CHLD blocked. */
static int run_child(char **argv, char **envp, int stdout_to_stderr, int *status, int *forwarded)
{
    sigset_t set;
    int pfd[2], st = 0, err_no = 0;
    int fg = isatty(STDIN_FILENO) && tcgetpgrp(STDIN_FILENO) == getpgrp();
    pid_t pid;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGHUP);
    sigaddset(&set, SIGCHLD);
    *forwarded = 0;
    if (pipe2(pfd, O_CLOEXEC) != 0)
        return -errno;
    fflush(NULL);
    sigprocmask(SIG_BLOCK, &set, NULL);
    if ((pid = fork()) < 0) {
        int e = errno;
        close(pfd[0]);
        close(pfd[1]);
        return -e;
    }
    if (pid == 0) {
        if (!fg)
            setpgid(0, 0);
        signal(SIGPIPE, SIG_DFL);
        if (stdout_to_stderr && dup2(STDERR_FILENO, STDOUT_FILENO) < 0)
            _exit(127);
        sigprocmask(SIG_UNBLOCK, &set, NULL);
        execvpe(argv[0], argv, envp);
        err_no = errno;
        if (write(pfd[1], &err_no, sizeof err_no) < 0) {
            /* nothing to do: the parent then sees an exit status 127 */
        }
        _exit(127);
    }
    if (!fg)
        setpgid(pid, pid); /* both sides: whichever runs first; EACCES after exec is fine */
    close(pfd[1]);
    ssize_t r;
    while ((r = read(pfd[0], &err_no, sizeof err_no)) < 0 && errno == EINTR)
        ;
    close(pfd[0]);
    if (r == (ssize_t)sizeof err_no) {
        while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
            ;
        fprintf(stderr, "tkmctl capture: cannot run %s: %s\n", argv[0], strerror(err_no));
        *status = err_no == ENOENT ? 127 : 126;
        return -err_no;
    }
    for (;;) {
        siginfo_t si;
        int sig = sigwaitinfo(&set, &si);
        if (sig < 0)
            continue; /* EINTR */
        if (sig == SIGCHLD) {
            pid_t w = waitpid(pid, &st, WNOHANG);
            if (w == pid)
                break;
            continue;
        }
        *forwarded = sig;
        fprintf(stderr, "tkmctl capture: %s: %s; nothing will be built\n", strsignal(sig),
                fg && si.si_code == SI_KERNEL ? "the command got it from the terminal"
                                              : "passing it to the command");
        if (!fg)
            kill(-pid, sig);
        else if (si.si_code != SI_KERNEL)
            kill(pid, sig);
    }
    if (*forwarded && !fg)
        kill(-pid, SIGKILL); /* what the command left running would write into the caches */
    /* a command killed by a signal was interrupted too: never published */
    if (!*forwarded && WIFSIGNALED(st))
        *forwarded = WTERMSIG(st);
    *status = WIFEXITED(st) ? WEXITSTATUS(st) : WIFSIGNALED(st) ? 128 + WTERMSIG(st) : 1;
    return 0;
}

/* The labels the run knows: GPU, driver, torch/Triton versions. kv: pairs,
 * NULL-terminated; strings in store. */
struct capture_labels {
    const char *kv[2 * 12 + 1];
    size_t n;
    char store[12][256];
};

static void label(struct capture_labels *l, const char *key, const char *val)
{
    if (!val || !val[0] || l->n >= 12)
        return;
    snprintf(l->store[l->n], sizeof l->store[l->n], "%s", val);
    l->kv[2 * l->n] = key;
    l->kv[2 * l->n + 1] = l->store[l->n];
    l->n++;
}

static void gpu_labels(struct capture_labels *l, const struct tkm_gpu_probe_opts *po)
{
    struct tkm_gpu_list gl = {0};
    struct tkm_err err = {0};
    char v[32];
    const struct tkm_gpu *g = NULL;
    if (tkm_gpu_probe(&gl, po, &err) != 0) {
        fprintf(stderr, "tkmctl capture: GPU probe: %s (the image records no GPU)\n",
                tkm_err_str(&err));
        return;
    }
    size_t usable = 0;
    for (size_t i = 0; i < gl.n; i++)
        if (gl.gpus[i].usable && usable++ == 0)
            g = &gl.gpus[i];
    if (g) {
        label(l, CAPTURE_LABEL_PREFIX "gpu-name", g->name);
        label(l, CAPTURE_LABEL_PREFIX "gpu-type", g->gpu_type);
        label(l, CAPTURE_LABEL_PREFIX "gpu-backend", g->backend);
        label(l, CAPTURE_LABEL_PREFIX "gpu-arch", g->arch);
        snprintf(v, sizeof v, "%zu", usable);
        label(l, CAPTURE_LABEL_PREFIX "gpu-count", v);
        label(l, CAPTURE_LABEL_PREFIX "driver-version", g->driver_version);
        label(l, CAPTURE_LABEL_PREFIX "cuda-driver-version", g->cuda_version);
    } else {
        fprintf(stderr, "tkmctl capture: no usable GPU found%s%s (the image records no GPU)\n",
                gl.nvml_error[0] ? ": " : "", gl.nvml_error);
    }
    tkm_gpu_list_release(&gl);
}

/* A part's scan result: 1 take it, 0 it holds no cache (left out, noted),
 * -1 an error (printed). */
static int scanned(int rc, const struct capture_part *part, const char *none,
                   const struct tkm_err *err)
{
    if (rc == -ENOENT) {
        fprintf(stderr, "tkmctl capture: %s holds %s: left out\n", part->env, none);
        return 0;
    }
    if (rc) {
        fprintf(stderr, "tkmctl capture: %s: %s\n", part->env, tkm_err_str(err));
        return -1;
    }
    return 1;
}

/* Looks into the filled parts: which the build takes (a part holding only
 * what is no cache is left out, with a note), and their versions. Returns 0
 * or 1 after printing why. */
static int scan_parts(struct capture_part *parts, struct ctl_publish *p, struct capture_labels *l)
{
    struct tkm_err err = {0};
    int rc;
    if (parts[0].filled) {
        struct tkm_triton_cache c = {0};
        if ((rc = tkm_triton_cache_scan(&c, parts[0].dir, &err)) != 0) {
            fprintf(stderr, "tkmctl capture: %s: %s\n", parts[0].env, tkm_err_str(&err));
            return 1;
        }
        if (c.n_kernels) {
            char tv[256] = "";
            size_t off = 0;
            for (size_t i = 0; i < c.summary.n_triton_versions && off < sizeof tv; i++)
                off += (size_t)snprintf(tv + off, sizeof tv - off, "%s%s", i ? "," : "",
                                        c.summary.triton_versions[i]);
            label(l, CAPTURE_LABEL_PREFIX "triton-version", tv);
            p->cache = parts[0].dir;
        } else {
            fprintf(stderr, "tkmctl capture: %s holds no Triton kernel: left out\n", parts[0].env);
        }
        tkm_triton_cache_release(&c);
    }
    if (parts[1].filled) {
        struct tkm_inductor_info in;
        rc = scanned(tkm_inductor_scan(&in, parts[1].dir, &err), &parts[1],
                     "no FX graph, AOTAutograd or generated code", &err);
        if (rc < 0)
            return 1;
        if (rc) {
            label(l, CAPTURE_LABEL_PREFIX "torch-version", in.facts.torch_version);
            if (!p->cache)
                label(l, CAPTURE_LABEL_PREFIX "triton-version", in.facts.triton_version);
            p->bo.inductor_dir = parts[1].dir;
        }
    }
    if (parts[2].filled) {
        struct tkm_vllm_info v;
        rc = scanned(tkm_vllm_scan(&v, parts[2].dir, &err), &parts[2],
                     "no torch.compile cache hash directory", &err);
        tkm_vllm_info_release(&v);
        if (rc < 0)
            return 1;
        if (rc)
            p->bo.vllm_dir = parts[2].dir;
    }
    if (!p->cache && !p->bo.inductor_dir && !p->bo.vllm_dir) {
        fprintf(stderr, "tkmctl capture: the command wrote files, but no Triton kernel, Inductor "
                        "entry or vLLM cache: nothing to publish\n");
        return 1;
    }
    return 0;
}

/* A new --output DIR is built as DIR.capture-XXXXXX next to it and renamed
 * at the end; an existing one is added to in place (its index.json is
 * replaced atomically). stage gets the staging path, or "" when none. */
static int output_stage(const char *output, char *stage, size_t size)
{
    struct stat st;
    stage[0] = '\0';
    if (!output || stat(output, &st) == 0)
        return 0;
    if (errno != ENOENT) {
        fprintf(stderr, "tkmctl capture: --output %s: %s\n", output, strerror(errno));
        return -1;
    }
    snprintf(stage, size, "%s.capture-XXXXXX", output);
    if (!mkdtemp(stage)) {
        fprintf(stderr, "tkmctl capture: --output %s: mkdtemp %s: %s\n", output, stage,
                strerror(errno));
        stage[0] = '\0';
        return -1;
    }
    return 0;
}

/* Gives every directory under path (the command's, in the private tree)
 * rwx to its owner again, so that a mode the command took away does not keep
 * the tree from being removed. Best effort. */
static void unlock_tree(int parent, const char *name, int depth)
{
    int fd;
    DIR *d;
    struct dirent *e;
    if (depth > CAPTURE_DEPTH_MAX || fchmodat(parent, name, S_IRWXU, 0) != 0 ||
        (fd = openat(parent, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0)
        return;
    if (!(d = fdopendir(fd))) {
        close(fd);
        return;
    }
    while ((e = readdir(d)) != NULL)
        if (e->d_type == DT_DIR && strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0)
            unlock_tree(dirfd(d), e->d_name, depth + 1);
    closedir(d);
}

static void remove_tree(const char *path)
{
    if (path[0])
        unlock_tree(AT_FDCWD, path, 0);
    int rc = path[0] ? tkm_rmtree_at(AT_FDCWD, path) : 0;
    if (rc != 0 && rc != -ENOENT)
        fprintf(stderr, "tkmctl capture: could not remove %s: %s\n", path, strerror(-rc));
}

struct capture_args {
    const char *sign_key, *env[3], *level, *platform;
    int allow_failure;
    struct tkm_gpu_probe_opts probe;
    char os[32], arch[32]; /* --platform, split */
};

/* Parses the flags before "--" into a and p. -1: go on; else the exit status. */
static int parse(int argc, char **argv, struct capture_args *a, struct ctl_publish *p)
{
    const struct ctl_arg args[] = {{"--output", &p->output, NULL},
                                   {"--tag", &p->tag, NULL},
                                   {"--push", &p->push, NULL},
                                   {"--add-variant", NULL, &p->add_variant},
                                   {"--sign-key", &a->sign_key, NULL},
                                   {"--allow-failure", NULL, &a->allow_failure},
                                   {"--env-triton", &a->env[0], NULL},
                                   {"--env-inductor", &a->env[1], NULL},
                                   {"--env-vllm", &a->env[2], NULL},
                                   {"--title", &p->bo.title, NULL},
                                   {"--level", &a->level, NULL},
                                   {"--platform", &a->platform, NULL},
                                   {"--torch-version", &p->bo.torch_version, NULL},
                                   {"--cuda-version", &p->bo.cuda_version, NULL},
                                   {"--triton-version", &p->bo.triton_version, NULL},
                                   {"--arch", &p->bo.arch, NULL},
                                   {"--vllm-root-env", &p->bo.vllm_root_env, NULL},
                                   {"--sysfs-root", &a->probe.sysfs_root, NULL},
                                   {"--procfs-root", &a->probe.procfs_root, NULL},
                                   {"--nvml-lib", &a->probe.nvml_lib, NULL},
                                   {"--no-nvml", NULL, &a->probe.no_nvml},
                                   {0}};
    const struct ctl_args_spec spec = {"capture", args, NULL, 0, usage, p->f};
    int st = ctl_args_parse(&spec, argc, argv);
    if (st >= 0)
        return st;
    if (!p->output && !p->push) {
        fprintf(stderr, "tkmctl capture: need --output DIR and/or --push REF\n\n");
        usage(stderr);
        return 2;
    }
    if (a->sign_key && !p->push) {
        fprintf(stderr, "tkmctl capture: --sign-key signs what --push pushed: give --push REF\n");
        return 2;
    }
    if (a->sign_key && !strstr(a->sign_key, "://") && access(a->sign_key, R_OK) != 0) {
        fprintf(stderr, "tkmctl capture: --sign-key %s: %s\n", a->sign_key, strerror(errno));
        return 2;
    }
    for (int i = 0; i < 3; i++) {
        const char *e = a->env[i];
        if (e && (!e[0] || strchr(e, '='))) {
            fprintf(stderr, "tkmctl capture: '%s' is not an environment variable name\n", e);
            return 2;
        }
    }
    if (a->level) {
        int64_t v;
        if (tkm_parse_i64(a->level, 1, 9, &v) != 0) {
            fprintf(stderr, "tkmctl capture: --level takes 1..9, not '%s'\n", a->level);
            return 2;
        }
        p->bo.gzip_level = (int)v;
    }
    if (a->platform) {
        if (ctl_parse_platform(a->platform, a->os, a->arch) != 0) {
            fprintf(stderr,
                    "tkmctl capture: --platform takes OS/ARCH (e.g. linux/arm64), not '%s'\n",
                    a->platform);
            return 2;
        }
        p->bo.os = a->os;
        p->bo.architecture = a->arch;
    }
    return ctl_publish_check(p) ? 2 : -1;
}

/* -o json's capture keys: the command's status, what each part captured, the
 * signing command. */
static json_t *capture_json(const struct capture_part *parts, int status, const char *sign)
{
    json_t *c = json_object();
    for (int i = 0; c && i < 3; i++)
        json_object_set_new(c, parts[i].what,
                            json_pack("{s:s,s:I,s:I}", "env", parts[i].env, "files",
                                      (json_int_t)parts[i].files, "bytes",
                                      (json_int_t)parts[i].bytes));
    return json_pack("{s:i,s:o*,s:s*}", "commandStatus", status, "captured", c, "signCommand",
                     sign[0] ? sign : NULL);
}

static void print_parts(const struct capture_part *parts, int status)
{
    char b[32];
    printf("command exited with status %d; captured:\n", status);
    for (int i = 0; i < 3; i++)
        printf("  %-8s %s: %llu files, %s\n", parts[i].what, parts[i].env,
               (unsigned long long)parts[i].files, ctl_human_bytes(parts[i].bytes, b, sizeof b));
}

static int cmd_capture(int argc, char **argv)
{
    static const char *const names[3] = {"TRITON_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR",
                                         "VLLM_CACHE_ROOT"};
    static const char *const what[3] = {"triton", "inductor", "vllm"};
    struct ctl_oci_flags f;
    struct ctl_publish p;
    struct capture_args a;
    struct capture_part parts[3];
    struct capture_labels labels;
    char priv[1024], stage[1200] = "", defs[3][1200], msg[4200];
    char **env = NULL;
    const char *tmp = getenv("TMPDIR");
    int dash = 1, status = 0, forwarded = 0, rc = 1, st;
    memset(&p, 0, sizeof p);
    memset(&a, 0, sizeof a);
    memset(parts, 0, sizeof parts);
    memset(&labels, 0, sizeof labels);
    ctl_oci_flags_init(&f, "push");
    p.cmd = "capture";
    p.f = &f;
    while (dash < argc && strcmp(argv[dash], "--") != 0)
        dash++;
    if ((st = parse(dash, argv, &a, &p)) >= 0)
        return st;
    if (dash + 1 >= argc) {
        fprintf(stderr, "tkmctl capture: need the command after --\n\n");
        usage(stderr);
        return 2;
    }
    snprintf(priv, sizeof priv, "%s/tkmctl-capture-XXXXXX", tmp && tmp[0] ? tmp : "/tmp");
    if (!mkdtemp(priv)) {
        fprintf(stderr, "tkmctl capture: mkdtemp %s: %s\n", priv, strerror(errno));
        return 1;
    }
    for (int i = 0; i < 3; i++) {
        parts[i].what = what[i];
        parts[i].env = a.env[i] ? a.env[i] : names[i];
        snprintf(parts[i].dir, sizeof parts[i].dir, "%s/%s", priv, what[i]);
        if (mkdir(parts[i].dir, 0755) != 0) {
            fprintf(stderr, "tkmctl capture: mkdir %s: %s\n", parts[i].dir, strerror(errno));
            goto out;
        }
    }
    if (!(env = child_env(parts, 3, defs))) {
        fprintf(stderr, "tkmctl capture: out of memory\n");
        goto out;
    }
    if (run_child(argv + dash + 1, env, f.json, &status, &forwarded) != 0) {
        rc = status;
        goto unblock;
    }
    if (forwarded) {
        fprintf(stderr, "tkmctl capture: interrupted (%s): nothing built\n", strsignal(forwarded));
        rc = status ? status : 128 + forwarded;
        goto unblock;
    }
    if (status != 0 && !a.allow_failure) {
        fprintf(stderr,
                "tkmctl capture: the command failed (exit status %d): nothing built "
                "(--allow-failure publishes what it wrote anyway)\n",
                status);
        rc = status;
        goto unblock;
    }
    /* From here tkmctl's own work: INT/TERM set the flag (ctl_signal.h),
     * checked between the steps; HUP stays blocked (a closed terminal does
     * not cut a push short). */
    if (ctl_signal_install() < 0) {
        fprintf(stderr, "tkmctl capture: sigaction: %s\n", strerror(errno));
        goto unblock;
    }
    {
        sigset_t set;
        sigemptyset(&set);
        sigaddset(&set, SIGINT);
        sigaddset(&set, SIGTERM);
        sigaddset(&set, SIGCHLD);
        sigprocmask(SIG_UNBLOCK, &set, NULL);
    }
    int any = 0;
    for (int i = 0; i < 3; i++) {
        int fd = open(parts[i].dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        int crc = fd < 0 ? -errno : count_tree(fd, parts[i].dir, 0, &parts[i], msg, sizeof msg);
        if (fd < 0)
            snprintf(msg, sizeof msg, "%s: %s", parts[i].dir, strerror(-crc));
        if (crc != 0) {
            fprintf(stderr,
                    "tkmctl capture: cannot read what the command wrote into %s: %s; nothing "
                    "built\n",
                    parts[i].env, msg);
            goto out;
        }
        parts[i].filled = parts[i].files > 0;
        any |= parts[i].filled;
    }
    if (!f.json)
        print_parts(parts, status);
    if (!any) {
        fprintf(stderr,
                "tkmctl capture: the command wrote nothing into %s, %s or %s: nothing to publish "
                "(did it compile anything? does it set its own cache directory, which overrides "
                "these variables?)\n",
                parts[0].env, parts[1].env, parts[2].env);
        goto out;
    }
    if (scan_parts(parts, &p, &labels) != 0)
        goto out;
    char tool[64];
    snprintf(tool, sizeof tool, "tkmctl capture %s", TKM_VERSION);
    label(&labels, CAPTURE_LABEL_PREFIX "tool", tool);
    gpu_labels(&labels, &a.probe);
    p.bo.labels = labels.kv;
    p.tmpdir = priv;
    p.cancel = ctl_signal_flag();
    if (output_stage(p.output, stage, sizeof stage) != 0)
        goto out;
    const char *output = p.output;
    if (stage[0])
        p.output = stage;
    st = ctl_publish_run(&p);
    if (st == 0 && atomic_load(ctl_signal_flag()))
        st = -ECANCELED;
    if (st == 0 && stage[0] && rename(stage, output) != 0) {
        fprintf(stderr, "tkmctl capture: rename %s to %s: %s\n", stage, output, strerror(errno));
        st = 1;
    }
    if (st == -ECANCELED) {
        fprintf(stderr, "tkmctl capture: interrupted: %s\n",
                p.pushed[0] ? "the image was pushed, not reported" : "nothing published");
        rc = ctl_signal_status();
        goto out;
    }
    if (st != 0)
        goto out;
    stage[0] = '\0'; /* renamed */
    char sign[1200] = "";
    if (a.sign_key)
        snprintf(sign, sizeof sign, "cosign sign --key %s %s", a.sign_key, p.pushed);
    if (f.json)
        p.json_extra = capture_json(parts, status, sign);
    ctl_publish_print(&p, output);
    json_decref(p.json_extra);
    if (a.sign_key && !f.json)
        printf("sign it (tkm verifies cosign signatures but does not sign; cosign v3 attaches "
               "the bundle tkm reads):\n  %s\n",
               sign);
    rc = 0;
    goto out;
unblock:;
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGCHLD);
    sigprocmask(SIG_UNBLOCK, &set, NULL);
out:
    remove_tree(stage);
    remove_tree(priv);
    free(env);
    return rc;
}

TKMCTL_COMMAND_ORDERED(capture, "run a workload and package the caches it compiled", cmd_capture,
                       9);
