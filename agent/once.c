/*
 * once.c - `tkm-agent --once`: probe, judge, print the node status the agent
 * would apply, exit. With --image no apiserver is needed (support, GPU
 * machines without a control plane); without it the caches come from the
 * apiserver and nothing is written.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <tkm/buf.h>
#include <tkm/log.h>
#include <tkm/oci/layout.h>
#include <tkm/oci/manifest.h>
#include <tkm/oci/ref.h>
#include <tkm/triton/image.h>
#include <tkm/triton/variants.h>
#include <tkm/trust/sigjob.h>
#include <tkm/util.h>
#include <tkm/yaml_out.h>

#include "agent.h"

/* ---- output ------------------------------------------------------------------------- */

static int print_obj(const json_t *v, const char *fmt)
{
    if (strcmp(fmt, "yaml") != 0)
        return json_dumpf(v, stdout, JSON_INDENT(2)) == 0 && fputc('\n', stdout) != EOF ? 0 : -EIO;
    struct tkm_buf b = TKM_BUF_INIT(1u << 30);
    int rc = tkm_yaml_from_json(v, &b);
    if (rc == 0 && b.len && fwrite(b.data, 1, b.len, stdout) != b.len)
        rc = -EIO;
    tkm_buf_release(&b);
    return rc;
}

/* The apply body of one node status, without the ownerReference (no Node
 * uid is needed to print). */
static json_t *status_obj(struct agent *a, const char *ns)
{
    struct tkm_api_node_status st;
    struct tkm_err e = {0};
    json_t *body = NULL;
    char ts[32];
    tkm_api_now(ts, sizeof ts);
    if (agent_status_build(a, ns, ts, &st) < 0)
        return NULL;
    if (tkm_api_node_status_apply(&st, ns, "00000000-0000-0000-0000-000000000000", &body, &e) < 0)
        tkm_err("%s", tkm_err_str(&e));
    agent_status_release(&st);
    if (body)
        json_object_del(json_object_get(body, "metadata"), "ownerReferences");
    return body;
}

/* 0 when every cache is usable and compatible with a GPU; else 1 with each
 * reason on stderr. */
static int once_verdict(struct agent *a)
{
    int bad = 0;
    for (struct agent_cache *ac = a->caches; ac; ac = ac->next) {
        size_t ok = 0;
        for (size_t i = 0; i < ac->verdicts.n; i++)
            ok += ac->verdicts.v[i].compatible;
        for (size_t i = 0; ac->variants.from_index && i < ac->verdicts.n && i < a->gpus.n; i++) {
            /* a variant index: every GPU's pick and its verdict */
            const struct tkm_gpu *g = &a->gpus.gpus[i];
            int k = ac->verdicts.variant ? ac->verdicts.variant[i] : -1;
            char d[128] = "no variant";
            if (k >= 0)
                tkm_variant_describe(&ac->variants.v[k], d, sizeof d);
            fprintf(stderr, "tkm-agent: %s: GPU %d (%s): %s%s%s: %s: %s\n", ac->key, g->index,
                    g->gpu_type, d, k >= 0 ? " " : "", k >= 0 ? ac->variants.v[k].digest : "",
                    ac->verdicts.v[i].compatible ? "Compatible"
                                                 : agent_verdict_reason(&ac->verdicts, i),
                    ac->verdicts.v[i].reason);
        }
        if (ac->reason[0]) {
            fprintf(stderr, "tkm-agent: %s: %s: %s\n", ac->key, ac->reason, ac->message);
            bad = 1;
        } else if (!ok) {
            fprintf(stderr, "tkm-agent: %s: no compatible GPU on this node%s\n", ac->key,
                    a->gpus.n ? "" : " (no GPU found)");
            for (size_t i = 0; i < ac->verdicts.n; i++)
                fprintf(stderr, "  %s: %s\n", agent_verdict_reason(&ac->verdicts, i),
                        ac->verdicts.v[i].reason);
            bad = 1;
        }
    }
    return bad;
}

