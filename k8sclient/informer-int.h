/*
 * informer-int.h - the informer's store (store.c): objects keyed by
 * "ns/name", one allocation each, and the relist replace with delete
 * synthesis. Unit-tested without an apiserver.
 */
#ifndef K8S_INFORMER_INT_H
#define K8S_INFORMER_INT_H

#include <stddef.h>

#include <k8s/informer.h>
#include <k8s/watch.h>

#include <tkm/strmap.h>

struct k8s__store {
    struct tkm_strmap map; /* key -> struct k8s_obj * (owned by the store) */
    size_t obj_bytes;      /* sum of the objects' allocation sizes */
};

/* Builds an object from a decoded event/item (its raw bytes and metadata);
 * strip_managed_fields: without metadata.managedFields (ev->raw must then be
 * validated JSON, as every decoded event's is). *out is owned:
 * k8s_obj_free(). 0, -EINVAL (no metadata.name), -ENOMEM. */
int k8s__obj_new(const struct k8s_watch_event *ev, int strip_managed_fields, struct k8s_obj **out);
/* Builds an object from parts (raw need not be NUL-terminated), with raw's
 * bytes [cut, cut + cut_len) left out of json (cut_len 0: all of raw).
 * -EINVAL also for a span outside raw. */
int k8s__obj_make_cut(const char *ns, const char *name, const char *rv, const char *uid,
                      const char *raw, size_t raw_len, size_t cut, size_t cut_len,
                      struct k8s_obj **out);
size_t k8s__obj_size(const struct k8s_obj *o);

void k8s__store_init(struct k8s__store *s);
/* Frees every object and the table. */
void k8s__store_release(struct k8s__store *s);
/* Inserts obj (taken, also on failure). *old (owned by the caller, may be
 * NULL) gets the object it replaced. 0 or -ENOMEM. */
int k8s__store_put_take(struct k8s__store *s, struct k8s_obj *obj, struct k8s_obj **old);
/* Removes key; returns the object (owned by the caller) or NULL. */
struct k8s_obj *k8s__store_remove(struct k8s__store *s, const char *key);
const struct k8s_obj *k8s__store_get(const struct k8s__store *s, const char *key);
size_t k8s__store_count(const struct k8s__store *s);

struct k8s__store_delta {
    void (*add)(const struct k8s_obj *obj, void *data);
    void (*update)(const struct k8s_obj *old, const struct k8s_obj *cur, void *data);
    void (*del)(const struct k8s_obj *obj, int final_state_unknown, void *data);
};

/* Replaces s's contents with fresh's (fresh is left empty), then calls add
 * for new keys, update for keys whose resourceVersion differs, del(obj, 1)
 * for keys missing from fresh. Callbacks run with s already holding the new
 * contents (a lookup sees them); the replaced objects they receive stay
 * valid until the last callback has returned. The callbacks must not modify
 * s. */
void k8s__store_replace(struct k8s__store *s, struct k8s__store *fresh,
                        const struct k8s__store_delta *d, void *data);

#endif
