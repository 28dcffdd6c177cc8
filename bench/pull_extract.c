/*
 * pull_extract.c - tkm pull + verify + extract of a cache image from a local
 * registry, side by side with a baseline doing the same work with standard
 * tools: `curl URL | tee BLOB | openssl dgst -sha256` (OpenSSL's SHA-256, as
 * tkm's; coreutils' sha256sum is 4x slower here), the digest compared with the
 * manifest's (a mismatch fails), `tar -xzf BLOB`, and `sync -f` (syncfs, as
 * tkm flushes with one syncfs()). The sides alternate which goes first, each
 * after an untimed sync. Prints both throughputs (compressed blob bytes per
 * second of wall time), CPU seconds (user + sys of every process involved),
 * their ratios and tkm's peak RSS (ru_maxrss of a child process that does the
 * whole pull and extraction).
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

static double ru_cpu(const struct rusage *ru)
{
    return (double)(ru->ru_utime.tv_sec + ru->ru_stime.tv_sec) +
           (double)(ru->ru_utime.tv_usec + ru->ru_stime.tv_usec) / 1e6;
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
static int tkm_round(const struct tkm_oci_ref *ref, const char *work, double *secs, double *cpu,
                     long *rss_kb)
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
             tkm_triton_extract_layout_with(layout, "bench", out, NULL, NULL, &xr, &err) != 0)) {
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
    *cpu = ru_cpu(&ru);
    *rss_kb = ru.ru_maxrss;
    return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : -EIO;
}

/* One baseline round: download while writing the blob and hashing it, compare
 * the digest, extract, flush. CPU = every child's user + sys time. */
static int base_round(const char *url, const char *digest, const char *blob, const char *dir,
                      double *secs, double *cpu)
{
    char cmd[8192];
    struct rusage r0, r1;
    rm_rf(dir);
    unlink(blob);
    if (mkdir(dir, 0755) != 0)
        return -errno;
    snprintf(cmd, sizeof cmd,
             "d=$(curl -sf '%s' | tee '%s' | openssl dgst -sha256 -r) && "
             "{ [ \"sha256:${d%%%% *}\" = '%s' ] || "
             "{ echo \"bench: baseline: downloaded blob is sha256:${d%%%% *}, "
             "expected %s\" >&2; exit 1; }; } && "
             "tar -xzf '%s' -C '%s' && sync -f '%s'",
             url, blob, digest, digest, blob, dir, dir);
    getrusage(RUSAGE_CHILDREN, &r0);
    uint64_t t0 = tkm_now_ms();
    if (run_sh(cmd) != 0)
        return -EIO;
    *secs = secs_since(t0);
    getrusage(RUSAGE_CHILDREN, &r1);
    *cpu = ru_cpu(&r1) - ru_cpu(&r0);
    return 0;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int64_t n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return v[n / 2];
}

int main(int argc, char **argv)
{
    struct tkm_oci_ref ref;
    struct tkm_oci_pull_result info;
    struct tkm_err err = {0};
    char url[4096], blob[2048], tdir[2048];
    double t_tkm[ROUNDS_MAX], t_base[ROUNDS_MAX], c_tkm[ROUNDS_MAX], c_base[ROUNDS_MAX];
    double r_wall[ROUNDS_MAX],
        r_cpu[ROUNDS_MAX]; /* per round: baseline/tkm wall, tkm/baseline CPU */
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
    for (int64_t i = 0; i < rounds; i++) {
        long rss = 0;
        /* Alternate which side goes first; each starts with no dirty pages of
         * the other (sync, untimed). */
        for (int side = 0; side < 2; side++) {
            sync();
            if ((side ^ (int)(i & 1)) == 0) {
                if (base_round(url, layer->digest, blob, tdir, &t_base[i], &c_base[i]) != 0) {
                    fprintf(stderr, "bench: baseline round %lld failed\n", (long long)i);
                    return 1;
                }
            } else if (tkm_round(&ref, work, &t_tkm[i], &c_tkm[i], &rss) != 0) {
                fprintf(stderr, "bench: tkm round %lld failed\n", (long long)i);
                return 1;
            }
        }
        if (rss > rss_max)
            rss_max = rss;
        r_wall[i] = t_base[i] / t_tkm[i];
        r_cpu[i] = c_tkm[i] / c_base[i];
        printf("round %lld (%s first): baseline %.2f s (CPU %.2f s), tkm %.2f s (CPU %.2f s), "
               "tkm max RSS %.1f MiB\n",
               (long long)i, i & 1 ? "tkm" : "baseline", t_base[i], c_base[i], t_tkm[i], c_tkm[i],
               (double)rss / 1024.0);
    }
    double mb = (double)layer->size / (1024.0 * 1024.0);
    double b = median(t_base, rounds), t = median(t_tkm, rounds);
    double bc = median(c_base, rounds), tc = median(c_tkm, rounds);
    printf("blob %s: %.1f MiB compressed\n", layer->digest, mb);
    printf(
        "baseline (curl | tee | openssl sha256 + compare; tar -xzf; sync -f)  median %.2f s  %7.1f "
        "MiB/s  CPU %.2f s\n",
        b, mb / b, bc);
    printf(
        "tkm (pull + verify + extract + rewrite + syncfs)                    median %.2f s  %7.1f "
        "MiB/s  CPU %.2f s  max RSS %.1f MiB\n",
        t, mb / t, tc, (double)rss_max / 1024.0);
    printf("ratio tkm/baseline CPU seconds: %.2f (below 1: tkm uses less CPU); median of the "
           "per-round ratios %.2f\n",
           tc / bc, median(r_cpu, rounds));
    printf("per-round throughput ratios tkm/baseline: median %.2f\n", median(r_wall, rounds));
    printf("ratio tkm/baseline throughput: %.2f (goal >= 0.80): %s\n", b / t,
           b / t >= 0.8 ? "met" : "NOT met");
    printf("tkm max RSS %.1f MiB (goal < 32 MiB): %s\n", (double)rss_max / 1024.0,
           rss_max < 32 * 1024 ? "met" : "NOT met");
    tkm_oci_pull_result_release(&info);
    rm_rf(tdir);
    unlink(blob);
    return 0;
}
