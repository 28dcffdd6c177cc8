/*
 * test_ctrl.c - tkm-controller's pure parts: the hash map, the compact node
 * status index (which caches an update notifies, relists, garbage), the
 * aggregation into conditions/counts/failedNodes, the SQLite state (across a
 * reopen) and the policy fingerprint.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sqlite3.h>

#include "test.h"
#include "ctrl-int.h"

#define DA "sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
#define DB "sha256:bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"

TEST(map_put_get_del_grow)
{
    struct ctrl_map m = {0};
    char k[32];
    for (int i = 0; i < 1000; i++) {
        snprintf(k, sizeof k, "key-%d", i);
        ASSERT_EQ(ctrl_map_put(&m, k, (void *)(uintptr_t)(i + 1), NULL), 0);
    }
    ASSERT_UEQ(m.n, 1000);
    ASSERT_EQ((int)(uintptr_t)ctrl_map_get(&m, "key-777"), 778);
    ASSERT_EQ((int)(uintptr_t)ctrl_map_del(&m, "key-777"), 778);
    ASSERT_NULL(ctrl_map_get(&m, "key-777"));
    ASSERT_NULL(ctrl_map_del(&m, "key-777"));
    ASSERT_UEQ(m.n, 999);
    ctrl_map_release(&m);
    ASSERT_NULL(ctrl_map_get(&m, "key-1"));
}

/* A node status object: caches given as a JSON object text. */
static char *ns_json(const char *ns, const char *node, const char *caches)
{
    static char buf[8192];
    snprintf(buf, sizeof buf,
             "{\"apiVersion\":\"tkm.io/v1alpha1\",\"kind\":\"TritonKernelCacheNodeStatus\","
             "\"metadata\":{\"name\":\"%s\",\"namespace\":\"%s\",\"uid\":\"u-%s\","
             "\"resourceVersion\":\"%d\"},\"status\":{\"nodeName\":\"%s\",\"caches\":%s}}",
             node, ns, node, rand(), node, caches);
    return buf;
}

static const char *compat(const char *d)
{
    static char b[8][256];
    static int i;
    i = (i + 1) % 8;
    snprintf(b[i], sizeof b[i],
             "{\"digest\":\"%s\",\"verified\":true,\"extracted\":true,"
             "\"compatibleGPUs\":[{\"ids\":[0,1],\"gpuType\":\"nvidia-h200\"}]}",
             d);
    return b[i];
}

static const char *incompat(const char *d, const char *reason)
{
    static char b[8][300];
    static int i;
    i = (i + 1) % 8;
    snprintf(b[i], sizeof b[i],
             "{\"digest\":\"%s\",\"incompatibleGPUs\":[{\"ids\":[0],\"gpuType\":\"nvidia-a100\","
             "\"reason\":\"%s\",\"message\":\"sm_80\"}]}",
             d, reason);
    return b[i];
}

struct notes {
    char keys[64][64];
    int n, invalid, gone;
};

static void on_changed(const char *key, void *data)
{
    struct notes *n = data;
    if (n->n < 64)
        snprintf(n->keys[n->n++], 64, "%s", key);
}
static void on_invalid(const struct ctrl_nsobj *o, const char *msg, void *data)
{
    (void)o;
    (void)msg;
    ((struct notes *)data)->invalid++;
}
static void on_gone(const char *node, void *data)
{
    (void)node;
    ((struct notes *)data)->gone++;
}

static int upsert(struct ctrl_nodes *n, const char *ns, const char *node, const char *caches)
{
    const char *j = ns_json(ns, node, caches);
    return ctrl_nodes_upsert(n, 0, j, strlen(j), 0);
}