int agent_once_print(struct agent *a)
{
    json_t *out = NULL;
    int rc;
    if (a->o.image) {
        out = status_obj(a, NULL);
    } else {
        json_t *items = json_array();
        out = json_pack("{s:s,s:s,s:o}", "apiVersion", "v1", "kind", "List", "items", items);
        for (struct agent_cache *ac = a->caches; out && ac; ac = ac->next) {
            const char *ns = ac->c.cluster ? "" : ac->c.meta.ns;
            int seen = 0;
            for (struct agent_cache *p = a->caches; p != ac; p = p->next)
                seen |= !strcmp(p->c.cluster ? "" : p->c.meta.ns, ns);
            if (!seen)
                json_array_append_new(items, status_obj(a, ns[0] ? ns : NULL));
        }
    }
    if (!out) {
        fprintf(stderr, "tkm-agent: out of memory\n");
        return 1;
    }
    rc = print_obj(out, a->o.output);
    json_decref(out);
    fflush(stdout);
    if (rc < 0) {
        fprintf(stderr, "tkm-agent: writing the output failed\n");
        return 1;
    }
    return once_verdict(a);
}

/* ---- --image ---------------------------------------------------------------------------- */

struct once_img {
    struct agent *a;
    struct agent_cache *ac;
    struct tkm_oci_session *s;
    struct tkm_oci_ref ref;
    char *pem;
    size_t pem_len;
    size_t vpending; /* a variant index: its variants' inspections in flight */
};

static void once_finish(struct once_img *oi)
{
    struct agent *a = oi->a;
    oi->ac->verified_at_ms = tkm_now_ms(); /* judged: agent_caches_pending() drops it */
    free(oi->pem);
    free(oi);
    agent_once_check(a);
}

static void once_sig(struct tkm_oci_job *job, int rc, struct tkm_oci_job_result *res,
                     const struct tkm_err *err, void *data)
{
    struct once_img *oi = data;
    (void)job;
    if (rc == 0) {
        const struct tkm_sig_result *sr = res->detail;
        oi->ac->verified = 1;
        tkm_info("%s: signature verified (%s at %s)", oi->ac->key, tkm_sig_format_name(sr->format),
                 sr->location);
    } else {
        snprintf(oi->ac->reason, sizeof oi->ac->reason, "%s", tkm_sig_reason(rc));
        snprintf(oi->ac->message, sizeof oi->ac->message, "%s", tkm_err_str(err));
    }
    once_finish(oi);
}

static void take_image(struct agent_cache *ac, struct tkm_triton_image *im)
{
    ac->summary = im->summary;
    memset(&im->summary, 0, sizeof im->summary);
    snprintf(ac->digest, sizeof ac->digest, "%s", im->manifest_digest);
    agent_cache_take_parts(ac, &im->config);
    ac->inspected = 1;
}

/* The image (or every variant) is known: the signature (of the digest pinned:
 * the index's for a variant index), with --key. */
static void once_signature(struct once_img *oi)
{
    struct tkm_err e = {0};
    if (!oi->pem) {
        snprintf(oi->ac->message, sizeof oi->ac->message, "signature not checked (no --key)");
        once_finish(oi);
        return;
    }
    struct tkm_sig_key k = {oi->pem, oi->pem_len};
    struct tkm_sig_policy pol = {.mode = TKM_SIG_MODE_ENFORCE, .keys = &k, .nkeys = 1};
    if (tkm_sig_job_verify(oi->s, oi->ref.repo, oi->ac->digest, &pol, once_sig, oi, NULL, &e) < 0) {
        snprintf(oi->ac->reason, sizeof oi->ac->reason, "InvalidPolicy");
        snprintf(oi->ac->message, sizeof oi->ac->message, "%s", tkm_err_str(&e));
        once_finish(oi);
    }
}

struct once_var {
    struct once_img *oi;
    size_t idx;
};

static void once_variant(struct tkm_oci_job *job, int rc, struct tkm_oci_job_result *res,
                         const struct tkm_err *err, void *data)
{
    struct once_var *ov = data;
    struct once_img *oi = ov->oi;
    struct agent_variant *av = &oi->ac->vars[ov->idx];
    (void)job;
    if (rc < 0) {
        av->state = -1;
        snprintf(av->reason, sizeof av->reason, "%s",
                 rc == -EBADMSG ? "VariantMismatch" : "InvalidImage");
        snprintf(av->message, sizeof av->message, "%s", tkm_err_str(err));
    } else {
        agent_variant_take(oi->ac, ov->idx, res);
    }
    free(ov);
    if (--oi->vpending == 0) {
        oi->ac->inspected = 1;
        once_signature(oi);
    }
}

