/*
 * strmap.h - a string-keyed hash map of pointers (open addressing,
 * linear probing, backward-shift deletion: no tombstones).
 *
 * Keys are borrowed: each key must stay valid and unchanged while its entry
 * is in the map (the informer store and the work queue keep the key inside
 * the value, so an entry costs 24 bytes of table, not a copy of the key).
 * Values are borrowed too; the map never frees them. Not thread-safe.
 */
#ifndef TKM_STRMAP_H
#define TKM_STRMAP_H

#include <stddef.h>
#include <stdint.h>

struct tkm_strmap_slot {
    const char *key; /* NULL = empty */
    void *val;
    uint64_t hash;
};

struct tkm_strmap {
    struct tkm_strmap_slot *slots;
    size_t cap; /* power of two, or 0 */
    size_t count;
};

#define TKM_STRMAP_INIT                                                                            \
    {                                                                                              \
        0                                                                                          \
    }

/* Frees the table (not keys or values) and empties the map. */
void tkm_strmap_release(struct tkm_strmap *m);
void *tkm_strmap_get(const struct tkm_strmap *m, const char *key);
/* Inserts or replaces. *old (optional) gets the replaced value or NULL.
 * 0 or -ENOMEM (the map is unchanged then). */
int tkm_strmap_put(struct tkm_strmap *m, const char *key, void *val, void **old);
/* Removes key; returns its value, or NULL when absent. */
void *tkm_strmap_del(struct tkm_strmap *m, const char *key);
/* Iteration: size_t pos = 0; while (tkm_strmap_next(m, &pos, &k, &v)) ...
 * The map must not be modified during iteration. */
int tkm_strmap_next(const struct tkm_strmap *m, size_t *pos, const char **key, void **val);
/* Bytes used by the table (for memory accounting). */
size_t tkm_strmap_bytes(const struct tkm_strmap *m);

#endif
