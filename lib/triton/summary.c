/*
 * triton/summary.c - the de-duplicated targets of a cache, and the
 * cache.triton.image/summary label that carries them in an image config.
 */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tkm/triton/cache.h>

void tkm_triton_summary_release(struct tkm_triton_summary *s)
{
    if (!s)
        return;
    for (size_t i = 0; i < s->n_triton_versions; i++)
        free(s->triton_versions[i]);
    free(s->triton_versions);
    free(s->targets);
    free(s->ptx_versions);
    memset(s, 0, sizeof *s);
}

static int target_cmp(const struct tkm_triton_target *a, const struct tkm_triton_target *b)
{
    int r = strcmp(a->backend, b->backend);
    if (r)
        return r;
    /* numeric CUDA archs sort by value ("80" < "90" < "100") */
    size_t la = strlen(a->arch), lb = strlen(b->arch);
    if (isdigit((unsigned char)a->arch[0]) && isdigit((unsigned char)b->arch[0]) && la != lb)
        return la < lb ? -1 : 1;
    r = strcmp(a->arch, b->arch);
    return r ? r : a->warp_size - b->warp_size;
}

static int starget_qcmp(const void *a, const void *b)
{
    return target_cmp(&((const struct tkm_triton_summary_target *)a)->target,
                      &((const struct tkm_triton_summary_target *)b)->target);
}

static int ptx_qcmp(const void *a, const void *b)
{
    return tkm_ptx_version_cmp(*(const struct tkm_ptx_version *)a,
                               *(const struct tkm_ptx_version *)b);
}