TEST(nodes_update_notifies_only_changed_caches)
{
    struct ctrl_nodes n;
    struct notes seen = {0};
    char c[1024];
    ctrl_nodes_init(&n);
    n.changed = on_changed;
    n.data = &seen;
    snprintf(c, sizeof c, "{\"a\":%s,\"b\":%s,\"c\":%s}", compat(DA), compat(DA), compat(DA));
    ASSERT_EQ(upsert(&n, "ml", "node-1", c), 0);
    ASSERT_EQ(seen.n, 3);
    ASSERT_UEQ(ctrl_nodes_cache(&n, "ml/a", 0)->n, 1);
    /* same facts again: nobody is notified */
    seen.n = 0;
    ASSERT_EQ(upsert(&n, "ml", "node-1", c), 0);
    ASSERT_EQ(seen.n, 0);
    /* b becomes incompatible, c disappears, d appears: b, c, d notified, not a */
    snprintf(c, sizeof c, "{\"a\":%s,\"b\":%s,\"d\":%s}", compat(DA), incompat(DA, "ArchMismatch"),
             compat(DA));
    ASSERT_EQ(upsert(&n, "ml", "node-1", c), 0);
    ASSERT_EQ(seen.n, 3);
    ASSERT_STREQ(seen.keys[0], "ml/b");
    ASSERT_STREQ(seen.keys[1], "ml/c");
    ASSERT_STREQ(seen.keys[2], "ml/d");
    ASSERT_NULL(ctrl_nodes_cache(&n, "ml/c", 0)); /* no entries, no rec: dropped */
    const struct ctrl_entry *e = ctrl_nodes_cache(&n, "ml/b", 0)->entries[0];
    ASSERT_EQ(e->flags & (CTRL_E_COMPAT | CTRL_E_INCOMPAT), CTRL_E_INCOMPAT);
    ASSERT_STREQ(e->why, "ArchMismatch");
    ASSERT_STREQ(e->why + strlen(e->why) + 1, "sm_80");
    ASSERT_UEQ(n.n_entries, 3);
    /* removal notifies each of its caches */
    seen.n = 0;
    ctrl_nodes_remove(&n, 0, "ml", "node-1");
    ASSERT_EQ(seen.n, 3);
    ASSERT_UEQ(n.n_entries, 0);
    ctrl_nodes_release(&n);
}

TEST(nodes_many_nodes_one_cache_positions_stay_consistent)
{
    struct ctrl_nodes n;
    char node[32], c[512];
    ctrl_nodes_init(&n);
    for (int i = 0; i < 50; i++) {
        snprintf(node, sizeof node, "n%d", i);
        snprintf(c, sizeof c, "{\"x\":%s}", compat(DA));
        ASSERT_EQ(upsert(&n, "ml", node, c), 0);
    }
    for (int i = 0; i < 50; i += 3) { /* remove every third node */
        snprintf(node, sizeof node, "n%d", i);
        ctrl_nodes_remove(&n, 0, "ml", node);
    }
    struct ctrl_cidx *x = ctrl_nodes_cache(&n, "ml/x", 0);
    ASSERT_UEQ(x->n, 33);
    for (size_t i = 0; i < x->n; i++) {
        ASSERT_UEQ(x->entries[i]->pos, i);
        ASSERT(x->entries[i]->cache == x);
    }
    ctrl_nodes_release(&n);
}

TEST(nodes_garbage_keeps_previous_entries_and_reports_once)
{
    struct ctrl_nodes n;
    struct notes seen = {0};
    char c[512];
    ctrl_nodes_init(&n);
    n.invalid = on_invalid;
    n.data = &seen;
    snprintf(c, sizeof c, "{\"x\":%s}", compat(DA));
    ASSERT_EQ(upsert(&n, "ml", "n1", c), 0);
    const char *bad =
        "{\"apiVersion\":\"tkm.io/v1alpha1\",\"kind\":\"TritonKernelCacheNodeStatus\","
        "\"metadata\":{\"name\":\"n1\",\"namespace\":\"ml\",\"resourceVersion\":\"9\"},"
        "\"status\":{\"gpus\":[{\"id\":99999999999}]}}";
    ASSERT_EQ(ctrl_nodes_upsert(&n, 0, bad, strlen(bad), 0), 0);
    ASSERT_EQ(ctrl_nodes_upsert(&n, 0, bad, strlen(bad), 0), 0);
    ASSERT_EQ(seen.invalid, 1); /* once per resourceVersion */
    ASSERT_UEQ(ctrl_nodes_cache(&n, "ml/x", 0)->n, 1);
    const char *junk = "{\"kind\":\"TritonKernelCacheNodeStatus\",\"metadata\":{}}";
    ASSERT_EQ(ctrl_nodes_upsert(&n, 0, junk, strlen(junk), 0), 0);
    const char *notjson = "{{{";
    ASSERT_EQ(ctrl_nodes_upsert(&n, 0, notjson, 3, 0), 0);
    ctrl_nodes_release(&n);
}

