/* json.c - typed getters with field-naming errors, and encoding helpers. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "api-int.h"

static const char *type_name(const json_t *v)
{
    static const char *const names[] = {[JSON_OBJECT] = "an object",
                                        [JSON_ARRAY] = "a list",
                                        [JSON_STRING] = "a string",
                                        [JSON_INTEGER] = "an integer",
                                        [JSON_REAL] = "a number with a fraction",
                                        [JSON_TRUE] = "a boolean",
                                        [JSON_FALSE] = "a boolean",
                                        [JSON_NULL] = "null"};
    unsigned t = (unsigned)json_typeof(v);
    return t < sizeof names / sizeof names[0] ? names[t] : "null";
}

static int wrong(const json_t *v, const char *path, const char *key, const char *want,
                 struct tkm_err *err)
{
    return tkm_err_set(err, -EPROTO, "%s%s%s: expected %s, got %s", path, *path ? "." : "", key,
                       want, type_name(v));
}

/* obj[key], NULL when absent or null. */
static const json_t *get(const json_t *obj, const char *key)
{
    const json_t *v = obj ? json_object_get(obj, key) : NULL;
    return v && !json_is_null(v) ? v : NULL;
}

int tkm__api_str(const json_t *obj, const char *path, const char *key, char **out,
                 struct tkm_err *err)
{
    const json_t *v = get(obj, key);
    *out = NULL;
    if (!v)
        return 0;
    if (!json_is_string(v))
        return wrong(v, path, key, "a string", err);
    if (!(*out = strdup(json_string_value(v))))
        return tkm_err_set(err, -ENOMEM, "%s.%s: out of memory", path, key);
    return 0;
}

int tkm__api_int(const json_t *obj, const char *path, const char *key, int64_t min, int64_t max,
                 int64_t *out, struct tkm_err *err)
{
    const json_t *v = get(obj, key);
    *out = 0;
    if (!v)
        return 0;
    if (!json_is_integer(v))
        return wrong(v, path, key, "an integer", err);
    json_int_t i = json_integer_value(v);
    if (i < min || i > max)
        return tkm_err_set(err, -EPROTO, "%s%s%s: %lld is out of range [%lld, %lld]", path,
                           *path ? "." : "", key, (long long)i, (long long)min, (long long)max);
    *out = (int64_t)i;
    return 0;
}

int tkm__api_i32(const json_t *obj, const char *path, const char *key, int32_t *out,
                 struct tkm_err *err)
{
    int64_t v;
    int rc = tkm__api_int(obj, path, key, INT32_MIN, INT32_MAX, &v, err);
    *out = (int32_t)v;
    return rc;
}

int tkm__api_bool(const json_t *obj, const char *path, const char *key, int *out,
                  struct tkm_err *err)
{
    const json_t *v = get(obj, key);
    *out = 0;
    if (!v)
        return 0;
    if (!json_is_boolean(v))
        return wrong(v, path, key, "a boolean", err);
    *out = json_is_true(v);
    return 0;
}

int tkm__api_obj(const json_t *obj, const char *path, const char *key, const json_t **out,
                 struct tkm_err *err)
{
    const json_t *v = get(obj, key);
    *out = NULL;
    if (v && !json_is_object(v))
        return wrong(v, path, key, "an object", err);
    *out = v;
    return 0;
}

int tkm__api_arr(const json_t *obj, const char *path, const char *key, size_t max,
                 const json_t **out, size_t *n, struct tkm_err *err)
{
    const json_t *v = get(obj, key);
    *out = NULL;
    *n = 0;
    if (!v)
        return 0;
    if (!json_is_array(v))
        return wrong(v, path, key, "a list", err);
    if (json_array_size(v) > max)
        return tkm_err_set(err, -EPROTO, "%s%s%s: %zu entries, more than the %zu allowed", path,
                           *path ? "." : "", key, json_array_size(v), max);
    *out = v;
    *n = json_array_size(v);
    return 0;
}

int tkm__api_alloc(size_t n, size_t size, void **out, struct tkm_err *err)
{
    *out = NULL;
    if (n == 0)
        return 0;
    if (!(*out = calloc(n, size)))
        return tkm_err_set(err, -ENOMEM, "out of memory");
    return 0;
}

void tkm__api_meta_release(struct tkm_api_meta *m)
{
    free(m->name);
    free(m->ns);
    free(m->uid);
    free(m->resource_version);
    free(m->deletion_timestamp);
    memset(m, 0, sizeof *m);
}

