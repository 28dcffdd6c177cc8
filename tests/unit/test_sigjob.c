/*
 * test_sigjob.c - the signature search as a job on a registry session
 * (tkm_sig_job_verify, tkm_sig_reason) against tsrv: every place it looks,
 * pagination, the bearer flow, a registry that is down, cancellation and a
 * session freed mid-search. The bundle is real cosign v3.1.3 output and the
 * classic signature real cosign v2 output (tests/unit/data/cosign/).
 */
#include <uv.h>

#include <tkm/buf.h>
#include <tkm/http.h>
#include <tkm/oci/session.h>
#include <tkm/trust/bundle.h>
#include <tkm/oci/digest.h>
#include <tkm/trust/keys.h>
#include <tkm/trust/sigjob.h>
#include <tkm/util.h>

#include "test.h"
#include "tsrv.h"

#include "cosign3_bundle.h"

#define IMG    COSIGN3_IMG
#define HEX    COSIGN3_HEX
#define PUB    COSIGN3_PUB
#define BUNDLE COSIGN3_BUNDLE

#define OCTET "Content-Type: application/octet-stream\r\n"
#define INDEX "Content-Type: application/vnd.oci.image.index.v1+json\r\n"
#define MANIF "Content-Type: application/vnd.oci.image.manifest.v1+json\r\n"
#define NF    "{\"errors\":[{\"code\":\"MANIFEST_UNKNOWN\"}]}"

/* "sha256:<hex>" of n bytes at p (the test fails if hashing does). */
static void digest_of(const char *p, size_t n, char out[72])
{
    ASSERT_EQ(tkm_oci_digest_bytes(p, n, out), 0);
}

/* The referrer manifest for BUNDLE and an index listing it; the routes. */
struct art {
    char bdig[72], mdig[72], mpath[128], bpath[128];
    struct tkm_buf man, idx;
};

static void art_init(struct art *a)
{
    digest_of(BUNDLE, strlen(BUNDLE), a->bdig);
    tkm_buf_init(&a->man, 1 << 16);
    tkm_buf_init(&a->idx, 1 << 16);
    ASSERT_OK(tkm_buf_printf(
        &a->man,
        "{\"schemaVersion\":2,\"mediaType\":\"application/vnd.oci.image.manifest.v1+json\","
        "\"artifactType\":\"" TKM_BUNDLE_MEDIA_TYPE_V03 "\",\"config\":{\"mediaType\":"
        "\"application/vnd.oci.empty.v1+json\",\"size\":2,\"digest\":\"sha256:"
        "44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a\"},\"layers\":[{"
        "\"mediaType\":\"" TKM_BUNDLE_MEDIA_TYPE_V03 "\",\"size\":%zu,\"digest\":\"%s\"}],"
        "\"annotations\":{\"dev.sigstore.bundle.predicateType\":\"" TKM_BUNDLE_PREDICATE_SIGN
        "\"},\"subject\":{\"mediaType\":\"application/vnd.oci.image.manifest.v1+json\","
        "\"size\":1,\"digest\":\"" IMG "\"}}",
        strlen(BUNDLE), a->bdig));
    digest_of(a->man.data, a->man.len, a->mdig);
    ASSERT_OK(tkm_buf_printf(&a->idx,
                             "{\"schemaVersion\":2,\"mediaType\":\"application/vnd.oci.image.index."
                             "v1+json\",\"manifests\":[{\"mediaType\":\"application/vnd.oci.image."
                             "manifest.v1+json\",\"size\":%zu,\"digest\":\"%s\","
                             "\"artifactType\":\"" TKM_BUNDLE_MEDIA_TYPE_V03 "\"}]}",
                             a->man.len, a->mdig));
    snprintf(a->mpath, sizeof a->mpath, "/v2/t/img/manifests/%s", a->mdig);
    snprintf(a->bpath, sizeof a->bpath, "/v2/t/img/blobs/%s", a->bdig);
}

