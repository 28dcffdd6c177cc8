/*
 * strmap-int.h - a string-keyed hash map of pointers (open addressing,
 * linear probing, backward-shift deletion: no tombstones).
 *
 * Keys are borrowed: each key must stay valid and unchanged while its entry
 * is in the map (the informer store and the work queue keep the key inside
 * the value, so an entry costs 24 bytes of table, not a copy of the key).
 * Values are borrowed too; the map never frees them. Not thread-safe.
 */
#ifndef K8S_STRMAP_INT_H
#define K8S_STRMAP_INT_H

#include <stddef.h>
#include <stdint.h>

struct k8s__strmap_slot {
    const char *key; /* NULL = empty */
    void *val;
    uint64_t hash;
};

struct k8s__strmap {
    struct k8s__strmap_slot *slots;
    size_t cap; /* power of two, or 0 */
    size_t count;
};

#define K8S__STRMAP_INIT                                                                           \
    {                                                                                              \
        0                                                                                          \
    }

/* Frees the table (not keys or values) and empties the map. */
void k8s__strmap_release(struct k8s__strmap *m);
void *k8s__strmap_get(const struct k8s__strmap *m, const char *key);
/* Inserts or replaces. *old (optional) gets the replaced value or NULL.
 * 0 or -ENOMEM (the map is unchanged then). */
int k8s__strmap_put(struct k8s__strmap *m, const char *key, void *val, void **old);
/* Removes key; returns its value, or NULL when absent. */
void *k8s__strmap_del(struct k8s__strmap *m, const char *key);
/* Iteration: size_t pos = 0; while (k8s__strmap_next(m, &pos, &k, &v)) ...
 * The map must not be modified during iteration. */
int k8s__strmap_next(const struct k8s__strmap *m, size_t *pos, const char **key, void **val);
/* Bytes used by the table (for memory accounting). */
size_t k8s__strmap_bytes(const struct k8s__strmap *m);

#endif
