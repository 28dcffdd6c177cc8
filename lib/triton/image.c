/*
 * triton/image.c - Triton labels of an image, from a layout or a registry.
 */
#include <tkm/triton/image.h>
#include <tkm/triton/parts.h>
#include <tkm/triton/variants.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tkm/buf.h>
#include <tkm/oci/image.h>
#include <tkm/oci/layout.h>
#include <tkm/oci/ref.h>
#include <tkm/oci/session.h>

#include "oci/session-int.h"

#define MAX_SMALL_BLOB (4u << 20)

void tkm_triton_image_release(struct tkm_triton_image *im)
{
    if (!im)
        return;
    tkm_oci_config_release(&im->config);
    tkm_triton_summary_release(&im->summary);
    memset(im, 0, sizeof *im);
}

/* Takes the labels out of a parsed config and parses the summary. */
static int image_labels(struct tkm_triton_image *im, struct tkm_err *err)
{
    im->summary_label = tkm_oci_config_label(&im->config, TKM_TRITON_LABEL_SUMMARY);
    im->entry_count = tkm_oci_config_label(&im->config, TKM_TRITON_LABEL_ENTRY_COUNT);
    im->size_bytes = tkm_oci_config_label(&im->config, TKM_TRITON_LABEL_SIZE);
    if (!im->summary_label && tkm_oci_config_label(&im->config, TKM_VLLM_LABEL_SUMMARY)) {
        /* upstream MCV's vLLM-only image: its summary has the same "targets" form */
        im->summary_label = tkm_oci_config_label(&im->config, TKM_VLLM_LABEL_SUMMARY);
        im->entry_count = tkm_oci_config_label(&im->config, TKM_VLLM_LABEL_ENTRY_COUNT);
        im->size_bytes = tkm_oci_config_label(&im->config, TKM_VLLM_LABEL_SIZE);
    }
    if (!im->summary_label)
        return tkm_err_set(err, -ENOENT,
                           "%s: the image config has no %s label, so it is not a Triton cache "
                           "image (build one with 'tkmctl build')",
                           im->what, TKM_TRITON_LABEL_SUMMARY);
    int rc = tkm_triton_summary_parse(&im->summary, im->summary_label, err);
    if (rc)
        tkm_err_prefix(err, "%s", im->what);
    return rc;
}

int tkm_triton_image_load_layout(struct tkm_triton_image *im, const char *dir, const char *tag,
                                 struct tkm_err *err)
{
    struct tkm_oci_desc d;
    struct tkm_oci_manifest m = {0};
    struct tkm_buf b = TKM_BUF_INIT(MAX_SMALL_BLOB);
    int rc;
    memset(im, 0, sizeof *im);
    snprintf(im->what, sizeof im->what, "layout %.400s%s%.128s", dir, tag ? ":" : "",
             tag ? tag : "");
    if ((rc = tkm_oci_layout_find(dir, tag, &d, err)) != 0 ||
        (rc = tkm_oci_layout_read_blob(dir, &d, &b, err)) != 0 ||
        (rc = tkm_oci_manifest_parse(&m, d.media_type[0] ? d.media_type : NULL, b.data, b.len,
                                     im->what, err)) != 0)
        goto out;
    if (m.kind != TKM_OCI_KIND_MANIFEST) {
        rc = tkm_err_set(err, -EINVAL, "%s: %s is an index, not an image manifest", im->what,
                         d.digest);
        goto out;
    }
    snprintf(im->manifest_digest, sizeof im->manifest_digest, "%s", d.digest);
    tkm_buf_reset(&b);
    if ((rc = tkm_oci_layout_read_blob(dir, &m.config, &b, err)) != 0 ||
        (rc = tkm_oci_config_parse(&im->config, b.data, b.len, im->what, err)) != 0)
        goto out;
    rc = image_labels(im, err);
out:
    tkm_oci_manifest_release(&m);
    tkm_buf_release(&b);
    if (rc)
        tkm_triton_image_release(im);
    return rc;
}

/* From a config that an inspect or pull job returned (session.h): config
 * is taken (zeroed on return, in every case); what and manifest_digest are
 * copied (either may be NULL). */
static int image_from_config(struct tkm_triton_image *im, const char *what,
                             const char *manifest_digest, struct tkm_oci_config *config,
                             struct tkm_err *err)
{
    int rc;
    memset(im, 0, sizeof *im);
    snprintf(im->what, sizeof im->what, "%s", what ? what : "image");
    snprintf(im->manifest_digest, sizeof im->manifest_digest, "%s",
             manifest_digest ? manifest_digest : "");
    im->config = *config; /* taken */
    memset(config, 0, sizeof *config);
    if ((rc = image_labels(im, err)) != 0)
        tkm_triton_image_release(im);
    return rc;
}

