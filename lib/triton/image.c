/*
 * triton/image.c - Triton labels of an image, from a layout or a registry.
 */
#include <tkm/triton/image.h>

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <tkm/buf.h>
#include <tkm/oci/layout.h>
#include <tkm/oci/ref.h>

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

/* GETs the manifest at reference; follows an index to the linux/host-arch image. */
static int fetch_manifest(struct tkm_oci_registry *r, const struct tkm_oci_ref *ref,
                          struct tkm_oci_manifest *m, char *digest, struct tkm_err *err)
{
    struct tkm_buf b = TKM_BUF_INIT(MAX_SMALL_BLOB);
    char ct[128], pinned[TKM_OCI_DIGEST_LEN + 1];
    const char *reference = tkm_oci_ref_reference(ref);
    int rc;
    for (int hop = 0; hop < 2; hop++) {
        const struct tkm_oci_desc *sel;
        tkm_buf_reset(&b);
        if ((rc = tkm_oci_registry_get_manifest(r, ref->repo, reference, &b, ct, sizeof ct, digest,
                                                err)) != 0 ||
            (rc = tkm_oci_manifest_parse(m, ct, b.data, b.len, reference, err)) != 0)
            break;
        if (m->kind == TKM_OCI_KIND_MANIFEST)
            break;
        if (hop == 1 ||
            (rc = tkm_oci_index_select(m, "linux", tkm_oci_host_arch(), NULL, &sel, err)) != 0) {
            if (!rc)
                rc = tkm_err_set(err, -EINVAL, "%s: an index points at another index", reference);
            break;
        }
        snprintf(pinned, sizeof pinned, "%s", sel->digest);
        tkm_oci_manifest_release(m);
        reference = pinned;
    }
    tkm_buf_release(&b);
    return rc;
}

int tkm_triton_image_load_ref(struct tkm_triton_image *im, const char *s,
                              const struct tkm_oci_registry_opts *opts, struct tkm_err *err)
{
    struct tkm_oci_ref ref;
    struct tkm_oci_registry *r = NULL;
    struct tkm_oci_manifest m = {0};
    struct tkm_buf b = TKM_BUF_INIT(MAX_SMALL_BLOB);
    struct tkm_oci_registry_opts none = {0};
    int rc;
    memset(im, 0, sizeof *im);
    if ((rc = tkm_oci_ref_parse(&ref, s, err)) != 0)
        return rc;
    if (tkm_oci_ref_format(&ref, im->what, sizeof im->what) < 0)
        snprintf(im->what, sizeof im->what, "%.500s", s);
    if ((rc = tkm_oci_registry_new(ref.host, opts ? opts : &none, &r, err)) != 0 ||
        (rc = fetch_manifest(r, &ref, &m, im->manifest_digest, err)) != 0 ||
        (rc = tkm_oci_registry_fetch_blob_mem(r, ref.repo, &m.config, &b, err)) != 0 ||
        (rc = tkm_oci_config_parse(&im->config, b.data, b.len, im->what, err)) != 0)
        goto out;
    rc = image_labels(im, err);
out:
    tkm_oci_manifest_release(&m);
    tkm_oci_registry_free(r);
    tkm_buf_release(&b);
    if (rc)
        tkm_triton_image_release(im);
    return rc;
}
