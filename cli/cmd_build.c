/*
 * cmd_build.c - tkmctl build: a Triton cache directory -> an OCI image.
 */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <tkm/archive.h>
#include <tkm/triton/build.h>
#include <tkm/buf.h>
#include <tkm/oci/digest.h>
#include <tkm/oci/image.h>
#include <tkm/oci/layout.h>
#include <tkm/oci/ref.h>
#include <tkm/oci/registry.h>
#include <tkm/triton/variants.h>
#include <tkm/util.h>

#include "ctl_args.h"
#include "ctl_oci.h"
#include "tkmctl.h"
#include "ctl_json.h"
#include "ctl_variants.h"

static void usage(FILE *f)
{
    fprintf(f,
            "Usage: tkmctl build CACHE_DIR (--output DIR | --push REF) [flags]\n\n"
            "Packs a Triton kernel cache (the directory TRITON_CACHE_DIR points at) into an OCI\n"
            "image in the upstream MCV \"compat\" format: one gzip layer holding\n"
            "io.triton.cache/<kernel dirs> and io.triton.manifest/manifest.json, and a config\n"
            "whose labels (cache.triton.image/entry-count, /summary, /cache-size-bytes) tell a\n"
            "node which GPUs the kernels were compiled for. The tar is deterministic: the same\n"
            "cache always gives the same image digest. Leftover tmp.pid_* dirs are skipped;\n"
            "symbolic links or special files in the cache are refused. The config's platform is\n"
            "this machine's (linux/<its CPU>: the cache's launcher .so files are its code), or\n"
            "--platform.\n\n"
            "With --add-variant the image is a variant of a variant index (docs/images.md\n"
            "\"Variants\"): the cache must hold exactly one target (one TRITON_CACHE_DIR per GPU\n"
            "type); the image, its manifest annotated with its target, is added to the index\n"
            "named --tag in the --output layout and/or to the index at --push REF (GET the\n"
            "index, add, PUT it under REF's tag: the image first, by its digest), replacing the\n"
            "variant of the same platform, backend, arch and warp size; an index that does not\n"
            "exist yet is created. Sign the index digest it prints. Two builds adding to one\n"
            "registry index at the same time can lose one of the variants: add them in turn.\n\n"
            "Flags:\n"
            "  --output DIR       write an OCI image layout to DIR (created or added to)\n"
            "  --tag TAG          tag in the layout (default: the --push tag, else latest)\n"
            "  --push REF         push the image to REF, e.g. quay.io/me/cache:sm90\n"
            "  --title TEXT       org.opencontainers.image.title (default triton-kernel-cache)\n"
            "  --level N          gzip level 1-9 (default 6)\n"
            "  --inductor-dir DIR also pack Inductor's cache (TORCHINDUCTOR_CACHE_DIR: FX graph,\n"
            "                     AOTAutograd, generated code, its triton/) as io.inductor.cache/\n"
            "  --vllm-dir DIR     also pack a vLLM cache root (VLLM_CACHE_ROOT) as io.vllm.cache/\n"
            "                     with MCV's cache.vllm.image/* and io.kserve.km/* labels\n"
            "  --torch-version V, --cuda-version V, --triton-version V, --arch A\n"
            "                     what Inductor's keys depend on, where its cache records\n"
            "                     nothing (a flag contradicting the cache is an error)\n"
            "  --vllm-root-env E  io.kserve.km/cache-root-env (default VLLM_CACHE_ROOT=<dir>)\n"
            "  --platform OS/ARCH the config's platform (default linux/<this CPU>, OCI spelling:\n"
            "                     amd64, arm64)\n"
            "  --add-variant      add the image to a variant index (see above) instead of\n"
            "                     tagging it\n"
            "  -o json            print the result as JSON\n\n"
            "%s\n"
            "Examples:\n"
            "  tkmctl build ~/.triton/cache --output ./img --tag sm90\n"
            "  tkmctl build ~/.triton/cache --push 127.0.0.1:5000/tkm/cache:sm90\n"
            "  tkmctl build ./cache-sm80 --push quay.io/me/cache:v1 --add-variant\n"
            "  tkmctl build $TRITON_CACHE_DIR --push quay.io/me/cache:v1 --auth-file cfg.json -o "
            "json\n",
            ctl_oci_flags_help);
}

/* What --add-variant did: the index it wrote (layout and/or registry). */
struct added {
    char layout_index[TKM_OCI_DIGEST_LEN + 1], pushed_index[TKM_OCI_DIGEST_LEN + 1];
    char replaced[TKM_OCI_DIGEST_LEN + 1];
};

