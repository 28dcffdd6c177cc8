/* manifest.c - see manifest.h. */
#include <tkm/oci/manifest.h>

#include <ctype.h>
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>

#include <tkm/buf.h>
#include <tkm/oci/digest.h>

/* Whether a media type is a manifest or an index. */
static enum tkm_oci_kind media_kind(const char *mt)
{
    if (!mt)
        return TKM_OCI_KIND_NONE;
    if (strcmp(mt, TKM_OCI_MT_MANIFEST) == 0 || strcmp(mt, TKM_DOCKER_MT_MANIFEST) == 0)
        return TKM_OCI_KIND_MANIFEST;
    if (strcmp(mt, TKM_OCI_MT_INDEX) == 0 || strcmp(mt, TKM_DOCKER_MT_LIST) == 0)
        return TKM_OCI_KIND_INDEX;
    return TKM_OCI_KIND_NONE;
}

int tkm_oci_layer_supported(const char *mt, const char **compression)
{
    const char *c = NULL;
    if (strcmp(mt, TKM_OCI_MT_LAYER_GZIP) == 0 || strcmp(mt, TKM_DOCKER_MT_LAYER_GZIP) == 0)
        c = "gzip";
    else if (strcmp(mt, TKM_OCI_MT_LAYER_ZSTD) == 0)
        c = "zstd";
    else if (strcmp(mt, TKM_OCI_MT_LAYER_TAR) == 0)
        c = "";
    if (compression)
        *compression = c;
    return c != NULL;
}

/* Content-Type without parameters and surrounding blanks, into out. */
static void bare_type(const char *ct, char *out, size_t n)
{
    size_t i = 0;
    while (*ct == ' ' || *ct == '\t')
        ct++;
    while (ct[i] && ct[i] != ';' && i + 1 < n)
        i++;
    while (i > 0 && (ct[i - 1] == ' ' || ct[i - 1] == '\t'))
        i--;
    memcpy(out, ct, i);
    out[i] = '\0';
}

static int copy_str(char *out, size_t n, const char *s)
{
    size_t len = strlen(s);
    if (len >= n)
        return -1;
    memcpy(out, s, len + 1);
    return 0;
}

static int parse_desc(json_t *j, struct tkm_oci_desc *d, const char *what, const char *field,
                      size_t idx, struct tkm_err *err)
{
    const char *mt = json_string_value(json_object_get(j, "mediaType"));
    const char *dg = json_string_value(json_object_get(j, "digest"));
    json_t *size = json_object_get(j, "size");
    memset(d, 0, sizeof *d);
    if (!json_is_object(j))
        return tkm_err_set(err, -EINVAL, "%s: %s[%zu] is not an object", what, field, idx);
    if (!mt || copy_str(d->media_type, sizeof d->media_type, mt) != 0)
        return tkm_err_set(err, -EINVAL, "%s: %s[%zu] has no (or a too long) mediaType", what,
                           field, idx);
    if (!tkm_oci_digest_valid(dg))
        return tkm_err_set(err, -EINVAL, "%s: %s[%zu] digest%s is not sha256:<64 hex>", what, field,
                           idx, dg ? "" : " (missing)");
    memcpy(d->digest, dg, TKM_OCI_DIGEST_LEN + 1);
    if (!json_is_integer(size) || json_integer_value(size) < 0)
        return tkm_err_set(err, -EINVAL, "%s: %s[%zu] (%s) has no valid size", what, field, idx,
                           dg);
    d->size = (uint64_t)json_integer_value(size);
    json_t *pf = json_object_get(j, "platform");
    if (json_is_object(pf)) {
        const char *os = json_string_value(json_object_get(pf, "os"));
        const char *arch = json_string_value(json_object_get(pf, "architecture"));
        const char *var = json_string_value(json_object_get(pf, "variant"));
        d->has_platform = 1;
        if (copy_str(d->os, sizeof d->os, os ? os : "") ||
            copy_str(d->arch, sizeof d->arch, arch ? arch : "") ||
            copy_str(d->variant, sizeof d->variant, var ? var : ""))
            return tkm_err_set(err, -EINVAL, "%s: %s[%zu] platform field too long", what, field,
                               idx);
    }
    json_t *ann = json_object_get(j, "annotations");
    const char *rt = json_string_value(json_object_get(ann, "vnd.docker.reference.type"));
    d->attestation = rt && strcmp(rt, "attestation-manifest") == 0;
    const char *rn = json_string_value(json_object_get(ann, "org.opencontainers.image.ref.name"));
    if (rn && copy_str(d->ref_name, sizeof d->ref_name, rn) != 0)
        d->ref_name[0] = '\0';
    return 0;
}

