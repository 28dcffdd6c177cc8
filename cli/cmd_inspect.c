/*
 * cmd_inspect.c - `tkmctl inspect`: what a Triton cache (or cache image) holds.
 */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

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

static void inspect_usage(FILE *f)
{
    fprintf(
        f,
        "Usage: tkmctl inspect CACHE_DIR | --image-layout DIR [--tag TAG] | IMAGE_REF "
        "[-o json]\n\n"
        "Shows what a Triton kernel cache holds. For a directory (TRITON_CACHE_DIR, or an\n"
        "extracted image's io.triton.cache/): the summary an image built from it would carry\n"
        "(targets = backend, arch, warp size; Triton and PTX ISA versions; entry count = the\n"
        "kernel JSONs with a \"hash\"; cache size = the sum of regular file sizes, tmp.pid_*\n"
        "skipped) and one line per kernel: directory, name, backend, arch, warps, stages,\n"
        "Triton version, PTX ISA version, size. For an image (an OCI layout or a registry\n"
        "reference): its cache.triton.image/* labels, read from the config without pulling\n"
        "the layer, and its torch.compile parts (Inductor: torch/CUDA/Triton versions and\n"
        "GPU; vLLM: MCV's cache.vllm.image/* and io.kserve.km/* labels), and the image as a\n"
        "variant (platform, backend, arch, warp size). A variant index (an image index whose\n"
        "entries carry cache.triton.image/backend, docs/images.md \"Variants\"): its variants,\n"
        "each with digest, platform, target, Triton version and parts. A directory that\n"
        "an extracted multi-part image left (triton/ inductor/ vllm/): each part.\n\n"
        "Options:\n"
        "  -o, --output json|text  output format (default text)\n"
        "  --image-layout DIR      an OCI image layout (as written by 'tkmctl build')\n"
        "  --tag TAG               the manifest to read from the layout (default: the only "
        "one)\n\n"
        "%s\n"
        "Exit status: 0 success, 1 the cache or image cannot be read (the message says why),\n"
        "2 usage error.\n\n"
        "Examples:\n"
        "  tkmctl inspect ~/.triton/cache\n"
        "  tkmctl inspect ~/.triton/cache -o json | jq '.kernels[].name'\n"
        "  tkmctl inspect --image-layout ./out --tag v1\n"
        "  tkmctl inspect quay.io/me/cache:v1 -o json | jq '.variants[].digest'\n",
        ctl_oci_flags_help);
}

static json_t *kernel_json(const struct tkm_triton_kernel *k)
{
    char pv[16];
    json_t *o = json_pack("{s:s,s:s,s:s,s:s?,s:s,s:s,s:i,s:i,s:i,s:s?,s:s,s:s,s:s,s:O,s:I,s:s?}",
                          "dir", k->dir, "json", k->json_name, "hash", k->hash, "name", k->name,
                          "backend", k->target.backend, "arch", k->target.arch, "warpSize",
                          k->target.warp_size, "numWarps", k->num_warps, "numStages", k->num_stages,
                          "tritonVersion", k->triton_version, "ptxVersion",
                          k->ptx.major >= 0 ? tkm_ptx_version_str(k->ptx, pv, sizeof pv) : "",
                          "ptxTarget", k->ptx_target, "binaryArch", k->binary_arch, "env", k->env,
                          "sizeBytes", (json_int_t)k->size_bytes, "group", k->group_name);
    return o;
}

static int inspect_dir_json(const struct tkm_triton_cache *c)
{
    char *label = NULL;
    json_t *ks = json_array(), *root;
    int bad = !ks || tkm_triton_summary_label(&c->summary, &label, NULL) != 0;
    for (size_t i = 0; !bad && i < c->n_kernels; i++)
        bad = json_array_append_new(ks, kernel_json(&c->kernels[i])) != 0;
    root = json_pack("{s:s,s:I,s:I,s:I,s:o*,s:o}", "path", c->root, "entryCount",
                     (json_int_t)c->n_kernels, "directories", (json_int_t)c->n_dirs,
                     "cacheSizeBytes", (json_int_t)c->size_bytes, "summary",
                     label ? json_loads(label, 0, NULL) : NULL, "kernels", ks); /* takes ks */
    free(label);
    if (bad) {
        json_decref(root);
        return -ENOMEM;
    }
    return ctl_json_print(root);
}

