/*
 * rest.c - paths and the REST verbs (get, list, create, delete, patch,
 * server-side apply) on top of k8s_request_start(). See k8s/client.h.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <k8s/client.h>
#include <tkm/log.h>

#include "client-int.h"

#define PATH_MAXLEN (16u * 1024)

const struct k8s_resource k8s_res_configmaps = {"", "v1", "configmaps", "ConfigMap", 1};
const struct k8s_resource k8s_res_secrets = {"", "v1", "secrets", "Secret", 1};
const struct k8s_resource k8s_res_pods = {"", "v1", "pods", "Pod", 1};
const struct k8s_resource k8s_res_nodes = {"", "v1", "nodes", "Node", 0};
const struct k8s_resource k8s_res_namespaces = {"", "v1", "namespaces", "Namespace", 0};
const struct k8s_resource k8s_res_events = {"", "v1", "events", "Event", 1};
const struct k8s_resource k8s_res_leases = {"coordination.k8s.io", "v1", "leases", "Lease", 1};

/* ---- paths ------------------------------------------------------------------ */

static int unreserved(unsigned char ch)
{
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
           ch == '-' || ch == '.' || ch == '_' || ch == '~';
}

static int put_escaped(struct tkm_buf *out, const char *s)
{
    static const char hex[] = "0123456789ABCDEF";
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        int rc;
        if (unreserved(*p)) {
            rc = tkm_buf_putc(out, (char)*p);
        } else {
            char e[3] = {'%', hex[*p >> 4], hex[*p & 15]};
            rc = tkm_buf_append(out, e, 3);
        }
        if (rc)
            return rc;
    }
    return 0;
}

static int check_segment(const char *what, const char *s, struct tkm_err *err)
{
    if (!s || !*s)
        return tkm_err_set(err, -EINVAL, "k8s path: %s is empty", what);
    if (strcmp(s, ".") == 0 || strcmp(s, "..") == 0 || strchr(s, '/'))
        return tkm_err_set(err, -EINVAL, "k8s path: %s \"%s\" may not be '.', '..' or contain '/'",
                           what, s);
    if (strlen(s) > 253 * 2)
        return tkm_err_set(err, -EINVAL, "k8s path: %s is longer than 506 bytes", what);
    return 0;
}

int k8s_path(struct tkm_buf *out, const struct k8s_resource *r, const char *ns, const char *name,
             const char *subresource, struct tkm_err *err)
{
    int rc;
    if (!r || !r->version || !r->plural)
        return tkm_err_set(err, -EINVAL, "k8s path: the resource needs a version and a plural");
    if ((rc = check_segment("resource", r->plural, err)) ||
        (rc = check_segment("version", r->version, err)) ||
        (r->group && *r->group && (rc = check_segment("group", r->group, err))) ||
        (r->namespaced && ns && *ns && (rc = check_segment("namespace", ns, err))) ||
        (name && (rc = check_segment("name", name, err))) ||
        (subresource && (rc = check_segment("subresource", subresource, err))))
        return rc;
    if (subresource && !name)
        return tkm_err_set(err, -EINVAL, "k8s path: subresource \"%s\" needs a name", subresource);
    if (r->group && *r->group)
        rc = tkm_buf_printf(out, "/apis/%s/%s", r->group, r->version);
    else
        rc = tkm_buf_printf(out, "/api/%s", r->version);
    if (!rc && r->namespaced && ns && *ns) {
        if (!(rc = tkm_buf_puts(out, "/namespaces/")))
            rc = put_escaped(out, ns);
    }
    if (!rc)
        rc = tkm_buf_printf(out, "/%s", r->plural);
    if (!rc && name && !(rc = tkm_buf_putc(out, '/')))
        rc = put_escaped(out, name);
    if (!rc && subresource && !(rc = tkm_buf_putc(out, '/')))
        rc = put_escaped(out, subresource);
    if (rc)
        return tkm_err_set(err, rc, "k8s path: %s", strerror(-rc));
    return 0;
}

int k8s_query_add(struct tkm_buf *out, const char *key, const char *value)
{
    if (!value)
        return 0;
    int rc = tkm_buf_putc(out, memchr(out->data, '?', out->len) ? '&' : '?');
    if (!rc)
        rc = put_escaped(out, key);
    if (!rc)
        rc = tkm_buf_putc(out, '=');
    if (!rc)
        rc = put_escaped(out, value);
    return rc;
}

/* ---- object accessors ---------------------------------------------------------- */

static const char *meta_str(const json_t *obj, const char *key)
{
    return json_string_value(json_object_get(json_object_get(obj, "metadata"), key));
}

const char *k8s_obj_name(const json_t *obj)
{
    return meta_str(obj, "name");
}