static int str_qcmp(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Adds k's target/PTX/version facts to s; arrays were sized for n kernels. */
static int summary_add(struct tkm_triton_summary *s, const struct tkm_triton_kernel *k)
{
    struct tkm_triton_summary_target *t = NULL;
    size_t i;
    for (i = 0; i < s->n_targets; i++)
        if (target_cmp(&s->targets[i].target, &k->target) == 0)
            t = &s->targets[i];
    if (!t) {
        t = &s->targets[s->n_targets++];
        t->target = k->target;
        t->ptx_max.major = t->ptx_max.minor = -1;
    }
    t->kernels++;
    if (k->ptx.major >= 0 && tkm_ptx_version_cmp(k->ptx, t->ptx_max) > 0)
        t->ptx_max = k->ptx;
    if (k->binary_arch[0]) {
        size_t al = strlen(k->target.arch);
        /* "90a" (arch-specific) compares as "90" against the cubin's SM number */
        if (al > 1 && isdigit((unsigned char)k->target.arch[0]) &&
            isalpha((unsigned char)k->target.arch[al - 1]))
            al--;
        if (strlen(k->binary_arch) != al || strncmp(k->binary_arch, k->target.arch, al) != 0)
            t->binary_mismatch++;
    }
    size_t tl = strlen(k->ptx_target);
    if (tl > 0 && k->ptx_target[tl - 1] == 'a')
        t->arch_specific = 1;
    if (k->ptx.major >= 0) {
        for (i = 0; i < s->n_ptx_versions; i++)
            if (tkm_ptx_version_cmp(s->ptx_versions[i], k->ptx) == 0)
                break;
        if (i == s->n_ptx_versions)
            s->ptx_versions[s->n_ptx_versions++] = k->ptx;
    }
    if (k->triton_version) {
        for (i = 0; i < s->n_triton_versions; i++)
            if (strcmp(s->triton_versions[i], k->triton_version) == 0)
                break;
        if (i == s->n_triton_versions) {
            if (!(s->triton_versions[i] = strdup(k->triton_version)))
                return -ENOMEM;
            s->n_triton_versions++;
        }
    }
    return 0;
}

int tkm_triton_summary_build(struct tkm_triton_summary *s, const struct tkm_triton_kernel *k,
                             size_t n, struct tkm_err *err)
{
    memset(s, 0, sizeof *s);
    size_t m = n ? n : 1;
    s->targets = calloc(m, sizeof *s->targets);
    s->ptx_versions = calloc(m, sizeof *s->ptx_versions);
    s->triton_versions = calloc(m, sizeof *s->triton_versions);
    if (!s->targets || !s->ptx_versions || !s->triton_versions)
        goto nomem;
    for (size_t i = 0; i < n; i++)
        if (summary_add(s, &k[i]) != 0)
            goto nomem;
    qsort(s->targets, s->n_targets, sizeof *s->targets, starget_qcmp);
    qsort(s->ptx_versions, s->n_ptx_versions, sizeof *s->ptx_versions, ptx_qcmp);
    qsort(s->triton_versions, s->n_triton_versions, sizeof *s->triton_versions, str_qcmp);
    return 0;
nomem:
    tkm_triton_summary_release(s);
    return tkm_err_set(err, -ENOMEM, "summary: out of memory");
}

int tkm_triton_summary_label(const struct tkm_triton_summary *s, char **out, struct tkm_err *err)
{
    json_t *targets = json_array(), *tv = json_array(), *pv = json_array(), *root;
    int bad = !targets || !tv || !pv;
    for (size_t i = 0; !bad && i < s->n_targets; i++) {
        const struct tkm_triton_target *t = &s->targets[i].target;
        bad =
            json_array_append_new(targets, json_pack("{s:s,s:s,s:i}", "backend", t->backend, "arch",
                                                     t->arch, "warp_size", t->warp_size)) != 0;
    }
    for (size_t i = 0; !bad && i < s->n_triton_versions; i++)
        bad = json_array_append_new(tv, json_string(s->triton_versions[i])) != 0;
    for (size_t i = 0; !bad && i < s->n_ptx_versions; i++) {
        char b[32];
        bad = json_array_append_new(
                  pv, json_string(tkm_ptx_version_str(s->ptx_versions[i], b, sizeof b))) != 0;
    }
    /* "o" steals the three arrays: json_pack releases them if it fails */
    root =
        json_pack("{s:o,s:o,s:o}", "targets", targets, "triton_versions", tv, "ptx_versions", pv);
    *out = root && !bad ? json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
    json_decref(root);
    return *out ? 0 : tkm_err_set(err, -ENOMEM, "summary label: out of memory");
}

static int parse_label_ptx(struct tkm_triton_summary *s, json_t *pv, struct tkm_err *err)
{
    size_t i;
    json_t *v;
    if (!pv)
        return 0;
    if (!json_is_array(pv))
        return tkm_err_set(err, -EINVAL, "summary label: ptx_versions must be a list");
    s->ptx_versions = calloc(json_array_size(pv) + 1, sizeof *s->ptx_versions);
    if (!s->ptx_versions)
        return tkm_err_set(err, -ENOMEM, "out of memory");
    json_array_foreach(pv, i, v)
    {
        struct tkm_ptx_version x;
        char t[2];
        if (!json_is_string(v))
            return tkm_err_set(err, -EINVAL, "summary label: ptx_versions[%zu] must be \"X.Y\"", i);
        char line[64];
        snprintf(line, sizeof line, ".version %.40s\n", json_string_value(v));
        if (tkm_ptx_header_parse(line, strlen(line), &x, t, 0) != 0)
            return tkm_err_set(err, -EINVAL, "summary label: ptx_versions[%zu] must be \"X.Y\"", i);
        s->ptx_versions[s->n_ptx_versions++] = x;
    }
    qsort(s->ptx_versions, s->n_ptx_versions, sizeof *s->ptx_versions, ptx_qcmp);
    for (i = 0; i < s->n_targets && s->n_ptx_versions; i++)
        if (strcmp(s->targets[i].target.backend, "cuda") == 0)
            s->targets[i].ptx_max = s->ptx_versions[s->n_ptx_versions - 1];
    return 0;
}

int tkm_triton_summary_parse(struct tkm_triton_summary *s, const char *label, struct tkm_err *err)
{
    json_error_t je;
    json_t *root = NULL, *targets, *v;
    size_t i;
    int rc = 0;
    memset(s, 0, sizeof *s);
    root = json_loads(label, JSON_REJECT_DUPLICATES, &je);
    if (!root) {
        rc = tkm_err_set(err, -EINVAL, "summary label is not valid JSON: %s", je.text);
        goto out;
    }
    targets = json_object_get(root, "targets");
    if (!json_is_array(targets) || json_array_size(targets) == 0 ||
        json_array_size(targets) > 4096) {
        rc = tkm_err_set(err, -EINVAL, "summary label: \"targets\" must be a non-empty list");
        goto out;
    }
    s->targets = calloc(json_array_size(targets), sizeof *s->targets);
    if (!s->targets) {
        rc = tkm_err_set(err, -ENOMEM, "out of memory");
        goto out;
    }
    json_array_foreach(targets, i, v)
    {
        char what[64];
        snprintf(what, sizeof what, "summary label: targets[%zu]", i);
        s->targets[i].ptx_max.major = s->targets[i].ptx_max.minor = -1;
        if ((rc = tkm_triton_target_parse(v, &s->targets[i].target, NULL, what, err)) != 0)
            goto out;
        s->n_targets++;
    }
    qsort(s->targets, s->n_targets, sizeof *s->targets, starget_qcmp);
    rc = parse_label_ptx(s, json_object_get(root, "ptx_versions"), err);
    if (!rc) {
        json_t *tv = json_object_get(root, "triton_versions");
        s->triton_versions = calloc(json_array_size(tv) + 1, sizeof *s->triton_versions);
        if (!s->triton_versions)
            rc = tkm_err_set(err, -ENOMEM, "out of memory");
        json_array_foreach(tv, i, v)
        {
            if (rc || !json_is_string(v))
                continue;
            if (!(s->triton_versions[s->n_triton_versions] = strdup(json_string_value(v))))
                rc = tkm_err_set(err, -ENOMEM, "out of memory");
            else
                s->n_triton_versions++;
        }
    }
out:
    json_decref(root);
    if (rc)
        tkm_triton_summary_release(s);
    return rc;
}
