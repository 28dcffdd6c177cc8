/* compiles.c - the compiles summary (issue 25) of a node status entry and of a
 * cache status: encoding, the cache status' decoding (the node status' is
 * nodestatus_scan.c's), release and the checks both decoders share. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tkm/triton/cache.h>

#include "api-int.h"

void tkm_api_compiles_release(struct tkm_api_compiles *c)
{
    for (size_t i = 0; i < c->n_top; i++)
        free(c->top[i].name);
    free(c->top);
    free(c->since);
    free(c->hit);
    memset(c, 0, sizeof *c);
}

/* n digits at s within [lo, hi]. */
static int digits(const char *s, int n, int lo, int hi)
{
    int v = 0;
    for (int i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return 0;
        v = v * 10 + (s[i] - '0');
    }
    return v >= lo && v <= hi;
}

int tkm_api_time_ok(const char *s)
{
    if (!s || strlen(s) < 20 || !digits(s, 4, 0, 9999) || s[4] != '-' || !digits(s + 5, 2, 1, 12) ||
        s[7] != '-' || !digits(s + 8, 2, 1, 31) || (s[10] != 'T' && s[10] != 't') ||
        !digits(s + 11, 2, 0, 23) || s[13] != ':' || !digits(s + 14, 2, 0, 59) || s[16] != ':' ||
        !digits(s + 17, 2, 0, 60))
        return 0;
    const char *p = s + 19;
    if (*p == '.') {
        const char *d = ++p;
        while (*p >= '0' && *p <= '9')
            p++;
        if (p == d)
            return 0;
    }
    if (*p == 'Z' || *p == 'z')
        return p[1] == '\0';
    return (*p == '+' || *p == '-') && digits(p + 1, 2, 0, 23) && p[3] == ':' &&
           digits(p + 4, 2, 0, 59) && p[6] == '\0';
}

json_t *tkm_api_compiles_json(const struct tkm_api_compiles *c)
{
    json_t *o = json_object(), *top = c->n_top ? json_array() : NULL;
    int bad = !o || (c->n_top && !top) || (c->nodes && tkm__api_set_int(o, "nodes", c->nodes)) ||
              tkm__api_set_int(o, "podsServed", c->pods_served) ||
              tkm__api_set_int(o, "podsCompiled", c->pods_compiled) ||
              tkm__api_set_int(o, "tritonKernels", c->triton_kernels) ||
              tkm__api_set_int(o, "inductorEntries", c->inductor_entries) ||
              tkm__api_set_int(o, "vllmEntries", c->vllm_entries) ||
              tkm__api_set_int(o, "bytes", c->bytes);
    for (size_t i = 0; !bad && i < c->n_top; i++) {
        json_t *e = json_pack("{s:s,s:I}", "name", c->top[i].name ? c->top[i].name : "", "pods",
                              (json_int_t)c->top[i].pods);
        bad = !e || json_array_append_new(top, e) != 0;
    }
    bad = bad || (top && json_object_set(o, "topKernels", top)) ||
          tkm__api_set_str(o, "since", c->since) || tkm__api_set_str(o, "hit", c->hit);
    json_decref(top);
    if (bad) {
        json_decref(o);
        return NULL;
    }
    return o;
}

int tkm__api_compiles_decode(const json_t *parent, const char *path, struct tkm_api_compiles *out,
                             struct tkm_err *err)
{
    const json_t *c, *arr;
    char p[256], kp[300];
    size_t n;
    int64_t nodes;
    int rc;
    memset(out, 0, sizeof *out);
    if ((rc = tkm__api_obj(parent, path, "compiles", &c, err)) || !c)
        return rc;
    snprintf(p, sizeof p, "%s%scompiles", path, *path ? "." : "");
    if ((rc = tkm__api_int(c, p, "nodes", 0, INT32_MAX, &nodes, err)) ||
        (rc = tkm__api_int(c, p, "podsServed", 0, INT64_MAX, &out->pods_served, err)) ||
        (rc = tkm__api_int(c, p, "podsCompiled", 0, INT64_MAX, &out->pods_compiled, err)) ||
        (rc = tkm__api_int(c, p, "tritonKernels", 0, INT64_MAX, &out->triton_kernels, err)) ||
        (rc = tkm__api_int(c, p, "inductorEntries", 0, INT64_MAX, &out->inductor_entries, err)) ||
        (rc = tkm__api_int(c, p, "vllmEntries", 0, INT64_MAX, &out->vllm_entries, err)) ||
        (rc = tkm__api_int(c, p, "bytes", 0, INT64_MAX, &out->bytes, err)) ||
        (rc = tkm__api_str(c, p, "since", &out->since, err)) ||
        (rc = tkm__api_str(c, p, "hit", &out->hit, err)) ||
        (rc = tkm__api_arr(c, p, "topKernels", TKM_API_COMPILES_TOP, &arr, &n, err)) ||
        (rc = tkm__api_alloc(n, sizeof *out->top, (void **)&out->top, err)))
        goto fail;
    out->present = 1;
    out->nodes = (int32_t)nodes;
    if (out->since && !tkm_api_time_ok(out->since)) {
        rc =
            tkm_err_set(err, -EPROTO, "%s.since: \"%.40s\" is not an RFC 3339 time", p, out->since);
        goto fail;
    }
    if (out->hit && strlen(out->hit) > 64) {
        rc = tkm_err_set(err, -EPROTO, "%s.hit: longer than 64 bytes", p);
        goto fail;
    }
    for (size_t i = 0; i < n; i++) {
        const json_t *e = json_array_get(arr, i);
        struct tkm_api_kernel_count *k = &out->top[i];
        snprintf(kp, sizeof kp, "%s.topKernels[%zu]", p, i);
        out->n_top = i + 1;
        if (!json_is_object(e)) {
            rc = tkm_err_set(err, -EPROTO, "%s: expected an object", kp);
            goto fail;
        }
        if ((rc = tkm__api_str(e, kp, "name", &k->name, err)) ||
            (rc = tkm__api_int(e, kp, "pods", 0, INT64_MAX, &k->pods, err)))
            goto fail;
        if (!k->name || !tkm_kernel_name_ok(k->name, strlen(k->name))) {
            rc = tkm_err_set(err, -EPROTO, "%s.name: expected [A-Za-z0-9_.-]{1,128}", kp);
            goto fail;
        }
    }
    return 0;
fail:
    tkm_api_compiles_release(out);
    return rc;
}
