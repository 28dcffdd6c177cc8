/*
 * watch.c - list then watch, with resourceVersion tracking, 410 relists,
 * Retry-After and jittered backoff. See k8s/watch.h for the behaviour and
 * reliability.md section 1 for the why.
 *
 * State machine (one request at a time, all on the loop):
 *   list  --ok-->  watch --normal end--> watch (same RV, at once)
 *     |              |--410 (event or HTTP)--> list at last RV (then at "")
 *     |              |--429/5xx--> wait max(Retry-After, backoff) --> watch
 *     |              |--cut/refused/bad frame/very short--> backoff --> watch
 *     |              '--other 4xx--> backoff --> list
 *     '--fail--> backoff (or Retry-After) --> list
 * The uv timer runs the next step, so nothing happens inside start/stop.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include <tkm/backoff.h>
#include <tkm/bug.h>
#include <tkm/log.h>
#include <tkm/util.h>

#include "watch-int.h"

#define ACCEPT_META_LIST  "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"
#define ACCEPT_META_WATCH "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1"

/* A watch's timeoutSeconds is drawn from [300, 600] (client-go's range). */
#define TIMEOUT_MIN_S 300u
#define TIMEOUT_MAX_S 600u
/* A watch that ends sooner than this without an event is an error
 * (client-go's VeryShortWatchError). */
#define SHORT_WATCH_MS 1000u
/* The most of a server's Retry-After a watch waits. */
#define MAX_RETRY_AFTER_S 60

enum list_rv { LIST_RV_ANY = 0, LIST_RV_LAST, LIST_RV_QUORUM };
enum next_step { STEP_LIST = 0, STEP_WATCH };

struct k8s_watch {
    struct k8s_client *c;
    uv_loop_t *loop;
    struct k8s_watch_opts o;
    char *ns, *label, *field;
    struct k8s_watch_handler h;
    void *data;
    struct k8s_watch_stats st;
    char *rv;             /* last resourceVersion seen, "" before the first list */
    enum list_rv list_rv; /* which RV the next list uses */
    enum next_step next;
    struct k8s_req *req; /* in flight, or NULL */
    int req_is_list;
    struct k8s__framer fr;
    struct k8s__rawdec rd; /* the decoder's scratch, reused */
    int list_begun;
    int got_410;
    int stream_rc;
    struct tkm_err stream_err;
    uint64_t watch_started_ms, watch_events;
    uv_timer_t timer;
    struct tkm_backoff bo;
    uint64_t rng;
    int stopping, timer_closed;
    int halted;            /* a handler returned non-zero: no more requests or callbacks */
    int watch_rv0;         /* watching from ""/"0": the RV is held through the synthetic ADDEDs */
    const char *rv0_param; /* "0" or NULL (""), the watch's resourceVersion then */
    void (*closed_cb)(void *data);
    void *closed_data;
};

static void start_next(struct k8s_watch *w);

static int dead(const struct k8s_watch *w)
{
    return w->stopping || w->halted;
}

/* A handler asked to stop: cancel what runs, deliver nothing more. The
 * memory stays until the owner calls k8s_watch_close(). */
static void halt(struct k8s_watch *w)
{
    if (dead(w))
        return;
    w->halted = 1;
    if (w->req)
        k8s_req_cancel(w->req);
    uv_timer_stop(&w->timer);
}

static int set_rv(struct k8s_watch *w, const char *rv)
{
    if (!rv || !*rv || strcmp(rv, w->rv) == 0)
        return 0;
    char *n = strdup(rv);
    if (!n)
        return -ENOMEM;
    free(w->rv);
    w->rv = n;
    return 0;
}

static void maybe_free(struct k8s_watch *w)
{
    if (!w->stopping || w->req || !w->timer_closed)
        return;
    void (*cb)(void *) = w->closed_cb;
    void *d = w->closed_data;
    k8s__framer_release(&w->fr);
    k8s__rawdec_release(&w->rd);
    free(w->ns);
    free(w->label);
    free(w->field);
    free(w->rv);
    free(w);
    if (cb)
        cb(d);
}

static void on_timer(uv_timer_t *t)
{
    struct k8s_watch *w = t->data;
    if (!dead(w))
        start_next(w);
}

static void schedule(struct k8s_watch *w, enum next_step step, uint64_t delay_ms)
{
    w->next = step;
    uv_timer_start(&w->timer, on_timer, delay_ms, 0);
}

/* Backs off after a failure; the server's Retry-After (s, -1 = none) is a
 * lower bound. */
