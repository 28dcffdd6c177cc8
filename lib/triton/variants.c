/* variants.c - see variants.h. */
#include <tkm/triton/variants.h>

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tkm/buf.h>
#include <tkm/oci/digest.h>
#include <tkm/triton/parts.h>
#include <tkm/util.h>

/* ---- grammar -------------------------------------------------------------- */

static int in_set(const char *s, size_t min, size_t max, const char *extra, int upper)
{
    size_t n = 0;
    for (; s[n]; n++) {
        char c = s[n];
        if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || (upper && c >= 'A' && c <= 'Z') ||
              (extra && strchr(extra, c))))
            return 0;
    }
    return n >= min && n <= max;
}

/* A value as a message may show it: its first 24 bytes through tkm_escape
 * (control characters as \n, \xNN; never raw). */
static const char *shown(const char *s, char *out, size_t n)
{
    size_t len = strlen(s), o;
    tkm_escape(s, len > 24 ? 24 : len, out, n);
    o = strlen(out);
    if (len > 24 && o + 4 < n)
        memcpy(out + o, "...", 4);
    return out;
}

static int warp_valid(const char *s, int *out)
{
    long v = 0;
    if (!s[0] || s[0] == '0' || strlen(s) > 4)
        return 0;
    for (const char *p = s; *p; p++) {
        if (*p < '0' || *p > '9')
            return 0;
        v = v * 10 + (*p - '0');
    }
    if (v < 1 || v > 1024)
        return 0;
    *out = (int)v;
    return 1;
}

static const char *const part_names[] = {"inductor", "triton", "vllm"};
static const int part_bits[] = {TKM_PART_INDUCTOR, TKM_PART_TRITON, TKM_PART_VLLM};

/* "inductor,triton" -> mask; sorted, no repeats, at least one. -1 when not. */
static int parts_mask(const char *s)
{
    int mask = 0, last = -1;
    const char *p = s;
    if (!*p)
        return -1;
    while (*p) {
        size_t len = strcspn(p, ",");
        int k = -1;
        for (int i = 0; i < 3; i++)
            if (strlen(part_names[i]) == len && strncmp(p, part_names[i], len) == 0)
                k = i;
        if (k <= last)
            return -1;
        last = k;
        mask |= part_bits[k];
        p += len;
        if (*p == ',' && !*++p)
            return -1;
    }
    return mask;
}

void tkm_variant_parts_str(int mask, char *out, size_t n)
{
    size_t o = 0;
    if (n == 0)
        return;
    out[0] = '\0';
    for (int i = 0; i < 3; i++)
        if (mask & part_bits[i]) {
            int w = snprintf(out + o, n - o, "%s%s", o ? "," : "", part_names[i]);
            if (w < 0 || (size_t)w >= n - o)
                return;
            o += (size_t)w;
        }
}

/* ---- describe ----------------------------------------------------------------- */

void tkm_variant_describe(const struct tkm_variant *v, char *out, size_t n)
{
    char more[32] = "";
    if (v->n_targets > 1)
        snprintf(more, sizeof more, " (+%zu targets)", v->n_targets - 1);
    if (!v->backend[0]) {
        snprintf(out, n, "%s/%s (no target)", v->os[0] ? v->os : "?",
                 v->architecture[0] ? v->architecture : "?");
        return;
    }
    snprintf(out, n, "%s/%s %s %s%s warp %d%s", v->os[0] ? v->os : "?",
             v->architecture[0] ? v->architecture : "?", v->backend,
             strcmp(v->backend, "cuda") == 0 ? "sm" : "", v->arch, v->warp_size, more);
}

int tkm_variant_same_target(const struct tkm_variant *a, const struct tkm_variant *b)
{
    return strcmp(a->os, b->os) == 0 && strcmp(a->architecture, b->architecture) == 0 &&
           strcmp(a->backend, b->backend) == 0 && strcmp(a->arch, b->arch) == 0 &&
           a->warp_size == b->warp_size;
}

/* ---- parse ------------------------------------------------------------------- */

void tkm_variant_set_release(struct tkm_variant_set *s)
{
    if (!s)
        return;
    free(s->v);
    memset(s, 0, sizeof *s);
}