static void art_release(struct art *a)
{
    tkm_buf_release(&a->man);
    tkm_buf_release(&a->idx);
}

/* A loop, an http client and a session on 127.0.0.1:port. */
struct env {
    uv_loop_t loop;
    struct tkm_http *http;
    struct tkm_oci_session *ses;
};

static void env_open(struct env *e, int port)
{
    struct tkm_err err = {0};
    char host[64];
    ASSERT_OK(tkm_http_global_init(&err));
    ASSERT_OK(uv_loop_init(&e->loop));
    ASSERT_OK(tkm_http_new(&e->loop, NULL, &e->http, &err));
    snprintf(host, sizeof host, "127.0.0.1:%d", port);
    /* the request timeout, scaled (valgrind): cancel tests end well before it */
    struct tkm_oci_registry_opts ro = {.anonymous = 1,
                                       .timeout_ms = 5000 * tkm_test_timeout_scale()};
    ASSERT_OK(tkm_oci_session_new(e->http, host, &ro, &e->ses, &err));
}

static void env_close(struct env *e)
{
    tkm_oci_session_close(e->ses, NULL, NULL);
    tkm_http_close(e->http, NULL, NULL);
    ASSERT_OK(uv_run(&e->loop, UV_RUN_DEFAULT));
    ASSERT_OK(uv_loop_close(&e->loop));
}

struct out {
    int calls, rc;
    struct tkm_sig_result res;
    char msg[1024];
};

static void on_job(struct tkm_oci_job *job, int rc, struct tkm_oci_job_result *res,
                   const struct tkm_err *err, void *data)
{
    struct out *o = data;
    (void)job;
    o->calls++;
    o->rc = rc;
    if (rc == 0)
        o->res = *(const struct tkm_sig_result *)res->detail;
    snprintf(o->msg, sizeof o->msg, "%s", rc ? err->msg : "");
}

/* Runs a search for t/img@IMG to its end. */
static int search(struct env *e, const struct tkm_sig_policy *pol, struct out *o)
{
    struct tkm_err err = {0};
    memset(o, 0, sizeof *o);
    ASSERT_OK(tkm_sig_job_verify(e->ses, "t/img", IMG, pol, on_job, o, NULL, &err));
    ASSERT_EQ(o->calls, 0); /* never from inside the start */
    while (o->calls == 0)
        uv_run(&e->loop, UV_RUN_ONCE);
    ASSERT_EQ(o->calls, 1);
    ASSERT_EQ(tkm_oci_session_jobs(e->ses), 0);
    return o->rc;
}

static struct tkm_sig_policy key_policy(struct tkm_sig_key *k, const char *pem)
{
    k->pem = pem;
    k->len = strlen(pem);
    return (struct tkm_sig_policy){.keys = k, .nkeys = 1};
}

static const struct tsrv_reply R_NF = {404, NULL, NF}, R_NOAPI = {404, NULL, "404 page not found"},
                               R_HEAD_OK = {200, MANIF, "{}"};