static void fail_and_retry(struct k8s_watch *w, enum next_step step, int rc, long retry_after_s,
                           const char *msg)
{
    uint64_t d = tkm_backoff_next(&w->bo, tkm_now_ms());
    if (retry_after_s >= 0) {
        long ra = retry_after_s;
        if (ra > MAX_RETRY_AFTER_S)
            ra = MAX_RETRY_AFTER_S;
        uint64_t ra_ms = (uint64_t)ra * 1000u;
        w->st.last_retry_after_ms = ra_ms;
        if (ra_ms > d)
            d = ra_ms;
    }
    tkm_warn("watch %s: %s; %s again in %" PRIu64 " ms", w->o.res->plural, msg,
             step == STEP_LIST ? "listing" : "watching", d);
    if (w->h.error)
        w->h.error(rc, msg, d, w->data);
    if (!dead(w))
        schedule(w, step, d);
}

static int build_path(struct k8s_watch *w, struct tkm_buf *path, int watch, struct tkm_err *err)
{
    int rc = k8s_path(path, w->o.res, w->ns, NULL, NULL, err);
    if (rc < 0)
        return rc;
    if (watch) {
        char t[24];
        unsigned secs = (unsigned)tkm_rand_range(&w->rng, TIMEOUT_MIN_S, TIMEOUT_MAX_S);
        snprintf(t, sizeof t, "%u", secs);
        if ((rc = k8s_query_add(path, "watch", "1")) < 0 ||
            (rc = k8s_query_add(path, "resourceVersion", *w->rv ? w->rv : w->rv0_param)) < 0 ||
            (rc = k8s_query_add(path, "allowWatchBookmarks", "true")) < 0 ||
            (rc = k8s_query_add(path, "timeoutSeconds", t)) < 0)
            return tkm_err_set(err, rc, "watch: cannot build the request path");
    } else if (w->list_rv == LIST_RV_ANY) {
        rc = k8s_query_add(path, "resourceVersion", "0");
    } else if (w->list_rv == LIST_RV_LAST && *w->rv) {
        if ((rc = k8s_query_add(path, "resourceVersion", w->rv)) == 0)
            rc = k8s_query_add(path, "resourceVersionMatch", "NotOlderThan");
    }
    if (rc < 0 || (rc = k8s_query_add(path, "labelSelector", w->label)) < 0 ||
        (rc = k8s_query_add(path, "fieldSelector", w->field)) < 0)
        return tkm_err_set(err, rc, "watch: cannot build the request path");
    return 0;
}

/* ---- list ---------------------------------------------------------------- */

/* Decodes one list item (item 1) or watch event; a failure ends the stream. */
static int decode(struct k8s_watch *w, int item, const char *p, size_t n,
                  struct k8s_watch_event *ev, json_t **root)
{
    int rc;
    *root = NULL;
    if (item)
        rc = k8s__item_decode_raw(&w->rd, p, n, ev, &w->stream_err);
    else
        rc = k8s__event_decode_raw(&w->rd, p, n, ev, root, &w->stream_err);
    if (rc < 0)
        w->stream_rc = rc;
    return rc;
}

static int list_item_cb(const char *p, size_t n, void *data)
{
    struct k8s_watch *w = data;
    struct k8s_watch_event ev;
    json_t *root;
    if (dead(w) || decode(w, 1, p, n, &ev, &root) < 0)
        return 1;
    if (!w->list_begun) {
        w->list_begun = 1;
        if (w->h.list_begin)
            w->h.list_begin(w->data);
    }
    if (w->h.list_item && !dead(w) && w->h.list_item(&ev, w->data) != 0 && !dead(w))
        halt(w);
    json_decref(root);
    return dead(w) ? 1 : 0;
}

/* The body of a list (cb list_item_cb) or of a watch (event_cb). */
static int feed(struct k8s_watch *w, const char *p, size_t n, k8s__frame_cb cb)
{
    int rc = k8s__framer_feed(&w->fr, p, n, cb, w, &w->stream_err);
    if (rc < 0)
        w->stream_rc = rc;
    return rc != 0;
}

static int list_data(struct k8s_req *req, const char *p, size_t n, void *data)
{
    struct k8s_watch *w = data;
    (void)req;
    if (dead(w) || w->stream_rc)
        return 1;
    return feed(w, p, n, list_item_cb);
}