int tkm_variants_is_index(const void *raw, size_t n)
{
    json_t *root, *arr;
    size_t i;
    int found = 0;
    if (!raw || n > TKM_OCI_MANIFEST_MAX)
        return 0;
    if (!(root = json_loadb(raw, n, JSON_REJECT_DUPLICATES, NULL)))
        return 0;
    arr = json_object_get(root, "manifests");
    for (i = 0; json_is_array(arr) && i < json_array_size(arr) && !found; i++)
        found = json_object_get(json_object_get(json_array_get(arr, i), "annotations"),
                                TKM_VARIANT_ANN_BACKEND) != NULL;
    json_decref(root);
    return found;
}

/* One annotation of entry i: a string in its grammar (copied to out when
 * out_n), or absent when optional. */
static int ann(json_t *anns, const char *key, size_t i, int required, const char *grammar,
               int (*valid)(const char *s), char *out, size_t out_n, const char *what,
               struct tkm_err *err)
{
    char sh[128];
    json_t *j = json_object_get(anns, key);
    const char *s = json_string_value(j);
    if (!j && !required) {
        if (out_n)
            out[0] = '\0';
        return 0;
    }
    if (!j)
        return tkm_err_set(err, -EPROTO, "%s: variant manifests[%zu] has no annotation %s", what, i,
                           key);
    if (!s)
        return tkm_err_set(err, -EPROTO, "%s: variant manifests[%zu] annotation %s is not a string",
                           what, i, key);
    if (!valid(s) || (out_n && strlen(s) >= out_n))
        return tkm_err_set(err, -EPROTO,
                           "%s: variant manifests[%zu] annotation %s is not %s (value \"%s\")",
                           what, i, key, grammar, shown(s, sh, sizeof sh));
    if (out_n)
        memcpy(out, s, strlen(s) + 1);
    return 0;
}

static int valid_backend(const char *s)
{
    return in_set(s, 1, 15, NULL, 0);
}
static int valid_arch(const char *s)
{
    return in_set(s, 1, 31, NULL, 0);
}
static int valid_platform(const char *s)
{
    return in_set(s, 1, 31, "_", 0);
}
static int valid_triton(const char *s)
{
    return in_set(s, 1, 63, ".+_-", 1);
}
static int valid_parts(const char *s)
{
    return strlen(s) < 64 && parts_mask(s) > 0;
}
static int valid_warp(const char *s)
{
    int w;
    return warp_valid(s, &w);
}

static int parse_entry(json_t *e, const struct tkm_oci_desc *d, size_t i, struct tkm_variant *v,
                       const char *what, struct tkm_err *err)
{
    char sh1[128], sh2[128], warp[8];
    json_t *anns = json_object_get(e, "annotations");
    json_t *pf = json_object_get(e, "platform");
    const char *os = json_string_value(json_object_get(pf, "os"));
    const char *arch = json_string_value(json_object_get(pf, "architecture"));
    int rc;
    memset(v, 0, sizeof *v);
    v->entry = i;
    v->n_targets = 1;
    if (strcmp(d->media_type, TKM_OCI_MT_MANIFEST) != 0 &&
        strcmp(d->media_type, TKM_DOCKER_MT_MANIFEST) != 0)
        return tkm_err_set(err, -EPROTO, "%s: variant manifests[%zu] is not an image manifest",
                           what, i);
    if (!json_is_object(pf) || !os || !arch)
        return tkm_err_set(err, -EPROTO,
                           "%s: variant manifests[%zu] has no platform (os and architecture are "
                           "required: the CPU its host code was built for)",
                           what, i);
    if (!valid_platform(os) || !valid_platform(arch))
        return tkm_err_set(err, -EPROTO,
                           "%s: variant manifests[%zu] platform \"%s/%s\" is not [a-z0-9_]{1,31}",
                           what, i, shown(os, sh1, sizeof sh1), shown(arch, sh2, sizeof sh2));
    memcpy(v->os, os, strlen(os) + 1);
    memcpy(v->architecture, arch, strlen(arch) + 1);
    memcpy(v->digest, d->digest, sizeof v->digest);
    memcpy(v->media_type, d->media_type, sizeof v->media_type);
    v->size = d->size;
    if ((rc = ann(anns, TKM_VARIANT_ANN_BACKEND, i, 1, "[a-z0-9]{1,15}", valid_backend, v->backend,
                  sizeof v->backend, what, err)) ||
        (rc = ann(anns, TKM_VARIANT_ANN_ARCH, i, 1, "[a-z0-9]{1,31}", valid_arch, v->arch,
                  sizeof v->arch, what, err)) ||
        (rc = ann(anns, TKM_VARIANT_ANN_WARP, i, 1, "a decimal number 1..1024", valid_warp, warp,
                  sizeof warp, what, err)) ||
        (rc = ann(anns, TKM_VARIANT_ANN_TRITON, i, 0, "[0-9A-Za-z.+_-]{1,63}", valid_triton,
                  v->triton_version, sizeof v->triton_version, what, err)) ||
        (rc =
             ann(anns, TKM_VARIANT_ANN_PARTS, i, 1, "a sorted comma list of inductor, triton, vllm",
                 valid_parts, v->parts, sizeof v->parts, what, err)))
        return rc;
    warp_valid(warp, &v->warp_size);
    return 0;
}