TEST(referrers_hit)
{
    struct art a;
    art_init(&a);
    struct tsrv_reply ri = {200, INDEX, a.idx.data}, rm = {200, MANIF, a.man.data},
                      rb = {200, OCTET, BUNDLE};
    struct tsrv srv;
    tsrv_init(&srv);
    ASSERT_OK(tsrv_route(&srv, "GET", "/v2/t/img/referrers/" IMG, TSRV_TARGET, NULL, &ri, 1));
    ASSERT_OK(tsrv_route(&srv, "GET", a.mpath, TSRV_TARGET, NULL, &rm, 1));
    ASSERT_OK(tsrv_route(&srv, "GET", a.bpath, TSRV_TARGET, NULL, &rb, 1));
    int port = tsrv_listen(&srv);
    ASSERT(port > 0);
    struct env e;
    env_open(&e, port);
    /* the policy is copied: the caller's goes away before the job runs */
    char *pem = strdup(PUB);
    struct tkm_sig_key k;
    struct tkm_sig_policy pol = key_policy(&k, pem);
    struct tkm_err err = {0};
    struct out o = {0};
    ASSERT_OK(tkm_sig_job_verify(e.ses, "t/img", IMG, &pol, on_job, &o, NULL, &err));
    memset(pem, 'x', strlen(pem));
    free(pem);
    while (o.calls == 0)
        uv_run(&e.loop, UV_RUN_ONCE);
    if (o.rc)
        tkm_test_fail(__FILE__, __LINE__, "%s", o.msg);
    ASSERT_EQ(o.res.source, TKM_SIG_SRC_REFERRERS);
    ASSERT_EQ(o.res.format, TKM_SIG_FMT_BUNDLE_DSSE);
    ASSERT_EQ(o.res.found, 1);
    ASSERT_STRCONTAINS(o.res.location, a.mdig);
    ASSERT_EQ(strncmp(o.res.key_id, "sha256:", 7), 0);
    ASSERT_STREQ(tkm_sig_reason(o.rc), "Verified");
    ASSERT_EQ(tsrv_nreqs(&srv), 3);
    env_close(&e);
    art_release(&a);
    tsrv_stop(&srv);
}

TEST(tag_schema_after_referrers_404)
{
    struct art a;
    art_init(&a);
    struct tsrv_reply ri = {200, INDEX, a.idx.data}, rm = {200, MANIF, a.man.data},
                      rb = {200, OCTET, BUNDLE};
    struct tsrv srv;
    tsrv_init(&srv);
    ASSERT_OK(tsrv_route(&srv, "GET", "/v2/t/img/referrers/" IMG, TSRV_TARGET, NULL, &R_NOAPI, 1));
    ASSERT_OK(
        tsrv_route(&srv, "GET", "/v2/t/img/manifests/sha256-" HEX, TSRV_TARGET, NULL, &ri, 1));
    ASSERT_OK(tsrv_route(&srv, "GET", a.mpath, TSRV_TARGET, NULL, &rm, 1));
    ASSERT_OK(tsrv_route(&srv, "GET", a.bpath, TSRV_TARGET, NULL, &rb, 1));
    int port = tsrv_listen(&srv);
    ASSERT(port > 0);
    struct env e;
    env_open(&e, port);
    struct tkm_sig_key k;
    struct tkm_sig_policy pol = key_policy(&k, PUB);
    struct out o;
    if (search(&e, &pol, &o))
        tkm_test_fail(__FILE__, __LINE__, "%s", o.msg);
    ASSERT_EQ(o.res.source, TKM_SIG_SRC_TAG_SCHEMA);
    ASSERT_STRCONTAINS(tsrv_req(&srv, 1), "GET /v2/t/img/manifests/sha256-" HEX " HTTP/1.1");
    env_close(&e);
    art_release(&a);
    tsrv_stop(&srv);
}

static char *read_data(const char *name, size_t *n)
{
    char path[512], *p = NULL;
    struct tkm_err err = {0};
    snprintf(path, sizeof path, "%s/tests/unit/data/cosign/%s", TKM_SOURCE_DIR, name);
    ASSERT_OK(tkm_trust_read_file(path, 1 << 20, &p, n, &err));
    return p;
}

/* The real cosign v2 signature of tests/unit/data/cosign behind the .sig tag. */
static void classic_routes(struct tsrv *srv, struct tsrv_reply *rs, struct tsrv_reply *rp,
                           char *ppath, size_t pn, char **sig, char **payload)
{
    size_t n, pl;
    *sig = read_data("sig.json", &n);
    *payload = read_data("payload.json", &pl);
    char *pd = read_data("payload-digest", &n);
    pd[strcspn(pd, "\n")] = '\0';
    snprintf(ppath, pn, "/v2/t/img/blobs/%s", pd);
    free(pd);
    *rs = (struct tsrv_reply){200, MANIF, *sig};
    *rp = (struct tsrv_reply){200, OCTET, *payload, .body_len = pl};
    ASSERT_OK(tsrv_route(srv, "GET", "/v2/t/img/referrers/" IMG, TSRV_TARGET, NULL, &R_NOAPI, 1));
    ASSERT_OK(
        tsrv_route(srv, "GET", "/v2/t/img/manifests/sha256-" HEX, TSRV_TARGET, NULL, &R_NF, 1));
    ASSERT_OK(
        tsrv_route(srv, "GET", "/v2/t/img/manifests/sha256-" HEX ".sig", TSRV_TARGET, NULL, rs, 1));
    ASSERT_OK(tsrv_route(srv, "GET", ppath, TSRV_TARGET, NULL, rp, 1));
}