static void inspect_dir_text(const struct tkm_triton_cache *c)
{
    const struct tkm_triton_summary *s = &c->summary;
    char pv[16];
    printf("Cache:        %s\n", c->root);
    printf("Entries:      %zu kernels in %zu directories\n", c->n_kernels, c->n_dirs);
    printf("Size:         %llu bytes\n", (unsigned long long)c->size_bytes);
    printf("Triton:       ");
    for (size_t i = 0; i < s->n_triton_versions; i++)
        printf("%s%s", i ? ", " : "", s->triton_versions[i]);
    printf("%s\nPTX ISA:      ", s->n_triton_versions ? "" : "(not recorded)");
    for (size_t i = 0; i < s->n_ptx_versions; i++)
        printf("%s%s", i ? ", " : "", tkm_ptx_version_str(s->ptx_versions[i], pv, sizeof pv));
    printf("%s\nTargets:\n", s->n_ptx_versions ? "" : "(no .ptx files)");
    for (size_t i = 0; i < s->n_targets; i++)
        printf("  %-5s arch %-8s warp %-3d %zu kernels%s\n", s->targets[i].target.backend,
               s->targets[i].target.arch, s->targets[i].target.warp_size, s->targets[i].kernels,
               s->targets[i].arch_specific ? " (arch-specific sm_NNa code)" : "");
    for (size_t i = 0; i < s->n_targets; i++)
        if (s->targets[i].binary_mismatch)
            printf(
                "  WARNING: %zu kernels of %s arch %s carry a cubin/hsaco built for another arch "
                "(see BIN); 'tkmctl check' refuses this target\n",
                s->targets[i].binary_mismatch, s->targets[i].target.backend,
                s->targets[i].target.arch);
    printf("\n%-12s %-40s %-5s %-6s %-6s %5s %6s %-7s %-4s %10s\n", "DIR", "NAME", "BACK", "ARCH",
           "BIN", "WARPS", "STAGES", "TRITON", "PTX", "SIZE");
    for (size_t i = 0; i < c->n_kernels; i++) {
        const struct tkm_triton_kernel *k = &c->kernels[i];
        printf("%-12.12s %-40.40s %-5s %-6s %-6s %5d %6d %-7s %-4s %10llu\n", k->dir,
               k->name ? k->name : "?", k->target.backend, k->target.arch,
               k->binary_arch[0] ? k->binary_arch : "-", k->num_warps, k->num_stages,
               k->triton_version ? k->triton_version : "-",
               tkm_ptx_version_str(k->ptx, pv, sizeof pv), (unsigned long long)k->size_bytes);
    }
}

/* The Inductor and vLLM parts an image config announces (labels); o*
 * leaves out a part that is not there. */
static json_t *parts_json(const struct tkm_oci_config *cfg)
{
    static const char *const kserve[] = {TKM_KSERVE_LABEL_CACHE_HASH,
                                         TKM_KSERVE_LABEL_MOUNT_SUBPATH, TKM_KSERVE_LABEL_ROOT_ENV,
                                         TKM_KSERVE_LABEL_CACHE_TYPE, TKM_KSERVE_LABEL_FRAMEWORK};
    json_t *ind = NULL, *vllm = NULL;
    const char *v;
    if ((v = tkm_oci_config_label(cfg, TKM_INDUCTOR_LABEL_SUMMARY)) != NULL)
        ind = json_pack("{s:o*,s:o*,s:o*}", "entryCount",
                        ctl_json_label(tkm_oci_config_label(cfg, TKM_INDUCTOR_LABEL_ENTRY_COUNT)),
                        "cacheSizeBytes",
                        ctl_json_label(tkm_oci_config_label(cfg, TKM_INDUCTOR_LABEL_SIZE)),
                        "summary", json_loads(v, 0, NULL));
    if (tkm_oci_config_label(cfg, TKM_VLLM_LABEL_ENTRY_COUNT)) {
        json_t *k = json_object();
        for (size_t i = 0; k && i < sizeof kserve / sizeof kserve[0]; i++)
            if ((v = tkm_oci_config_label(cfg, kserve[i])) != NULL)
                json_object_set_new(k, kserve[i], json_string(v));
        const char *sum = tkm_oci_config_label(cfg, TKM_VLLM_LABEL_SUMMARY);
        vllm = json_pack("{s:o*,s:o*,s:s?,s:o*,s:o*}", "entryCount",
                         ctl_json_label(tkm_oci_config_label(cfg, TKM_VLLM_LABEL_ENTRY_COUNT)),
                         "cacheSizeBytes",
                         ctl_json_label(tkm_oci_config_label(cfg, TKM_VLLM_LABEL_SIZE)), "format",
                         tkm_oci_config_label(cfg, TKM_VLLM_LABEL_FORMAT), "summary",
                         sum ? json_loads(sum, 0, NULL) : NULL, "kserve", k);
    }
    return json_pack("{s:o*,s:o*}", "inductor", ind, "vllm", vllm);
}