static int meta_decode(const json_t *root, struct tkm_api_meta *m, struct tkm_err *err)
{
    const json_t *md;
    int rc = tkm__api_obj(root, "", "metadata", &md, err);
    if (rc == 0 && !md)
        rc = tkm_err_set(err, -EPROTO, "metadata: missing");
    if (rc == 0)
        rc = tkm__api_str(md, "metadata", "name", &m->name, err);
    if (rc == 0 && !m->name)
        rc = tkm_err_set(err, -EPROTO, "metadata.name: missing");
    if (rc == 0)
        rc = tkm__api_str(md, "metadata", "namespace", &m->ns, err);
    if (rc == 0)
        rc = tkm__api_str(md, "metadata", "uid", &m->uid, err);
    if (rc == 0)
        rc = tkm__api_str(md, "metadata", "resourceVersion", &m->resource_version, err);
    if (rc == 0)
        rc = tkm__api_int(md, "metadata", "generation", 0, INT64_MAX, &m->generation, err);
    if (rc == 0)
        rc = tkm__api_str(md, "metadata", "deletionTimestamp", &m->deletion_timestamp, err);
    return rc;
}

int tkm__api_parse(const char *json, size_t len, const char *kind, const char *cluster_kind,
                   json_t **root, int *cluster, struct tkm_api_meta *meta, struct tkm_err *err)
{
    json_error_t je;
    char *av = NULL, *k = NULL;
    int rc;
    /* jansson skips a NUL byte outside strings; JSON has none, and
     * tkm_api_nodestatus_scan (tkm_jscan) refuses it: so do we. */
    *root = NULL;
    if (memchr(json, 0, len))
        return tkm_err_set(err, -EPROTO, "%s: not JSON: a NUL byte", kind);
    *root = json_loadb(json, len, JSON_REJECT_DUPLICATES, &je);
    if (!*root)
        return tkm_err_set(err, -EPROTO, "%s: not JSON: %s (line %d, column %d)", kind, je.text,
                           je.line, je.column);
    if (!json_is_object(*root)) {
        rc =
            tkm_err_set(err, -EPROTO, "%s: expected a JSON object, got %s", kind, type_name(*root));
        goto out;
    }
    if ((rc = tkm__api_str(*root, "", "apiVersion", &av, err)) ||
        (rc = tkm__api_str(*root, "", "kind", &k, err)))
        goto out;
    if (av && strcmp(av, TKM_API_GROUP_VERSION) != 0) {
        rc = tkm_err_set(err, -EPROTO, "apiVersion: \"%s\", expected \"%s\"", av,
                         TKM_API_GROUP_VERSION);
        goto out;
    }
    if (k && strcmp(k, kind) != 0 && strcmp(k, cluster_kind) != 0) {
        rc = tkm_err_set(err, -EPROTO, "kind: \"%s\", expected %s or %s", k, kind, cluster_kind);
        goto out;
    }
    rc = meta_decode(*root, meta, err);
    /* Objects from a typed list or watch may lack kind: the namespace says. */
    *cluster = k ? strcmp(k, cluster_kind) == 0 : meta->ns == NULL;
out:
    free(av);
    free(k);
    if (rc) {
        json_decref(*root);
        *root = NULL;
        tkm__api_meta_release(meta);
    }
    return rc;
}

void tkm__api_conditions_release(struct tkm_api_condition *c, size_t n)
{
    for (size_t i = 0; c && i < n; i++) {
        free(c[i].type);
        free(c[i].last_transition_time);
        free(c[i].reason);
        free(c[i].message);
    }
    free(c);
}