/* A media type as a message may show it, into out: quoted when it is one tkm
 * knows, else a phrase (a registry's or a document's free text never reaches
 * a condition message; docs/security.md). Returns out. */
static const char *shown_type(const char *mt, char *out, size_t n)
{
    if (media_kind(mt) != TKM_OCI_KIND_NONE)
        snprintf(out, n, "'%s'", mt);
    else
        snprintf(out, n, "(a type tkm does not know)");
    return out;
}

/* Decides the media type from the Content-Type and the body's mediaType. */
static int decide_type(struct tkm_oci_manifest *m, json_t *root, const char *content_type,
                       const char *what, struct tkm_err *err)
{
    char ct[128] = "", t1[160], t2[160];
    json_t *mtj = json_object_get(root, "mediaType");
    const char *mt = json_string_value(mtj);
    if (mtj && !mt)
        return tkm_err_set(err, -EINVAL, "%s: mediaType is not a string", what);
    if (content_type)
        bare_type(content_type, ct, sizeof ct);
    if (strcmp(ct, "application/vnd.docker.distribution.manifest.v1+prettyjws") == 0 ||
        strcmp(ct, "application/vnd.docker.distribution.manifest.v1+json") == 0 ||
        json_integer_value(json_object_get(root, "schemaVersion")) == 1)
        return tkm_err_set(err, -ENOTSUP,
                           "%s: Docker schema 1 manifests are not supported (push the image again "
                           "with a current client)",
                           what);
    if (mt && ct[0] && strcmp(mt, ct) != 0)
        return tkm_err_set(err, -EINVAL,
                           "%s: mediaType %s does not match the Content-Type %s it was served with",
                           what, shown_type(mt, t1, sizeof t1), shown_type(ct, t2, sizeof t2));
    if (!mt && ct[0])
        mt = ct;
    if (!mt) {
        /* No type from either side (a layout or a file): the structure decides. */
        mt = json_object_get(root, "manifests") ? TKM_OCI_MT_INDEX : TKM_OCI_MT_MANIFEST;
    }
    m->kind = media_kind(mt);
    if (m->kind == TKM_OCI_KIND_NONE)
        return tkm_err_set(err, -EINVAL, "%s: media type %s is not an image manifest or index",
                           what, shown_type(mt, t1, sizeof t1));
    if (json_integer_value(json_object_get(root, "schemaVersion")) != 2)
        return tkm_err_set(err, -EINVAL, "%s: schemaVersion is not 2", what);
    if ((m->kind == TKM_OCI_KIND_INDEX && json_object_get(root, "layers")) ||
        (m->kind == TKM_OCI_KIND_MANIFEST && json_object_get(root, "manifests")))
        return tkm_err_set(err, -EINVAL,
                           "%s: ambiguous document: a %s carrying '%s' (rejected, see "
                           "CVE-2021-41190)",
                           what, m->kind == TKM_OCI_KIND_INDEX ? "index" : "manifest",
                           m->kind == TKM_OCI_KIND_INDEX ? "layers" : "manifests");
    copy_str(m->media_type, sizeof m->media_type, mt);
    return 0;
}