int tkm_variants_parse(const void *raw, size_t n, const char *digest, const char *what,
                       struct tkm_variant_set *out, struct tkm_err *err)
{
    struct tkm_oci_manifest m = {0};
    struct tkm_err e = {0};
    json_t *root = NULL, *arr;
    int rc;
    memset(out, 0, sizeof *out);
    if (!what)
        what = "variant index";
    /* The manifest parser's checks first: size cap, duplicate keys, the
     * descriptors' digests and sizes, at most TKM_OCI_DESCS_MAX entries. */
    if ((rc = tkm_oci_manifest_parse(&m, NULL, raw, n, what, &e)) != 0) {
        if (rc == -ENOMEM)
            return tkm_err_set(err, rc, "%s: out of memory", what);
        return tkm_err_set(err, -EPROTO, "%s", e.msg[0] ? e.msg : "not an index");
    }
    if (m.kind != TKM_OCI_KIND_INDEX) {
        rc = tkm_err_set(err, -EPROTO, "%s: an image manifest, not a variant index", what);
        goto out;
    }
    if (digest && strcmp(digest, m.digest) != 0) {
        rc = tkm_err_set(err, -EPROTO, "%s: digest mismatch: the bytes hash to %s, not %s", what,
                         m.digest, tkm_oci_digest_valid(digest) ? digest : "(an invalid digest)");
        goto out;
    }
    if (!(root = json_loadb(raw, n, JSON_REJECT_DUPLICATES, NULL)) ||
        !json_is_array(arr = json_object_get(root, "manifests"))) {
        rc = tkm_err_set(err, -EPROTO, "%s: not an index", what);
        goto out;
    }
    memcpy(out->digest, m.digest, sizeof out->digest);
    out->from_index = 1;
    for (size_t i = 0; i < m.n_descs; i++) {
        json_t *ent = json_array_get(arr, i);
        json_t *anns = json_object_get(ent, "annotations");
        if (anns && !json_is_object(anns)) {
            rc = tkm_err_set(err, -EPROTO, "%s: manifests[%zu] annotations is not an object", what,
                             i);
            goto out;
        }
        if (!json_object_get(anns, TKM_VARIANT_ANN_BACKEND))
            continue; /* not a variant: attestation, another artifact */
        if (out->n == TKM_VARIANTS_MAX) {
            rc = tkm_err_set(err, -EPROTO, "%s: more than %d variants (tkm's limit)", what,
                             TKM_VARIANTS_MAX);
            goto out;
        }
        if (!out->v && !(out->v = calloc(TKM_VARIANTS_MAX, sizeof *out->v))) {
            rc = tkm_err_set(err, -ENOMEM, "%s: out of memory", what);
            goto out;
        }
        struct tkm_variant *v = &out->v[out->n];
        if ((rc = parse_entry(ent, &m.descs[i], i, v, what, err)) != 0)
            goto out;
        for (size_t k = 0; k < out->n; k++)
            if (tkm_variant_same_target(&out->v[k], v)) {
                char d[160];
                tkm_variant_describe(v, d, sizeof d);
                rc = tkm_err_set(err, -EPROTO,
                                 "%s: variants manifests[%zu] and manifests[%zu] both claim %s",
                                 what, out->v[k].entry, i, d);
                goto out;
            }
        out->n++;
    }
    if (out->n == 0)
        rc =
            tkm_err_set(err, -EPROTO, "%s: no entry carries the annotation %s: not a variant index",
                        what, TKM_VARIANT_ANN_BACKEND);
out:
    json_decref(root);
    tkm_oci_manifest_release(&m);
    if (rc)
        tkm_variant_set_release(out);
    return rc;
}

