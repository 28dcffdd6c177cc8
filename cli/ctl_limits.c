/* ctl_limits.c - see ctl_limits.h. */
#include "ctl_limits.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <tkm/mirrors.h>

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

/* The pull of ref (by digest) through the mirrors of caps, then the registry. */
static int pull_mirrored(const struct tkm_oci_ref *ref, const struct tkm_oci_registry_opts *ro,
                         const char *layout_dir, const char *tag, int layers,
                         const struct ctl_pull_caps *caps, struct tkm_oci_pull_result *res,
                         struct tkm_err *err)
{
    struct tkm_mirrors *m = NULL;
    struct tkm_mirror_endpoint *eps = NULL;
    size_t n = 0;
    int rc;
    if (!ref->digest[0] || (!caps->mirrors_dir && !caps->registries_conf))
        return tkm_oci_pull(ref, ro, layout_dir, tag, layers, res, err);
    if ((rc = tkm_mirrors_load(caps->mirrors_dir, caps->registries_conf, &m, err)) < 0 ||
        (rc = tkm_mirrors_resolve(m, ref->host, ref->repo, 1, &eps, &n, err)) < 0) {
        tkm_mirrors_free(m);
        return rc;
    }
    rc = -ENOENT;
    for (size_t i = 0; i < n; i++) {
        const struct tkm_mirror_endpoint *ep = &eps[i];
        if (tkm_mirror_endpoint_is_registry(ep, ref->host, ref->repo))
            break; /* the registry itself, as the flags say: below */
        struct tkm_oci_registry_opts o = *ro;
        struct tkm_oci_ref r = *ref;
        struct tkm_err e = {0};
        tkm_mirror_endpoint_opts(ep, &o); /* the registry's credentials never go to a mirror */
        snprintf(r.host, sizeof r.host, "%s", ep->host);
        snprintf(r.repo, sizeof r.repo, "%s", ep->repo);
        if ((rc = tkm_oci_pull(&r, &o, layout_dir, tag, layers, res, &e)) == 0) {
            fprintf(stderr, "pulled %s from mirror %s\n", ref->digest, ep->host);
            break;
        }
        if (rc == -ECANCELED) {
            *err = e;
            break;
        }
        fprintf(stderr, "mirror %s: %s; trying the next\n", ep->host, tkm_err_str(&e));
    }
    tkm_mirror_endpoints_free(eps, n);
    tkm_mirrors_free(m);
    if (rc == 0 || rc == -ECANCELED)
        return rc;
    return tkm_oci_pull(ref, ro, layout_dir, tag, layers, res, err);
}

int ctl_pull_capped(const struct tkm_oci_ref *ref, const struct tkm_oci_registry_opts *ro,
                    const char *layout_dir, const char *tag, int layers,
                    const struct ctl_pull_caps *caps, struct tkm_oci_pull_result *res,
                    struct tkm_err *err)
{
    struct tkm_oci_pull_result img;
    struct tkm_oci_ref pinned = *ref;
    int rc;
    int mirrored = caps && (caps->mirrors_dir || caps->registries_conf);
    if (!caps || (!caps->max_bytes && !caps->max_blob_bytes && (!mirrored || ref->digest[0])))
        return caps ? pull_mirrored(ref, ro, layout_dir, tag, layers, caps, res, err)
                    : tkm_oci_pull(ref, ro, layout_dir, tag, layers, res, err);
    if ((rc = tkm_oci_inspect(ref, ro, &img, err)) != 0)
        return rc;
    rc = check_caps(&img, caps, layers, err);
    snprintf(pinned.digest, sizeof pinned.digest, "%s",
             img.index_digest[0] ? img.index_digest : img.manifest.digest);
    tkm_oci_pull_result_release(&img);
    if (rc != 0)
        return rc;
    /* The digest was checked above: what is pulled now is what was measured. */
    return pull_mirrored(&pinned, ro, layout_dir, tag, layers, caps, res, err);
}