const char *k8s_obj_uid(const json_t *obj)
{
    return meta_str(obj, "uid");
}

const char *k8s_obj_resource_version(const json_t *obj)
{
    return meta_str(obj, "resourceVersion");
}

/* ---- verbs ------------------------------------------------------------------------- */

struct verb_ctx {
    k8s_result_cb cb;
    void *data;
};

static void verb_done(struct k8s_req *req, struct k8s_response *resp, void *data)
{
    (void)req;
    struct verb_ctx *v = data;
    json_t *obj = NULL;
    int rc = resp->rc;
    if (rc == 0) {
        json_error_t je;
        if (resp->body->len == 0) {
            obj = json_object();
        } else {
            obj = json_loadb(resp->body->data, resp->body->len, JSON_REJECT_DUPLICATES, &je);
            if (!obj)
                rc = k8s__status_local(resp->st, -EPROTO,
                                       "HTTP %ld: the response is not valid JSON: %s (line %d)",
                                       resp->code, je.text, je.line);
        }
        if (!obj && rc == 0)
            rc = k8s__status_local(resp->st, -ENOMEM, "out of memory");
        if (rc)
            resp->st->code = resp->code;
    }
    v->cb(rc, obj, resp->st, v->data);
    json_decref(obj);
    free(v);
}

/* A prepared request: path and body owned here until sent. */
struct prep {
    struct tkm_buf path;
    char *body;
    size_t body_len;
    struct k8s_request rq;
};

static void prep_init(struct prep *p, const char *method)
{
    memset(p, 0, sizeof *p);
    tkm_buf_init(&p->path, PATH_MAXLEN);
    p->rq.method = method;
}

static void prep_release(struct prep *p)
{
    tkm_buf_release(&p->path);
    free(p->body);
    p->body = NULL;
}

static const char *ns_or_default(struct k8s_client *c, const struct k8s_resource *r, const char *ns)
{
    if (!r->namespaced)
        return NULL;
    return ns ? ns : k8s_client_namespace(c);
}

static int prep_path(struct prep *p, struct k8s_client *c, const struct k8s_resource *r,
                     const char *ns, const char *name, const char *sub, struct k8s_status *st)
{
    struct tkm_err e = {0};
    int rc = k8s_path(&p->path, r, ns_or_default(c, r, ns), name, sub, &e);
    if (rc)
        return k8s__status_local(st, rc, "%s", e.msg);
    return 0;
}

static int prep_body(struct prep *p, const json_t *obj, struct k8s_status *st)
{
    p->body = json_dumps(obj, JSON_COMPACT);
    if (!p->body)
        return k8s__status_local(st, -EINVAL, "the object cannot be serialised as JSON");
    p->body_len = strlen(p->body);
    p->rq.body = p->body;
    p->rq.body_len = p->body_len;
    return 0;
}

static int prep_send(struct prep *p, struct k8s_client *c, k8s_result_cb cb, void *data,
                     struct k8s_status *st)
{
    struct verb_ctx *v = malloc(sizeof *v);
    struct tkm_err e = {0};
    int rc = -ENOMEM;
    p->rq.path = p->path.data;
    if (v) {
        v->cb = cb;
        v->data = data;
        rc = k8s_request_start(c, &p->rq, NULL, verb_done, v, NULL, &e);
    }
    if (rc) {
        free(v);
        k8s__status_local(st, rc, "%s", e.code ? e.msg : "out of memory");
    }
    prep_release(p);
    return rc;
}

static int get_prep(struct prep *p, struct k8s_client *c, const struct k8s_resource *r,
                    const char *ns, const char *name, const char *sub, struct k8s_status *st)
{
    prep_init(p, "GET");
    p->rq.idempotent = K8S_IDEMPOTENT;
    if (!name)
        return k8s__status_local(st, -EINVAL, "get %s: a name is required", r->plural);
    return prep_path(p, c, r, ns, name, sub, st);
}

static int list_prep(struct prep *p, struct k8s_client *c, const struct k8s_resource *r,
                     const char *ns, const struct k8s_list_opts *o, struct k8s_status *st)
{
    prep_init(p, "GET");
    p->rq.idempotent = K8S_IDEMPOTENT;
    int rc = prep_path(p, c, r, ns, NULL, NULL, st);
    if (rc || !o)
        return rc;
    char lim[32];
    snprintf(lim, sizeof lim, "%ld", o->limit);
    if (k8s_query_add(&p->path, "labelSelector", o->label_selector) ||
        k8s_query_add(&p->path, "fieldSelector", o->field_selector) ||
        k8s_query_add(&p->path, "limit", o->limit > 0 ? lim : NULL) ||
        k8s_query_add(&p->path, "continue", o->continue_token) ||
        k8s_query_add(&p->path, "resourceVersion", o->resource_version) ||
        k8s_query_add(&p->path, "resourceVersionMatch", o->resource_version_match))
        return k8s__status_local(st, -E2BIG, "list %s: query too long", r->plural);
    return 0;
}

