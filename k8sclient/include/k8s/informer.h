/*
 * k8s/informer.h - an in-memory cache of one resource kept current by a
 * k8s_watch (list + watch), with add/update/delete callbacks.
 *
 * Memory: the store keeps each object as its raw JSON bytes exactly as the
 * apiserver sent them, plus its key, resourceVersion and uid, in ONE
 * allocation (struct k8s_obj). No jansson tree is kept: a parsed tree costs
 * tens of bytes per JSON value, the raw bytes cost one. Callers that need
 * fields parse the bytes on demand with k8s_obj_parse() (or keep a compact
 * struct of their own, filled from the callbacks). The watch builds no tree
 * while listing or watching either (k8s/watch.h). With metadata_only the
 * server sends PartialObjectMetadata (for Nodes: a fraction of the size).
 *
 * Semantics (client-go's shared informer, minus the sharing):
 *   - The store is keyed by "namespace/name" ("name" for cluster-scoped).
 *   - The first list fills the store (on_add for each object), then
 *     k8s_informer_has_synced() turns 1 and on_synced runs once.
 *   - A relist (after 410 Gone) replaces the store: on_add for new keys,
 *     on_update for keys whose resourceVersion changed, and on_delete with
 *     final_state_unknown = 1 for keys that vanished (client-go's
 *     DeletedFinalStateUnknown): no delete is lost while the watch was broken.
 *   - Watch events: ADDED/MODIFIED -> on_add or on_update (by whether the key
 *     is in the store), DELETED -> on_delete with the object's final state.
 *
 * Ownership: every struct k8s_obj passed to a callback or returned by a
 * getter is borrowed. Objects in the store stay valid until the informer
 * next changes that key, i.e. until control returns to the loop; objects
 * passed to callbacks that are not in the store (old versions, deleted ones)
 * only until the callback returns.
 *
 * Lifecycle: k8s_informer_start() ... k8s_informer_close(inf, closed_cb,
 * data). Callback contract as in k8s/watch.h: never called from inside
 * start/stop; if start fails none is called; callbacks may call stop.
 */
#ifndef K8S_INFORMER_H
#define K8S_INFORMER_H

#include <stddef.h>
#include <stdint.h>
#include <jansson.h>

#include <tkm/err.h>
#include <k8s/client.h>
#include <k8s/watch.h>

struct k8s_informer;

/* One cached object. All strings are NUL-terminated and live in the same
 * allocation. json is the object's JSON text (json_len bytes). */
struct k8s_obj {
    const char *key; /* "ns/name" or "name" */
    const char *ns;  /* "" for cluster-scoped objects */
    const char *name;
    const char *resource_version;
    const char *uid;
    const char *json;
    size_t json_len;
};

/* Parses obj->json (duplicate keys rejected). *out is owned: json_decref().
 * 0 or -EPROTO with err. */
int k8s_obj_parse(const struct k8s_obj *obj, json_t **out, struct tkm_err *err);
/* Frees an object built by the informer's internals (tests). NULL is a no-op. */
void k8s_obj_free(struct k8s_obj *obj);

/* Callbacks; every member optional. */
struct k8s_informer_handler {
    void (*on_add)(const struct k8s_obj *obj, void *data);
    void (*on_update)(const struct k8s_obj *old, const struct k8s_obj *cur, void *data);
    /* final_state_unknown: the object vanished during a relist; obj is the
     * last state this informer knew. */
    void (*on_delete)(const struct k8s_obj *obj, int final_state_unknown, void *data);
    void (*on_synced)(void *data);
    /* The watch failed and backs off for delay_ms (msg borrowed): for logs. */
    void (*on_error)(int rc, const char *msg, uint64_t delay_ms, void *data);
};

struct k8s_informer_opts {
    struct k8s_watch_opts watch;         /* resource, namespace, selectors, tuning */
    struct k8s_informer_handler handler; /* copied */
    void *data;                          /* passed to every callback */
    /* 1: store objects without metadata.managedFields (client-go's
     * TransformStripManagedFields): for a small custom resource it is most
     * of the bytes. Only for callers that never read managedFields. */
    int strip_managed_fields;
};

/* Starts list+watch on c's loop. c must outlive the informer; opts are
 * copied. *out is owned: end with k8s_informer_close(). 0, -EINVAL, -ENOMEM. */
int k8s_informer_start(struct k8s_client *c, const struct k8s_informer_opts *opts,
                       struct k8s_informer **out, struct tkm_err *err);
/* Stops watching and frees the store and the informer from the loop;
 * closed_cb (optional) runs afterwards. NULL is a no-op. */
void k8s_informer_close(struct k8s_informer *inf, void (*closed_cb)(void *data), void *data);

/* 1 once the first list has been applied. */
int k8s_informer_has_synced(const struct k8s_informer *inf);
/* Borrowed object or NULL; key is "ns/name", or "name" for cluster-scoped kinds. */
const struct k8s_obj *k8s_informer_get_key(const struct k8s_informer *inf, const char *key);
size_t k8s_informer_count(const struct k8s_informer *inf);
/* Calls fn for every object (any order) until it returns non-zero, which is
 * then returned. fn must not stop the informer. */
int k8s_informer_foreach(const struct k8s_informer *inf,
                         int (*fn)(const struct k8s_obj *obj, void *data), void *data);
/* Bytes held by the store (objects + table), for metrics and the bench. */
size_t k8s_informer_bytes(const struct k8s_informer *inf);
/* The underlying watch (stats, resourceVersion); borrowed. */
const struct k8s_watch *k8s_informer_watch(const struct k8s_informer *inf);

#endif