static void print_result(const struct tkm_triton_build_result *r, const char *layout,
                         const char *tag, const char *pushed, const struct added *ad, int json)
{
    char a[32], b[32];
    if (json && ad) {
        json_t *v = json_pack("{s:o,s:s*,s:s*,s:s*}", "variant", ctl_variant_json(&r->variant),
                              "layoutIndex", ad->layout_index[0] ? ad->layout_index : NULL,
                              "pushedIndex", ad->pushed_index[0] ? ad->pushed_index : NULL,
                              "replaced", ad->replaced[0] ? ad->replaced : NULL);
        json_t *all = json_pack(
            "{s:s,s:s,s:s,s:I,s:I,s:I,s:s*,s:s*,s:s*}", "manifest", r->manifest.digest, "config",
            r->config.digest, "layer", r->layer.digest, "layer_size", (json_int_t)r->layer.size,
            "entries", (json_int_t)r->entries, "cache_size_bytes", (json_int_t)r->cache_bytes,
            "layout", layout, "tag", layout ? tag : NULL, "pushed", pushed);
        if (all && v)
            json_object_update(all, v);
        json_decref(v);
        ctl_json_print(all);
        return;
    }
    if (json) {
        /* a part's counts only when it is there; s*, o*: a NULL leaves the key out */
        json_t *ie = r->inductor_bytes ? json_integer((json_int_t)r->inductor_entries) : NULL;
        json_t *ib = r->inductor_bytes ? json_integer((json_int_t)r->inductor_bytes) : NULL;
        json_t *ve = r->vllm_bytes ? json_integer((json_int_t)r->vllm_entries) : NULL;
        json_t *vb = r->vllm_bytes ? json_integer((json_int_t)r->vllm_bytes) : NULL;
        ctl_json_print(json_pack(
            "{s:s,s:s,s:s,s:I,s:s,s:I,s:I,s:I,s:I,s:s*,s:s*,s:o*,s:o*,s:o*,s:o*,s:s*}", "manifest",
            r->manifest.digest, "config", r->config.digest, "layer", r->layer.digest, "layer_size",
            (json_int_t)r->layer.size, "diff_id", r->diff_id, "entries", (json_int_t)r->entries,
            "cache_size_bytes", (json_int_t)r->cache_bytes, "files", (json_int_t)r->files,
            "tar_bytes", (json_int_t)r->tar_bytes, "layout", layout, "tag", layout ? tag : NULL,
            "inductor_entries", ie, "inductor_bytes", ib, "vllm_entries", ve, "vllm_bytes", vb,
            "pushed", pushed));
        return;
    }
    printf("built %s: %llu kernel entries, %llu files, %s of cache, layer %s\n", r->manifest.digest,
           (unsigned long long)r->entries, (unsigned long long)r->files,
           ctl_human_bytes(r->cache_bytes, a, sizeof a),
           ctl_human_bytes(r->layer.size, b, sizeof b));
    if (r->inductor_bytes)
        printf("  inductor part: %llu FX graph + AOTAutograd entries, %s\n",
               (unsigned long long)r->inductor_entries,
               ctl_human_bytes(r->inductor_bytes, a, sizeof a));
    if (r->vllm_bytes)
        printf("  vllm part: %llu cache hash dirs, %s\n", (unsigned long long)r->vllm_entries,
               ctl_human_bytes(r->vllm_bytes, a, sizeof a));
    if (ad) {
        char d[160];
        tkm_variant_describe(&r->variant, d, sizeof d);
        printf("variant %s%s%s%s\n", d, ad->replaced[0] ? " (replacing " : "", ad->replaced,
               ad->replaced[0] ? ")" : "");
        if (layout)
            printf("layout %s (tag %s): variant index %s\n", layout, tag, ad->layout_index);
        if (pushed)
            printf("pushed variant index %s\n", pushed);
        return;
    }
    if (layout)
        printf("layout %s (tag %s)\n", layout, tag);
    if (pushed)
        printf("pushed %s\n", pushed);
}

/* The index bytes there are in a layout under tag into b (empty: none). */
static int layout_index(const char *layout, const char *tag, struct tkm_buf *b, struct tkm_err *err)
{
    struct tkm_oci_desc d;
    struct tkm_err e = {0};
    int rc = tkm_oci_layout_find(layout, tag, &d, &e);
    if (rc == -ENOENT)
        return 0;
    if (rc)
        return tkm_err_set(err, rc, "%s", tkm_err_str(&e));
    return tkm_oci_layout_read_blob(layout, &d, b, err);
}