int tkm_oci_manifest_parse(struct tkm_oci_manifest *m, const char *content_type, const void *p,
                           size_t n, const char *what, struct tkm_err *err)
{
    json_error_t je;
    json_t *root = NULL;
    int rc = 0;
    memset(m, 0, sizeof *m);
    if (n > TKM_OCI_MANIFEST_MAX)
        return tkm_err_set(err, -E2BIG, "%s: manifest of %zu bytes exceeds the %u byte limit", what,
                           n, TKM_OCI_MANIFEST_MAX);
    root = json_loadb(p, n, JSON_REJECT_DUPLICATES, &je);
    if (!root || !json_is_object(root)) {
        rc = tkm_err_set(err, -EINVAL, "%s: manifest is not a JSON object: %s (line %d)", what,
                         root ? "not an object" : je.text, je.line);
        goto out;
    }
    if ((rc = decide_type(m, root, content_type, what, err)) != 0)
        goto out;
    if ((rc = tkm_oci_digest_bytes(p, n, m->digest)) != 0)
        goto out;
    m->size = n;
    const char *field = m->kind == TKM_OCI_KIND_INDEX ? "manifests" : "layers";
    json_t *arr = json_object_get(root, field);
    if (!json_is_array(arr)) {
        rc = tkm_err_set(err, -EINVAL, "%s: '%s' is missing or not an array", what, field);
        goto out;
    }
    if (json_array_size(arr) > TKM_OCI_DESCS_MAX) {
        rc = tkm_err_set(err, -E2BIG, "%s: more than %d %s", what, TKM_OCI_DESCS_MAX, field);
        goto out;
    }
    if (m->kind == TKM_OCI_KIND_MANIFEST &&
        (rc = parse_desc(json_object_get(root, "config"), &m->config, what, "config", 0, err)) != 0)
        goto out;
    m->n_descs = json_array_size(arr);
    m->descs = calloc(m->n_descs ? m->n_descs : 1, sizeof *m->descs);
    if (!m->descs) {
        rc = -ENOMEM;
        goto out;
    }
    for (size_t i = 0; i < m->n_descs; i++)
        if ((rc = parse_desc(json_array_get(arr, i), &m->descs[i], what, field, i, err)) != 0)
            goto out;
out:
    json_decref(root);
    if (rc)
        tkm_oci_manifest_release(m);
    return rc;
}

void tkm_oci_manifest_release(struct tkm_oci_manifest *m)
{
    if (!m)
        return;
    free(m->descs);
    memset(m, 0, sizeof *m);
}

const char *tkm_oci_host_arch(void)
{
    static const char *const arch[][2] = {{"x86_64", "amd64"},
                                          {"aarch64", "arm64"},
                                          {"arm64", "arm64"},
                                          {"ppc64le", "ppc64le"},
                                          {"s390x", "s390x"}};
    struct utsname u;
    if (uname(&u) != 0)
        return "amd64";
    for (size_t i = 0; i < sizeof arch / sizeof arch[0]; i++)
        if (strcmp(u.machine, arch[i][0]) == 0)
            return arch[i][1];
    return "amd64";
}