/* --once has not probed the GPUs yet: every variant of the index is inspected. */
static void once_variants(struct once_img *oi, struct tkm_variant_set *set, const char *digest)
{
    struct agent_cache *ac = oi->ac;
    struct tkm_oci_ref ref = oi->ref;
    struct tkm_err e = {0};
    ac->variants = *set;
    memset(set, 0, sizeof *set);
    snprintf(ac->digest, sizeof ac->digest, "%s", digest);
    if (!(ac->vars = calloc(ac->variants.n + 1, sizeof *ac->vars))) {
        snprintf(ac->reason, sizeof ac->reason, "Internal");
        snprintf(ac->message, sizeof ac->message, "out of memory");
        once_finish(oi);
        return;
    }
    oi->vpending = 1; /* this function's share */
    ref.tag[0] = 0;
    for (size_t i = 0; i < ac->variants.n; i++) {
        struct once_var *ov = calloc(1, sizeof *ov);
        snprintf(ref.digest, sizeof ref.digest, "%s", ac->variants.v[i].digest);
        if (!ov || tkm_triton_job_inspect(oi->s, &ref, once_variant, ov, NULL, &e) < 0) {
            ac->vars[i].state = -1;
            snprintf(ac->vars[i].reason, sizeof ac->vars[i].reason, "InvalidImage");
            snprintf(ac->vars[i].message, sizeof ac->vars[i].message, "%s",
                     ov ? tkm_err_str(&e) : "out of memory");
            free(ov);
            continue;
        }
        ov->oi = oi;
        ov->idx = i;
        oi->vpending++;
    }
    if (--oi->vpending == 0) {
        ac->inspected = 1;
        once_signature(oi);
    }
}

static void once_inspected(struct tkm_oci_job *job, int rc, struct tkm_oci_job_result *res,
                           const struct tkm_err *err, void *data)
{
    struct once_img *oi = data;
    (void)job;
    if (rc < 0) {
        snprintf(oi->ac->reason, sizeof oi->ac->reason, "%s",
                 rc == -ENOENT   ? "ImageNotFound"
                 : rc == -EACCES ? "RegistryUnauthorized"
                                 : "InspectFailed");
        snprintf(oi->ac->message, sizeof oi->ac->message, "%s", tkm_err_str(err));
        once_finish(oi);
        return;
    }
    struct tkm_variant_inspect *vi = (struct tkm_variant_inspect *)res->detail;
    if (!vi->image) { /* a variant index */
        once_variants(oi, &vi->set, res->digest);
        return;
    }
    take_image(oi->ac, vi->image);
    snprintf(oi->ac->digest, sizeof oi->ac->digest, "%s", res->digest);
    once_signature(oi);
}

static int read_key(const char *path, char **out, size_t *len)
{
    FILE *f = fopen(path, "r");
    char *buf = NULL;
    if (!f)
        return -errno;
    buf = calloc(1, 65537);
    size_t n = buf ? fread(buf, 1, 65536, f) : 0;
    fclose(f);
    if (!buf)
        return -ENOMEM;
    *out = buf;
    *len = n;
    return 0;
}

static struct agent_cache *image_cache(struct agent *a)
{
    struct agent_cache *ac = calloc(1, sizeof *ac);
    if (!ac)
        return NULL;
    ac->a = a;
    ac->c.cluster = 1;
    ac->key = strdup("image");
    ac->c.meta.name = strdup("image");
    if (!ac->key || !ac->c.meta.name || agent_index_add(agent_caches_index(a), ac) < 0) {
        agent_cache_destroy(ac);
        return NULL;
    }
    return ac;
}

/* A layout whose manifest is a variant index: every variant is read from the
 * layout's blobs and taken like a registry's inspection (agent_variant_take).
 * 1 when the layout holds a variant index (ac filled, or ac->reason set), 0
 * when it holds something else (read it as one image). */