static void inductor_text(const char *summary, const char *n, const char *b)
{
    struct tkm_inductor_info in;
    struct tkm_err e = {0};
    printf("Inductor:     %s FX graph + AOTAutograd entries, %s bytes\n", n ? n : "?", b ? b : "?");
    if (tkm_inductor_summary_parse(&in, summary, &e) != 0) {
        printf("  summary label unreadable: %s\n", tkm_err_str(&e));
        return;
    }
    const struct tkm_inductor_facts *f = &in.facts;
    printf("  torch %s (%s), CUDA %s (%s), Triton %s (%s), %s arch %s warp %d (%s)\n",
           f->torch_version[0] ? f->torch_version : "?", f->torch_from,
           f->cuda_version[0] ? f->cuda_version : "?", f->cuda_from,
           f->triton_version[0] ? f->triton_version : "?", f->triton_from,
           f->backend[0] ? f->backend : "?", f->arch[0] ? f->arch : "?", f->warp_size,
           f->arch_from);
    printf("  %llu FX graphs, %llu AOTAutograd, %llu generated modules, %llu Triton kernels in "
           "its triton/\n",
           (unsigned long long)in.fxgraph, (unsigned long long)in.aotautograd,
           (unsigned long long)in.code_files, (unsigned long long)in.triton_kernels);
}

static void parts_text(const struct tkm_oci_config *cfg)
{
    const char *v = tkm_oci_config_label(cfg, TKM_INDUCTOR_LABEL_SUMMARY);
    if (v)
        inductor_text(v, tkm_oci_config_label(cfg, TKM_INDUCTOR_LABEL_ENTRY_COUNT),
                      tkm_oci_config_label(cfg, TKM_INDUCTOR_LABEL_SIZE));
    if ((v = tkm_oci_config_label(cfg, TKM_VLLM_LABEL_ENTRY_COUNT)) != NULL) {
        const char *b = tkm_oci_config_label(cfg, TKM_VLLM_LABEL_SIZE);
        const char *fm = tkm_oci_config_label(cfg, TKM_VLLM_LABEL_FORMAT);
        const char *sm = tkm_oci_config_label(cfg, TKM_VLLM_LABEL_SUMMARY);
        const char *h = tkm_oci_config_label(cfg, TKM_KSERVE_LABEL_CACHE_HASH);
        const char *env = tkm_oci_config_label(cfg, TKM_KSERVE_LABEL_ROOT_ENV);
        printf("vLLM:         %s cache hash dirs (%s), %s bytes, format %s\n", v, h ? h : "?",
               b ? b : "?", fm ? fm : "?");
        printf("  summary %s; %s\n", sm ? sm : "?", env ? env : "no cache-root-env");
    }
}