/* The list's own resourceVersion, from the framer's non-item bytes. */
static int list_finish(struct k8s_watch *w, struct tkm_err *err)
{
    int rc = k8s__framer_finish(&w->fr, err);
    if (rc < 0)
        return rc;
    json_error_t je;
    json_t *rest = json_loadb(w->fr.rest.data, w->fr.rest.len, JSON_REJECT_DUPLICATES, &je);
    if (!rest)
        return tkm_err_set(err, -EPROTO, "list of %s: invalid JSON: %s", w->o.res->plural, je.text);
    const char *rv =
        json_string_value(json_object_get(json_object_get(rest, "metadata"), "resourceVersion"));
    if (!rv || !*rv)
        rc = tkm_err_set(err, -EPROTO, "list of %s has no metadata.resourceVersion",
                         w->o.res->plural);
    else
        rc = set_rv(w, rv);
    json_decref(rest);
    return rc;
}

static int too_large_rv(const struct k8s_status *st)
{
    return st->code == 504 && k8s_status_has_cause(st, "ResourceVersionTooLarge");
}

static void list_failed(struct k8s_watch *w, struct k8s_response *resp)
{
    char msg[600];
    w->st.list_failures++;
    if (w->list_begun && w->h.list_abort)
        w->h.list_abort(w->data);
    w->list_begun = 0;
    if (dead(w))
        return;
    if (w->stream_rc) {
        fail_and_retry(w, STEP_LIST, w->stream_rc, -1, w->stream_err.msg);
        return;
    }
    k8s_status_str(resp->st, msg, sizeof msg);
    if ((resp->code == 410 || too_large_rv(resp->st)) && w->list_rv == LIST_RV_LAST) {
        /* The last RV is gone too: a quorum read gives the current state. */
        tkm_info("list of %s at resourceVersion %s: %s; listing the current state",
                 w->o.res->plural, w->rv, msg);
        w->list_rv = LIST_RV_QUORUM;
        schedule(w, STEP_LIST, 0);
        return;
    }
    if (resp->code == 429)
        w->st.throttled++;
    fail_and_retry(w, STEP_LIST, resp->rc, resp->st->retry_after_s, msg);
}

static void list_done(struct k8s_req *req, struct k8s_response *resp, void *data)
{
    struct k8s_watch *w = data;
    struct tkm_err err = {0};
    (void)req;
    w->req = NULL;
    if (dead(w)) {
        maybe_free(w);
        return;
    }
    if (resp->rc < 0 || w->stream_rc) {
        list_failed(w, resp);
        return;
    }
    int rc = list_finish(w, &err);
    if (rc < 0) {
        w->stream_rc = rc;
        w->stream_err = err;
        list_failed(w, resp);
        return;
    }
    /* The list is complete: w->rv is its resourceVersion. */
    w->st.lists++;
    if (!w->list_begun && w->h.list_begin)
        w->h.list_begin(w->data);
    w->list_begun = 0;
    w->list_rv = LIST_RV_LAST;
    w->watch_rv0 = 0;
    if (w->h.list_end && w->h.list_end(w->rv, w->data) != 0 && !dead(w))
        halt(w);
    if (!dead(w))
        schedule(w, STEP_WATCH, 0);
}

/* ---- watch --------------------------------------------------------------- */

static int event_cb(const char *p, size_t n, void *data)
{
    struct k8s_watch *w = data;
    struct k8s_watch_event ev;
    json_t *root;
    if (dead(w) || decode(w, 0, p, n, &ev, &root) < 0)
        return 1;
    if (ev.type == K8S_WATCH_ERROR) {
        if (ev.code == 410) {
            w->got_410 = 1;
        } else {
            w->stream_rc = -EREMOTEIO;
            tkm_err_set(&w->stream_err, -EREMOTEIO, "watch ERROR event: %ld %s: %s", ev.code,
                        ev.reason, ev.message);
        }
        json_decref(root);
        return 1;
    }
    w->watch_events++;
    if (w->watch_rv0 && ev.type != K8S_WATCH_ADDED)
        w->watch_rv0 = 0;
    if (ev.type == K8S_WATCH_BOOKMARK) {
        w->st.bookmarks++;
    } else {
        w->st.events++;
        if (w->h.event && w->h.event(&ev, w->data) != 0 && !dead(w))
            halt(w);
    }
    if (!w->watch_rv0 && set_rv(w, ev.resource_version) < 0) {
        w->stream_rc = -ENOMEM;
        tkm_err_set(&w->stream_err, -ENOMEM, "watch: out of memory");
    }
    json_decref(root);
    return dead(w) || w->stream_rc ? 1 : 0;
}

