/* ctl_limits.c - see ctl_limits.h. */
#include "ctl_limits.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

static int check_caps(const struct tkm_oci_pull_result *img, const struct ctl_pull_caps *caps,
                      int layers, struct tkm_err *err)
{
    uint64_t total = img->parsed.config.size;
    for (size_t i = 0; layers && i < img->parsed.n_descs; i++) {
        const struct tkm_oci_desc *d = &img->parsed.descs[i];
        if (caps->max_blob_bytes && d->size > caps->max_blob_bytes)
            return tkm_err_set(err, -EFBIG,
                               "image %s: layer %s is %llu bytes, over the %llu-byte cap "
                               "(--max-file-bytes)",
                               img->manifest.digest, d->digest, (unsigned long long)d->size,
                               (unsigned long long)caps->max_blob_bytes);
        total += d->size;
        if (total < d->size)
            total = UINT64_MAX;
    }
    if (caps->max_bytes && total > caps->max_bytes)
        return tkm_err_set(err, -EFBIG,
                           "image %s: %zu layer(s) and config add up to %llu bytes, over the "
                           "%llu-byte cap (--max-bytes)",
                           img->manifest.digest, img->parsed.n_descs, (unsigned long long)total,
                           (unsigned long long)caps->max_bytes);
    return 0;
}

int ctl_pull_capped(const struct tkm_oci_ref *ref, const struct tkm_oci_registry_opts *ro,
                    const char *layout_dir, const char *tag, int layers,
                    const struct ctl_pull_caps *caps, struct tkm_oci_pull_result *res,
                    struct tkm_err *err)
{
    struct tkm_oci_pull_result img;
    struct tkm_oci_ref pinned = *ref;
    int rc;
    if (!caps || (!caps->max_bytes && !caps->max_blob_bytes))
        return tkm_oci_pull(ref, ro, layout_dir, tag, layers, res, err);
    if ((rc = tkm_oci_inspect(ref, ro, &img, err)) != 0)
        return rc;
    rc = check_caps(&img, caps, layers, err);
    snprintf(pinned.digest, sizeof pinned.digest, "%s",
             img.index_digest[0] ? img.index_digest : img.manifest.digest);
    tkm_oci_pull_result_release(&img);
    if (rc != 0)
        return rc;
    /* The digest was checked above: what is pulled now is what was measured. */
    return tkm_oci_pull(&pinned, ro, layout_dir, tag, layers, res, err);
}