int tkm_triton_image_load_ref(struct tkm_triton_image *im, const char *s,
                              const struct tkm_oci_registry_opts *opts, struct tkm_err *err)
{
    struct tkm_oci_ref ref;
    struct tkm_oci_pull_result res;
    char what[600];
    int rc;
    memset(im, 0, sizeof *im);
    if ((rc = tkm_oci_ref_parse(&ref, s, err)) != 0)
        return rc;
    if (tkm_oci_ref_format(&ref, what, sizeof what) < 0)
        snprintf(what, sizeof what, "%.500s", s);
    /* The one resolver (lib/oci): tag -> digest by hashing the bytes, an
     * index followed by digest, the config verified against the manifest. */
    if ((rc = tkm_oci_inspect(&ref, opts, &res, err)) != 0)
        return rc;
    rc = image_from_config(im, what, res.manifest.digest, &res.config, err);
    tkm_oci_pull_result_release(&res);
    return rc;
}

/* ---- inspect as an image job: the oci inspect, then the labels --------- */

struct ti_ctx {
    struct tkm_oci_job *outer, *inner;
    struct tkm_triton_image im;
    int variants; /* tkm_variants_job_inspect: detail is vi */
    struct tkm_variant_inspect vi;
    char what[600];
};

static void ti_free(void *p)
{
    struct ti_ctx *c = p;
    tkm_triton_image_release(&c->im);
    tkm_variant_set_release(&c->vi.set);
    free(c);
}

/* A variant index's set (res->raw), or the set of one of the image. */
static int ti_variants(struct ti_ctx *c, const struct tkm_oci_job_result *res, struct tkm_err *e)
{
    if (res->raw)
        return tkm_variants_parse(res->raw, res->raw_len, res->digest, c->what, &c->vi.set, e);
    c->vi.image = &c->im;
    return tkm_variants_from_image(res->image.manifest.digest, res->image.manifest.size,
                                   res->image.manifest.media_type, &c->im.config, &c->im.summary,
                                   NULL, &c->vi.set, e);
}

static void ti_cancel(void *p)
{
    struct ti_ctx *c = p;
    tkm_oci_job_cancel(c->inner); /* it reports -ECANCELED, which ends the outer job */
}

static void ti_done(struct tkm_oci_job *job, int rc, struct tkm_oci_job_result *res,
                    const struct tkm_err *err, void *data)
{
    struct ti_ctx *c = data;
    struct tkm_err e = {0};
    (void)job;
    c->inner = NULL;
    if (rc) {
        tkm__oci_job_ext_report(c->outer, rc, err);
        return;
    }
    struct tkm_oci_job_result *out = tkm__oci_job_ext_result(c->outer);
    memcpy(out->digest, res->digest, sizeof out->digest);
    if (!res->raw)
        rc = image_from_config(&c->im, c->what, res->image.manifest.digest, &res->image.config, &e);
    if (rc == 0 && c->variants)
        rc = ti_variants(c, res, &e);
    if (rc == 0) {
        out->image = res->image; /* moved (its config is in the detail) */
        memset(&res->image, 0, sizeof res->image);
        out->detail = c->variants ? (const void *)&c->vi : (const void *)&c->im;
    }
    tkm__oci_job_ext_report(c->outer, rc, &e);
}

static int ti_start(struct tkm_oci_session *s, const struct tkm_oci_ref *ref, int variants,
                    tkm_oci_job_cb cb, void *data, struct tkm_oci_job **out, struct tkm_err *err)
{
    struct ti_ctx *c;
    struct tkm_oci_job *j = NULL;
    int rc;
    if (!ref)
        return tkm_err_set(err, -EINVAL, "inspect: a reference is required");
    if (!(c = calloc(1, sizeof *c)))
        return tkm_err_set(err, -ENOMEM, "out of memory");
    if (tkm_oci_ref_format(ref, c->what, sizeof c->what) < 0)
        snprintf(c->what, sizeof c->what, "%.250s/%.300s", ref->host, ref->repo);
    if ((rc = tkm__oci_job_ext_new(s, ref->repo, tkm_oci_ref_reference(ref), cb, data, &j, err))) {
        free(c);
        return rc;
    }
    tkm__oci_job_ext_set(j, c, ti_free, ti_cancel);
    c->outer = j;
    c->variants = variants;
    if ((rc = tkm__oci_job_inspect_stop(s, ref, variants ? tkm_variants_is_index : NULL, ti_done, c,
                                        &c->inner, err)) != 0) {
        tkm__oci_job_ext_discard(j);
        return rc;
    }
    tkm__oci_job_ext_link(j, out);
    return 0;
}

int tkm_triton_job_inspect(struct tkm_oci_session *s, const struct tkm_oci_ref *ref,
                           tkm_oci_job_cb cb, void *data, struct tkm_oci_job **out,
                           struct tkm_err *err)
{
    return ti_start(s, ref, 0, cb, data, out, err);
}

int tkm_variants_job_inspect(struct tkm_oci_session *s, const struct tkm_oci_ref *ref,
                             tkm_oci_job_cb cb, void *data, struct tkm_oci_job **out,
                             struct tkm_err *err)
{
    return ti_start(s, ref, 1, cb, data, out, err);
}