TEST(nodes_relist_removes_vanished_objects_and_nodes)
{
    struct ctrl_nodes n;
    struct notes seen = {0};
    char c[512];
    ctrl_nodes_init(&n);
    n.node_gone = on_gone;
    n.data = &seen;
    snprintf(c, sizeof c, "{\"x\":%s}", compat(DA));
    ASSERT_EQ(upsert(&n, "ml", "n1", c), 0);
    ASSERT_EQ(upsert(&n, "ml", "n2", c), 0);
    ASSERT_EQ(ctrl_nodes_node_upsert(&n, "n1", "u1"), 0);
    ASSERT_EQ(ctrl_nodes_node_upsert(&n, "n2", "u2"), 0);
    ctrl_nodes_list_begin(&n, 0);
    ASSERT_EQ(upsert(&n, "ml", "n2", c), 0);
    ctrl_nodes_list_end(&n, 0);
    ASSERT_UEQ(ctrl_nodes_cache(&n, "ml/x", 0)->n, 1);
    ctrl_nodes_list_begin(&n, 2);
    ASSERT_EQ(ctrl_nodes_node_upsert(&n, "n2", "u2"), 0);
    ctrl_nodes_list_end(&n, 2);
    ASSERT_EQ(seen.gone, 1);
    ASSERT_NULL(ctrl_map_get(&n.nodes, "n1"));
    ASSERT_NOT_NULL(ctrl_map_get(&n.nodes, "n2"));
    ctrl_nodes_release(&n);
}

static const struct tkm_api_condition *cond(const struct tkm_api_cache_status *st, const char *t)
{
    for (size_t i = 0; i < st->n_conditions; i++)
        if (strcmp(st->conditions[i].type, t) == 0)
            return &st->conditions[i];
    return NULL;
}

TEST(agg_counts_ready_failed_nodes_capped)
{
    struct ctrl_nodes n;
    char node[32], c[512];
    struct tkm_api_cache_status st = {0};
    ctrl_nodes_init(&n);
    for (int i = 0; i < 3; i++) {
        snprintf(node, sizeof node, "ok-%d", i);
        snprintf(c, sizeof c, "{\"x\":%s}", compat(DA));
        ASSERT_EQ(upsert(&n, "ml", node, c), 0);
    }
    for (int i = 0; i < 20; i++) {
        snprintf(node, sizeof node, "old-gpu-%02d", i);
        snprintf(c, sizeof c, "{\"x\":%s}", incompat(DA, "ArchMismatch"));
        ASSERT_EQ(upsert(&n, "ml", node, c), 0);
    }
    snprintf(c, sizeof c, "{\"x\":{\"digest\":\"%s\",\"error\":\"disk full\"}}", DA);
    ASSERT_EQ(upsert(&n, "ml", "broken", c), 0);
    snprintf(c, sizeof c, "{\"x\":%s}", compat(DB)); /* still on another digest */
    ASSERT_EQ(upsert(&n, "ml", "behind", c), 0);
    struct ctrl_verdict v = {.verified = TKM_API_COND_TRUE,
                             .reason = "SignatureVerified",
                             .message = "ok",
                             .usable = 1,
                             .digest = DA};
    ASSERT_EQ(ctrl_agg_build(ctrl_nodes_cache(&n, "ml/x", 0), &v, 7, NULL, 0,
                             "2026-01-01T00:00:00Z", &st),
              0);
    ASSERT_EQ(st.counts.nodes, 25);
    ASSERT_EQ(st.counts.compatible, 3);
    ASSERT_EQ(st.counts.incompatible, 20);
    ASSERT_EQ(st.counts.failed, 1);
    ASSERT_UEQ(st.n_failed_nodes, CTRL_MAX_FAILED);
    ASSERT_STREQ(st.failed_nodes[0].node, "broken"); /* failures first */
    ASSERT_STREQ(st.failed_nodes[1].node, "old-gpu-00");
    ASSERT_STREQ(st.failed_nodes[1].reason, "ArchMismatch");
    const struct tkm_api_condition *r = cond(&st, "Ready");
    ASSERT_EQ(r->status, TKM_API_COND_TRUE);
    ASSERT_EQ(r->observed_generation, 7);
    ASSERT_STRCONTAINS(r->message, "usable on 3 of 25 nodes");
    ASSERT_STRCONTAINS(r->message, "20 incompatible");
    ASSERT_STRCONTAINS(r->message, "and 17 more");
    ASSERT_STRCONTAINS(r->message, "failedNodes lists 16, and 5 more");
    ASSERT_EQ(cond(&st, "Degraded")->status, TKM_API_COND_TRUE);
    ASSERT_STRCONTAINS(cond(&st, "Degraded")->message, "broken: NodeError: disk full");
    ASSERT_EQ(cond(&st, "Progressing")->status, TKM_API_COND_TRUE); /* "behind" */
    ASSERT_STREQ(cond(&st, "Progressing")->reason, "RollingOut");
    tkm_api_cache_status_release(&st);
    ctrl_nodes_release(&n);
}

