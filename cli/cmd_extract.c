/*
 * cmd_extract.c - tkmctl extract: an image (registry or layout) -> a usable cache dir.
 */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <tkm/archive.h>
#include <tkm/oci/image.h>
#include <tkm/triton/extract.h>
#include <tkm/oci/layout.h>
#include <tkm/oci/ref.h>

#include "ctl_args.h"
#include "ctl_limits.h"
#include "ctl_oci.h"
#include "ctl_signal.h"
#include "tkmctl.h"
#include "ctl_json.h"
#include "ctl_variants.h"

static void usage(FILE *f)
{
    fprintf(
        f,
        "Usage: tkmctl extract (REF | LAYOUT_DIR) --output DIR [flags]\n\n"
        "Writes the Triton cache held by an image to DIR, ready for TRITON_CACHE_DIR:\n"
        "pulls REF (verifying every digest) or reads an OCI image layout, checks the layer\n"
        "digest, size and diff_id, extracts io.triton.cache/ safely (no links, devices, '..'\n"
        "or absolute names; modes normalised) into a staging dir that is renamed to DIR only\n"
        "when complete, then rewrites every __grp__*.json so its child paths point at the\n"
        "path where Triton will see the cache (Triton ignores entries whose paths do not\n"
        "exist, so an unrewritten cache recompiles). An image with torch.compile parts\n"
        "(tkmctl build --inductor-dir/--vllm-dir) becomes DIR/triton, DIR/inductor and\n"
        "DIR/vllm, the group files of every part rewritten (docs/images.md).\n\n"
        "A variant index (docs/images.md \"Variants\"): the variant for this machine's GPUs\n"
        "(its platform, then the first GPU's exact target, then for CUDA its sm_NNa build), or\n"
        "the one --target names, is fetched by the digest the index names (its bytes must\n"
        "hash to it); when none fits, the error lists the variants.\n\n"
        "Work happens in .tkm-staging-<pid>-<start>-<random> beside DIR. SIGINT or SIGTERM\n"
        "stops it (a download too: the pull is cancelled), removes the staging dir and\n"
        "exits 128+signal (130, 143); a second one kills at once. What a killed run left\n"
        "is removed by the next run into the same parent directory (never a live run's).\n\n"
        "Flags:\n"
        "  --output DIR       where to extract (must not exist)\n"
        "  --mount-path P     the absolute path Triton will use (default: DIR's own path),\n"
        "                     e.g. the mountPath of a pod volume\n"
        "  --tag TAG          the image in a layout (default: the only one)\n"
        "  --target B/A[/W]   of a variant index: the variant for backend B, arch A, warp\n"
        "                     size W (default 32 for cuda, 64 for hip), e.g. cuda/90\n"
        "  --max-bytes N      cap on the uncompressed layer (default 32Gi); for REF also on\n"
        "                     the bytes downloaded: the sizes the manifest declares are\n"
        "                     checked against it before any layer is requested\n"
        "  --max-file-bytes N cap on one extracted file (default 4Gi)\n"
        "                     N: bytes, or K/M/G/T (x1000) or Ki/Mi/Gi/Ti (x1024): 512Mi\n"
        "  -o json            print the result as JSON\n\n"
        "%s\n"
        "Exit status: 0 done, 1 failed (nothing left at DIR), 2 usage, 130/143 interrupted.\n\n"
        "Examples:\n"
        "  tkmctl extract 127.0.0.1:5000/tkm/cache:sm90 --output ~/.triton/cache-sm90\n"
        "  tkmctl extract ./img --tag sm90 --output /srv/cache --mount-path /root/.triton/cache\n"
        "  tkmctl extract ./img --output /srv/cache --max-bytes 2Gi --max-file-bytes 256Mi\n",
        ctl_oci_flags_help);
}

static void print_result(const struct tkm_triton_extract_result *r, const char *out,
                         const struct tkm_variant *v, int json)
{
    char a[32];
    if (json) {
        json_t *j = json_pack(
            "{s:s,s:s,s:I,s:I,s:I,s:I,s:I,s:o*}", "output", out, "layer", r->layer, "files",
            (json_int_t)r->files, "file_bytes", (json_int_t)r->file_bytes, "groups_rewritten",
            (json_int_t)r->groups, "child_paths", (json_int_t)r->children, "missing_children",
            (json_int_t)r->missing_children, "variant", v->digest[0] ? ctl_variant_json(v) : NULL);
        ctl_json_print(j);
        return;
    }
    if (v->digest[0]) {
        char d[160];
        tkm_variant_describe(v, d, sizeof d);
        printf("variant %s (%s)\n", d, v->digest);
    }
    printf("extracted %llu files (%s) from %s to %s; rewrote %llu group files\n",
           (unsigned long long)r->files, ctl_human_bytes(r->file_bytes, a, sizeof a), r->layer, out,
           (unsigned long long)r->groups);
}