TEST(classic_sig_tag_and_wrong_key)
{
    struct tsrv srv;
    struct tsrv_reply rs, rp;
    char ppath[128], *sig, *payload;
    tsrv_init(&srv);
    classic_routes(&srv, &rs, &rp, ppath, sizeof ppath, &sig, &payload);
    int port = tsrv_listen(&srv);
    ASSERT(port > 0);
    struct env e;
    env_open(&e, port);
    size_t n;
    char *pub = read_data("cosign.pub", &n);
    struct tkm_sig_key k;
    struct tkm_sig_policy pol = key_policy(&k, pub);
    struct out o;
    if (search(&e, &pol, &o))
        tkm_test_fail(__FILE__, __LINE__, "%s", o.msg);
    ASSERT_EQ(o.res.source, TKM_SIG_SRC_SIG_TAG);
    ASSERT_EQ(o.res.format, TKM_SIG_FMT_SIMPLESIGNING);
    ASSERT_STRCONTAINS(o.res.location, "t/img:sha256-" HEX ".sig layer 0");
    ASSERT_STREQ(o.res.key_desc, "ECDSA P-256");
    /* the bundle's key is not the one that signed: KeyMismatch */
    pol = key_policy(&k, PUB);
    ASSERT_EQ(search(&e, &pol, &o), -EKEYREJECTED);
    ASSERT_STREQ(tkm_sig_reason(o.rc), "KeyMismatch");
    ASSERT_STRCONTAINS(o.msg, "t/img:sha256-" HEX ".sig (.sig tag)");
    env_close(&e);
    free(pub);
    free(sig);
    free(payload);
    tsrv_stop(&srv);
}

TEST(nothing_found_names_places_and_tells_missing_image)
{
    struct tsrv srv;
    tsrv_init(&srv);
    struct tsrv_reply heads[] = {R_HEAD_OK, R_NF};
    ASSERT_OK(tsrv_route(&srv, "GET", "/v2/t/img/referrers/" IMG, TSRV_TARGET, NULL, &R_NOAPI, 1));
    ASSERT_OK(tsrv_route(&srv, "HEAD", "/v2/t/img/manifests/" IMG, TSRV_TARGET, NULL, heads, 2));
    ASSERT_OK(tsrv_route(&srv, NULL, NULL, TSRV_PREFIX, NULL, &R_NF, 1));
    int port = tsrv_listen(&srv);
    ASSERT(port > 0);
    struct env e;
    env_open(&e, port);
    struct tkm_sig_key k;
    struct tkm_sig_policy pol = key_policy(&k, PUB);
    struct out o;
    ASSERT_EQ(search(&e, &pol, &o), -ENOENT);
    ASSERT_STREQ(tkm_sig_reason(o.rc), "NoSignature");
    ASSERT_STRCONTAINS(o.msg, "t/img@" IMG " is not signed: no signature found; looked at the "
                              "referrers API (none on this registry), the tag t/img:sha256-" HEX
                              " (not found) and the tag t/img:sha256-" HEX ".sig (not found)");
    ASSERT_EQ(tsrv_nreqs(&srv), 4);
    ASSERT_STRCONTAINS(tsrv_req(&srv, 3), "HEAD /v2/t/img/manifests/" IMG " HTTP/1.1");
    /* the second time the image manifest itself is gone */
    ASSERT_EQ(search(&e, &pol, &o), TKM_SIG_ENOIMAGE);
    ASSERT_STREQ(tkm_sig_reason(o.rc), "ImageNotFound");
    ASSERT_STRCONTAINS(o.msg, "t/img@" IMG ": the registry has no such image");
    ASSERT_STRCONTAINS(o.msg, "is not signed: no signature found; looked at");
    env_close(&e);
    tsrv_stop(&srv);
}