/* Adds the built variant to the index under tag in the layout. */
static int add_to_layout(const char *layout, const char *tag,
                         const struct tkm_triton_build_result *r, struct added *ad,
                         struct tkm_err *err)
{
    struct tkm_buf b = TKM_BUF_INIT(TKM_OCI_MANIFEST_MAX);
    struct tkm_oci_desc d = {0};
    char *text = NULL;
    size_t n = 0;
    int rc;
    if ((rc = layout_index(layout, tag, &b, err)) == 0 &&
        (rc = tkm_variants_index_put(b.len ? b.data : NULL, b.len, &r->variant, &text, &n,
                                     ad->replaced, err)) == 0 &&
        (rc = tkm_oci_layout_put_blob(layout, text, n, d.digest, err)) == 0) {
        snprintf(d.media_type, sizeof d.media_type, "%s", TKM_OCI_MT_INDEX);
        d.size = n;
        rc = tkm_oci_layout_add_manifest(layout, &d, tag, err);
        memcpy(ad->layout_index, d.digest, sizeof ad->layout_index);
    }
    if (rc)
        tkm_err_prefix(err, "layout %s, tag %s", layout, tag);
    free(text);
    tkm_buf_release(&b);
    return rc;
}

/* Pushes the built variant by its digest, then GETs the index at ref's
 * tag, adds the variant, PUTs it back. */
static int add_to_registry(const char *layout, const struct tkm_oci_ref *ref,
                           const struct tkm_oci_registry_opts *ro,
                           const struct tkm_triton_build_result *r, struct added *ad,
                           struct tkm_err *err)
{
    struct tkm_buf b = TKM_BUF_INIT(TKM_OCI_MANIFEST_MAX);
    struct tkm_oci_registry *reg = NULL;
    struct tkm_oci_ref vref = *ref;
    struct tkm_err e = {0};
    char ct[160], dg[TKM_OCI_DIGEST_LEN + 1], *text = NULL;
    size_t n = 0;
    int rc;
    vref.tag[0] = '\0'; /* the variant goes by its digest only */
    vref.digest[0] = '\0';
    if ((rc = tkm_oci_push(layout, r->variant.digest, &vref, ro, dg, NULL, err)) != 0 ||
        (rc = tkm_oci_registry_new(ref->host, ro, &reg, err)) != 0)
        goto out;
    rc = tkm_oci_registry_get_manifest(reg, ref->repo, ref->tag, &b, ct, sizeof ct, dg, &e);
    if (rc == -ENOENT) {
        tkm_buf_reset(&b);
        rc = 0;
    } else if (rc) {
        rc = tkm_err_set(err, rc, "%s", tkm_err_str(&e));
        goto out;
    }
    if ((rc = tkm_variants_index_put(b.len ? b.data : NULL, b.len, &r->variant, &text, &n,
                                     ad->replaced, err)) != 0 ||
        (rc = tkm_oci_registry_put_manifest(reg, ref->repo, ref->tag, TKM_OCI_MT_INDEX, text, n,
                                            err)) != 0 ||
        (rc = tkm_oci_digest_bytes(text, n, ad->pushed_index)) != 0)
        goto out;
out:
    tkm_oci_registry_free(reg);
    free(text);
    tkm_buf_release(&b);
    return rc;
}

/* "OS/ARCH" into os and arch (each at least 32 bytes). */
static int parse_platform(const char *p, char *os, char *arch)
{
    const char *slash = strchr(p, '/');
    if (!slash || slash == p || !slash[1] || strchr(slash + 1, '/') || slash - p >= 32 ||
        strlen(slash + 1) >= 32)
        return -1;
    snprintf(os, 32, "%.*s", (int)(slash - p), p);
    snprintf(arch, 32, "%s", slash + 1);
    return 0;
}