int tkm_variants_from_image(const char *digest, uint64_t size, const char *media_type,
                            const struct tkm_oci_config *cfg, const struct tkm_triton_summary *s,
                            const char *parts, struct tkm_variant_set *out, struct tkm_err *err)
{
    struct tkm_variant *v;
    memset(out, 0, sizeof *out);
    if (!tkm_oci_digest_valid(digest))
        return tkm_err_set(err, -EINVAL, "variant set: image digest is not sha256:<64 hex>");
    if (!(v = calloc(1, sizeof *v)))
        return tkm_err_set(err, -ENOMEM, "variant set: out of memory");
    memcpy(v->digest, digest, sizeof v->digest);
    v->size = size;
    snprintf(v->media_type, sizeof v->media_type, "%s", media_type ? media_type : "");
    if (cfg) {
        snprintf(v->os, sizeof v->os, "%s", cfg->os);
        snprintf(v->architecture, sizeof v->architecture, "%s", cfg->arch);
    }
    if (s && s->n_targets > 0) {
        const struct tkm_triton_target *t = &s->targets[0].target;
        snprintf(v->backend, sizeof v->backend, "%s", t->backend);
        snprintf(v->arch, sizeof v->arch, "%s", t->arch);
        v->warp_size = t->warp_size;
        v->n_targets = s->n_targets;
    }
    if (s && s->n_triton_versions == 1)
        snprintf(v->triton_version, sizeof v->triton_version, "%s", s->triton_versions[0]);
    if (parts)
        snprintf(v->parts, sizeof v->parts, "%s", parts);
    else
        tkm_variant_parts_str(cfg ? tkm_parts_from_config(cfg) : 0, v->parts, sizeof v->parts);
    if (!v->parts[0])
        snprintf(v->parts, sizeof v->parts, "triton");
    out->from_index = 0;
    memcpy(out->digest, digest, sizeof out->digest);
    out->v = v;
    out->n = 1;
    return 0;
}

/* ---- pick -------------------------------------------------------------------- */

static int target_fits(const struct tkm_variant *v, const struct tkm_gpu *g, int suffix_a)
{
    size_t n = strlen(g->arch);
    if (strcmp(v->backend, g->backend) != 0 || v->warp_size != g->warp_size)
        return 0;
    if (!suffix_a)
        return strcmp(v->arch, g->arch) == 0;
    return strcmp(g->backend, "cuda") == 0 && strncmp(v->arch, g->arch, n) == 0 &&
           strcmp(v->arch + n, "a") == 0;
}

static int platform_fits(const struct tkm_variant *v, const char *host_arch)
{
    return strcmp(v->os, "linux") == 0 && strcmp(v->architecture, host_arch) == 0;
}

/* "variants there are" for a message: the descriptions, comma-separated. */
static void list_variants(const struct tkm_variant_set *s, char *out, size_t n)
{
    struct tkm_buf b = TKM_BUF_INIT(4096);
    for (size_t i = 0; i < s->n; i++) {
        char d[160];
        tkm_variant_describe(&s->v[i], d, sizeof d);
        tkm_buf_printf(&b, "%s%s", i ? ", " : "", d);
    }
    snprintf(out, n, "%s", b.len ? b.data : "none");
    tkm_buf_release(&b);
}