TEST(agg_not_ready_reasons_and_transition_times)
{
    struct ctrl_nodes n;
    char c[512];
    struct tkm_api_cache_status st = {0}, st2 = {0};
    ctrl_nodes_init(&n);
    struct ctrl_verdict bad = {.verified = TKM_API_COND_FALSE,
                               .reason = "KeyMismatch",
                               .message = "signature does not verify",
                               .digest = DA};
    ASSERT_EQ(ctrl_agg_build(NULL, &bad, 1, NULL, 0, "2026-01-01T00:00:00Z", &st), 0);
    ASSERT_EQ(cond(&st, "Verified")->status, TKM_API_COND_FALSE);
    ASSERT_STREQ(cond(&st, "Ready")->reason, "NotVerified");
    ASSERT_STRCONTAINS(cond(&st, "Ready")->message, "KeyMismatch: signature does not verify");
    /* later, same facts: lastTransitionTime stays */
    ASSERT_EQ(
        ctrl_agg_build(NULL, &bad, 1, st.conditions, st.n_conditions, "2026-02-02T00:00:00Z", &st2),
        0);
    ASSERT_STREQ(cond(&st2, "Ready")->last_transition_time, "2026-01-01T00:00:00Z");
    tkm_api_cache_status_release(&st2);
    memset(&st2, 0, sizeof st2);
    /* verified now, every node incompatible: NoCompatibleNode; Ready's time stays
     * (still False), Verified's moves (False -> True) */
    snprintf(c, sizeof c, "{\"x\":%s}", incompat(DA, "WarpSizeMismatch"));
    ASSERT_EQ(upsert(&n, "ml", "n1", c), 0);
    struct ctrl_verdict ok = {.verified = TKM_API_COND_TRUE,
                              .reason = "SignatureVerified",
                              .message = "ok",
                              .usable = 1,
                              .digest = DA};
    ASSERT_EQ(ctrl_agg_build(ctrl_nodes_cache(&n, "ml/x", 0), &ok, 2, st.conditions,
                             st.n_conditions, "2026-03-03T00:00:00Z", &st2),
              0);
    ASSERT_STREQ(cond(&st2, "Ready")->reason, "NoCompatibleNode");
    ASSERT_STRCONTAINS(cond(&st2, "Ready")->message, "n1: WarpSizeMismatch: sm_80");
    ASSERT_STREQ(cond(&st2, "Ready")->last_transition_time, "2026-01-01T00:00:00Z");
    ASSERT_STREQ(cond(&st2, "Verified")->last_transition_time, "2026-03-03T00:00:00Z");
    ASSERT_EQ(cond(&st2, "Degraded")->status, TKM_API_COND_FALSE);
    tkm_api_cache_status_release(&st);
    tkm_api_cache_status_release(&st2);
    ctrl_nodes_release(&n);
}