static int create_prep(struct prep *p, struct k8s_client *c, const struct k8s_resource *r,
                       const char *ns, json_t *obj, struct k8s_status *st)
{
    prep_init(p, "POST");
    int rc = prep_path(p, c, r, ns, NULL, NULL, st);
    return rc ? rc : prep_body(p, obj, st);
}

static const char *propagation_str(enum k8s_propagation p)
{
    switch (p) {
    case K8S_PROPAGATE_BACKGROUND:
        return "Background";
    case K8S_PROPAGATE_FOREGROUND:
        return "Foreground";
    case K8S_PROPAGATE_ORPHAN:
        return "Orphan";
    default:
        return NULL;
    }
}

static int delete_prep(struct prep *p, struct k8s_client *c, const struct k8s_resource *r,
                       const char *ns, const char *name, const struct k8s_delete_opts *o,
                       struct k8s_status *st)
{
    prep_init(p, "DELETE");
    if (!name)
        return k8s__status_local(st, -EINVAL, "delete %s: a name is required", r->plural);
    int rc = prep_path(p, c, r, ns, name, NULL, st);
    if (rc || !o)
        return rc;
    json_t *d = json_pack("{s:s,s:s}", "apiVersion", "v1", "kind", "DeleteOptions");
    json_t *pre = json_object();
    const char *prop = propagation_str(o->propagation);
    if (!d || !pre) {
        json_decref(d);
        json_decref(pre);
        return k8s__status_local(st, -ENOMEM, "out of memory");
    }
    if (prop)
        json_object_set_new(d, "propagationPolicy", json_string(prop));
    if (o->has_grace_period)
        json_object_set_new(d, "gracePeriodSeconds", json_integer(o->grace_period_s));
    if (o->precondition_uid)
        json_object_set_new(pre, "uid", json_string(o->precondition_uid));
    if (o->precondition_resource_version)
        json_object_set_new(pre, "resourceVersion", json_string(o->precondition_resource_version));
    if (json_object_size(pre)) {
        json_object_set(d, "preconditions", pre);
        p->rq.idempotent = K8S_IDEMPOTENT;
    }
    json_decref(pre);
    rc = prep_body(p, d, st);
    json_decref(d);
    return rc;
}

static int patch_prep(struct prep *p, struct k8s_client *c, const struct k8s_resource *r,
                      const char *ns, const char *name, json_t *patch,
                      const struct k8s_patch_opts *o, struct k8s_status *st)
{
    static const char *const types[] = {"application/merge-patch+json",
                                        "application/json-patch+json",
                                        "application/strategic-merge-patch+json"};
    prep_init(p, "PATCH");
    enum k8s_patch_type t = o ? o->type : K8S_PATCH_MERGE;
    if ((unsigned)t > K8S_PATCH_STRATEGIC)
        return k8s__status_local(st, -EINVAL, "patch %s: unknown patch type %d", r->plural, t);
    if (!name)
        return k8s__status_local(st, -EINVAL, "patch %s: a name is required", r->plural);
    if (t == K8S_PATCH_JSON ? !json_is_array(patch) : !json_is_object(patch))
        return k8s__status_local(st, -EINVAL, "patch %s/%s: a %s patch must be a JSON %s",
                                 r->plural, name, t == K8S_PATCH_JSON ? "JSON" : "merge",
                                 t == K8S_PATCH_JSON ? "array" : "object");
    p->rq.content_type = types[t];
    int rc = prep_path(p, c, r, ns, name, o ? o->subresource : NULL, st);
    if (!rc && o && o->field_manager && k8s_query_add(&p->path, "fieldManager", o->field_manager))
        rc = k8s__status_local(st, -E2BIG, "patch: query too long");
    return rc ? rc : prep_body(p, patch, st);
}