static int cond_decode(const json_t *v, const char *path, struct tkm_api_condition *c,
                       struct tkm_err *err)
{
    char *st = NULL;
    int rc;
    if (!json_is_object(v))
        return tkm_err_set(err, -EPROTO, "%s: expected an object, got %s", path, type_name(v));
    if ((rc = tkm__api_str(v, path, "type", &c->type, err)) ||
        (rc = tkm__api_str(v, path, "status", &st, err)) ||
        (rc = tkm__api_int(v, path, "observedGeneration", 0, INT64_MAX, &c->observed_generation,
                           err)) ||
        (rc = tkm__api_str(v, path, "lastTransitionTime", &c->last_transition_time, err)) ||
        (rc = tkm__api_str(v, path, "reason", &c->reason, err)) ||
        (rc = tkm__api_str(v, path, "message", &c->message, err)))
        goto out;
    if (!c->type)
        rc = tkm_err_set(err, -EPROTO, "%s.type: missing", path);
    else if (st && strcmp(st, "True") == 0)
        c->status = TKM_API_COND_TRUE;
    else if (st && strcmp(st, "False") == 0)
        c->status = TKM_API_COND_FALSE;
    else if (st && strcmp(st, "Unknown") != 0)
        rc = tkm_err_set(err, -EPROTO, "%s.status: \"%s\", expected True, False or Unknown", path,
                         st);
out:
    free(st);
    return rc;
}

int tkm__api_conditions_decode(const json_t *status, const char *path,
                               struct tkm_api_condition **out, size_t *n, struct tkm_err *err)
{
    const json_t *arr;
    size_t cnt;
    char p[256];
    int rc = tkm__api_arr(status, path, "conditions", 16, &arr, &cnt, err);
    *out = NULL;
    *n = 0;
    if (rc || (rc = tkm__api_alloc(cnt, sizeof **out, (void **)out, err)))
        return rc;
    for (size_t i = 0; i < cnt && rc == 0; i++) {
        snprintf(p, sizeof p, "%s.conditions[%zu]", path, i);
        rc = cond_decode(json_array_get(arr, i), p, &(*out)[i], err);
        *n = i + 1;
    }
    if (rc) {
        tkm__api_conditions_release(*out, *n);
        *out = NULL;
        *n = 0;
    }
    return rc;
}

/* ---- encoding --------------------------------------------------------------- */

int tkm__api_set_new(json_t *o, const char *key, json_t *v)
{
    return v && json_object_set_new(o, key, v) == 0 ? 0 : -ENOMEM;
}

int tkm__api_set_str(json_t *o, const char *key, const char *v)
{
    return v ? tkm__api_set_new(o, key, json_string(v)) : 0;
}

int tkm__api_set_int(json_t *o, const char *key, int64_t v)
{
    return tkm__api_set_new(o, key, json_integer((json_int_t)v));
}

int tkm__api_set_bool(json_t *o, const char *key, int v)
{
    return tkm__api_set_new(o, key, json_boolean(v));
}

int tkm__api_object(const char *kind, const char *name, const char *ns, json_t **out,
                    struct tkm_err *err)
{
    *out = NULL;
    if (!name || !*name)
        return tkm_err_set(err, -EINVAL, "%s apply body: metadata.name is required", kind);
    /* s*: no namespace member for a cluster-scoped object (ns NULL) */
    if (!(*out = json_pack("{s:s,s:s,s:{s:s,s:s*}}", "apiVersion", TKM_API_GROUP_VERSION, "kind",
                           kind, "metadata", "name", name, "namespace", ns)))
        return tkm_err_set(err, -ENOMEM, "%s apply body: out of memory", kind);
    return 0;
}

static const char *cond_status_str(enum tkm_api_cond_status s)
{
    return s == TKM_API_COND_TRUE ? "True" : s == TKM_API_COND_FALSE ? "False" : "Unknown";
}

json_t *tkm__api_conditions_encode(const struct tkm_api_condition *c, size_t n, struct tkm_err *err)
{
    json_t *arr = json_array();
    for (size_t i = 0; arr && i < n; i++) {
        if (!c[i].type || !c[i].reason || !c[i].last_transition_time) {
            tkm_err_set(err, -EINVAL,
                        "status.conditions[%zu]: type, reason and lastTransitionTime are required",
                        i);
            json_decref(arr);
            return NULL;
        }
        json_t *o = json_pack("{s:s,s:s,s:I,s:s,s:s,s:s}", "type", c[i].type, "status",
                              cond_status_str(c[i].status), "observedGeneration",
                              (json_int_t)c[i].observed_generation, "lastTransitionTime",
                              c[i].last_transition_time, "reason", c[i].reason, "message",
                              c[i].message ? c[i].message : "");
        if (!o || json_array_append_new(arr, o)) { /* append_new frees o on failure */
            json_decref(arr);
            tkm_err_set(err, -ENOMEM, "status.conditions: out of memory");
            return NULL;
        }
    }
    if (!arr)
        tkm_err_set(err, -ENOMEM, "status.conditions: out of memory");
    return arr;
}
