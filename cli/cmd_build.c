/*
 * cmd_build.c - tkmctl build: a Triton cache directory -> an OCI image.
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <tkm/util.h>

#include "ctl_args.h"
#include "ctl_oci.h"
#include "ctl_publish.h"
#include "tkmctl.h"

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

static int cmd_build(int argc, char **argv)
{
    struct ctl_oci_flags f;
    struct ctl_publish p;
    const char *level = NULL, *pos[1], *platform = NULL;
    char os[32], arch[32];
    memset(&p, 0, sizeof p);
    p.cmd = "build";
    p.f = &f;
    ctl_oci_flags_init(&f, "push");
    const struct ctl_arg args[] = {{"--output", &p.output, NULL},
                                   {"--tag", &p.tag, NULL},
                                   {"--push", &p.push, NULL},
                                   {"--title", &p.bo.title, NULL},
                                   {"--level", &level, NULL},
                                   {"--inductor-dir", &p.bo.inductor_dir, NULL},
                                   {"--vllm-dir", &p.bo.vllm_dir, NULL},
                                   {"--torch-version", &p.bo.torch_version, NULL},
                                   {"--cuda-version", &p.bo.cuda_version, NULL},
                                   {"--triton-version", &p.bo.triton_version, NULL},
                                   {"--arch", &p.bo.arch, NULL},
                                   {"--vllm-root-env", &p.bo.vllm_root_env, NULL},
                                   {"--platform", &platform, NULL},
                                   {"--add-variant", NULL, &p.add_variant},
                                   {0}};
    const struct ctl_args_spec spec = {"build", args, pos, 1, usage, &f};
    int st = ctl_args_parse(&spec, argc, argv);
    if (st >= 0)
        return st;
    p.cache = pos[0];
    if (level) {
        int64_t v;
        if (tkm_parse_i64(level, 1, 9, &v) != 0) {
            fprintf(stderr, "tkmctl build: --level takes 1..9, not '%s'\n", level);
            return 2;
        }
        p.bo.gzip_level = (int)v;
    }
    if (!p.cache || (!p.output && !p.push)) {
        fprintf(stderr, "tkmctl build: need CACHE_DIR and --output DIR and/or --push REF\n\n");
        usage(stderr);
        return 2;
    }
    if (platform) {
        if (ctl_parse_platform(platform, os, arch) != 0) {
            fprintf(stderr, "tkmctl build: --platform takes OS/ARCH (e.g. linux/arm64), not '%s'\n",
                    platform);
            return 2;
        }
        p.bo.os = os;
        p.bo.architecture = arch;
    }
    if ((st = ctl_publish_check(&p)) != 0)
        return st;
    return ctl_publish(&p) == 0 ? 0 : 1;
}

TKMCTL_COMMAND_ORDERED(build, "pack a Triton cache directory into an OCI image or variant",
                       cmd_build, 10);