int tkm_variant_pick(const struct tkm_variant_set *s, const struct tkm_gpu *g,
                     const char *host_arch, size_t *idx, const char **reason, char *msg,
                     size_t msg_n)
{
    char list[1024], gpu[160];
    int other_platform = 0;
    const char *why;
    if (!host_arch)
        host_arch = tkm_oci_host_arch();
    if (g->backend[0] && g->arch[0])
        snprintf(gpu, sizeof gpu, "GPU %d (%s, %s %s%s warp %d)", g->index,
                 g->gpu_type[0] ? g->gpu_type : "unknown type", g->backend,
                 strcmp(g->backend, "cuda") == 0 ? "sm" : "", g->arch, g->warp_size);
    else
        snprintf(gpu, sizeof gpu, "GPU %d (%s, target unknown)", g->index,
                 g->gpu_type[0] ? g->gpu_type : "unknown type");
    if (!s->from_index && s->n == 1) {
        const struct tkm_variant *v = &s->v[0];
        if (!v->os[0] || !v->architecture[0] || platform_fits(v, host_arch)) {
            *idx = 0;
            return 0;
        }
        other_platform = 1;
    } else if (g->backend[0] && g->arch[0]) {
        for (int a = 0; a < 2; a++)
            for (size_t i = 0; i < s->n; i++) {
                if (!target_fits(&s->v[i], g, a))
                    continue;
                if (platform_fits(&s->v[i], host_arch)) {
                    *idx = i;
                    return 0;
                }
                other_platform = 1;
            }
    }
    why = other_platform ? "HostArchMismatch" : "NoVariant";
    if (reason)
        *reason = why;
    if (msg && msg_n) {
        list_variants(s, list, sizeof list);
        if (other_platform)
            snprintf(msg, msg_n,
                     "%s on linux/%s: the cache has no variant for this host's CPU (its host "
                     "code is built for another architecture); variants: %s",
                     gpu, host_arch, list);
        else
            snprintf(msg, msg_n, "%s on linux/%s: no variant of the cache fits; variants: %s", gpu,
                     host_arch, list);
    }
    return -ENOENT;
}

/* ---- check an inspected variant ------------------------------------------------ */

int tkm_variant_check_image(const struct tkm_variant *v, const struct tkm_oci_config *cfg,
                            const struct tkm_triton_summary *s, char *msg, size_t msg_n)
{
    char d[160], parts[64], sh1[128], sh2[128];
    tkm_variant_describe(v, d, sizeof d);
    if (strcmp(cfg->os, v->os) != 0 || strcmp(cfg->arch, v->architecture) != 0) {
        snprintf(msg, msg_n,
                 "variant %s (%s): its config says platform %s/%s, the index says %s/%s", v->digest,
                 d, shown(cfg->os, sh1, sizeof sh1), shown(cfg->arch, sh2, sizeof sh2), v->os,
                 v->architecture);
        return -EPROTO;
    }
    if (!s || s->n_targets != 1) {
        snprintf(msg, msg_n, "variant %s (%s): its summary has %zu targets, a variant has one",
                 v->digest, d, s ? s->n_targets : 0);
        return -EPROTO;
    }
    const struct tkm_triton_target *t = &s->targets[0].target;
    if (strcmp(t->backend, v->backend) != 0 || strcmp(t->arch, v->arch) != 0 ||
        t->warp_size != v->warp_size) {
        snprintf(msg, msg_n,
                 "variant %s (%s): its summary's target is %s %s warp %d, not the index's",
                 v->digest, d, shown(t->backend, sh1, sizeof sh1), shown(t->arch, sh2, sizeof sh2),
                 t->warp_size);
        return -EPROTO;
    }
    if (v->triton_version[0]) {
        size_t i;
        for (i = 0; i < s->n_triton_versions; i++)
            if (strcmp(s->triton_versions[i], v->triton_version) == 0)
                break;
        if (s->n_triton_versions && i == s->n_triton_versions) {
            snprintf(msg, msg_n,
                     "variant %s (%s): the index says Triton %s, its summary does not list it",
                     v->digest, d, v->triton_version);
            return -EPROTO;
        }
    }
    tkm_variant_parts_str(tkm_parts_from_config(cfg), parts, sizeof parts);
    if (!parts[0])
        snprintf(parts, sizeof parts, "triton");
    if (strcmp(parts, v->parts) != 0) {
        snprintf(msg, msg_n, "variant %s (%s): its config holds parts %s, the index says %s",
                 v->digest, d, parts, v->parts);
        return -EPROTO;
    }
    return 0;
}

