/*
 * cmd_check.c - `tkmctl check`: can the GPUs of this machine use a Triton cache?
 */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <tkm/gpu/compat.h>
#include <tkm/gpu/probe.h>
#include <tkm/oci/layout.h>
#include <tkm/triton/cache.h>
#include <tkm/triton/image.h>
#include <tkm/triton/parts.h>
#include <tkm/util.h>

#include "ctl_args.h"
#include "tkmctl.h"
#include "ctl_oci.h"
#include "ctl_json.h"
#include "ctl_variants.h"

static void check_usage(FILE *f)
{
    fprintf(
        f,
        "Usage: tkmctl check [CACHE_DIR | --image-layout DIR [--tag TAG] | IMAGE_REF] [-o json]\n"
        "                    [--sysfs-root DIR] [--procfs-root DIR] [--nvml-lib PATH] "
        "[--no-nvml]\n\n"
        "Probes this machine's GPUs (NVIDIA through NVML, AMD through the amdgpu KFD topology,\n"
        "any other NVIDIA/AMD display device from the PCI bus) and says, for each GPU, whether\n"
        "Triton there would hit the kernels of a cache, and why not.\n\n"
        "A GPU is compatible when one of the cache's targets has its backend (cuda/hip), exactly\n"
        "its arch (CUDA compute capability 9.0 = sm90; AMD gfx942), its warp size, and, for\n"
        "CUDA, a PTX ISA version its driver supports (PTX ISA 8.7 needs CUDA 12.8+). A GPU whose\n"
        "driver is not loaded is never compatible. See docs/compatibility.md.\n\n"
        "The cache is one of:\n"
        "  CACHE_DIR              a Triton cache directory (TRITON_CACHE_DIR); every kernel\n"
        "                         JSON and .ptx is read\n"
        "  --image-layout DIR     an OCI image layout written by 'tkmctl build' (the summary\n"
        "                         label of its config); --tag picks a manifest\n"
        "  IMAGE_REF              an image in a registry, e.g. quay.io/org/cache:v1 (only the\n"
        "                         manifest and config are fetched)\n"
        "A variant index (docs/images.md \"Variants\") is judged per GPU: the variant for\n"
        "each GPU (this host's platform, its exact target, then for CUDA its sm_NNa build;\n"
        "--target picks one for every GPU), read by the digest the index names, must agree\n"
        "with its annotations (else VariantMismatch) and is then judged as above.\n\n"
        "Options:\n"
        "  -o, --output json|text  output format (default text)\n"
        "  --sysfs-root DIR        read /sys from DIR (default /sys)\n"
        "  --procfs-root DIR       read /proc from DIR (default /proc)\n"
        "  --nvml-lib PATH         the NVML library to dlopen (default libnvidia-ml.so.1)\n"
        "  --no-nvml               do not load NVML (NVIDIA GPUs then show as unusable)\n"
        "  --target B/A[/W]        of a variant index: judge every GPU against the variant\n"
        "                          for backend B, arch A, warp size W (e.g. cuda/90)\n\n"
        "%s\n"
        "Exit status: 0 when at least one GPU is compatible, 1 when none is (or on an error),\n"
        "2 on a usage error.\n\n"
        "Examples:\n"
        "  tkmctl check ~/.triton/cache\n"
        "  tkmctl check --image-layout ./out -o json\n"
        "  tkmctl check quay.io/gkm/cache-examples:vector-add-cache-cuda\n",
        ctl_oci_flags_help);
}

struct check_args {
    const char *source, *layout, *tag, *target;
    int json;
    struct tkm_gpu_probe_opts probe;
    struct ctl_oci_flags oci; /* registry flags, for IMAGE_REF */
};

