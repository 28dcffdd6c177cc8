/*
 * ctrl_map.c - a string-keyed hash map with chaining (FNV-1a, power-of-two
 * table, grows at load 1). Values are the caller's; keys are copied into the
 * entry itself (one allocation per entry).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "ctrl-int.h"

static uint64_t hash_str(const char *s)
{
    uint64_t h = 1469598103934665603ULL;
    for (; *s; s++) {
        h ^= (unsigned char)*s;
        h *= 1099511628211ULL;
    }
    return h;
}

static struct ctrl_map_ent *find(const struct ctrl_map *m, const char *key, uint64_t h)
{
    if (!m->cap)
        return NULL;
    for (struct ctrl_map_ent *e = m->tab[h & (m->cap - 1)]; e; e = e->next)
        if (e->hash == h && strcmp(e->key, key) == 0)
            return e;
    return NULL;
}

void *ctrl_map_get(const struct ctrl_map *m, const char *key)
{
    struct ctrl_map_ent *e = find(m, key, hash_str(key));
    return e ? e->val : NULL;
}

static int grow(struct ctrl_map *m)
{
    size_t ncap = m->cap ? m->cap * 2 : 16;
    struct ctrl_map_ent **nt = calloc(ncap, sizeof *nt);
    if (!nt)
        return -ENOMEM;
    for (size_t i = 0; i < m->cap; i++) {
        struct ctrl_map_ent *e = m->tab[i], *next;
        for (; e; e = next) {
            next = e->next;
            e->next = nt[e->hash & (ncap - 1)];
            nt[e->hash & (ncap - 1)] = e;
        }
    }
    free(m->tab);
    m->tab = nt;
    m->cap = ncap;
    return 0;
}

int ctrl_map_put(struct ctrl_map *m, const char *key, void *val, const char **slot_key)
{
    uint64_t h = hash_str(key);
    struct ctrl_map_ent *e = find(m, key, h);
    if (e) {
        e->val = val;
        if (slot_key)
            *slot_key = e->key;
        return 0;
    }
    if (m->n >= m->cap && grow(m) < 0)
        return -ENOMEM;
    size_t kl = strlen(key);
    e = malloc(sizeof *e + kl + 1);
    if (!e)
        return -ENOMEM;
    memcpy(e->key, key, kl + 1);
    e->hash = h;
    e->val = val;
    e->next = m->tab[h & (m->cap - 1)];
    m->tab[h & (m->cap - 1)] = e;
    m->n++;
    if (slot_key)
        *slot_key = e->key;
    return 0;
}

void *ctrl_map_del(struct ctrl_map *m, const char *key)
{
    if (!m->cap)
        return NULL;
    uint64_t h = hash_str(key);
    struct ctrl_map_ent **pp = &m->tab[h & (m->cap - 1)];
    for (; *pp; pp = &(*pp)->next) {
        struct ctrl_map_ent *e = *pp;
        if (e->hash == h && strcmp(e->key, key) == 0) {
            void *v = e->val;
            *pp = e->next;
            free(e);
            m->n--;
            return v;
        }
    }
    return NULL;
}

int ctrl_map_foreach(const struct ctrl_map *m, int (*fn)(const char *key, void *val, void *data),
                     void *data)
{
    for (size_t i = 0; i < m->cap; i++)
        for (struct ctrl_map_ent *e = m->tab[i]; e; e = e->next) {
            int rc = fn(e->key, e->val, data);
            if (rc)
                return rc;
        }
    return 0;
}

void ctrl_map_release(struct ctrl_map *m)
{
    for (size_t i = 0; i < m->cap; i++) {
        struct ctrl_map_ent *e = m->tab[i], *next;
        for (; e; e = next) {
            next = e->next;
            free(e);
        }
    }
    free(m->tab);
    memset(m, 0, sizeof *m);
}
