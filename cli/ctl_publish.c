/* ctl_publish.c - see ctl_publish.h. */
#include "ctl_publish.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <tkm/archive.h>
#include <tkm/buf.h>
#include <tkm/oci/digest.h>
#include <tkm/oci/image.h>
#include <tkm/oci/layout.h>
#include <tkm/oci/registry.h>
#include <tkm/triton/variants.h>
#include <tkm/util.h>

#include "ctl_json.h"
#include "ctl_variants.h"

/* The JSON result, with extra's keys (borrowed, may be NULL) added. */
static void print_json(json_t *j, json_t *extra)
{
    if (j && extra)
        json_object_update(j, extra);
    ctl_json_print(j);
}

static void print_result(const struct tkm_triton_build_result *r, const char *layout,
                         const char *tag, const char *pushed, const struct ctl_added *ad, int json,
                         json_t *extra)
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
        print_json(all, extra);
        return;
    }
    if (json) {
        /* a part's counts only when it is there; s*, o*: a NULL leaves the key out */
        json_t *ie = r->inductor_bytes ? json_integer((json_int_t)r->inductor_entries) : NULL;
        json_t *ib = r->inductor_bytes ? json_integer((json_int_t)r->inductor_bytes) : NULL;
        json_t *ve = r->vllm_bytes ? json_integer((json_int_t)r->vllm_entries) : NULL;
        json_t *vb = r->vllm_bytes ? json_integer((json_int_t)r->vllm_bytes) : NULL;
        print_json(
            json_pack("{s:s,s:s,s:s,s:I,s:s,s:I,s:I,s:I,s:I,s:s*,s:s*,s:o*,s:o*,s:o*,s:o*,s:s*}",
                      "manifest", r->manifest.digest, "config", r->config.digest, "layer",
                      r->layer.digest, "layer_size", (json_int_t)r->layer.size, "diff_id",
                      r->diff_id, "entries", (json_int_t)r->entries, "cache_size_bytes",
                      (json_int_t)r->cache_bytes, "files", (json_int_t)r->files, "tar_bytes",
                      (json_int_t)r->tar_bytes, "layout", layout, "tag", layout ? tag : NULL,
                      "inductor_entries", ie, "inductor_bytes", ib, "vllm_entries", ve,
                      "vllm_bytes", vb, "pushed", pushed),
            extra);
        return;
    }
    if (r->entries)
        printf("built %s: %llu kernel entries, %llu files, %s of cache, layer %s\n",
               r->manifest.digest, (unsigned long long)r->entries, (unsigned long long)r->files,
               ctl_human_bytes(r->cache_bytes, a, sizeof a),
               ctl_human_bytes(r->layer.size, b, sizeof b));
    else
        printf("built %s: no Triton part, %llu files, layer %s\n", r->manifest.digest,
               (unsigned long long)r->files, ctl_human_bytes(r->layer.size, b, sizeof b));
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
                         const struct tkm_triton_build_result *r, struct ctl_added *ad,
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
                           const struct tkm_triton_build_result *r, struct ctl_added *ad,
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

int ctl_parse_platform(const char *p, char *os, char *arch)
{
    const char *slash = strchr(p, '/');
    if (!slash || slash == p || !slash[1] || strchr(slash + 1, '/') || slash - p >= 32 ||
        strlen(slash + 1) >= 32)
        return -1;
    snprintf(os, 32, "%.*s", (int)(slash - p), p);
    snprintf(arch, 32, "%s", slash + 1);
    return 0;
}

int ctl_publish_check(struct ctl_publish *p)
{
    struct tkm_err err = {0};
    if (p->push && tkm_oci_ref_parse(&p->ref, p->push, &err) != 0) {
        fprintf(stderr, "tkmctl %s: %s\n", p->cmd, tkm_err_str(&err));
        return 2;
    }
    if (p->add_variant && p->push && (!p->ref.tag[0] || p->ref.digest[0])) {
        fprintf(stderr,
                "tkmctl %s: --add-variant --push needs a tag to update (REF:TAG), not a digest\n",
                p->cmd);
        return 2;
    }
    p->bo.variant = p->add_variant;
    p->bo.untagged = p->add_variant; /* the layout's tag names the index */
    if (!p->tag)
        p->tag = p->push && p->ref.tag[0] ? p->ref.tag : "latest";
    return 0;
}

static int cancelled(const struct ctl_publish *p)
{
    return p->cancel && atomic_load(p->cancel);
}

int ctl_publish_run(struct ctl_publish *p)
{
    struct tkm_err err = {0};
    char tmpl[1024], layout_tmp[1100] = "";
    const char *layout = p->output;
    int rc = 1;
    memset(&p->added, 0, sizeof p->added);
    if (!p->output) {
        snprintf(tmpl, sizeof tmpl, "%s/tkmctl-build-XXXXXX", p->tmpdir ? p->tmpdir : "/tmp");
        if (!mkdtemp(tmpl)) {
            fprintf(stderr, "tkmctl %s: mkdtemp %s: %s\n", p->cmd, tmpl, strerror(errno));
            return 1;
        }
        snprintf(layout_tmp, sizeof layout_tmp, "%s/layout", tmpl);
        layout = layout_tmp;
    }
    if (tkm_triton_build_cache_image(p->cache, layout, p->tag, &p->bo, &p->res, &err) != 0) {
        fprintf(stderr, "tkmctl %s: %s\n", p->cmd, tkm_err_str(&err));
        goto out;
    }
    if (p->add_variant && p->output &&
        add_to_layout(p->output, p->tag, &p->res, &p->added, &err) != 0) {
        fprintf(stderr, "tkmctl %s: %s\n", p->cmd, tkm_err_str(&err));
        goto out;
    }
    if (cancelled(p)) {
        rc = -ECANCELED;
        goto out;
    }
    if (p->push) {
        struct tkm_oci_registry_opts ro;
        char canon[600];
        ctl_oci_registry_opts(p->f, &ro);
        int prc = p->add_variant
                      ? add_to_registry(layout, &p->ref, &ro, &p->res, &p->added, &err)
                      : tkm_oci_push(layout, p->tag, &p->ref, &ro, p->digest, NULL, &err);
        if (p->add_variant)
            memcpy(p->digest, p->added.pushed_index, sizeof p->digest);
        ctl_progress_end(&p->f->progress);
        if (prc != 0) {
            fprintf(stderr, "tkmctl %s: push %s: %s\n", p->cmd, p->push, tkm_err_str(&err));
            goto out;
        }
        tkm_oci_ref_format(&p->ref, canon, sizeof canon);
        snprintf(p->pushed, sizeof p->pushed, "%s@%s", canon, p->digest);
    }
    rc = 0;
out:
    if (!p->output) {
        int rrc = tkm_rmtree_at(AT_FDCWD, tmpl);
        if (rrc != 0)
            fprintf(stderr, "tkmctl %s: could not remove %s: %s\n", p->cmd, tmpl, strerror(-rrc));
    }
    return rc;
}

void ctl_publish_print(const struct ctl_publish *p, const char *layout)
{
    print_result(&p->res, layout ? layout : p->output, p->tag, p->push ? p->pushed : NULL,
                 p->add_variant ? &p->added : NULL, p->f->json, p->json_extra);
}

int ctl_publish(struct ctl_publish *p)
{
    int rc = ctl_publish_run(p);
    if (rc == 0)
        ctl_publish_print(p, NULL);
    return rc;
}
