/*
 * informer.c - a k8s_watch feeding a store (store.c). See k8s/informer.h.
 *
 * During a list the items go into a fresh store; at list_end it replaces the
 * live one (k8s__store_replace synthesizes adds, updates and deletes). A
 * failed list (list_abort) throws the fresh store away, so a half-received
 * list never reaches the callbacks.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <tkm/bug.h>
#include <tkm/log.h>

#include "informer-int.h"

struct k8s_informer {
    struct k8s_informer_handler h;
    void *data;
    struct k8s_watch *w;
    struct k8s__store store, fresh;
    int synced, in_list;
    int strip_mf; /* strip metadata.managedFields from stored objects */
    int stopping;
    void (*closed_cb)(void *data);
    void *closed_data;
};

static void d_add(const struct k8s_obj *o, void *data)
{
    struct k8s_informer *inf = data;
    if (inf->h.on_add && !inf->stopping)
        inf->h.on_add(o, inf->data);
}

static void d_update(const struct k8s_obj *old, const struct k8s_obj *cur, void *data)
{
    struct k8s_informer *inf = data;
    if (inf->h.on_update && !inf->stopping)
        inf->h.on_update(old, cur, inf->data);
}

static void d_del(const struct k8s_obj *o, int unknown, void *data)
{
    struct k8s_informer *inf = data;
    if (inf->h.on_delete && !inf->stopping)
        inf->h.on_delete(o, unknown, inf->data);
}

static const struct k8s__store_delta delta = {d_add, d_update, d_del};

static void on_list_begin(void *data)
{
    struct k8s_informer *inf = data;
    k8s__store_release(&inf->fresh);
    inf->in_list = 1;
}

static int on_list_item(const struct k8s_watch_event *ev, void *data)
{
    struct k8s_informer *inf = data;
    struct k8s_obj *o = NULL;
    int rc = k8s__obj_new(ev, inf->strip_mf, &o);
    if (rc == -EINVAL) {
        tkm_warn("informer: list item without metadata.name ignored");
        return 0;
    }
    if (rc < 0 || (rc = k8s__store_put_take(&inf->fresh, o, NULL)) < 0) {
        tkm_err("informer: out of memory while listing");
        return rc;
    }
    return 0;
}

static int on_list_end(const char *rv, void *data)
{
    struct k8s_informer *inf = data;
    (void)rv;
    inf->in_list = 0;
    k8s__store_replace(&inf->store, &inf->fresh, &delta, inf);
    if (!inf->synced && !inf->stopping) {
        inf->synced = 1;
        if (inf->h.on_synced)
            inf->h.on_synced(inf->data);
    }
    return 0;
}

static void on_list_abort(void *data)
{
    struct k8s_informer *inf = data;
    inf->in_list = 0;
    k8s__store_release(&inf->fresh);
}

static int apply_upsert(struct k8s_informer *inf, struct k8s_obj *o)
{
    struct k8s_obj *old = NULL;
    const char *key = o->key;
    int rc = k8s__store_put_take(&inf->store, o, &old);
    if (rc < 0)
        return rc;
    const struct k8s_obj *cur = k8s__store_get(&inf->store, key);
    if (old) {
        d_update(old, cur, inf);
        k8s_obj_free(old);
    } else {
        d_add(cur, inf);
    }
    return 0;
}

static void on_watch_error(int rc, const char *msg, uint64_t delay_ms, void *data)
{
    struct k8s_informer *inf = data;
    if (inf->h.on_error && !inf->stopping)
        inf->h.on_error(rc, msg, delay_ms, inf->data);
}

static int on_event(const struct k8s_watch_event *ev, void *data)
{
    struct k8s_informer *inf = data;
    struct k8s_obj *o = NULL;
    int rc = k8s__obj_new(ev, inf->strip_mf, &o);
    if (rc == -EINVAL) {
        tkm_warn("informer: %s event without metadata.name ignored", k8s_watch_type_str(ev->type));
        return 0;
    }
    if (rc < 0)
        return rc;
    if (ev->type == K8S_WATCH_DELETED) {
        struct k8s_obj *old = k8s__store_remove(&inf->store, o->key);
        d_del(o, 0, inf);
        k8s_obj_free(old);
        k8s_obj_free(o);
        return 0;
    }
    return apply_upsert(inf, o);
}

int k8s_informer_start(struct k8s_client *c, const struct k8s_informer_opts *opts,
                       struct k8s_informer **out, struct tkm_err *err)
{
    *out = NULL;
    if (!c || !opts)
        return tkm_err_set(err, -EINVAL, "informer: client and options are required");
    struct k8s_informer *inf = calloc(1, sizeof *inf);
    if (!inf)
        return tkm_err_set(err, -ENOMEM, "informer: out of memory");
    inf->h = opts->handler;
    inf->data = opts->data;
    inf->strip_mf = opts->strip_managed_fields;
    k8s__store_init(&inf->store);
    k8s__store_init(&inf->fresh);
    static const struct k8s_watch_handler wh = {
        .list_begin = on_list_begin,
        .list_item = on_list_item,
        .list_end = on_list_end,
        .list_abort = on_list_abort,
        .event = on_event,
        .error = on_watch_error,
    };
    int rc = k8s_watch_start(c, &opts->watch, &wh, inf, &inf->w, err);
    if (rc < 0) {
        free(inf);
        return rc;
    }
    *out = inf;
    return 0;
}

static void on_watch_closed(void *data)
{
    struct k8s_informer *inf = data;
    void (*cb)(void *) = inf->closed_cb;
    void *d = inf->closed_data;
    k8s__store_release(&inf->store);
    k8s__store_release(&inf->fresh);
    free(inf);
    if (cb)
        cb(d);
}

void k8s_informer_close(struct k8s_informer *inf, void (*closed_cb)(void *data), void *data)
{
    if (!inf || TKM_BUG(inf->stopping)) /* a second stop would wait forever */
        return;
    inf->stopping = 1;
    inf->closed_cb = closed_cb;
    inf->closed_data = data;
    k8s_watch_close(inf->w, on_watch_closed, inf);
}

int k8s_informer_has_synced(const struct k8s_informer *inf)
{
    return inf->synced;
}

const struct k8s_obj *k8s_informer_get_key(const struct k8s_informer *inf, const char *key)
{
    return k8s__store_get(&inf->store, key);
}

size_t k8s_informer_count(const struct k8s_informer *inf)
{
    return k8s__store_count(&inf->store);
}

int k8s_informer_foreach(const struct k8s_informer *inf,
                         int (*fn)(const struct k8s_obj *obj, void *data), void *data)
{
    size_t pos = 0;
    void *v;
    while (tkm_strmap_next(&inf->store.map, &pos, NULL, &v)) {
        int rc = fn(v, data);
        if (rc)
            return rc;
    }
    return 0;
}

size_t k8s_informer_bytes(const struct k8s_informer *inf)
{
    return inf->store.obj_bytes + tkm_strmap_bytes(&inf->store.map);
}

const struct k8s_watch *k8s_informer_watch(const struct k8s_informer *inf)
{
    return inf->w;
}
