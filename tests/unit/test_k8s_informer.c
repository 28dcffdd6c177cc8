/* Unit tests for the informer store (k8sclient/store.c) and the string map
 * (k8sclient/strmap.c). */
#include "test.h"
#include "informer-int.h"
#include <tkm/strmap.h>

static struct k8s_obj *mk(const char *ns, const char *name, const char *rv)
{
    char json[256];
    struct k8s_obj *o = NULL;
    snprintf(json, sizeof json,
             "{\"metadata\":{\"namespace\":\"%s\",\"name\":\"%s\",\"resourceVersion\":\"%s\"}}", ns,
             name, rv);
    if (k8s__obj_make_cut(ns, name, rv, "uid", json, strlen(json), 0, 0, &o) < 0)
        return NULL;
    return o;
}

struct delta_log {
    const struct k8s__store *s; /* the store being replaced, if checked */
    int adds, updates, dels, unknown, saw_new;
    char last_del[64];
    char last_upd_old[16], last_upd_new[16];
};

static void d_add(const struct k8s_obj *o, void *data)
{
    struct delta_log *l = data;
    l->adds++;
    if (l->s && k8s__store_get(l->s, o->key) == o)
        l->saw_new++;
}

static void d_update(const struct k8s_obj *old, const struct k8s_obj *cur, void *data)
{
    struct delta_log *l = data;
    l->updates++;
    if (l->s && k8s__store_get(l->s, cur->key) == cur)
        l->saw_new++;
    snprintf(l->last_upd_old, sizeof l->last_upd_old, "%s", old->resource_version);
    snprintf(l->last_upd_new, sizeof l->last_upd_new, "%s", cur->resource_version);
}

static void d_del(const struct k8s_obj *o, int unknown, void *data)
{
    struct delta_log *l = data;
    l->dels++;
    l->unknown += unknown;
    snprintf(l->last_del, sizeof l->last_del, "%s", o->key);
}

TEST(obj_layout_and_keys)
{
    struct k8s_obj *o = mk("ns1", "cache-a", "42");
    ASSERT_NOT_NULL(o);
    ASSERT_STREQ(o->key, "ns1/cache-a");
    ASSERT_STREQ(o->ns, "ns1");
    ASSERT_STREQ(o->name, "cache-a");
    ASSERT_STREQ(o->resource_version, "42");
    ASSERT_STRCONTAINS(o->json, "\"name\":\"cache-a\"");
    ASSERT_EQ(o->json[o->json_len], '\0');
    json_t *j = NULL;
    ASSERT_OK(k8s_obj_parse(o, &j, NULL));
    ASSERT_STREQ(json_string_value(json_object_get(json_object_get(j, "metadata"), "name")),
                 "cache-a");
    json_decref(j);
    k8s_obj_free(o);

    /* Cluster-scoped: key is the name. */
    ASSERT_OK(k8s__obj_make_cut(NULL, "node-1", "1", NULL, "{}", 2, 0, 0, &o));
    ASSERT_STREQ(o->key, "node-1");
    ASSERT_STREQ(o->ns, "");
    k8s_obj_free(o);
    ASSERT_EQ(k8s__obj_make_cut("ns", "", "1", NULL, "{}", 2, 0, 0, &o), -EINVAL);
    ASSERT_NULL(o);
}

TEST(store_put_replace_remove)
{
    struct k8s__store s;
    struct k8s_obj *old = NULL;
    k8s__store_init(&s);
    ASSERT_OK(k8s__store_put_take(&s, mk("a", "x", "1"), &old));
    ASSERT_NULL(old);
    size_t bytes1 = s.obj_bytes;
    ASSERT(bytes1 > 0);
    ASSERT_OK(k8s__store_put_take(&s, mk("a", "x", "2"), &old));
    ASSERT_NOT_NULL(old);
    ASSERT_STREQ(old->resource_version, "1");
    k8s_obj_free(old);
    ASSERT_EQ(k8s__store_count(&s), 1);
    ASSERT_EQ(s.obj_bytes, bytes1);
    ASSERT_STREQ(k8s__store_get(&s, "a/x")->resource_version, "2");
    struct k8s_obj *r = k8s__store_remove(&s, "a/x");
    ASSERT_NOT_NULL(r);
    k8s_obj_free(r);
    ASSERT_NULL(k8s__store_remove(&s, "a/x"));
    ASSERT_EQ(k8s__store_count(&s), 0);
    ASSERT_EQ(s.obj_bytes, 0);
    k8s__store_release(&s);
}