TEST(referrers_pagination)
{
    struct art a;
    art_init(&a);
    static const char page1[] =
        "{\"schemaVersion\":2,\"mediaType\":\"application/vnd.oci.image.index.v1+json\","
        "\"manifests\":[{\"mediaType\":\"application/vnd.oci.image.manifest.v1+json\",\"size\":1,"
        "\"digest\":\"sha256:0000000000000000000000000000000000000000000000000000000000000000\","
        "\"artifactType\":\"application/vnd.example.sbom+json\"}]}";
    struct tsrv_reply r1 = {
        200, INDEX "Link: </v2/t/img/referrers/" IMG "?n=1&last=x>; rel=\"next\"\r\n", page1};
    struct tsrv_reply r2 = {200, INDEX, a.idx.data}, rm = {200, MANIF, a.man.data},
                      rb = {200, OCTET, BUNDLE};
    struct tsrv srv;
    tsrv_init(&srv);
    ASSERT_OK(tsrv_route(&srv, "GET", "/v2/t/img/referrers/" IMG, TSRV_TARGET, NULL, &r1, 1));
    ASSERT_OK(tsrv_route(&srv, "GET", "/v2/t/img/referrers/" IMG "?n=1&last=x", TSRV_TARGET, NULL,
                         &r2, 1));
    ASSERT_OK(tsrv_route(&srv, "GET", a.mpath, TSRV_TARGET, NULL, &rm, 1));
    ASSERT_OK(tsrv_route(&srv, "GET", a.bpath, TSRV_TARGET, NULL, &rb, 1));
    int port = tsrv_listen(&srv);
    ASSERT(port > 0);
    struct env e;
    env_open(&e, port);
    struct tkm_sig_key k;
    struct tkm_sig_policy pol = key_policy(&k, PUB);
    struct out o;
    if (search(&e, &pol, &o))
        tkm_test_fail(__FILE__, __LINE__, "%s", o.msg);
    ASSERT_EQ(o.res.source, TKM_SIG_SRC_REFERRERS);
    ASSERT_STRCONTAINS(o.res.location, a.mdig);
    ASSERT_EQ(tsrv_nreqs(&srv), 4);
    ASSERT_STRCONTAINS(tsrv_req(&srv, 1), "GET /v2/t/img/referrers/" IMG "?n=1&last=x HTTP/1.1");
    env_close(&e);
    art_release(&a);
    tsrv_stop(&srv);
}

/* A registry that wants a bearer token: 401 without one, the art's routes with it. */
struct bearer {
    int port;
    struct art *a;
};

static int bearer_v2(const struct tsrv_request *rq, struct tsrv_reply *out, char *scratch, size_t n,
                     void *data)
{
    struct bearer *b = data;
    if (!strstr(rq->head, "Authorization: Bearer tok-1\r\n")) {
        snprintf(scratch, n,
                 "WWW-Authenticate: Bearer realm=\"http://127.0.0.1:%d/token\","
                 "service=\"t\",scope=\"repository:t/img:pull\"\r\n",
                 b->port);
        *out = (struct tsrv_reply){401, scratch, "{\"errors\":[{\"code\":\"UNAUTHORIZED\"}]}"};
    } else if (strstr(rq->path, "/referrers/")) {
        *out = (struct tsrv_reply){200, INDEX, b->a->idx.data};
    } else if (strcmp(rq->path, b->a->mpath) == 0) {
        *out = (struct tsrv_reply){200, MANIF, b->a->man.data};
    } else if (strcmp(rq->path, b->a->bpath) == 0) {
        *out = (struct tsrv_reply){200, OCTET, BUNDLE};
    } else {
        *out = R_NF;
    }
    return 0;
}