static int watch_data(struct k8s_req *req, const char *p, size_t n, void *data)
{
    struct k8s_watch *w = data;
    (void)req;
    if (dead(w) || w->stream_rc || w->got_410)
        return 1;
    return feed(w, p, n, event_cb);
}

static void watch_failed(struct k8s_watch *w, struct k8s_response *resp)
{
    char msg[600];
    w->st.watch_failures++;
    k8s_status_str(resp->st, msg, sizeof msg);
    if (resp->code == 410 || too_large_rv(resp->st)) {
        w->st.relists_410++;
        w->list_rv = LIST_RV_LAST;
        tkm_info("watch %s at resourceVersion %s: %s; relisting", w->o.res->plural, w->rv, msg);
        schedule(w, STEP_LIST, 0);
        return;
    }
    if (resp->code == 0 || resp->code == 200 || resp->code == 429 || resp->code >= 500) {
        /* Connection refused or cut, throttled, server trouble: the RV is
         * still good, so watch again from it without a list. */
        if (resp->code == 429)
            w->st.throttled++;
        fail_and_retry(w, STEP_WATCH, resp->rc, resp->st->retry_after_s, msg);
        return;
    }
    fail_and_retry(w, STEP_LIST, resp->rc, resp->st->retry_after_s, msg);
}

static void watch_done(struct k8s_req *req, struct k8s_response *resp, void *data)
{
    struct k8s_watch *w = data;
    struct tkm_err err = {0};
    (void)req;
    w->req = NULL;
    if (dead(w)) {
        maybe_free(w);
        return;
    }
    uint64_t lived = tkm_now_ms() - w->watch_started_ms;
    if (w->got_410) {
        w->st.relists_410++;
        w->list_rv = LIST_RV_LAST;
        tkm_info("watch %s: resourceVersion %s expired (410); relisting", w->o.res->plural, w->rv);
        schedule(w, STEP_LIST, 0);
        return;
    }
    if (w->stream_rc) {
        /* An oversized or undecodable event: everything before it was
         * delivered and w->rv is the last good RV; watch again from there
         * (no relist: the cache is still consistent up to that RV). */
        w->st.watch_failures++;
        if (w->stream_rc == -E2BIG)
            w->st.oversized_events++;
        fail_and_retry(w, STEP_WATCH, w->stream_rc, -1, w->stream_err.msg);
        return;
    }
    if (resp->rc < 0 && resp->rc != -EINTR) {
        watch_failed(w, resp);
        return;
    }
    if (k8s__framer_finish(&w->fr, &err) < 0) {
        w->st.watch_failures++;
        fail_and_retry(w, STEP_WATCH, -EPROTO, -1, err.msg);
        return;
    }
    if (w->watch_events == 0 && lived < SHORT_WATCH_MS) {
        w->st.watch_failures++;
        fail_and_retry(w, STEP_WATCH, -EPIPE, -1,
                       "very short watch: the server closed it at once without an event");
        return;
    }
    tkm_dbg("watch %s ended after %" PRIu64 " ms, %" PRIu64 " events; resuming at %s",
            w->o.res->plural, lived, w->watch_events, w->rv);
    schedule(w, STEP_WATCH, 0);
}

/* ---- request start ------------------------------------------------------- */

static void start_next(struct k8s_watch *w)
{
    struct tkm_buf path = TKM_BUF_INIT(8192);
    struct tkm_err err = {0};
    int watch = w->next == STEP_WATCH && (*w->rv || w->watch_rv0);
    int rc = build_path(w, &path, watch, &err);
    if (rc < 0)
        goto out;
    k8s__framer_release(&w->fr);
    k8s__framer_init(&w->fr, watch ? K8S__FRAME_STREAM : K8S__FRAME_LIST, w->o.max_event_bytes);
    w->stream_rc = 0;
    tkm_err_clear(&w->stream_err);
    w->got_410 = 0;
    w->list_begun = 0;
    w->watch_events = 0;
    struct k8s_request r = {
        .method = "GET",
        .path = path.data,
        .accept = w->o.metadata_only ? (watch ? ACCEPT_META_WATCH : ACCEPT_META_LIST) : NULL,
        .idempotent = K8S_IDEMPOTENT,
        .no_retry = 1,
        .timeout_ms = watch ? (TIMEOUT_MAX_S + 60u) * 1000u : 5u * 60u * 1000u,
    };
    w->req_is_list = !watch;
    if (watch) {
        w->st.watches++;
        w->watch_started_ms = tkm_now_ms();
    }
    rc = k8s_request_start(w->c, &r, watch ? watch_data : list_data, watch ? watch_done : list_done,
                           w, &w->req, &err);
out:
    tkm_buf_release(&path);
    if (rc < 0) {
        w->req = NULL;
        fail_and_retry(w, watch ? STEP_WATCH : STEP_LIST, rc, -1, tkm_err_str(&err));
    }
}