static int cmd_build(int argc, char **argv)
{
    struct ctl_oci_flags f;
    struct tkm_triton_build_opts bo = {0};
    struct tkm_triton_build_result res;
    struct tkm_oci_ref ref;
    struct tkm_err err = {0};
    const char *cache = NULL, *output = NULL, *tag = NULL, *push = NULL;
    char tmpl[] = "/tmp/tkmctl-build-XXXXXX", layout_tmp[64] = "", pushed[800] = "";
    int rc = 1;
    ctl_oci_flags_init(&f, "push");
    const char *level = NULL, *pos[1], *platform = NULL;
    char os[32], arch[32];
    int add_variant = 0;
    struct added ad;
    memset(&ad, 0, sizeof ad);
    const struct ctl_arg args[] = {{"--output", &output, NULL},
                                   {"--tag", &tag, NULL},
                                   {"--push", &push, NULL},
                                   {"--title", &bo.title, NULL},
                                   {"--level", &level, NULL},
                                   {"--inductor-dir", &bo.inductor_dir, NULL},
                                   {"--vllm-dir", &bo.vllm_dir, NULL},
                                   {"--torch-version", &bo.torch_version, NULL},
                                   {"--cuda-version", &bo.cuda_version, NULL},
                                   {"--triton-version", &bo.triton_version, NULL},
                                   {"--arch", &bo.arch, NULL},
                                   {"--vllm-root-env", &bo.vllm_root_env, NULL},
                                   {"--platform", &platform, NULL},
                                   {"--add-variant", NULL, &add_variant},
                                   {0}};
    const struct ctl_args_spec spec = {"build", args, pos, 1, usage, &f};
    int st = ctl_args_parse(&spec, argc, argv);
    if (st >= 0)
        return st;
    cache = pos[0];
    if (level) {
        int64_t v;
        if (tkm_parse_i64(level, 1, 9, &v) != 0) {
            fprintf(stderr, "tkmctl build: --level takes 1..9, not '%s'\n", level);
            return 2;
        }
        bo.gzip_level = (int)v;
    }
    if (!cache || (!output && !push)) {
        fprintf(stderr, "tkmctl build: need CACHE_DIR and --output DIR and/or --push REF\n\n");
        usage(stderr);
        return 2;
    }
    if (push && tkm_oci_ref_parse(&ref, push, &err) != 0) {
        fprintf(stderr, "tkmctl build: %s\n", tkm_err_str(&err));
        return 2;
    }
    if (platform) {
        if (parse_platform(platform, os, arch) != 0) {
            fprintf(stderr, "tkmctl build: --platform takes OS/ARCH (e.g. linux/arm64), not '%s'\n",
                    platform);
            return 2;
        }
        bo.os = os;
        bo.architecture = arch;
    }
    if (add_variant && push && (!ref.tag[0] || ref.digest[0])) {
        fprintf(stderr, "tkmctl build: --add-variant --push needs a tag to update (REF:TAG), "
                        "not a digest\n");
        return 2;
    }
    bo.variant = add_variant;
    bo.untagged = add_variant; /* the layout's tag names the index */
    if (!tag)
        tag = push && ref.tag[0] ? ref.tag : "latest";
    if (!output) {
        if (!mkdtemp(tmpl)) {
            fprintf(stderr, "tkmctl build: mkdtemp: %s\n", strerror(errno));
            return 1;
        }
        snprintf(layout_tmp, sizeof layout_tmp, "%s/layout", tmpl);
    }
    if (tkm_triton_build_cache_image(cache, output ? output : layout_tmp, tag, &bo, &res, &err) !=
        0) {
        fprintf(stderr, "tkmctl build: %s\n", tkm_err_str(&err));
        goto out;
    }
    if (add_variant && output && add_to_layout(output, tag, &res, &ad, &err) != 0) {
        fprintf(stderr, "tkmctl build: %s\n", tkm_err_str(&err));
        goto out;
    }
    if (push) {
        struct tkm_oci_registry_opts ro;
        char digest[TKM_OCI_DIGEST_LEN + 1], canon[600];
        ctl_oci_registry_opts(&f, &ro);
        int prc =
            add_variant
                ? add_to_registry(output ? output : layout_tmp, &ref, &ro, &res, &ad, &err)
                : tkm_oci_push(output ? output : layout_tmp, tag, &ref, &ro, digest, NULL, &err);
        if (add_variant)
            memcpy(digest, ad.pushed_index, sizeof digest);
        ctl_progress_end(&f.progress);
        if (prc != 0) {
            fprintf(stderr, "tkmctl build: push %s: %s\n", push, tkm_err_str(&err));
            goto out;
        }
        tkm_oci_ref_format(&ref, canon, sizeof canon);
        snprintf(pushed, sizeof pushed, "%s@%s", canon, digest);
    }
    print_result(&res, output, tag, push ? pushed : NULL, add_variant ? &ad : NULL, f.json);
    rc = 0;
out:
    if (!output) {
        int rrc = tkm_rmtree_at(AT_FDCWD, tmpl);
        if (rrc != 0)
            fprintf(stderr, "tkmctl build: could not remove %s: %s\n", tmpl, strerror(-rrc));
    }
    return rc;
}

TKMCTL_COMMAND_ORDERED(build, "pack a Triton cache directory into an OCI image or variant",
                       cmd_build, 10);