TEST(bearer_401_flow)
{
    struct art a;
    art_init(&a);
    struct bearer b = {0, &a};
    struct tsrv_reply tok = {200, "Content-Type: application/json\r\n",
                             "{\"token\":\"tok-1\",\"expires_in\":300}"};
    struct tsrv srv;
    tsrv_init(&srv);
    ASSERT_OK(tsrv_route(&srv, "GET", "/token", TSRV_EXACT, NULL, &tok, 1));
    ASSERT_OK(tsrv_route_fn(&srv, NULL, "/v2/", TSRV_PREFIX, NULL, bearer_v2, &b));
    b.port = tsrv_listen(&srv);
    ASSERT(b.port > 0);
    struct env e;
    env_open(&e, b.port);
    struct tkm_sig_key k;
    struct tkm_sig_policy pol = key_policy(&k, PUB);
    struct out o;
    if (search(&e, &pol, &o))
        tkm_test_fail(__FILE__, __LINE__, "%s", o.msg);
    ASSERT_EQ(o.res.source, TKM_SIG_SRC_REFERRERS);
    /* 401, token, then the three requests with the token: one token for the search */
    int tokens = 0;
    for (int i = 0; i < tsrv_nreqs(&srv); i++)
        tokens += strncmp(tsrv_req(&srv, i), "GET /token", 10) == 0;
    ASSERT_EQ(tokens, 1);
    ASSERT_EQ(tsrv_nreqs(&srv), 5);
    env_close(&e);
    art_release(&a);
    tsrv_stop(&srv);
}

TEST(registry_unauthorized)
{
    struct tsrv_reply deny = {403, NULL, "{\"errors\":[{\"code\":\"DENIED\"}]}"};
    struct tsrv srv;
    int port = tsrv_start(&srv, &deny, 1);
    ASSERT(port > 0);
    struct env e;
    env_open(&e, port);
    struct tkm_sig_key k;
    struct tkm_sig_policy pol = key_policy(&k, PUB);
    struct out o;
    ASSERT_EQ(search(&e, &pol, &o), -EPERM);
    ASSERT_STREQ(tkm_sig_reason(o.rc), "RegistryUnauthorized");
    ASSERT_STRCONTAINS(o.msg, "/v2/t/img/referrers/" IMG);
    ASSERT_STRCONTAINS(o.msg, "403");
    env_close(&e);
    tsrv_stop(&srv);
}

TEST(registry_down)
{
    /* a port that was just listening and is closed now */
    struct tsrv srv;
    int port = tsrv_start(&srv, &R_NF, 1);
    ASSERT(port > 0);
    tsrv_stop(&srv);
    struct env e;
    env_open(&e, port);
    struct tkm_sig_key k;
    struct tkm_sig_policy pol = key_policy(&k, PUB);
    struct out o;
    ASSERT_EQ(search(&e, &pol, &o), -ECONNREFUSED);
    ASSERT_STREQ(tkm_sig_reason(o.rc), "RegistryUnreachable");
    ASSERT_STRCONTAINS(o.msg, "gave up after 4 attempts");
    env_close(&e);
}

/* The bundle blob never comes: the search waits there until the timer acts. */
struct stall {
    struct env *e;
    struct tkm_oci_job *job;
    struct tsrv *srv;
    int free_session;
    uv_timer_t t;
};

static void stall_tick(uv_timer_t *t)
{
    struct stall *s = t->data;
    if (tsrv_nreqs(s->srv) < 3)
        return; /* not at the blob yet */
    uv_timer_stop(t);
    uv_close((uv_handle_t *)t, NULL);
    if (s->free_session) {
        tkm_oci_session_close(s->e->ses, NULL, NULL);
        s->e->ses = NULL;
    } else {
        tkm_oci_job_cancel(s->job);
    }
}

