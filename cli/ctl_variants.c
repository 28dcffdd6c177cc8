/* ctl_variants.c - see ctl_variants.h. */
#include "ctl_variants.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tkm/buf.h>
#include <tkm/oci/layout.h>
#include <tkm/oci/manifest.h>
#include <tkm/oci/registry.h>
#include <tkm/util.h>

void ctl_variants_release(struct ctl_variants *cv)
{
    tkm_variant_set_release(&cv->set);
}

static int load_bytes(struct ctl_variants *cv, const void *raw, size_t n, const char *digest,
                      struct tkm_err *err)
{
    if (!tkm_variants_is_index(raw, n))
        return 0;
    return tkm_variants_parse(raw, n, digest, cv->what, &cv->set, err);
}

int ctl_variants_load(struct ctl_variants *cv, const char *layout, const char *tag, const char *ref,
                      struct ctl_oci_flags *f, struct tkm_err *err)
{
    struct tkm_buf b = TKM_BUF_INIT(TKM_OCI_MANIFEST_MAX);
    int rc;
    memset(cv, 0, sizeof *cv);
    cv->layout = layout;
    if (layout) {
        struct tkm_oci_desc d;
        snprintf(cv->what, sizeof cv->what, "layout %.500s%s%.128s", layout, tag ? ":" : "",
                 tag ? tag : "");
        /* what cannot be found is the image path's business (its messages) */
        if (tkm_oci_layout_find(layout, tag, &d, NULL) != 0 ||
            (strcmp(d.media_type, TKM_OCI_MT_INDEX) != 0 &&
             strcmp(d.media_type, TKM_DOCKER_MT_LIST) != 0))
            return 0;
        if ((rc = tkm_oci_layout_read_blob(layout, &d, &b, err)) == 0)
            rc = load_bytes(cv, b.data, b.len, d.digest, err);
    } else {
        struct tkm_oci_registry_opts ro;
        struct tkm_oci_registry *r = NULL;
        char ct[160], dg[TKM_OCI_DIGEST_LEN + 1];
        if ((rc = tkm_oci_ref_parse(&cv->ref, ref, err)) != 0)
            return rc;
        if (tkm_oci_ref_format(&cv->ref, cv->what, sizeof cv->what) < 0)
            snprintf(cv->what, sizeof cv->what, "%.600s", ref);
        ctl_oci_registry_opts(f, &ro);
        if ((rc = tkm_oci_registry_new(cv->ref.host, &ro, &r, err)) == 0 &&
            (rc = tkm_oci_registry_get_manifest(r, cv->ref.repo, tkm_oci_ref_reference(&cv->ref),
                                                &b, ct, sizeof ct, dg, err)) == 0)
            rc = load_bytes(cv, b.data, b.len, dg, err);
        tkm_oci_registry_free(r);
    }
    tkm_buf_release(&b);
    return rc;
}

int ctl_variants_choose(const struct ctl_variants *cv, const char *target,
                        const struct tkm_gpu_list *l, size_t *idx, int *gpu, struct tkm_err *err)
{
    char msg[1536] = "", list[1024] = "";
    const char *reason = NULL;
    if (gpu)
        *gpu = -1;
    if (target) {
        struct tkm_gpu g;
        char t[96], *arch, *warp;
        int64_t w = 0;
        memset(&g, 0, sizeof g);
        snprintf(t, sizeof t, "%s", target);
        arch = strchr(t, '/');
        warp = arch ? strchr(arch + 1, '/') : NULL;
        if (arch)
            *arch++ = '\0';
        if (warp)
            *warp++ = '\0';
        if (!arch || !*t || !*arch || strlen(t) >= sizeof g.backend ||
            strlen(arch) >= sizeof g.arch || (warp && tkm_parse_i64(warp, 1, 1024, &w) != 0))
            return tkm_err_set(err, -EINVAL,
                               "--target takes BACKEND/ARCH[/WARP], e.g. cuda/90 or hip/gfx942/64");
        snprintf(g.backend, sizeof g.backend, "%s", t);
        snprintf(g.arch, sizeof g.arch, "%s", arch);
        snprintf(g.gpu_type, sizeof g.gpu_type, "--target");
        g.warp_size = warp ? (int)w : strcmp(t, "hip") == 0 ? 64 : 32;
        if (tkm_variant_pick(&cv->set, &g, NULL, idx, &reason, msg, sizeof msg) == 0)
            return 0;
        return tkm_err_set(err, -ENOENT, "%s: %s (%s)", cv->what, msg, reason);
    }
    for (size_t i = 0; l && i < l->n; i++) {
        if (tkm_variant_pick(&cv->set, &l->gpus[i], NULL, idx, &reason, msg, sizeof msg) == 0) {
            if (gpu)
                *gpu = l->gpus[i].index;
            return 0;
        }
    }
    if (!l || l->n == 0) {
        for (size_t i = 0; i < cv->set.n; i++) {
            char d[160];
            tkm_variant_describe(&cv->set.v[i], d, sizeof d);
            snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", i ? ", " : "", d);
        }
        return tkm_err_set(err, -ENOENT,
                           "%s: no GPU found here to pick a variant for; choose one with "
                           "--target BACKEND/ARCH[/WARP] (variants: %s)",
                           cv->what, list);
    }
    return tkm_err_set(err, -ENOENT, "%s: no variant fits a GPU here (%s: %s)", cv->what, reason,
                       msg);
}

void ctl_variants_source(const struct ctl_variants *cv, size_t idx, char *out, size_t n)
{
    struct tkm_oci_ref r;
    if (cv->layout) {
        snprintf(out, n, "%s", cv->set.v[idx].digest);
        return;
    }
    r = cv->ref;
    r.tag[0] = '\0';
    snprintf(r.digest, sizeof r.digest, "%s", cv->set.v[idx].digest);
    if (tkm_oci_ref_format(&r, out, n) < 0)
        snprintf(out, n, "%s/%s@%s", r.host, r.repo, r.digest);
}

json_t *ctl_variant_json(const struct tkm_variant *v)
{
    char plat[80];
    json_t *parts = json_array();
    for (const char *p = v->parts; parts && *p;) {
        size_t len = strcspn(p, ",");
        json_array_append_new(parts, json_stringn(p, len));
        p += len + (p[len] == ',');
    }
    snprintf(plat, sizeof plat, "%s/%s", v->os[0] ? v->os : "?",
             v->architecture[0] ? v->architecture : "?");
    return json_pack("{s:s,s:s,s:s,s:s,s:i,s:s*,s:o*}", "digest", v->digest, "platform", plat,
                     "backend", v->backend, "arch", v->arch, "warpSize", v->warp_size,
                     "tritonVersion", v->triton_version[0] ? v->triton_version : NULL, "parts",
                     parts);
}

void ctl_variants_print(const struct tkm_variant_set *s)
{
    for (size_t i = 0; i < s->n; i++) {
        char d[160];
        const struct tkm_variant *v = &s->v[i];
        tkm_variant_describe(v, d, sizeof d);
        printf("  %-36s triton %-8s parts %-22s %s\n", d,
               v->triton_version[0] ? v->triton_version : "?", v->parts, v->digest);
    }
}