/* ---- write -------------------------------------------------------------------- */

int tkm_variant_annotate(const struct tkm_variant *v, json_t *ann)
{
    char warp[16];
    if (!json_is_object(ann))
        return ann ? -EINVAL : -ENOMEM;
    snprintf(warp, sizeof warp, "%d", v->warp_size);
    if (json_object_set_new(ann, TKM_VARIANT_ANN_BACKEND, json_string(v->backend)) ||
        json_object_set_new(ann, TKM_VARIANT_ANN_ARCH, json_string(v->arch)) ||
        json_object_set_new(ann, TKM_VARIANT_ANN_WARP, json_string(warp)) ||
        json_object_set_new(ann, TKM_VARIANT_ANN_PARTS, json_string(v->parts)) ||
        (v->triton_version[0] && valid_triton(v->triton_version) &&
         json_object_set_new(ann, TKM_VARIANT_ANN_TRITON, json_string(v->triton_version))))
        return -ENOMEM;
    return 0;
}

int tkm_variants_index_put(const void *raw, size_t n, const struct tkm_variant *v, char **out,
                           size_t *out_n, char replaced[TKM_OCI_DIGEST_LEN + 1],
                           struct tkm_err *err)
{
    struct tkm_variant_set old = {0}, check = {0};
    struct tkm_oci_manifest m = {0};
    json_t *root = NULL, *arr, *e = NULL, *ann;
    char *text = NULL;
    int rc = 0;
    *out = NULL;
    if (replaced)
        replaced[0] = '\0';
    if (raw) {
        if ((rc = tkm_oci_manifest_parse(&m, NULL, raw, n, "the index there is", err)) != 0) {
            rc = rc == -ENOMEM ? rc : -EPROTO;
            goto out;
        }
        if (m.kind != TKM_OCI_KIND_INDEX) {
            rc = tkm_err_set(err, -EPROTO,
                             "the reference names an image manifest, not an image index: add "
                             "every variant with --add-variant (the first too), or use another "
                             "tag");
            goto out;
        }
        if (tkm_variants_is_index(raw, n) &&
            (rc = tkm_variants_parse(raw, n, NULL, "the index there is", &old, err)) != 0)
            goto out;
        root = json_loadb(raw, n, JSON_REJECT_DUPLICATES, NULL);
    } else {
        root = json_pack("{s:i,s:s,s:[]}", "schemaVersion", 2, "mediaType", TKM_OCI_MT_INDEX,
                         "manifests");
    }
    if (!root || !json_is_array(arr = json_object_get(root, "manifests"))) {
        rc = tkm_err_set(err, -ENOMEM, "variant index: out of memory");
        goto out;
    }
    for (size_t i = old.n; i-- > 0;)
        if (tkm_variant_same_target(&old.v[i], v)) {
            if (replaced)
                memcpy(replaced, old.v[i].digest, TKM_OCI_DIGEST_LEN + 1);
            json_array_remove(arr, old.v[i].entry);
        }
    e = json_pack("{s:s,s:s,s:I,s:{s:s,s:s},s:{}}", "mediaType", v->media_type, "digest", v->digest,
                  "size", (json_int_t)v->size, "platform", "os", v->os, "architecture",
                  v->architecture, "annotations");
    ann = json_object_get(e, "annotations");
    if (!e || tkm_variant_annotate(v, ann) != 0 || json_array_append(arr, e) != 0 ||
        !(text = json_dumps(root, JSON_COMPACT))) {
        rc = tkm_err_set(err, -ENOMEM, "variant index: out of memory");
        goto out;
    }
    /* the result must read back as a variant index (limits, grammar) */
    if ((rc = tkm_variants_parse(text, strlen(text), NULL, "the new index", &check, err)) != 0)
        goto out;
    *out_n = strlen(text);
    *out = text;
    text = NULL;
out:
    free(text);
    json_decref(e);
    json_decref(root);
    tkm_oci_manifest_release(&m);
    tkm_variant_set_release(&old);
    tkm_variant_set_release(&check);
    return rc;
}