TEST(state_persists_across_reopen)
{
    struct ctrl_state *s = NULL;
    struct tkm_err err = {0};
    char d[CTRL_DIGEST_MAX], h[72];
    struct ctrl_verify_rec r = {.ok = 1, .reason = "SignatureVerified", .key_id = "sha256:ab12"},
                           out;
    ASSERT_EQ(ctrl_state_open(tkm_test_tmpdir(), &s, &err), 0);
    ASSERT_EQ(ctrl_state_pin_get(s, "u1", "r/x:v1", d), 0);
    ASSERT_EQ(ctrl_state_pin_put(s, "u1", "r/x:v1", DA), 0);
    ASSERT_EQ(ctrl_state_pin_put(s, "u1", "r/x:v2", DB), 0); /* replaces */
    ASSERT_EQ(ctrl_state_verify_put(s, "u1", DB, "fp1", &r), 0);
    ASSERT_EQ(ctrl_state_status_put(s, "u1", "sha256:h"), 0);
    ctrl_state_close(s);
    s = NULL;
    ASSERT_EQ(ctrl_state_open(tkm_test_tmpdir(), &s, &err), 0);
    ASSERT_EQ(ctrl_state_pin_get(s, "u1", "r/x:v1", d), 0);
    ASSERT_EQ(ctrl_state_pin_get(s, "u1", "r/x:v2", d), 1);
    ASSERT_STREQ(d, DB);
    ASSERT_EQ(ctrl_state_verify_get(s, "u1", DB, "fp2", &out), 0); /* another policy */
    ASSERT_EQ(ctrl_state_verify_get(s, "u1", DB, "fp1", &out), 1);
    ASSERT_EQ(out.ok, 1);
    ASSERT_STREQ(out.key_id, "sha256:ab12");
    ASSERT_EQ(ctrl_state_status_get(s, "u1", h), 1);
    ASSERT_STREQ(h, "sha256:h");
    ASSERT_EQ(ctrl_state_forget(s, "u1"), 0);
    ASSERT_EQ(ctrl_state_pin_get(s, "u1", "r/x:v2", d), 0);
    ASSERT_EQ(ctrl_state_status_get(s, "u1", h), 0);
    ctrl_state_close(s);
}

TEST(state_memory_stays_small_with_1000_caches)
{
    /* The page cache is capped (64 KiB) and not allocated in bulk: 1000
     * caches' pins, verifications and status hashes (about 200 pages) cost
     * SQLite ~80 KB of heap, not the ~280 KB of its defaults here. */
    struct ctrl_state *s = NULL;
    struct tkm_err err = {0};
    char uid[64], d[CTRL_DIGEST_MAX];
    struct ctrl_verify_rec r = {.ok = 1, .reason = "SignatureVerified", .key_id = "sha256:ab12"};
    snprintf(r.message, sizeof r.message, "%s verified with key sha256:ab12 (spec.signaturePolicy)",
             DA);
    ASSERT_EQ(ctrl_state_open(tkm_test_tmpdir(), &s, &err), 0);
    for (int i = 0; i < 1000; i++) {
        snprintf(uid, sizeof uid, "%08d-1111-2222-3333-444444444444", i);
        ASSERT_EQ(ctrl_state_pin_put(s, uid, "127.0.0.1:5000/bench/cache:sm90", DA), 0);
        ASSERT_EQ(ctrl_state_verify_put(s, uid, DA, "fp1", &r), 0);
        ASSERT_EQ(ctrl_state_status_put(s, uid, DB), 0);
    }
    for (int i = 0; i < 1000; i += 7) { /* still all there */
        snprintf(uid, sizeof uid, "%08d-1111-2222-3333-444444444444", i);
        ASSERT_EQ(ctrl_state_pin_get(s, uid, "127.0.0.1:5000/bench/cache:sm90", d), 1);
        ASSERT_STREQ(d, DA);
    }
    ASSERT(sqlite3_memory_used() < 128 * 1024);
    ctrl_state_close(s);
}

TEST(state_bad_dir_is_a_clear_error)
{
    struct ctrl_state *s = NULL;
    struct tkm_err err = {0};
    ASSERT(ctrl_state_open("/nonexistent/dir/x", &s, &err) < 0);
    ASSERT_STRCONTAINS(err.msg, "/nonexistent/dir/x/controller.db");
    ASSERT_NULL(s);
}

