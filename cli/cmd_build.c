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
#include <tkm/oci/image.h>
#include <tkm/oci/ref.h>
#include <tkm/util.h>

#include "ctl_args.h"
#include "ctl_oci.h"
#include "tkmctl.h"
#include "ctl_json.h"

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
            "symbolic links or special files in the cache are refused.\n\n"
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
            "  -o json            print the result as JSON\n\n"
            "%s\n"
            "Examples:\n"
            "  tkmctl build ~/.triton/cache --output ./img --tag sm90\n"
            "  tkmctl build ~/.triton/cache --push 127.0.0.1:5000/tkm/cache:sm90\n"
            "  tkmctl build $TRITON_CACHE_DIR --push quay.io/me/cache:v1 --auth-file cfg.json -o "
            "json\n",
            ctl_oci_flags_help);
}

static void print_result(const struct tkm_triton_build_result *r, const char *layout,
                         const char *tag, const char *pushed, int json)
{
    char a[32], b[32];
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
    if (layout)
        printf("layout %s (tag %s)\n", layout, tag);
    if (pushed)
        printf("pushed %s\n", pushed);
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
    const char *level = NULL, *pos[1];
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
    if (push) {
        struct tkm_oci_registry_opts ro;
        char digest[TKM_OCI_DIGEST_LEN + 1], canon[600];
        ctl_oci_registry_opts(&f, &ro);
        int prc = tkm_oci_push(output ? output : layout_tmp, tag, &ref, &ro, digest, NULL, &err);
        ctl_progress_end(&f.progress);
        if (prc != 0) {
            fprintf(stderr, "tkmctl build: push %s: %s\n", push, tkm_err_str(&err));
            goto out;
        }
        tkm_oci_ref_format(&ref, canon, sizeof canon);
        snprintf(pushed, sizeof pushed, "%s@%s", canon, digest);
    }
    print_result(&res, output, tag, push ? pushed : NULL, f.json);
    rc = 0;
out:
    if (!output) {
        int rrc = tkm_rmtree_at(AT_FDCWD, tmpl);
        if (rrc != 0)
            fprintf(stderr, "tkmctl build: could not remove %s: %s\n", tmpl, strerror(-rrc));
    }
    return rc;
}

TKMCTL_COMMAND_ORDERED(build, "pack a Triton cache directory into an OCI image", cmd_build, 10);
