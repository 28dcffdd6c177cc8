/*
 * strmap.c - string-keyed hash map, see <tkm/strmap.h>.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <tkm/strmap.h>

static uint64_t hash_str(const char *s)
{
    uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a */
    for (; *s; s++) {
        h ^= (unsigned char)*s;
        h *= 0x100000001b3ull;
    }
    return h ^ (h >> 29);
}

void tkm_strmap_release(struct tkm_strmap *m)
{
    if (!m)
        return;
    free(m->slots);
    m->slots = NULL;
    m->cap = 0;
    m->count = 0;
}

static struct tkm_strmap_slot *find(const struct tkm_strmap *m, const char *key, uint64_t h)
{
    if (!m->cap)
        return NULL;
    size_t mask = m->cap - 1;
    for (size_t i = h & mask;; i = (i + 1) & mask) {
        struct tkm_strmap_slot *s = &m->slots[i];
        if (!s->key)
            return NULL;
        if (s->hash == h && strcmp(s->key, key) == 0)
            return s;
    }
}

void *tkm_strmap_get(const struct tkm_strmap *m, const char *key)
{
    struct tkm_strmap_slot *s = find(m, key, hash_str(key));
    return s ? s->val : NULL;
}

static void insert_slot(struct tkm_strmap_slot *slots, size_t cap, const char *key, void *val,
                        uint64_t h)
{
    size_t mask = cap - 1;
    size_t i = h & mask;
    while (slots[i].key)
        i = (i + 1) & mask;
    slots[i].key = key;
    slots[i].val = val;
    slots[i].hash = h;
}

static int grow(struct tkm_strmap *m)
{
    size_t ncap = m->cap ? m->cap * 2 : 16;
    struct tkm_strmap_slot *ns = calloc(ncap, sizeof *ns);
    if (!ns)
        return -ENOMEM;
    for (size_t i = 0; i < m->cap; i++) {
        if (m->slots[i].key)
            insert_slot(ns, ncap, m->slots[i].key, m->slots[i].val, m->slots[i].hash);
    }
    free(m->slots);
    m->slots = ns;
    m->cap = ncap;
    return 0;
}

int tkm_strmap_put(struct tkm_strmap *m, const char *key, void *val, void **old)
{
    uint64_t h = hash_str(key);
    struct tkm_strmap_slot *s = find(m, key, h);
    if (s) {
        if (old)
            *old = s->val;
        s->key = key;
        s->val = val;
        return 0;
    }
    if ((m->count + 1) * 4 > m->cap * 3) {
        int rc = grow(m);
        if (rc < 0)
            return rc;
    }
    insert_slot(m->slots, m->cap, key, val, h);
    m->count++;
    if (old)
        *old = NULL;
    return 0;
}

void *tkm_strmap_del(struct tkm_strmap *m, const char *key)
{
    struct tkm_strmap_slot *s = find(m, key, hash_str(key));
    if (!s)
        return NULL;
    void *val = s->val;
    size_t mask = m->cap - 1;
    size_t i = (size_t)(s - m->slots);
    /* Backward-shift: move later entries of the probe run into the hole. */
    for (size_t j = (i + 1) & mask; m->slots[j].key; j = (j + 1) & mask) {
        size_t home = m->slots[j].hash & mask;
        /* Entry j may move to i only if its home is not in (i, j]. */
        int between = i <= j ? (home > i && home <= j) : (home > i || home <= j);
        if (between)
            continue;
        m->slots[i] = m->slots[j];
        i = j;
    }
    m->slots[i].key = NULL;
    m->slots[i].val = NULL;
    m->count--;
    return val;
}

int tkm_strmap_next(const struct tkm_strmap *m, size_t *pos, const char **key, void **val)
{
    for (; *pos < m->cap; (*pos)++) {
        if (m->slots[*pos].key) {
            if (key)
                *key = m->slots[*pos].key;
            if (val)
                *val = m->slots[*pos].val;
            (*pos)++;
            return 1;
        }
    }
    return 0;
}

size_t tkm_strmap_bytes(const struct tkm_strmap *m)
{
    return m->cap * sizeof(struct tkm_strmap_slot);
}