/* What one extraction needs. */
struct xjob {
    const char *src, *output, *tag, *mount, *target;
    char vsrc[800];             /* a variant index: the variant chosen (a tag or a ref) */
    struct tkm_variant variant; /* and its facts (digest "" when not a variant index) */
    struct ctl_oci_flags *f;
    struct tkm_archive_opts ao; /* limits and the cancel flag */
    struct ctl_pull_caps caps;  /* for REF */
    int pfd;                    /* the parent of output */
    char parent[4200];          /* its path */
    char stg[TKM_STAGING_NAME_MAX];
};

/* Opens the directory that will hold j->output; j->parent gets its path. */
static int open_parent(struct xjob *j, struct tkm_err *err)
{
    size_t n = strlen(j->output);
    while (n > 1 && j->output[n - 1] == '/')
        n--;
    if (n >= sizeof j->parent)
        return tkm_err_set(err, -ENAMETOOLONG, "--output is too long");
    memcpy(j->parent, j->output, n);
    j->parent[n] = '\0';
    char *slash = strrchr(j->parent, '/');
    if (!slash)
        snprintf(j->parent, sizeof j->parent, ".");
    else if (slash == j->parent)
        j->parent[1] = '\0';
    else
        *slash = '\0';
    j->pfd = open(j->parent, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (j->pfd < 0)
        return tkm_err_set(err, -errno, "cannot open %s, the directory for %s: %s", j->parent,
                           j->output, strerror(errno));
    return 0;
}

/* A variant index at src: the variant for this machine (or --target) into
 * j->vsrc/j->variant, and src/tag switched to it. */
static int choose_variant(struct xjob *j, int is_layout, struct tkm_err *err)
{
    struct ctl_variants cv;
    struct tkm_gpu_list l = {0};
    struct tkm_gpu_probe_opts po = {0};
    size_t idx;
    int rc = ctl_variants_load(&cv, is_layout ? j->src : NULL, j->tag, is_layout ? NULL : j->src,
                               j->f, err);
    if (rc || cv.set.n == 0)
        goto out;
    if (!j->target && (rc = tkm_gpu_probe(&l, &po, err)) != 0)
        goto out;
    if ((rc = ctl_variants_choose(&cv, j->target, &l, &idx, NULL, err)) != 0)
        goto out;
    j->variant = cv.set.v[idx];
    ctl_variants_source(&cv, idx, j->vsrc, sizeof j->vsrc);
    if (is_layout)
        j->tag = j->vsrc;
    else
        j->src = j->vsrc;
out:
    tkm_gpu_list_release(&l);
    ctl_variants_release(&cv);
    return rc;
}

static int extract_ref(struct xjob *j, struct tkm_triton_extract_result *r, struct tkm_err *err)
{
    struct tkm_oci_ref ref;
    struct tkm_oci_registry_opts ro;
    struct tkm_oci_pull_result pr;
    char layout[4400];
    int rc, sfd;
    if ((rc = choose_variant(j, tkm_oci_layout_is(j->src), err)) != 0)
        return rc;
    if (tkm_oci_layout_is(j->src))
        return tkm_triton_extract_layout_with(j->src, j->tag, j->output, j->mount, &j->ao, r, err);
    if ((rc = tkm_oci_ref_parse(&ref, j->src, err)) != 0) {
        tkm_err_prefix(err, "'%s' is neither an OCI layout directory nor a reference", j->src);
        return rc;
    }
    /* Pull into a private layout beside the output (same filesystem), removed after. */
    tkm_staging_purge(j->pfd, j->parent);
    if ((sfd = tkm_staging_create(j->pfd, j->stg, sizeof j->stg, err)) < 0)
        return sfd;
    snprintf(layout, sizeof layout, "%s/%s/layout", j->parent, j->stg);
    ctl_oci_registry_opts(j->f, &ro);
    ro.cancel = j->ao.cancel; /* a signal cancels the pull job, which removes its layout */
    rc = ctl_pull_capped(&ref, &ro, layout, "pulled", 1, &j->caps, &pr, err);
    ctl_progress_end(&j->f->progress);
    if (rc && j->variant.digest[0]) {
        char d[160];
        tkm_variant_describe(&j->variant, d, sizeof d);
        tkm_err_prefix(err, "variant %s (%s) of the index, in %s", d, j->variant.digest, ref.repo);
    }
    if (rc == 0) {
        tkm_oci_pull_result_release(&pr);
        rc = tkm_triton_extract_layout_with(layout, "pulled", j->output, j->mount, &j->ao, r, err);
    }
    int rrc = tkm_rmtree_at(j->pfd, j->stg);
    if (rrc != 0)
        fprintf(stderr, "tkmctl extract: could not remove %s/%s: %s\n", j->parent, j->stg,
                strerror(-rrc));
    close(sfd);
    return rc;
}

static int cmd_extract(int argc, char **argv)
{
    struct ctl_oci_flags f;
    struct tkm_triton_extract_result r;
    struct tkm_err err = {0};
    struct xjob j;
    const char *max_bytes = NULL, *max_file = NULL;
    memset(&j, 0, sizeof j);
    j.pfd = -1;
    tkm_archive_opts_init(&j.ao);
    ctl_oci_flags_init(&f, "pull");
    j.f = &f;
    const struct ctl_arg args[] = {{"--output", &j.output, NULL},
                                   {"--tag", &j.tag, NULL},
                                   {"--target", &j.target, NULL},
                                   {"--mount-path", &j.mount, NULL},
                                   {"--max-bytes", &max_bytes, NULL},
                                   {"--max-file-bytes", &max_file, NULL},
                                   {0}};
    const struct ctl_args_spec spec = {"extract", args, &j.src, 1, usage, &f};
    int st = ctl_args_parse(&spec, argc, argv);
    if (st >= 0)
        return st;
    if (!j.src || !j.output) {
        fprintf(stderr, "tkmctl extract: need REF or LAYOUT_DIR, and --output DIR\n\n");
        usage(stderr);
        return 2;
    }
    if (ctl_size_flag("extract", "--max-bytes", max_bytes, &j.ao.limits.max_total_bytes) ||
        ctl_size_flag("extract", "--max-file-bytes", max_file, &j.ao.limits.max_file_bytes))
        return 2;
    /* the cap (given or the default) also bounds the sizes a manifest declares, checked
     * before any layer is downloaded */
    j.caps.max_bytes = j.ao.limits.max_total_bytes;
    j.caps.mirrors_dir = f.mirrors_dir;
    j.caps.registries_conf = f.registries_conf;
    if (j.mount && j.mount[0] != '/') {
        fprintf(stderr, "tkmctl extract: --mount-path must be absolute, not '%s'\n", j.mount);
        return 2;
    }
    if (access(j.output, F_OK) == 0) {
        fprintf(stderr, "tkmctl extract: %s exists; extract into a new directory\n", j.output);
        return 1;
    }
    if (ctl_signal_install() < 0)
        fprintf(stderr, "tkmctl extract: warning: cannot catch SIGINT/SIGTERM\n");
    j.ao.cancel = ctl_signal_flag();
    st = open_parent(&j, &err) == 0 && extract_ref(&j, &r, &err) == 0 ? 0 : 1;
    if (j.pfd >= 0)
        close(j.pfd);
    if (st != 0 && ctl_signal_status()) {
        fprintf(stderr, "tkmctl extract: interrupted by signal %d; nothing was left beside %s\n",
                ctl_signal_status() - 128, j.output);
        return ctl_signal_status();
    }
    if (st != 0) {
        fprintf(stderr, "tkmctl extract: %s\n", tkm_err_str(&err));
        return 1;
    }
    if (r.label_bytes && r.label_bytes != r.file_bytes)
        fprintf(stderr,
                "tkmctl extract: warning: the image label cache-size-bytes says %llu, extracted "
                "%llu\n",
                (unsigned long long)r.label_bytes, (unsigned long long)r.file_bytes);
    print_result(&r, j.output, &j.variant, f.json);
    return 0;
}

TKMCTL_COMMAND_ORDERED(extract, "write an image's Triton cache to a directory", cmd_extract, 13);