static void stalled_search(int free_session)
{
    struct art a;
    art_init(&a);
    struct tsrv_reply ri = {200, INDEX, a.idx.data}, rm = {200, MANIF, a.man.data},
                      rb = {200, OCTET, BUNDLE, .hang_ms = -1};
    struct tsrv srv;
    tsrv_init(&srv);
    ASSERT_OK(tsrv_route(&srv, "GET", "/v2/t/img/referrers/" IMG, TSRV_TARGET, NULL, &ri, 1));
    ASSERT_OK(tsrv_route(&srv, "GET", a.mpath, TSRV_TARGET, NULL, &rm, 1));
    ASSERT_OK(tsrv_route(&srv, "GET", a.bpath, TSRV_TARGET, NULL, &rb, 1));
    int port = tsrv_listen(&srv);
    ASSERT(port > 0);
    struct env e;
    env_open(&e, port);
    struct tkm_sig_key k;
    struct tkm_sig_policy pol = key_policy(&k, PUB);
    struct tkm_err err = {0};
    struct out o = {0};
    struct stall s = {&e, NULL, &srv, free_session};
    ASSERT_OK(tkm_sig_job_verify(e.ses, "t/img", IMG, &pol, on_job, &o, &s.job, &err));
    ASSERT_NOT_NULL(s.job);
    ASSERT_OK(uv_timer_init(&e.loop, &s.t));
    s.t.data = &s;
    ASSERT_OK(uv_timer_start(&s.t, stall_tick, 5, 5));
    uint64_t t0 = tkm_now_ms();
    while (o.calls == 0 && tkm_now_ms() - t0 < 4000u * tkm_test_timeout_scale())
        uv_run(&e.loop, UV_RUN_ONCE);
    ASSERT_EQ(o.calls, 1);
    ASSERT_EQ(o.rc, -ECANCELED);
    ASSERT_STREQ(tkm_sig_reason(o.rc), "Cancelled");
    ASSERT_STRCONTAINS(o.msg, "cancelled");
    ASSERT(tkm_now_ms() - t0 < 3000u * tkm_test_timeout_scale()); /* before the request timeout */
    env_close(&e); /* runs the loop dry: no second report */
    ASSERT_EQ(o.calls, 1);
    art_release(&a);
    tsrv_stop(&srv);
}

TEST(cancel_mid_search)
{
    stalled_search(0);
}

TEST(session_freed_mid_search)
{
    stalled_search(1);
}

TEST(start_failures_never_call_back)
{
    struct env e;
    env_open(&e, 9); /* nothing is ever sent */
    struct tkm_err err = {0};
    struct out o = {0};
    struct tkm_sig_identity none = {0};
    struct tkm_sig_policy kl = {.trusted_root = "{}", .trusted_root_len = 2, .identities = &none};
    ASSERT_EQ(tkm_sig_job_verify(e.ses, "t/img", IMG, &kl, on_job, &o, NULL, &err),
              TKM_SIG_EPOLICY);
    ASSERT_EQ(err.code, TKM_SIG_EPOLICY);
    ASSERT_STRCONTAINS(err.msg, "any signer at all is not a policy");
    ASSERT_STREQ(tkm_sig_reason(err.code), "InvalidPolicy");
    struct tkm_sig_key k;
    struct tkm_sig_policy pol = key_policy(&k, PUB);
    tkm_err_clear(&err);
    ASSERT_EQ(tkm_sig_job_verify(e.ses, "t/img", "sha256:12", &pol, on_job, &o, NULL, &err),
              -EINVAL);
    ASSERT_STRCONTAINS(err.msg, "is not sha256:<64 hex>");
    tkm_err_clear(&err);
    ASSERT_EQ(tkm_sig_job_verify(e.ses, "t/img", IMG, &pol, NULL, &o, NULL, &err), -EINVAL);
    ASSERT_EQ(tkm_sig_job_verify(NULL, "t/img", IMG, &pol, on_job, &o, NULL, &err), -EINVAL);
    ASSERT_EQ(tkm_oci_session_jobs(e.ses), 0);
    env_close(&e);
    ASSERT_EQ(o.calls, 0);
}

