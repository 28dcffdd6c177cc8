/*
 * pull_extract.c - tkm pull + verify + extract of a cache image from a local
 * registry, side by side with the baseline `curl URL | sha256sum` followed by
 * `tar -xzf` of the same blob. Prints both throughputs (compressed blob bytes
 * per second of wall time), their ratio and tkm's peak RSS (ru_maxrss of a
 * child process that does the whole pull and extraction).
 *
 * Usage: bench_pull_extract REF WORKDIR [ROUNDS]
 * bench/pull_extract.sh synthesizes a ~200 MB cache, pushes it and runs this.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <tkm/archive.h>
#include <tkm/http.h>
#include <tkm/oci/image.h>
#include <tkm/triton/extract.h>
#include <tkm/oci/ref.h>
#include <tkm/util.h>

#define ROUNDS_MAX 9

static double secs_since(uint64_t t0)
{
    return (double)(tkm_now_ms() - t0) / 1000.0;
}

static int run_sh(const char *cmd)
{
    int rc = system(cmd);
    if (rc != 0)
        fprintf(stderr, "bench: command failed (%d): %s\n", rc, cmd);
    return rc;
}

static void rm_rf(const char *path)
{
    int rc = tkm_rmtree_at(AT_FDCWD, path);
    if (rc != 0)
        fprintf(stderr, "bench: rm %s: %s\n", path, strerror(-rc));
}

/* One tkm round in a child: pull into a fresh layout, extract. */
static int tkm_round(const struct tkm_oci_ref *ref, const char *work, double *secs, long *rss_kb)
{
    char layout[2048], out[2048];
    snprintf(layout, sizeof layout, "%s/tkm-layout", work);
    snprintf(out, sizeof out, "%s/tkm-out", work);
    rm_rf(layout);
    rm_rf(out);
    uint64_t t0 = tkm_now_ms();
    pid_t pid = fork();
    if (pid < 0)
        return -errno;
    if (pid == 0) {
        struct tkm_oci_pull_result pr;
        struct tkm_triton_extract_result xr;
        struct tkm_err err = {0};
        if (tkm_oci_pull(ref, NULL, layout, "bench", 1, &pr, &err) != 0 ||
            (tkm_oci_pull_result_release(&pr),
             tkm_triton_extract_layout(layout, "bench", out, NULL, &xr, &err) != 0)) {
            fprintf(stderr, "bench: tkm: %s\n", tkm_err_str(&err));
            _exit(1);
        }
        _exit(0);
    }
    int st;
    struct rusage ru;
    if (wait4(pid, &st, 0, &ru) < 0)
        return -errno;
    *secs = secs_since(t0);
    *rss_kb = ru.ru_maxrss;
    return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : -EIO;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
    struct tkm_oci_ref ref;
    struct tkm_oci_pull_result info;
    struct tkm_err err = {0};
    char url[4096], cmd[8192], blob[2048], tdir[2048];
    double t_tkm[ROUNDS_MAX], t_base[ROUNDS_MAX];
    long rss_max = 0;
    int64_t rounds = 3;
    if (argc < 3 || (argc > 3 && tkm_parse_i64(argv[3], 1, ROUNDS_MAX, &rounds) != 0)) {
        fprintf(stderr, "usage: bench_pull_extract REF WORKDIR [ROUNDS 1-%d]\n", ROUNDS_MAX);
        return 2;
    }
    const char *work = argv[2];
    if (tkm_http_global_init(&err) != 0 || tkm_oci_ref_parse(&ref, argv[1], &err) != 0) {
        fprintf(stderr, "bench: %s\n", tkm_err_str(&err));
        return 1;
    }
    /* The layer to fetch (not timed). */
    snprintf(tdir, sizeof tdir, "%s/info", work);
    rm_rf(tdir);
    if (tkm_oci_pull(&ref, NULL, tdir, "info", 0, &info, &err) != 0 || info.parsed.n_descs != 1) {
        fprintf(stderr, "bench: %s\n", err.code ? tkm_err_str(&err) : "image needs one layer");
        return 1;
    }
    const struct tkm_oci_desc *layer = &info.parsed.descs[0];
    snprintf(url, sizeof url, "http://%s/v2/%s/blobs/%s", ref.host, ref.repo, layer->digest);
    snprintf(blob, sizeof blob, "%s/base.blob", work);
    snprintf(tdir, sizeof tdir, "%s/base-out", work);
    snprintf(cmd, sizeof cmd, "curl -sf -o '%s' '%s'", blob, url);
    if (run_sh(cmd) != 0)
        return 1;
    for (int64_t i = 0; i < rounds; i++) {
        long rss = 0;
        /* baseline: download + hash, then extract the same blob from a file. Each side
         * starts with no dirty pages of the other (sync, untimed). */
        rm_rf(tdir);
        mkdir(tdir, 0755);
        sync();
        uint64_t t0 = tkm_now_ms();
        snprintf(cmd, sizeof cmd, "curl -sf '%s' | sha256sum >/dev/null", url);
        if (run_sh(cmd) != 0)
            return 1;
        snprintf(cmd, sizeof cmd, "tar -xzf '%s' -C '%s'", blob, tdir);
        if (run_sh(cmd) != 0)
            return 1;
        t_base[i] = secs_since(t0);
        sync();
        if (tkm_round(&ref, work, &t_tkm[i], &rss) != 0) {
            fprintf(stderr, "bench: tkm round %lld failed\n", (long long)i);
            return 1;
        }
        if (rss > rss_max)
            rss_max = rss;
        printf("round %lld: baseline %.2f s, tkm %.2f s, tkm max RSS %.1f MiB\n", (long long)i,
               t_base[i], t_tkm[i], (double)rss / 1024.0);
    }
    qsort(t_base, (size_t)rounds, sizeof *t_base, cmp_double);
    qsort(t_tkm, (size_t)rounds, sizeof *t_tkm, cmp_double);
    double mb = (double)layer->size / (1024.0 * 1024.0);
    double b = t_base[rounds / 2], t = t_tkm[rounds / 2];
    printf("blob %s: %.1f MiB compressed\n", layer->digest, mb);
    printf("baseline (curl | sha256sum; tar -xzf)  median %.2f s  %7.1f MiB/s\n", b, mb / b);
    printf("tkm (pull + verify + extract + rewrite) median %.2f s  %7.1f MiB/s  max RSS %.1f MiB\n",
           t, mb / t, (double)rss_max / 1024.0);
    printf("ratio tkm/baseline throughput: %.2f (goal >= 0.80): %s\n", b / t,
           b / t >= 0.8 ? "met" : "NOT met");
    printf("tkm max RSS %.1f MiB (goal < 32 MiB): %s\n", (double)rss_max / 1024.0,
           rss_max < 32 * 1024 ? "met" : "NOT met");
    tkm_oci_pull_result_release(&info);
    rm_rf(tdir);
    return 0;
}