/* ---- public -------------------------------------------------------------- */

static int dup_opt(const char *s, char **out)
{
    *out = NULL;
    if (!s || !*s)
        return 0;
    *out = strdup(s);
    return *out ? 0 : -ENOMEM;
}

static int check_opts(struct k8s_watch_opts *o, struct tkm_err *err)
{
    if (!o->res || !o->res->plural || !o->res->version)
        return tkm_err_set(err, -EINVAL, "watch: opts.res (the resource) is required");
    if (!o->max_event_bytes)
        o->max_event_bytes = 8u * 1024u * 1024u;
    return 0;
}

int k8s_watch_start(struct k8s_client *c, const struct k8s_watch_opts *opts,
                    const struct k8s_watch_handler *h, void *data, struct k8s_watch **out,
                    struct tkm_err *err)
{
    int rc;
    *out = NULL;
    if (!c || !opts || !h)
        return tkm_err_set(err, -EINVAL, "watch: client, options and handler are required");
    struct k8s_watch *w = calloc(1, sizeof *w);
    if (!w)
        return tkm_err_set(err, -ENOMEM, "watch: out of memory");
    w->o = *opts;
    if ((rc = check_opts(&w->o, err)) < 0)
        goto fail;
    w->o.ns = w->o.label_selector = w->o.field_selector = NULL;
    if ((rc = dup_opt(opts->ns, &w->ns)) < 0 ||
        (rc = dup_opt(opts->label_selector, &w->label)) < 0 ||
        (rc = dup_opt(opts->field_selector, &w->field)) < 0 || !(w->rv = strdup(""))) {
        rc = tkm_err_set(err, -ENOMEM, "watch: out of memory");
        goto fail;
    }
    w->c = c;
    w->loop = k8s_client_loop(c);
    w->h = *h;
    w->data = data;
    w->rng = tkm_now_ms() ^ (uint64_t)(uintptr_t)w;
    w->bo =
        (struct tkm_backoff){.initial_ms = w->o.backoff_initial_ms ? w->o.backoff_initial_ms : 800,
                             .max_ms = w->o.backoff_max_ms ? w->o.backoff_max_ms : 30000,
                             .reset_ms = 120000,
                             .jitter_pct = 100,
                             .rng = w->rng | 1};
    k8s__framer_init(&w->fr, K8S__FRAME_LIST, w->o.max_event_bytes);
    k8s__rawdec_init(&w->rd);
    if (opts->start_resource_version) {
        const char *srv = opts->start_resource_version;
        w->watch_rv0 = !*srv || strcmp(srv, "0") == 0;
        w->rv0_param = strcmp(srv, "0") == 0 ? "0" : NULL;
        if (strcmp(srv, "0") != 0 && set_rv(w, srv) < 0) {
            rc = tkm_err_set(err, -ENOMEM, "watch: out of memory");
            goto fail;
        }
    }
    w->o.start_resource_version = NULL;
    uv_timer_init(w->loop, &w->timer);
    w->timer.data = w;
    schedule(w, opts->start_resource_version ? STEP_WATCH : STEP_LIST, 0);
    *out = w;
    return 0;
fail:
    free(w->ns);
    free(w->label);
    free(w->field);
    free(w->rv);
    free(w);
    return rc;
}

static void on_timer_closed(uv_handle_t *h)
{
    struct k8s_watch *w = h->data;
    w->timer_closed = 1;
    maybe_free(w);
}

void k8s_watch_close(struct k8s_watch *w, void (*closed_cb)(void *data), void *data)
{
    /* A second stop would wait forever for a closed_cb that never comes; the
     * first caller's callback is kept (see k8s/watch.h). */
    if (!w || TKM_BUG(w->stopping))
        return;
    w->stopping = 1;
    w->closed_cb = closed_cb;
    w->closed_data = data;
    if (w->req)
        k8s_req_cancel(w->req);
    uv_timer_stop(&w->timer);
    uv_close((uv_handle_t *)&w->timer, on_timer_closed);
}

const char *k8s_watch_resource_version(const struct k8s_watch *w)
{
    return w->rv;
}

const struct k8s_watch_stats *k8s_watch_get_stats(const struct k8s_watch *w)
{
    return &w->st;
}
