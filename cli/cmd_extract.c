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
#include "ctl_oci.h"
#include "tkmctl.h"

static void usage(FILE *f)
{
    fprintf(
        f,
        "Usage: tkmctl extract (REF | LAYOUT_DIR) --output DIR [flags]\n\n"
        "Writes the Triton cache held by an image to DIR, ready for TRITON_CACHE_DIR:\n"
        "pulls REF (verifying every digest) or reads an OCI image layout, checks the layer\n"
        "digest and diff_id, extracts io.triton.cache/ safely (no links, devices, '..' or\n"
        "absolute names; modes normalised) into a staging dir that is renamed to DIR only\n"
        "when complete, then rewrites every __grp__*.json so its child paths point at the\n"
        "path where Triton will see the cache (Triton ignores entries whose paths do not\n"
        "exist, so an unrewritten cache recompiles).\n\n"
        "Flags:\n"
        "  --output DIR       where to extract (must not exist)\n"
        "  --mount-path P     the absolute path Triton will use (default: DIR's own path),\n"
        "                     e.g. the mountPath of a pod volume\n"
        "  --tag TAG          the image in a layout (default: the only one)\n"
        "  -o json            print the result as JSON\n\n"
        "%s\n"
        "Examples:\n"
        "  tkmctl extract 127.0.0.1:5000/tkm/cache:sm90 --output ~/.triton/cache-sm90\n"
        "  tkmctl extract ./img --tag sm90 --output /srv/cache --mount-path /root/.triton/cache\n",
        ctl_oci_flags_help);
}

static void print_result(const struct tkm_triton_extract_result *r, const char *out, int json)
{
    char a[32];
    if (json) {
        json_t *j =
            json_pack("{s:s,s:s,s:I,s:I,s:I,s:I,s:I}", "output", out, "layer", r->layer, "files",
                      (json_int_t)r->files, "file_bytes", (json_int_t)r->file_bytes,
                      "groups_rewritten", (json_int_t)r->groups, "child_paths",
                      (json_int_t)r->children, "missing_children", (json_int_t)r->missing_children);
        char *s = j ? json_dumps(j, JSON_INDENT(2)) : NULL;
        if (s)
            printf("%s\n", s);
        free(s);
        json_decref(j);
        return;
    }
    printf("extracted %llu files (%s) from %s to %s; rewrote %llu group files\n",
           (unsigned long long)r->files, ctl_human_bytes(r->file_bytes, a, sizeof a), r->layer, out,
           (unsigned long long)r->groups);
}

static int extract_ref(const char *src, const char *output, const char *tag, const char *mount,
                       struct ctl_oci_flags *f, struct tkm_triton_extract_result *r,
                       struct tkm_err *err)
{
    struct tkm_oci_ref ref;
    struct tkm_oci_registry_opts ro;
    struct tkm_oci_pull_result pr;
    char tmpl[4200], layout[4300];
    int rc;
    if (tkm_oci_layout_is(src))
        return tkm_triton_extract_layout(src, tag, output, mount, r, err);
    if ((rc = tkm_oci_ref_parse(&ref, src, err)) != 0) {
        tkm_err_prefix(err, "'%s' is neither an OCI layout directory nor a reference", src);
        return rc;
    }
    /* Pull into a private layout beside the output (same filesystem), removed after. */
    snprintf(tmpl, sizeof tmpl, "%s.pull-XXXXXX", output);
    if (!mkdtemp(tmpl))
        return tkm_err_set(err, -errno, "mkdtemp %s: %s", tmpl, strerror(errno));
    snprintf(layout, sizeof layout, "%s/layout", tmpl);
    ctl_oci_registry_opts(f, &ro);
    rc = tkm_oci_pull(&ref, &ro, layout, "pulled", 1, &pr, err);
    ctl_progress_end(&f->progress);
    if (rc == 0) {
        tkm_oci_pull_result_release(&pr);
        rc = tkm_triton_extract_layout(layout, "pulled", output, mount, r, err);
    }
    int rrc = tkm_rmtree_at(AT_FDCWD, tmpl);
    if (rrc != 0)
        fprintf(stderr, "tkmctl extract: could not remove %s: %s\n", tmpl, strerror(-rrc));
    return rc;
}

static int cmd_extract(int argc, char **argv)
{
    struct ctl_oci_flags f;
    struct tkm_triton_extract_result r;
    struct tkm_err err = {0};
    const char *src = NULL, *output = NULL, *tag = NULL, *mount = NULL;
    ctl_oci_flags_init(&f, "pull");
    const struct ctl_arg args[] = {
        {"--output", &output, NULL}, {"--tag", &tag, NULL}, {"--mount-path", &mount, NULL}, {0}};
    const struct ctl_args_spec spec = {"extract", args, &src, 1, usage, &f};
    int st = ctl_args_parse(&spec, argc, argv);
    if (st >= 0)
        return st;
    if (!src || !output) {
        fprintf(stderr, "tkmctl extract: need REF or LAYOUT_DIR, and --output DIR\n\n");
        usage(stderr);
        return 2;
    }
    if (mount && mount[0] != '/') {
        fprintf(stderr, "tkmctl extract: --mount-path must be absolute, not '%s'\n", mount);
        return 2;
    }
    if (access(output, F_OK) == 0) {
        fprintf(stderr, "tkmctl extract: %s exists; extract into a new directory\n", output);
        return 1;
    }
    if (extract_ref(src, output, tag, mount, &f, &r, &err) != 0) {
        fprintf(stderr, "tkmctl extract: %s\n", tkm_err_str(&err));
        return 1;
    }
    if (r.label_bytes && r.label_bytes != r.file_bytes)
        fprintf(stderr,
                "tkmctl extract: warning: the image label cache-size-bytes says %llu, extracted "
                "%llu\n",
                (unsigned long long)r.label_bytes, (unsigned long long)r.file_bytes);
    print_result(&r, output, f.json);
    return 0;
}

TKMCTL_COMMAND_ORDERED(extract, "write an image's Triton cache to a directory", cmd_extract, 13);