/* A directory that an extracted multi-part image left: each part. */
static int inspect_parts_dir(const char *dir, int json)
{
    char p[4200], *label = NULL;
    struct tkm_inductor_info in;
    struct tkm_vllm_info v = {0};
    struct tkm_triton_cache c = {0};
    struct tkm_err e = {0};
    int rc = 1, has_t, has_i, has_v;
    snprintf(p, sizeof p, "%s/triton", dir);
    has_t = tkm_triton_cache_scan(&c, p, &e) == 0;
    snprintf(p, sizeof p, "%s/inductor", dir);
    has_i = tkm_inductor_scan(&in, p, &e) == 0 && tkm_inductor_summary_label(&in, &label, &e) == 0;
    snprintf(p, sizeof p, "%s/vllm", dir);
    has_v = tkm_vllm_scan(&v, p, &e) == 0;
    if (!has_t && !has_i && !has_v) {
        fprintf(stderr, "tkmctl inspect: %s: no readable part (%s)\n", dir, tkm_err_str(&e));
        goto out;
    }
    if (json) { /* o*: a part that is not there is left out */
        json_t *t = has_t ? json_pack("{s:I,s:I}", "entryCount", (json_int_t)c.n_kernels,
                                      "cacheSizeBytes", (json_int_t)c.size_bytes)
                          : NULL;
        json_t *i = has_i ? json_pack("{s:I,s:o*}", "cacheSizeBytes", (json_int_t)in.size_bytes,
                                      "summary", json_loads(label, 0, NULL))
                          : NULL;
        json_t *vl = has_v
                         ? json_pack("{s:I,s:I,s:s,s:s,s:o*}", "entryCount", (json_int_t)v.entries,
                                     "cacheSizeBytes", (json_int_t)v.size_bytes, "format", v.format,
                                     "hashes", v.hashes, "summary", json_loads(v.summary, 0, NULL))
                         : NULL;
        json_t *o = json_pack("{s:o*,s:o*,s:o*}", "triton", t, "inductor", i, "vllm", vl);
        rc = ctl_json_print(o) != 0;
        goto out;
    }
    printf("Parts of:     %s\n", dir);
    if (has_t)
        printf("Triton:       %zu kernels, %llu bytes (inspect %s/triton for each kernel)\n",
               c.n_kernels, (unsigned long long)c.size_bytes, dir);
    if (has_i) {
        char n[32], b[32];
        snprintf(n, sizeof n, "%llu", (unsigned long long)(in.fxgraph + in.aotautograd));
        snprintf(b, sizeof b, "%llu", (unsigned long long)in.size_bytes);
        inductor_text(label, n, b);
    }
    if (has_v)
        printf("vLLM:         %llu cache hash dirs (%s), %llu bytes, format %s\n  summary %s\n",
               (unsigned long long)v.entries, v.hashes, (unsigned long long)v.size_bytes, v.format,
               v.summary);
    rc = 0;
out:
    free(label);
    tkm_vllm_info_release(&v);
    tkm_triton_cache_release(&c);
    return rc;
}

/* A variant index: its variants. */
static int inspect_variants(const struct ctl_variants *cv, int json)
{
    if (json) {
        json_t *a = json_array();
        for (size_t i = 0; a && i < cv->set.n; i++)
            json_array_append_new(a, ctl_variant_json(&cv->set.v[i]));
        return ctl_json_print(json_pack("{s:s,s:s,s:o}", "image", cv->what, "indexDigest",
                                        cv->set.digest, "variants", a)) != 0;
    }
    printf("Image:        %s\nIndex:        %s (a variant index)\nVariants:     %zu\n", cv->what,
           cv->set.digest, cv->set.n);
    ctl_variants_print(&cv->set);
    printf("(each variant: 'tkmctl inspect' it by its digest)\n");
    return 0;
}

