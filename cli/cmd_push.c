/*
 * cmd_push.c - tkmctl push: an OCI image layout -> a registry.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tkm/oci/image.h>
#include <tkm/oci/ref.h>

#include "ctl_args.h"
#include "ctl_oci.h"
#include "tkmctl.h"
#include "ctl_json.h"

static void usage(FILE *f)
{
    fprintf(f,
            "Usage: tkmctl push LAYOUT_DIR REF [--tag TAG] [flags]\n\n"
            "Uploads the image tagged TAG in an OCI image layout (as written by\n"
            "'tkmctl build --output' or 'tkmctl pull') to REF. Every blob is verified against\n"
            "its digest before upload; blobs the registry already has are skipped; the manifest\n"
            "goes last, under REF's tag (or its digest). Prints REF@DIGEST.\n\n"
            "Flags:\n"
            "  --tag TAG          the image in the layout (default: the only one)\n"
            "  -o json            print the result as JSON\n\n"
            "%s\n"
            "Examples:\n"
            "  tkmctl push ./img 127.0.0.1:5000/tkm/cache:sm90 --tag sm90\n"
            "  tkmctl push ./img quay.io/me/cache:v1 --auth-file ~/.docker/config.json\n",
            ctl_oci_flags_help);
}

static int cmd_push(int argc, char **argv)
{
    struct ctl_oci_flags f;
    struct tkm_oci_ref ref;
    struct tkm_oci_registry_opts ro;
    struct tkm_err err = {0};
    const char *layout = NULL, *refstr = NULL, *tag = NULL;
    char digest[TKM_OCI_DIGEST_LEN + 1], canon[600];
    int uploaded = 0;
    ctl_oci_flags_init(&f, "push");
    const char *pos[2];
    const struct ctl_arg args[] = {{"--tag", &tag, NULL}, {0}};
    const struct ctl_args_spec spec = {"push", args, pos, 2, usage, &f};
    int st = ctl_args_parse(&spec, argc, argv);
    if (st >= 0)
        return st;
    layout = pos[0];
    refstr = pos[1];
    if (!layout || !refstr) {
        fprintf(stderr, "tkmctl push: need LAYOUT_DIR and REF\n\n");
        usage(stderr);
        return 2;
    }
    if (tkm_oci_ref_parse(&ref, refstr, &err) != 0) {
        fprintf(stderr, "tkmctl push: %s\n", tkm_err_str(&err));
        return 2;
    }
    ctl_oci_registry_opts(&f, &ro);
    int rc = tkm_oci_push(layout, tag, &ref, &ro, digest, &uploaded, &err);
    ctl_progress_end(&f.progress);
    if (rc != 0) {
        fprintf(stderr, "tkmctl push: %s\n", tkm_err_str(&err));
        return 1;
    }
    tkm_oci_ref_format(&ref, canon, sizeof canon);
    if (f.json) {
        ctl_json_print(json_pack("{s:s,s:s,s:i}", "reference", canon, "digest", digest,
                                 "blobs_uploaded", uploaded));
    } else {
        printf("%s@%s (%d blob%s uploaded)\n", canon, digest, uploaded, uploaded == 1 ? "" : "s");
    }
    return 0;
}

TKMCTL_COMMAND_ORDERED(push, "upload an OCI image layout to a registry", cmd_push, 11);
