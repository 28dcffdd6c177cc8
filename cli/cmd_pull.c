/*
 * cmd_pull.c - tkmctl pull: a registry image -> verified blobs in a layout.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tkm/oci/image.h>
#include <tkm/oci/ref.h>

#include "ctl_args.h"
#include "ctl_limits.h"
#include "ctl_oci.h"
#include "ctl_signal.h"
#include "tkmctl.h"
#include "ctl_json.h"

static void usage(FILE *f)
{
    fprintf(
        f,
        "Usage: tkmctl pull REF --output DIR [flags]\n\n"
        "Downloads an image into an OCI image layout at DIR. The tag is resolved to a\n"
        "digest once; the manifest is fetched by that digest and hashed; an index is\n"
        "followed to its linux/<this machine's arch> manifest; the config and every layer\n"
        "are verified against their digests and sizes while they stream (a mismatch is an\n"
        "error naming the digest, and nothing unverified is left in DIR). Prints the digest\n"
        "and the Triton cache labels. SIGINT or SIGTERM cancels the pull (a new layout is\n"
        "removed; an existing one keeps only verified blobs and no new tag) and exits\n"
        "128+signal (130, 143); a second one kills at once.\n\n"
        "Flags:\n"
        "  --output DIR       the layout to write (created, or added to)\n"
        "  --tag TAG          tag in the layout (default: REF's tag)\n"
        "  --config-only      fetch manifest and config only (inspect the labels)\n"
        "  --max-bytes N      refuse an image whose config and layers add up to more than N\n"
        "                     bytes (default: no cap beyond each descriptor's exact size)\n"
        "  --max-file-bytes N refuse an image with a layer blob over N bytes (default: none)\n"
        "                     With either cap the manifest is read and the sizes checked\n"
        "                     before any layer is downloaded; then that digest is pulled.\n"
        "                     N: bytes, or K/M/G/T (x1000) or Ki/Mi/Gi/Ti (x1024): 512Mi\n"
        "  -o json            print the result as JSON\n\n"
        "%s\n"
        "Exit status: 0 done, 1 failed, 2 usage, 130/143 interrupted.\n\n"
        "Examples:\n"
        "  tkmctl pull 127.0.0.1:5000/tkm/cache:sm90 --output ./img\n"
        "  tkmctl pull quay.io/gkm/cache-examples:vector-add-cache-cuda --output ./img -o json\n",
        ctl_oci_flags_help);
}

static const char *const labels[] = {
    "cache.triton.image/entry-count", "cache.triton.image/cache-size-bytes",
    "cache.triton.image/summary", "org.opencontainers.image.title"};

static void print_result(const char *canon, const struct tkm_oci_pull_result *r, const char *output,
                         int json)
{
    if (json) {
        json_t *l = json_object();
        for (size_t i = 0; i < sizeof labels / sizeof labels[0]; i++) {
            const char *v = tkm_oci_config_label(&r->config, labels[i]);
            if (v)
                json_object_set_new(l, labels[i], json_string(v));
        }
        json_t *j =
            json_pack("{s:s,s:s,s:s,s:o,s:I,s:I}", "reference", canon, "digest", r->manifest.digest,
                      "layout", output, "labels", l, "layers", (json_int_t)r->parsed.n_descs,
                      "bytes_fetched", (json_int_t)r->bytes_fetched);
        if (j && r->index_digest[0])
            json_object_set_new(j, "index", json_string(r->index_digest));
        ctl_json_print(j);
        return;
    }
    printf("%s@%s -> %s\n", canon, r->manifest.digest, output);
    for (size_t i = 0; i < sizeof labels / sizeof labels[0]; i++) {
        const char *v = tkm_oci_config_label(&r->config, labels[i]);
        if (v)
            printf("  %s=%s\n", labels[i], v);
    }
}

static int cmd_pull(int argc, char **argv)
{
    struct ctl_oci_flags f;
    struct tkm_oci_ref ref;
    struct tkm_oci_registry_opts ro;
    struct tkm_oci_pull_result res;
    struct tkm_err err = {0};
    const char *refstr = NULL, *output = NULL, *tag = NULL;
    char canon[600];
    int layers = 1;
    ctl_oci_flags_init(&f, "pull");
    int config_only = 0;
    const char *max_bytes = NULL, *max_file = NULL;
    struct ctl_pull_caps caps = {0};
    const struct ctl_arg args[] = {
        {"--output", &output, NULL},           {"--tag", &tag, NULL},
        {"--config-only", NULL, &config_only}, {"--max-bytes", &max_bytes, NULL},
        {"--max-file-bytes", &max_file, NULL}, {0}};
    const struct ctl_args_spec spec = {"pull", args, &refstr, 1, usage, &f};
    int st = ctl_args_parse(&spec, argc, argv);
    if (st >= 0)
        return st;
    layers = !config_only;
    if (ctl_size_flag("pull", "--max-bytes", max_bytes, &caps.max_bytes) ||
        ctl_size_flag("pull", "--max-file-bytes", max_file, &caps.max_blob_bytes))
        return 2;
    if (!refstr || !output) {
        fprintf(stderr, "tkmctl pull: need REF and --output DIR\n\n");
        usage(stderr);
        return 2;
    }
    if (tkm_oci_ref_parse(&ref, refstr, &err) != 0) {
        fprintf(stderr, "tkmctl pull: %s\n", tkm_err_str(&err));
        return 2;
    }
    if (ctl_signal_install() < 0)
        fprintf(stderr, "tkmctl pull: warning: cannot catch SIGINT/SIGTERM\n");
    ctl_oci_registry_opts(&f, &ro);
    ro.cancel = ctl_signal_flag(); /* cancels the pull job, which removes what it staged */
    caps.mirrors_dir = f.mirrors_dir;
    caps.registries_conf = f.registries_conf;
    int rc = ctl_pull_capped(&ref, &ro, output, tag, layers, &caps, &res, &err);
    ctl_progress_end(&f.progress);
    if (rc != 0 && ctl_signal_status()) {
        fprintf(stderr, "tkmctl pull: interrupted by signal %d; the pull was cancelled\n",
                ctl_signal_status() - 128);
        return ctl_signal_status();
    }
    if (rc != 0) {
        fprintf(stderr, "tkmctl pull: %s\n", tkm_err_str(&err));
        return 1;
    }
    tkm_oci_ref_format(&ref, canon, sizeof canon);
    print_result(canon, &res, output, f.json);
    tkm_oci_pull_result_release(&res);
    return 0;
}

TKMCTL_COMMAND_ORDERED(pull, "download an image into a verified OCI layout", cmd_pull, 12);