TEST(replace_synthesizes_adds_updates_and_deletes)
{
    struct k8s__store s, fresh;
    struct delta_log l = {0};
    struct k8s__store_delta d = {d_add, d_update, d_del};
    k8s__store_init(&s);
    k8s__store_init(&fresh);
    /* Before the relist: a(1) b(1) c(1). */
    ASSERT_OK(k8s__store_put_take(&s, mk("n", "a", "1"), NULL));
    ASSERT_OK(k8s__store_put_take(&s, mk("n", "b", "1"), NULL));
    ASSERT_OK(k8s__store_put_take(&s, mk("n", "c", "1"), NULL));
    /* The relist: a unchanged, b modified, c gone, d new. */
    ASSERT_OK(k8s__store_put_take(&fresh, mk("n", "a", "1"), NULL));
    ASSERT_OK(k8s__store_put_take(&fresh, mk("n", "b", "7"), NULL));
    ASSERT_OK(k8s__store_put_take(&fresh, mk("n", "d", "8"), NULL));
    l.s = &s;
    k8s__store_replace(&s, &fresh, &d, &l);
    ASSERT_EQ(l.saw_new, 2); /* callbacks already see the new contents */
    ASSERT_EQ(l.adds, 1);
    ASSERT_EQ(l.updates, 1);
    ASSERT_STREQ(l.last_upd_old, "1");
    ASSERT_STREQ(l.last_upd_new, "7");
    ASSERT_EQ(l.dels, 1);
    ASSERT_EQ(l.unknown, 1);
    ASSERT_STREQ(l.last_del, "n/c");
    ASSERT_EQ(k8s__store_count(&s), 3);
    ASSERT_NULL(k8s__store_get(&s, "n/c"));
    ASSERT_STREQ(k8s__store_get(&s, "n/b")->resource_version, "7");
    ASSERT_EQ(k8s__store_count(&fresh), 0);
    /* Replace with an empty list deletes everything. */
    memset(&l, 0, sizeof l);
    k8s__store_replace(&s, &fresh, &d, &l);
    ASSERT_EQ(l.dels, 3);
    ASSERT_EQ(k8s__store_count(&s), 0);
    k8s__store_release(&s);
    k8s__store_release(&fresh);
}

TEST(strmap_many_keys_and_deletes)
{
    struct tkm_strmap m = TKM_STRMAP_INIT;
    static char keys[5000][16];
    for (int i = 0; i < 5000; i++) {
        snprintf(keys[i], sizeof keys[i], "k%d", i);
        ASSERT_OK(tkm_strmap_put(&m, keys[i], keys[i], NULL));
    }
    ASSERT_EQ(m.count, 5000);
    /* Delete every third; the rest must still be found (backward shift). */
    for (int i = 0; i < 5000; i += 3)
        ASSERT(tkm_strmap_del(&m, keys[i]) == keys[i]);
    for (int i = 0; i < 5000; i++) {
        void *v = tkm_strmap_get(&m, keys[i]);
        if (i % 3 == 0)
            ASSERT_NULL(v);
        else
            ASSERT(v == keys[i]);
    }
    size_t pos = 0, n = 0;
    const char *k;
    void *v;
    while (tkm_strmap_next(&m, &pos, &k, &v)) {
        ASSERT(k == v);
        n++;
    }
    ASSERT_EQ(n, m.count);
    ASSERT_EQ(n, 5000 - 1667);
    tkm_strmap_release(&m);
}