static int inspect_image(const char *layout, const char *tag, const char *ref, int json,
                         struct ctl_oci_flags *oci)
{
    struct tkm_triton_image im;
    struct tkm_err err = {0};
    struct tkm_oci_registry_opts ro;
    struct ctl_variants cv;
    struct tkm_variant_set one = {0};
    ctl_oci_registry_opts(oci, &ro);
    int rc = ctl_variants_load(&cv, layout, tag, ref, oci, &err);
    if (rc == 0 && cv.set.n) {
        rc = inspect_variants(&cv, json);
        ctl_variants_release(&cv);
        return rc;
    }
    ctl_variants_release(&cv);
    if (rc == 0)
        rc = layout ? tkm_triton_image_load_layout(&im, layout, tag, &err)
                    : tkm_triton_image_load_ref(&im, ref, &ro, &err);
    if (rc == 0)
        rc = tkm_variants_from_image(im.manifest_digest, 0, NULL, &im.config, &im.summary, NULL,
                                     &one, &err);
    if (rc) {
        fprintf(stderr, "tkmctl inspect: %s\n", tkm_err_str(&err));
        return 1;
    }
    if (json) {
        rc = ctl_json_print(json_pack(
                 "{s:s,s:s,s:o*,s:o*,s:o*,s:o,s:[o]}", "image", im.what, "manifestDigest",
                 im.manifest_digest, "entryCount", ctl_json_label(im.entry_count), "cacheSizeBytes",
                 ctl_json_label(im.size_bytes), "summary", json_loads(im.summary_label, 0, NULL),
                 "parts", parts_json(&im.config), "variants", ctl_variant_json(&one.v[0]))) != 0;
    } else {
        char d[160];
        tkm_variant_describe(&one.v[0], d, sizeof d);
        printf("Image:        %s\nManifest:     %s\nEntries:      %s\nSize:         %s bytes\n"
               "Targets:\n",
               im.what, im.manifest_digest, im.entry_count ? im.entry_count : "?",
               im.size_bytes ? im.size_bytes : "?");
        for (size_t i = 0; i < im.summary.n_targets; i++)
            printf("  %-5s arch %-8s warp %d\n", im.summary.targets[i].target.backend,
                   im.summary.targets[i].target.arch, im.summary.targets[i].target.warp_size);
        parts_text(&im.config);
        printf("Variant:      %s (a single image: a set of one variant)\n", d);
        printf("(per-kernel details need the layer: 'tkmctl extract' it, then inspect the "
               "directory)\n");
    }
    tkm_variant_set_release(&one);
    tkm_triton_image_release(&im);
    return rc;
}

static int cmd_inspect(int argc, char **argv)
{
    const char *src = NULL, *layout = NULL, *tag = NULL, *out = NULL;
    struct ctl_oci_flags oci;
    const struct ctl_arg args[] = {
        {"--output", &out, NULL}, {"--image-layout", &layout, NULL}, {"--tag", &tag, NULL}, {0}};
    const struct ctl_args_spec spec = {"inspect", args, &src, 1, inspect_usage, &oci};
    ctl_oci_flags_init(&oci, "config"); /* -o json|text is one of its flags */
    int r = ctl_args_parse(&spec, argc, argv);
    if (r >= 0)
        return r;
    if (out && strcmp(out, "json") != 0 && strcmp(out, "text") != 0) {
        fprintf(stderr, "tkmctl inspect: --output takes json or text, not '%s'\n", out);
        return 2;
    }
    int json = out ? !strcmp(out, "json") : oci.json;
    if (!src == !layout) {
        fprintf(stderr, "tkmctl inspect: give exactly one of CACHE_DIR, --image-layout DIR or "
                        "IMAGE_REF\n\n");
        inspect_usage(stderr);
        return 2;
    }
    struct stat st;
    if (layout || (stat(src, &st) == 0 && S_ISDIR(st.st_mode) && tkm_oci_layout_is(src)))
        return inspect_image(layout ? layout : src, tag, NULL, json, &oci);
    /* "/x", "./x", "../x" are paths (a missing one is reported as such); others refs */
    if (src[0] != '/' && src[0] != '.' && (stat(src, &st) != 0 || !S_ISDIR(st.st_mode)))
        return inspect_image(NULL, NULL, src, json, &oci);
    if (tkm_parts_is_root(src))
        return inspect_parts_dir(src, json);
    struct tkm_triton_cache c;
    struct tkm_err err = {0};
    if (tkm_triton_cache_scan(&c, src, &err) != 0) {
        fprintf(stderr, "tkmctl inspect: %s\n", tkm_err_str(&err));
        return 1;
    }
    int rc = 0;
    if (json)
        rc = inspect_dir_json(&c) == 0 ? 0 : 1;
    else
        inspect_dir_text(&c);
    tkm_triton_cache_release(&c);
    return rc;
}

TKMCTL_COMMAND_ORDERED(inspect, "show a Triton cache's summary, kernels or variants", cmd_inspect,
                       30)