/* As ctl_args_parse: -1 to go on, else the exit status. */
static int check_parse(int argc, char **argv, struct check_args *a)
{
    const char *out = NULL;
    const struct ctl_arg args[] = {{"--output", &out, NULL},
                                   {"--image-layout", &a->layout, NULL},
                                   {"--tag", &a->tag, NULL},
                                   {"--sysfs-root", &a->probe.sysfs_root, NULL},
                                   {"--procfs-root", &a->probe.procfs_root, NULL},
                                   {"--nvml-lib", &a->probe.nvml_lib, NULL},
                                   {"--no-nvml", NULL, &a->probe.no_nvml},
                                   {"--target", &a->target, NULL},
                                   {0}};
    const struct ctl_args_spec spec = {"check", args, &a->source, 1, check_usage, &a->oci};
    memset(a, 0, sizeof *a);
    ctl_oci_flags_init(&a->oci, "config"); /* -o json|text is one of its flags */
    int st = ctl_args_parse(&spec, argc, argv);
    if (st >= 0)
        return st;
    if (out && strcmp(out, "json") != 0 && strcmp(out, "text") != 0) {
        fprintf(stderr, "tkmctl check: --output takes json or text, not '%s'\n", out);
        return 2;
    }
    a->json = out ? !strcmp(out, "json") : a->oci.json;
    if (!a->source == !a->layout) {
        fprintf(stderr, "tkmctl check: give exactly one of CACHE_DIR, --image-layout DIR or "
                        "IMAGE_REF\n\n");
        check_usage(stderr);
        return 2;
    }
    return -1;
}

/* The cache side: a scanned directory or an image's labels. */
struct check_cache {
    struct tkm_triton_cache dir;
    struct tkm_triton_image image;
    int is_dir;
    const struct tkm_triton_summary *summary;
};

static int check_load(struct check_cache *c, const struct check_args *a, struct tkm_err *err)
{
    struct stat st;
    memset(c, 0, sizeof *c);
    if (a->layout)
        return tkm_triton_image_load_layout(&c->image, a->layout, a->tag, err);
    /* "/x", "./x", "../x" are paths (a missing one is reported as such); others refs */
    if ((stat(a->source, &st) == 0 && S_ISDIR(st.st_mode)) || a->source[0] == '/' ||
        a->source[0] == '.') {
        if (tkm_oci_layout_is(a->source))
            return tkm_triton_image_load_layout(&c->image, a->source, a->tag, err);
        c->is_dir = 1;
        return tkm_triton_cache_scan(&c->dir, a->source, err);
    }
    struct tkm_oci_registry_opts ro;
    ctl_oci_registry_opts((struct ctl_oci_flags *)&a->oci, &ro);
    return tkm_triton_image_load_ref(&c->image, a->source, &ro, err);
}

/* The "cache" object of the JSON output. */
static json_t *cache_json(const struct check_cache *c)
{
    if (!c->is_dir)
        return json_pack("{s:s,s:s,s:s,s:o*,s:o*,s:o*}", "source", "image", "image", c->image.what,
                         "manifestDigest", c->image.manifest_digest, "entryCount",
                         ctl_json_label(c->image.entry_count), "cacheSizeBytes",
                         ctl_json_label(c->image.size_bytes), "summary",
                         json_loads(c->image.summary_label, 0, NULL));
    char *label = NULL;
    json_t *summary =
        tkm_triton_summary_label(c->summary, &label, NULL) == 0 ? json_loads(label, 0, NULL) : NULL;
    free(label);
    return json_pack("{s:s,s:s,s:I,s:I,s:o*}", "source", "directory", "path", c->dir.root,
                     "entryCount", (json_int_t)c->dir.n_kernels, "cacheSizeBytes",
                     (json_int_t)c->dir.size_bytes, "summary", summary);
}