static int layout_variants(struct agent_cache *ac, const char *dir)
{
    struct tkm_oci_desc d;
    struct tkm_buf b = TKM_BUF_INIT(4u << 20);
    struct tkm_err e = {0};
    int rc = 0;
    if (tkm_oci_layout_find(dir, NULL, &d, &e) != 0 ||
        tkm_oci_layout_read_blob(dir, &d, &b, &e) != 0 || !tkm_variants_is_index(b.data, b.len))
        goto out; /* the one-image path explains what is wrong */
    rc = 1;
    if (tkm_variants_parse(b.data, b.len, d.digest, dir, &ac->variants, &e) < 0) {
        snprintf(ac->reason, sizeof ac->reason, "InvalidImage");
        snprintf(ac->message, sizeof ac->message, "%s", tkm_err_str(&e));
        goto out;
    }
    snprintf(ac->digest, sizeof ac->digest, "%s", d.digest);
    if (!(ac->vars = calloc(ac->variants.n + 1, sizeof *ac->vars))) {
        snprintf(ac->reason, sizeof ac->reason, "Internal");
        snprintf(ac->message, sizeof ac->message, "out of memory");
        goto out;
    }
    for (size_t i = 0; i < ac->variants.n; i++) {
        const char *vd = ac->variants.v[i].digest;
        struct tkm_triton_image im = {0};
        struct tkm_oci_job_result res = {0};
        struct tkm_oci_desc md;
        tkm_buf_reset(&b);
        if (tkm_triton_image_load_layout(&im, dir, vd, &e) < 0 ||
            tkm_oci_layout_find(dir, vd, &md, &e) != 0 ||
            tkm_oci_layout_read_blob(dir, &md, &b, &e) != 0 ||
            tkm_oci_manifest_parse(&res.image.parsed, md.media_type[0] ? md.media_type : NULL,
                                   b.data, b.len, im.what, &e) != 0) {
            ac->vars[i].state = -1;
            snprintf(ac->vars[i].reason, sizeof ac->vars[i].reason, "InvalidImage");
            snprintf(ac->vars[i].message, sizeof ac->vars[i].message, "%s", tkm_err_str(&e));
        } else {
            snprintf(res.digest, sizeof res.digest, "%s", md.digest);
            res.detail = &im;
            agent_variant_take(ac, i, &res);
        }
        tkm_oci_manifest_release(&res.image.parsed);
        tkm_triton_image_release(&im);
    }
    ac->inspected = 1;
    snprintf(ac->message, sizeof ac->message, "signature not checked (layout)");
out:
    tkm_buf_release(&b);
    return rc;
}

/* Starts judging --image; the loop then runs until it has printed. 0, or 1
 * after printing why it cannot start. */
int agent_once_image(struct agent *a)
{
    struct tkm_err e = {0};
    struct stat sb;
    struct once_img *oi = calloc(1, sizeof *oi);
    if (!oi || !(oi->ac = image_cache(a)))
        goto nomem;
    oi->a = a;
    if (a->o.key && read_key(a->o.key, &oi->pem, &oi->pem_len) < 0) {
        fprintf(stderr, "tkm-agent: --key %s: %s\n", a->o.key, strerror(errno));
        goto fail;
    }
    if (stat(a->o.image, &sb) == 0 && S_ISDIR(sb.st_mode)) {
        struct tkm_triton_image im = {0};
        if (a->o.key) {
            fprintf(stderr, "tkm-agent: --key: a layout directory carries no signature; "
                            "verify the image in its registry instead\n");
            goto fail;
        }
        if (layout_variants(oi->ac, a->o.image)) {
            /* judged per GPU by agent_once_check, like a registry's index */
        } else if (tkm_triton_image_load_layout(&im, a->o.image, NULL, &e) < 0) {
            snprintf(oi->ac->reason, sizeof oi->ac->reason, "InvalidImage");
            snprintf(oi->ac->message, sizeof oi->ac->message, "%s", tkm_err_str(&e));
        } else {
            take_image(oi->ac, &im);
            snprintf(oi->ac->message, sizeof oi->ac->message, "signature not checked (layout)");
        }
        tkm_triton_image_release(&im);
        oi->ac->verified_at_ms = tkm_now_ms();
        free(oi->pem);
        free(oi);
        return 0; /* printed once the GPUs are probed (agent_once_check) */
    }
    if (tkm_oci_ref_parse(&oi->ref, a->o.image, &e) < 0) {
        fprintf(stderr, "tkm-agent: --image %s: not a directory, and %s\n", a->o.image,
                tkm_err_str(&e));
        goto fail;
    }
    /* its own session, with the user's docker credentials (the verify jobs'
     * pool has only the caches' pull Secrets); the policy is --key's, checked
     * with the signature search the verify job runs */
    if (tkm_oci_session_new(a->http, oi->ref.host, NULL, &oi->s, &e) < 0 ||
        tkm_variants_job_inspect(oi->s, &oi->ref, once_inspected, oi, NULL, &e) < 0) {
        fprintf(stderr, "tkm-agent: --image %s: %s\n", a->o.image, tkm_err_str(&e));
        tkm_oci_session_close(oi->s, NULL, NULL);
        goto fail;
    }
    a->once_session = oi->s;
    return 0;
nomem:
    fprintf(stderr, "tkm-agent: out of memory\n");
fail:
    if (oi)
        free(oi->pem);
    free(oi);
    return 1;
}