TEST(policy_fingerprint_changes_with_the_key)
{
    struct tkm_sig_key k1 = {"key-one", 7}, k2 = {"key-two", 7};
    struct tkm_sig_policy p = {.mode = TKM_SIG_MODE_ENFORCE, .keys = &k1, .nkeys = 1};
    char a[72], b[72], c[72];
    ctrl_policy_fingerprint(&p, a);
    p.keys = &k2;
    ctrl_policy_fingerprint(&p, b);
    p.mode = TKM_SIG_MODE_AUDIT;
    ctrl_policy_fingerprint(&p, c);
    ASSERT(strcmp(a, b) != 0);
    ASSERT(strcmp(b, c) != 0);
    p.keys = &k1;
    p.mode = TKM_SIG_MODE_ENFORCE;
    ctrl_policy_fingerprint(&p, c);
    ASSERT_STREQ(a, c);
}

TEST(digest_id)
{
    ASSERT_EQ(sizeof(struct ctrl_entry), 32);
    ASSERT_UEQ(ctrl_digest_id(DA), 0xaaaaaaaau);
    ASSERT_UEQ(ctrl_digest_id("sha256:0000000000000000aaaa"), 1); /* valid, never 0 */
    ASSERT_EQ(ctrl_digest_id("sha256:aaaaaaaaaaaaaaaX"), 0);      /* the 16 are checked */
    ASSERT(ctrl_digest_id(DA) != 0);
    ASSERT(ctrl_digest_id(DA) != ctrl_digest_id(DB));
    ASSERT_EQ(ctrl_digest_id(NULL), 0);
    ASSERT_EQ(ctrl_digest_id("sha256:xyz"), 0);
    ASSERT_EQ(ctrl_digest_id("md5:aaaaaaaaaaaaaaaaaaaaaa"), 0);
}

/* ---- ctrl_reg against a scripted registry (tsrv) --------------------------------- */

#include <tkm/http.h>
#include <tkm/oci/digest.h>

#include "tsrv.h"

struct reg_out {
    int done, rc, retry;
    char reason[64], digest[CTRL_DIGEST_MAX], msg[800];
};

static void reg_cb(const struct ctrl_reg_result *r, void *data)
{
    struct reg_out *o = data;
    o->done = 1;
    o->rc = r->rc;
    o->retry = r->retry;
    snprintf(o->reason, sizeof o->reason, "%s", r->reason ? r->reason : "");
    snprintf(o->digest, sizeof o->digest, "%s", r->digest);
    snprintf(o->msg, sizeof o->msg, "%s", r->message);
}

static void closed(void *data)
{
    *(int *)data = 1;
}

/* Resolves 127.0.0.1:<port>/e2e/x:v1 on a fresh loop; returns the outcome. */
static void resolve_once(int port, struct reg_out *o)
{
    uv_loop_t loop;
    struct tkm_http *http = NULL;
    struct ctrl_reg *reg = NULL;
    struct tkm_err err = {0};
    char image[128];
    int hclosed = 0;
    ASSERT_EQ(uv_loop_init(&loop), 0);
    ASSERT_EQ(tkm_http_global_init(&err), 0);
    ASSERT_EQ(tkm_http_new(&loop, NULL, &http, &err), 0);
    struct ctrl_reg_opts ro = {.timeout_ms = 2000};
    ASSERT_EQ(ctrl_reg_new(&loop, http, &ro, &reg, &err), 0);
    snprintf(image, sizeof image, "127.0.0.1:%d/e2e/x:v1", port);
    ASSERT_EQ(ctrl_reg_resolve(reg, image, NULL, 0, reg_cb, o, NULL, &err), 0);
    ASSERT_EQ(o->done, 0); /* never from inside the start */
    while (!o->done)
        uv_run(&loop, UV_RUN_ONCE);
    ctrl_reg_free(reg);
    tkm_http_close(http, closed, &hclosed);
    while (!hclosed)
        uv_run(&loop, UV_RUN_ONCE);
    uv_run(&loop, UV_RUN_DEFAULT);
    uv_loop_close(&loop);
}