static void print_text(const struct check_cache *c, const struct tkm_gpu_list *l,
                       const struct tkm_compat_verdict *v, size_t ok)
{
    const struct tkm_triton_summary *s = c->summary;
    if (c->is_dir)
        printf("Cache %s: %zu kernels, %llu bytes\n", c->dir.root, c->dir.n_kernels,
               (unsigned long long)c->dir.size_bytes);
    else
        printf("Image %s (%s): %s kernels, %s bytes\n", c->image.what, c->image.manifest_digest,
               c->image.entry_count ? c->image.entry_count : "?",
               c->image.size_bytes ? c->image.size_bytes : "?");
    for (size_t i = 0; i < s->n_targets; i++) {
        char pv[16];
        printf("  target %s arch %s warp %d, PTX ISA %s\n", s->targets[i].target.backend,
               s->targets[i].target.arch, s->targets[i].target.warp_size,
               tkm_ptx_version_str(s->targets[i].ptx_max, pv, sizeof pv));
    }
    if (l->n == 0)
        printf("No GPU found on this machine%s%s%s\n", l->nvml_error[0] ? " (NVML: " : "",
               l->nvml_error[0] ? l->nvml_error : "", l->nvml_error[0] ? ")" : "");
    for (size_t i = 0; i < l->n; i++) {
        const struct tkm_gpu *g = &l->gpus[i];
        printf("GPU %d  %s  [%s, %s, arch %s, warp %d, driver %s, CUDA %s]\n  %s %s\n", g->index,
               g->name, g->gpu_type, g->pci_bus_id[0] ? g->pci_bus_id : "?",
               g->arch[0] ? g->arch : "?", g->warp_size,
               g->driver_version[0] ? g->driver_version : "?",
               g->cuda_version[0] ? g->cuda_version : "-",
               v[i].compatible ? "COMPATIBLE  " : "INCOMPATIBLE", v[i].reason);
    }
    printf("%zu of %zu GPUs compatible\n", ok, l->n);
}

static int print_json(const struct check_cache *c, const struct tkm_gpu_list *l,
                      const struct tkm_compat_verdict *v, size_t ok)
{
    json_t *res = json_array(), *yes = json_array(), *no = json_array(), *root;
    int bad = !res || !yes || !no;
    for (size_t i = 0; !bad && i < l->n; i++)
        bad = json_array_append_new(res, tkm_compat_verdict_json(c->summary, &l->gpus[i], &v[i])) ||
              json_array_append_new(v[i].compatible ? yes : no, json_integer(l->gpus[i].index));
    /* "o" steals res, yes and no (and the cache object): released by json_pack if it fails */
    root = json_pack("{s:o,s:s*,s:o,s:o,s:o,s:b}", "cache", cache_json(c), "nvmlError",
                     l->nvml_error[0] ? l->nvml_error : NULL, "results", res, "compatibleGpus", yes,
                     "incompatibleGpus", no, "compatible", ok > 0);
    if (bad) {
        json_decref(root);
        return -ENOMEM;
    }
    return ctl_json_print(root);
}

/* One GPU against the variant it gets (vi < 0: none, msg says why). */
static void judge_variant(const struct tkm_triton_image *im, const struct tkm_variant *v,
                          const struct tkm_gpu *g, struct tkm_compat_verdict *out)
{
    char msg[768];
    const char *il = tkm_oci_config_label(&im->config, TKM_INDUCTOR_LABEL_SUMMARY);
    struct tkm_inductor_info ind = {0};
    if (tkm_variant_check_image(v, &im->config, &im->summary, msg, sizeof msg) != 0) {
        memset(out, 0, sizeof *out);
        out->gpu_index = g->index;
        out->target_index = -1;
        snprintf(out->reason, sizeof out->reason, "VariantMismatch: %s", msg);
        return;
    }
    tkm_compat_check(&im->summary, g, out);
    if (il && tkm_inductor_summary_parse(&ind, il, NULL) != 0)
        memset(&ind, 0, sizeof ind); /* unreadable: refused (fail closed) */
    if (il)
        tkm_inductor_compat_combine(&ind.facts, g, out);
}

