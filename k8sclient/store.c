/*
 * store.c - the informer store: struct k8s_obj (one allocation per object:
 * the header, then key, namespace, name, resourceVersion, uid and the JSON
 * text), the key -> object map and the relist replace. See informer-int.h.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "informer-int.h"
#include "watch-int.h"

static char *put_str(char **p, const char *s, size_t n)
{
    char *start = *p;
    memcpy(start, s, n);
    start[n] = '\0';
    *p += n + 1;
    return start;
}

int k8s__obj_make_cut(const char *ns, const char *name, const char *rv, const char *uid,
                      const char *raw, size_t raw_len, size_t cut, size_t cut_len,
                      struct k8s_obj **out)
{
    *out = NULL;
    if (cut > raw_len || cut_len > raw_len - cut)
        return -EINVAL;
    ns = ns ? ns : "";
    rv = rv ? rv : "";
    uid = uid ? uid : "";
    if (!name || !*name)
        return -EINVAL;
    size_t lns = strlen(ns), lname = strlen(name), lrv = strlen(rv), luid = strlen(uid);
    size_t lkey = lns ? lns + 1 + lname : 0; /* cluster-scoped: key is name */
    size_t total = sizeof(struct k8s_obj) + (lkey ? lkey + 1 : 0) + lns + 1 + lname + 1 + lrv + 1 +
                   luid + 1 + raw_len - cut_len + 1;
    struct k8s_obj *o = malloc(total);
    if (!o)
        return -ENOMEM;
    char *p = (char *)(o + 1);
    if (lkey) {
        char *k = p;
        memcpy(k, ns, lns);
        k[lns] = '/';
        memcpy(k + lns + 1, name, lname);
        k[lkey] = '\0';
        p += lkey + 1;
        o->key = k;
    }
    o->ns = put_str(&p, ns, lns);
    o->name = put_str(&p, name, lname);
    if (!lkey)
        o->key = o->name;
    o->resource_version = put_str(&p, rv, lrv);
    o->uid = put_str(&p, uid, luid);
    /* the JSON text less [cut, cut + cut_len) */
    memcpy(p, raw, cut);
    memcpy(p + cut, raw + cut + cut_len, raw_len - cut - cut_len);
    p[raw_len - cut_len] = '\0';
    o->json = p;
    o->json_len = raw_len - cut_len;
    *out = o;
    return 0;
}

int k8s__obj_new(const struct k8s_watch_event *ev, int strip_managed_fields, struct k8s_obj **out)
{
    size_t cut = 0, cut_len = 0;
    if (strip_managed_fields)
        k8s__managed_fields_span(ev->raw, ev->raw_len, &cut, &cut_len);
    return k8s__obj_make_cut(ev->ns, ev->name, ev->resource_version, ev->uid, ev->raw, ev->raw_len,
                             cut, cut_len, out);
}

size_t k8s__obj_size(const struct k8s_obj *o)
{
    size_t n = sizeof *o + strlen(o->ns) + 1 + strlen(o->name) + 1 + strlen(o->resource_version) +
               1 + strlen(o->uid) + 1 + o->json_len + 1;
    if (o->key != o->name)
        n += strlen(o->key) + 1;
    return n;
}

void k8s_obj_free(struct k8s_obj *obj)
{
    free(obj);
}

int k8s_obj_parse(const struct k8s_obj *obj, json_t **out, struct tkm_err *err)
{
    json_error_t je;
    *out = json_loadb(obj->json, obj->json_len, JSON_REJECT_DUPLICATES, &je);
    if (!*out)
        return tkm_err_set(err, -EPROTO, "object %s: invalid JSON: %s", obj->key, je.text);
    return 0;
}

void k8s__store_init(struct k8s__store *s)
{
    memset(s, 0, sizeof *s);
}

void k8s__store_release(struct k8s__store *s)
{
    size_t pos = 0;
    void *v;
    while (tkm_strmap_next(&s->map, &pos, NULL, &v))
        free(v);
    tkm_strmap_release(&s->map);
    s->obj_bytes = 0;
}

int k8s__store_put_take(struct k8s__store *s, struct k8s_obj *obj, struct k8s_obj **old)
{
    void *prev = NULL;
    if (old)
        *old = NULL;
    int rc = tkm_strmap_put(&s->map, obj->key, obj, &prev);
    if (rc < 0) {
        free(obj);
        return rc;
    }
    s->obj_bytes += k8s__obj_size(obj);
    if (prev) {
        s->obj_bytes -= k8s__obj_size(prev);
        if (old)
            *old = prev;
        else
            free(prev);
    }
    return 0;
}

struct k8s_obj *k8s__store_remove(struct k8s__store *s, const char *key)
{
    struct k8s_obj *o = tkm_strmap_del(&s->map, key);
    if (o)
        s->obj_bytes -= k8s__obj_size(o);
    return o;
}

const struct k8s_obj *k8s__store_get(const struct k8s__store *s, const char *key)
{
    return tkm_strmap_get(&s->map, key);
}

size_t k8s__store_count(const struct k8s__store *s)
{
    return s->map.count;
}

void k8s__store_replace(struct k8s__store *s, struct k8s__store *fresh,
                        const struct k8s__store_delta *d, void *data)
{
    /* Swap first, so callbacks that read the store see the new contents;
     * the old objects stay alive until every callback has run. */
    struct k8s__store old = *s;
    *s = *fresh;
    k8s__store_init(fresh);
    size_t pos = 0;
    void *v;
    while (tkm_strmap_next(&s->map, &pos, NULL, &v)) {
        const struct k8s_obj *cur = v, *prev = tkm_strmap_get(&old.map, cur->key);
        if (!prev) {
            if (d && d->add)
                d->add(cur, data);
        } else if (strcmp(prev->resource_version, cur->resource_version) != 0) {
            if (d && d->update)
                d->update(prev, cur, data);
        }
    }
    pos = 0;
    while (tkm_strmap_next(&old.map, &pos, NULL, &v)) {
        const struct k8s_obj *prev = v;
        if (!tkm_strmap_get(&s->map, prev->key) && d && d->del)
            d->del(prev, 1, data);
    }
    k8s__store_release(&old);
}