TEST(reasons_are_stable)
{
    static const struct {
        int rc;
        const char *reason;
    } t[] = {{0, "Verified"},
             {-ENOENT, "NoSignature"},
             {TKM_SIG_ENOIMAGE, "ImageNotFound"},
             {-EKEYREJECTED, "KeyMismatch"},
             {-EBADMSG, "SignatureForOtherImage"},
             {-ENOTSUP, "UnsupportedSignature"},
             {-EPROTONOSUPPORT, "UnsupportedSignature"},
             {-EINVAL, "MalformedSignature"},
             {-EACCES, "RegistryUnauthorized"},
             {-EPERM, "RegistryUnauthorized"},
             {-ECONNREFUSED, "RegistryUnreachable"},
             {-ETIMEDOUT, "RegistryUnreachable"},
             {-ECONNRESET, "RegistryUnreachable"},
             {-EHOSTUNREACH, "RegistryUnreachable"},
             {-EIO, "RegistryUnreachable"},
             {-EAGAIN, "RegistryUnreachable"},
             {-EPROTO, "RegistryError"},
             {-E2BIG, "RegistryError"},
             {-ELOOP, "RegistryError"},
             {TKM_SIG_EPOLICY, "InvalidPolicy"},
             {-ECANCELED, "Cancelled"},
             {-ENOMEM, "InternalError"}};
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
        ASSERT_STREQ(tkm_sig_reason(t[i].rc), t[i].reason);
}

TEST(referrer_digest_mismatch_is_the_registry_s_fault)
{
    struct art a;
    art_init(&a);
    /* the manifest listed by the index comes back with other bytes */
    struct tsrv_reply ri = {200, INDEX, a.idx.data}, rm = {200, MANIF, "{\"layers\":[]}"};
    struct tsrv srv;
    tsrv_init(&srv);
    ASSERT_OK(tsrv_route(&srv, "GET", "/v2/t/img/referrers/" IMG, TSRV_TARGET, NULL, &ri, 1));
    ASSERT_OK(tsrv_route(&srv, "GET", a.mpath, TSRV_TARGET, NULL, &rm, 1));
    ASSERT_OK(tsrv_route(&srv, NULL, NULL, TSRV_PREFIX, NULL, &R_NF, 1));
    int port = tsrv_listen(&srv);
    ASSERT(port > 0);
    struct env e;
    env_open(&e, port);
    struct tkm_sig_key k;
    struct tkm_sig_policy pol = key_policy(&k, PUB);
    struct out o;
    ASSERT_EQ(search(&e, &pol, &o), -EPROTO);
    ASSERT_STREQ(tkm_sig_reason(o.rc), "RegistryError");
    ASSERT_STRCONTAINS(o.msg, a.mdig);
    env_close(&e);
    art_release(&a);
    tsrv_stop(&srv);
}

TEST(registry_5xx_after_retries)
{
    struct tsrv_reply down = {503, NULL, "unavailable"};
    struct tsrv srv;
    int port = tsrv_start(&srv, &down, 1);
    ASSERT(port > 0);
    struct env e;
    env_open(&e, port);
    struct tkm_sig_key k;
    struct tkm_sig_policy pol = key_policy(&k, PUB);
    struct out o;
    ASSERT_EQ(search(&e, &pol, &o), -EIO);
    ASSERT_STREQ(tkm_sig_reason(o.rc), "RegistryUnreachable");
    ASSERT_STRCONTAINS(o.msg, "HTTP 503");
    ASSERT_EQ(tsrv_nreqs(&srv), 4); /* 3 retries on a loop timer */
    env_close(&e);
    tsrv_stop(&srv);
}