/* Reads variant vi (by the digest the index names) into im[vi] once. */
static int load_variant(const struct check_args *a, const struct ctl_variants *cv, size_t vi,
                        struct tkm_triton_image *im, int *loaded)
{
    struct tkm_oci_registry_opts ro;
    struct tkm_err err = {0};
    char src[800];
    if (loaded[vi])
        return 0;
    ctl_oci_registry_opts((struct ctl_oci_flags *)&a->oci, &ro);
    ctl_variants_source(cv, vi, src, sizeof src);
    if ((cv->layout ? tkm_triton_image_load_layout(&im[vi], cv->layout, src, &err)
                    : tkm_triton_image_load_ref(&im[vi], src, &ro, &err)) != 0) {
        fprintf(stderr, "tkmctl check: variant %s: %s\n", cv->set.v[vi].digest, tkm_err_str(&err));
        return -1;
    }
    loaded[vi] = 1;
    return 0;
}

/* A variant index: each GPU judged against its variant. */
static int check_variants(const struct check_args *a, struct ctl_variants *cv)
{
    struct tkm_gpu_list l = {0};
    struct tkm_err err = {0};
    struct tkm_triton_image *im = calloc(cv->set.n, sizeof *im);
    int *loaded = calloc(cv->set.n, sizeof *loaded);
    json_t *res = json_array(), *yes = json_array(), *no = json_array();
    struct tkm_triton_summary none = {0};
    size_t ok = 0, forced = 0;
    int status = 1;
    if (!im || !loaded || !res || !yes || !no) {
        fprintf(stderr, "tkmctl check: out of memory\n");
        goto out;
    }
    if (tkm_gpu_probe(&l, &a->probe, &err) != 0 ||
        (a->target && ctl_variants_choose(cv, a->target, NULL, &forced, NULL, &err) != 0)) {
        fprintf(stderr, "tkmctl check: %s\n", tkm_err_str(&err));
        goto out;
    }
    if (a->target && load_variant(a, cv, forced, im, loaded) != 0)
        goto out; /* read (and verified) even without a GPU */
    if (!a->json) {
        printf("Variant index %s (%s): %zu variants\n", cv->what, cv->set.digest, cv->set.n);
        ctl_variants_print(&cv->set);
    }
    for (size_t i = 0; i < l.n; i++) {
        const struct tkm_gpu *g = &l.gpus[i];
        struct tkm_compat_verdict v = {.gpu_index = g->index, .target_index = -1};
        const char *reason = NULL;
        char msg[700] = "";
        size_t vi = forced;
        int has =
            a->target || tkm_variant_pick(&cv->set, g, NULL, &vi, &reason, msg, sizeof msg) == 0;
        if (has && load_variant(a, cv, vi, im, loaded) != 0)
            goto out;
        if (has)
            judge_variant(&im[vi], &cv->set.v[vi], g, &v);
        else
            snprintf(v.reason, sizeof v.reason, "%s: %s", reason, msg);
        ok += v.compatible ? 1 : 0;
        if (a->json) {
            json_t *o = tkm_compat_verdict_json(has ? &im[vi].summary : &none, g, &v);
            json_object_set_new(o, "variant",
                                has ? json_string(cv->set.v[vi].digest) : json_null());
            json_array_append_new(res, o);
            json_array_append_new(v.compatible ? yes : no, json_integer(g->index));
        } else {
            char d[160] = "none";
            if (has)
                tkm_variant_describe(&cv->set.v[vi], d, sizeof d);
            printf("GPU %d  %s  [%s, arch %s, warp %d]  variant %s\n  %s %s\n", g->index, g->name,
                   g->gpu_type, g->arch[0] ? g->arch : "?", g->warp_size, d,
                   v.compatible ? "COMPATIBLE  " : "INCOMPATIBLE", v.reason);
        }
    }
    if (a->json) {
        json_t *vs = json_array();
        for (size_t i = 0; vs && i < cv->set.n; i++)
            json_array_append_new(vs, ctl_variant_json(&cv->set.v[i]));
        json_t *root =
            json_pack("{s:{s:s,s:s,s:s,s:o},s:o,s:o,s:o,s:b}", "cache", "source", "variantIndex",
                      "image", cv->what, "indexDigest", cv->set.digest, "variants", vs, "results",
                      res, "compatibleGpus", yes, "incompatibleGpus", no, "compatible", ok > 0);
        res = yes = no = NULL; /* taken */
        if (ctl_json_print(root) != 0) {
            fprintf(stderr, "tkmctl check: cannot write the JSON output\n");
            goto out;
        }
    } else {
        printf("%zu of %zu GPUs compatible\n", ok, l.n);
    }
    status = ok > 0 ? 0 : 1;
out:
    for (size_t i = 0; im && i < cv->set.n; i++)
        tkm_triton_image_release(&im[i]);
    free(im);
    free(loaded);
    json_decref(res);
    json_decref(yes);
    json_decref(no);
    tkm_gpu_list_release(&l);
    return status;
}