static int apply_prep(struct prep *p, struct k8s_client *c, const struct k8s_resource *r,
                      const char *ns, json_t *obj, const struct k8s_apply_opts *o,
                      struct k8s_status *st)
{
    prep_init(p, "PATCH");
    p->rq.content_type = "application/apply-patch+yaml";
    p->rq.idempotent = K8S_IDEMPOTENT;
    const char *name = k8s_obj_name(obj);
    if (!o || !o->field_manager || !*o->field_manager)
        return k8s__status_local(st, -EINVAL, "apply %s: a field manager is required", r->plural);
    if (!name || !json_is_string(json_object_get(obj, "apiVersion")) ||
        !json_is_string(json_object_get(obj, "kind")))
        return k8s__status_local(st, -EINVAL,
                                 "apply %s: the object needs apiVersion, kind and metadata.name",
                                 r->plural);
    if (k8s_obj_resource_version(obj))
        return k8s__status_local(st, -EINVAL,
                                 "apply %s/%s: remove metadata.resourceVersion from the applied "
                                 "object (it would become a precondition and cause 409s)",
                                 r->plural, name);
    int rc = prep_path(p, c, r, ns, name, o->subresource, st);
    if (!rc && (k8s_query_add(&p->path, "fieldManager", o->field_manager) ||
                k8s_query_add(&p->path, "force", o->force ? "true" : NULL)))
        rc = k8s__status_local(st, -E2BIG, "apply: query too long");
    return rc ? rc : prep_body(p, obj, st);
}

/* Async forms report preparation errors only through the return code; the
 * reason goes to the log, as there is no status to fill. */
static int async_fail(struct prep *p, struct k8s_status *st, int rc)
{
    tkm_warn("k8s: %s", st->message ? st->message : strerror(-rc));
    k8s_status_release(st);
    prep_release(p);
    return rc;
}

#define ASYNC_BODY(prep_call)                                                                      \
    struct prep p;                                                                                 \
    struct k8s_status st = K8S_STATUS_INIT;                                                        \
    int rc = (prep_call);                                                                          \
    if (rc)                                                                                        \
        return async_fail(&p, &st, rc);                                                            \
    rc = prep_send(&p, c, cb, data, &st);                                                          \
    if (rc)                                                                                        \
        return async_fail(&p, &st, rc);                                                            \
    return 0

int k8s_get_async(struct k8s_client *c, const struct k8s_resource *r, const char *ns,
                  const char *name, const char *subresource, k8s_result_cb cb, void *data)
{
    ASYNC_BODY(get_prep(&p, c, r, ns, name, subresource, &st));
}

int k8s_create_async(struct k8s_client *c, const struct k8s_resource *r, const char *ns,
                     json_t *obj, k8s_result_cb cb, void *data)
{
    ASYNC_BODY(create_prep(&p, c, r, ns, obj, &st));
}

int k8s_delete_async(struct k8s_client *c, const struct k8s_resource *r, const char *ns,
                     const char *name, const struct k8s_delete_opts *o, k8s_result_cb cb,
                     void *data)
{
    ASYNC_BODY(delete_prep(&p, c, r, ns, name, o, &st));
}

int k8s_patch_async(struct k8s_client *c, const struct k8s_resource *r, const char *ns,
                    const char *name, json_t *patch, const struct k8s_patch_opts *o,
                    k8s_result_cb cb, void *data)
{
    ASYNC_BODY(patch_prep(&p, c, r, ns, name, patch, o, &st));
}

int k8s_apply_async(struct k8s_client *c, const struct k8s_resource *r, const char *ns, json_t *obj,
                    const struct k8s_apply_opts *o, k8s_result_cb cb, void *data)
{
    ASYNC_BODY(apply_prep(&p, c, r, ns, obj, o, &st));
}

/* ---- waiting for one verb (CLIs, tests) ----------------------------------------------------- */

void k8s_sync_cb(int rc, json_t *obj, const struct k8s_status *st, void *data)
{
    struct k8s_sync *s = data;
    s->done = 1;
    s->rc = rc;
    if (rc == 0) {
        s->obj = json_incref(obj);
    } else if (s->st) {
        /* Move the report: the request frees its own copy after we return. */
        struct k8s_status *src = (struct k8s_status *)st;
        k8s_status_release(s->st);
        *s->st = *src;
        k8s_status_init(src);
    }
}

int k8s_sync_wait(struct k8s_client *c, int rc, struct k8s_sync *s, json_t **out)
{
    if (out)
        *out = NULL;
    if (rc)
        return rc;
    while (!s->done)
        uv_run(k8s_client_loop(c), UV_RUN_ONCE);
    if (out)
        *out = s->obj;
    else
        json_decref(s->obj);
    return s->rc;
}

int k8s_list(struct k8s_client *c, const struct k8s_resource *r, const char *ns,
             const struct k8s_list_opts *o, json_t **out, struct k8s_status *st)
{
    struct prep p;
    struct k8s_status local = K8S_STATUS_INIT;
    struct k8s_sync s = {.st = st};
    int rc = list_prep(&p, c, r, ns, o, st ? st : &local);
    if (rc == 0)
        rc = prep_send(&p, c, k8s_sync_cb, &s, st ? st : &local);
    else
        prep_release(&p);
    k8s_status_release(&local);
    return k8s_sync_wait(c, rc, &s, out);
}