TEST(reg_resolve_pins_the_hash_of_the_manifest_bytes)
{
    static const char manifest[] =
        "{\"schemaVersion\":2,\"mediaType\":\"application/vnd.oci.image.manifest.v1+json\","
        "\"config\":{\"mediaType\":\"application/vnd.oci.image.config.v1+json\",\"digest\":"
        "\"sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\",\"size\":2},"
        "\"layers\":[]}";
    static const struct tsrv_reply ok[] = {
        {200,
         "Content-Type: application/vnd.oci.image.manifest.v1+json\r\n"
         "Docker-Content-Digest: "
         "sha256:bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb\r\n",
         manifest}};
    struct tsrv s;
    struct reg_out o = {0};
    char want[CTRL_DIGEST_MAX];
    tsrv_init(&s);
    tsrv_route(&s, NULL, "/v2/e2e/x/manifests/v1", TSRV_EXACT, NULL, ok, 1);
    int port = tsrv_listen(&s);
    ASSERT(port > 0);
    resolve_once(port, &o);
    tsrv_stop(&s);
    ASSERT_EQ(o.rc, 0);
    ASSERT_EQ(tkm_oci_digest_bytes(manifest, strlen(manifest), want), 0);
    ASSERT_STREQ(o.digest, want); /* never the header's claim */
}

TEST(reg_resolve_failures_have_reasons)
{
    static const struct tsrv_reply missing[] = {
        {404, "Content-Type: application/json\r\n",
         "{\"errors\":[{\"code\":\"MANIFEST_UNKNOWN\",\"message\":\"manifest unknown\"}]}"}};
    static const struct tsrv_reply broken[] = {{500, NULL, "boom"}};
    struct tsrv s;
    struct reg_out o = {0};
    tsrv_init(&s);
    tsrv_route(&s, NULL, "/v2/e2e/x/manifests/v1", TSRV_EXACT, NULL, missing, 1);
    int port = tsrv_listen(&s);
    ASSERT(port > 0);
    resolve_once(port, &o);
    tsrv_stop(&s);
    ASSERT_EQ(o.rc, -ENOENT);
    ASSERT_STREQ(o.reason, "ImageNotFound");
    ASSERT_EQ(o.retry, 0); /* looked at again slowly, not with the fast backoff */
    ASSERT_STRCONTAINS(o.msg, "MANIFEST_UNKNOWN");

    memset(&o, 0, sizeof o);
    tsrv_init(&s);
    tsrv_route(&s, NULL, "/v2/e2e/x/manifests/v1", TSRV_EXACT, NULL, broken, 1);
    port = tsrv_listen(&s);
    ASSERT(port > 0);
    resolve_once(port, &o);
    tsrv_stop(&s);
    ASSERT(o.rc < 0);
    ASSERT_STREQ(o.reason, "RegistryUnreachable");
    ASSERT_EQ(o.retry, 1);
}

TEST(settle_waits_for_quiet_entries_up_to_the_max_delay)
{
    struct ctrl_opts o = {.status_settle_ms = 250, .status_max_delay_ms = 5000};
    uint64_t dirty = 0;
    /* Entries never changed, or quiet for the settle time: write now. */
    ASSERT_EQ(ctrl_settle_wait(&o, 0, &dirty, 1000), 0);
    ASSERT_EQ(ctrl_settle_wait(&o, 1000, &dirty, 1250), 0);
    ASSERT_EQ(dirty, 0);
    /* A change 100 ms ago: wait the 150 ms left, remembering the first. */
    ASSERT_EQ(ctrl_settle_wait(&o, 10000, &dirty, 10100), 150);
    ASSERT_EQ(dirty, 10100);
    /* Reports keep coming every 100 ms: never quiet, but written once the
     * first unwritten change is 5 s old (and the wait never passes that). */
    ASSERT_EQ(ctrl_settle_wait(&o, 14900, &dirty, 15000), 100);
    ASSERT_EQ(ctrl_settle_wait(&o, 15000, &dirty, 15050), 50);
    ASSERT_EQ(ctrl_settle_wait(&o, 15050, &dirty, 15100), 0);
    ASSERT_EQ(dirty, 10100);
    /* Settling off: always now. */
    o.status_settle_ms = 0;
    dirty = 0;
    ASSERT_EQ(ctrl_settle_wait(&o, 20000, &dirty, 20001), 0);
    ASSERT_EQ(dirty, 0);
}

TEST(cache_memory_is_small)
{
    /* The reconciler's fixed memory per cache: strings are sized to their
     * content and allocated while needed (was 6 KiB of fixed arrays: 6 MB at
     * 1000 caches). */
    ASSERT(ctrl_cache_sizeof() <= 512);
}