static int cmd_check(int argc, char **argv)
{
    struct check_args a;
    struct check_cache c;
    struct tkm_gpu_list l = {0};
    struct tkm_compat_verdict *v = NULL;
    struct tkm_err err = {0};
    size_t ok = 0;
    int rc = check_parse(argc, argv, &a), status = 1;
    if (rc >= 0)
        return rc;
    struct stat vst;
    int is_dir = a.source && !tkm_oci_layout_is(a.source) &&
                 ((stat(a.source, &vst) == 0 && S_ISDIR(vst.st_mode)) || a.source[0] == '/' ||
                  a.source[0] == '.');
    if (!is_dir) {
        struct ctl_variants cv;
        const char *lay = a.layout ? a.layout : tkm_oci_layout_is(a.source) ? a.source : NULL;
        rc = ctl_variants_load(&cv, lay, a.tag, lay ? NULL : a.source, &a.oci, &err);
        if (rc != 0 || cv.set.n) {
            if (rc != 0)
                fprintf(stderr, "tkmctl check: %s\n", tkm_err_str(&err));
            else
                rc = check_variants(&a, &cv);
            ctl_variants_release(&cv);
            return rc != 0;
        }
        ctl_variants_release(&cv);
    }
    if (check_load(&c, &a, &err) != 0) {
        fprintf(stderr, "tkmctl check: %s\n", tkm_err_str(&err));
        return 1;
    }
    c.summary = c.is_dir ? &c.dir.summary : &c.image.summary;
    if (c.is_dir && c.dir.n_kernels == 0) {
        fprintf(stderr,
                "tkmctl check: %s holds no Triton kernel (no <name>.json with a \"hash\")\n",
                a.source);
        goto out;
    }
    if (tkm_gpu_probe(&l, &a.probe, &err) != 0) {
        fprintf(stderr, "tkmctl check: probing GPUs: %s\n", tkm_err_str(&err));
        goto out;
    }
    if (!(v = calloc(l.n ? l.n : 1, sizeof *v))) {
        fprintf(stderr, "tkmctl check: out of memory\n");
        goto out;
    }
    /* an image with an Inductor part: judged too (as the agent does) */
    struct tkm_inductor_info ind = {0};
    const char *il =
        c.is_dir ? NULL : tkm_oci_config_label(&c.image.config, TKM_INDUCTOR_LABEL_SUMMARY);
    if (il && tkm_inductor_summary_parse(&ind, il, NULL) != 0)
        memset(&ind, 0, sizeof ind); /* unreadable: every GPU refused (fail closed) */
    for (size_t i = 0; i < l.n; i++) {
        tkm_compat_check(c.summary, &l.gpus[i], &v[i]);
        if (il)
            tkm_inductor_compat_combine(&ind.facts, &l.gpus[i], &v[i]);
        ok += v[i].compatible ? 1 : 0;
    }
    if (a.json) {
        if (print_json(&c, &l, v, ok) != 0) {
            fprintf(stderr, "tkmctl check: cannot write the JSON output\n");
            goto out;
        }
    } else {
        print_text(&c, &l, v, ok);
    }
    status = ok > 0 ? 0 : 1;
out:
    free(v);
    tkm_gpu_list_release(&l);
    tkm_triton_cache_release(&c.dir);
    tkm_triton_image_release(&c.image);
    return status;
}

TKMCTL_COMMAND_ORDERED(check, "say which GPUs here can use a Triton cache, and why not", cmd_check,
                       40)