int tkm_oci_index_select(const struct tkm_oci_manifest *idx, const char *os, const char *arch,
                         const char *variant, const struct tkm_oci_desc **out, struct tkm_err *err)
{
    struct tkm_buf seen = TKM_BUF_INIT(1024);
    const struct tkm_oci_desc *only = NULL;
    size_t n_images = 0;
    int rc = -ENOENT;
    for (size_t i = 0; i < idx->n_descs; i++) {
        const struct tkm_oci_desc *d = &idx->descs[i];
        if (d->attestation ||
            (d->has_platform && strcmp(d->os, "unknown") == 0 && strcmp(d->arch, "unknown") == 0))
            continue;
        if (media_kind(d->media_type) != TKM_OCI_KIND_MANIFEST)
            continue;
        n_images++;
        only = d;
        if (!d->has_platform)
            continue;
        tkm_buf_printf(&seen, "%s%s/%s%s%s", seen.len ? ", " : "", d->os, d->arch,
                       d->variant[0] ? "/" : "", d->variant);
        if (strcmp(d->os, os) == 0 && strcmp(d->arch, arch) == 0 &&
            (!variant || !variant[0] || strcmp(d->variant, variant) == 0)) {
            *out = d;
            rc = 0;
            goto out;
        }
    }
    if (n_images == 1 && !only->has_platform) {
        *out = only;
        rc = 0;
        goto out;
    }
    rc = tkm_err_set(err, -ENOENT, "index %s has no manifest for %s/%s (platforms: %s)",
                     idx->digest, os, arch, seen.len ? seen.data : "none");
out:
    tkm_buf_release(&seen);
    return rc;
}

int tkm_oci_config_parse(struct tkm_oci_config *c, const void *p, size_t n, const char *what,
                         struct tkm_err *err)
{
    json_error_t je;
    int rc = 0;
    memset(c, 0, sizeof *c);
    if (n > TKM_OCI_MANIFEST_MAX)
        return tkm_err_set(err, -E2BIG, "%s: config of %zu bytes exceeds the %u byte limit", what,
                           n, TKM_OCI_MANIFEST_MAX);
    json_t *root = json_loadb(p, n, JSON_REJECT_DUPLICATES, &je);
    c->root = root;
    if (!json_is_object(root)) {
        rc = tkm_err_set(err, -EINVAL, "%s: config is not a JSON object: %s", what,
                         root ? "not an object" : je.text);
        goto out;
    }
    const char *os = json_string_value(json_object_get(root, "os"));
    const char *arch = json_string_value(json_object_get(root, "architecture"));
    if (copy_str(c->os, sizeof c->os, os ? os : "") ||
        copy_str(c->arch, sizeof c->arch, arch ? arch : "")) {
        rc = tkm_err_set(err, -EINVAL, "%s: config os/architecture too long", what);
        goto out;
    }
    json_t *labels = json_object_get(json_object_get(root, "config"), "Labels");
    if (labels && !json_is_object(labels) && !json_is_null(labels)) {
        rc = tkm_err_set(err, -EINVAL, "%s: config.Labels is not an object", what);
        goto out;
    }
    json_t *ids = json_object_get(json_object_get(root, "rootfs"), "diff_ids");
    if (ids && !json_is_array(ids)) {
        rc = tkm_err_set(err, -EINVAL, "%s: rootfs.diff_ids is not an array", what);
        goto out;
    }
    c->n_diff_ids = json_array_size(ids);
    c->diff_ids = calloc(c->n_diff_ids ? c->n_diff_ids : 1, sizeof *c->diff_ids);
    if (!c->diff_ids) {
        rc = -ENOMEM;
        goto out;
    }
    for (size_t i = 0; i < c->n_diff_ids; i++) {
        const char *d = json_string_value(json_array_get(ids, i));
        if (!tkm_oci_digest_valid(d)) {
            rc = tkm_err_set(err, -EINVAL, "%s: rootfs.diff_ids[%zu] is not sha256:<64 hex>", what,
                             i);
            goto out;
        }
        memcpy(c->diff_ids[i], d, TKM_OCI_DIGEST_LEN + 1);
    }
out:
    if (rc)
        tkm_oci_config_release(c);
    return rc;
}

const char *tkm_oci_config_label(const struct tkm_oci_config *c, const char *key)
{
    json_t *labels = json_object_get(json_object_get(c->root, "config"), "Labels");
    return json_string_value(json_object_get(labels, key));
}

void tkm_oci_config_release(struct tkm_oci_config *c)
{
    if (!c)
        return;
    json_decref(c->root);
    free(c->diff_ids);
    memset(c, 0, sizeof *c);
}
