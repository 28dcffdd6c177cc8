/*
 * lease.c - leader election on a coordination.k8s.io/v1 Lease. See
 * k8s/lease.h for the behaviour and reliability.md section 4 for the why.
 *
 * One round = GET the Lease (POST it when absent), decide, PUT it with the
 * resourceVersion read. One request at a time; the `tick` timer starts the
 * next round after the previous one ended, the `deadline` timer ends
 * leadership renew_deadline after the last successful renewal started.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <jansson.h>

#include <k8s/lease.h>
#include <tkm/backoff.h>
#include <tkm/bug.h>
#include <tkm/log.h>
#include <tkm/util.h>

#include "watch-int.h"

enum pending_op { OP_NONE = 0, OP_GET, OP_CREATE, OP_UPDATE, OP_RELEASE };

struct k8s_lease {
    struct k8s_client *c;
    uv_loop_t *loop;
    struct k8s_lease_opts o;
    char *ns, *name, *identity;
    int leader;
    uint64_t last_renew_ms; /* monotonic start of the last successful attempt */
    uint64_t attempt_ms;    /* monotonic start of the current attempt */
    char *observed_spec;    /* the record last seen (compact, sorted JSON) */
    char *observed_holder;
    uint64_t observed_ms; /* when observed_spec last changed, monotonic */
    uint64_t expiry_ms;   /* another holder's lease may be taken from then on (0: none) */
    json_t *last_obj;     /* the Lease as last written by us (for release) */
    struct k8s_req *req;
    enum pending_op op;
    uv_timer_t tick, deadline;
    int stopping, handles_open;
    struct k8s_lease_stats st;
    uint64_t rng;
    void (*closed_cb)(void *data);
    void *closed_data;
};

static void round_end(struct k8s_lease *l);
static void finish_stop(struct k8s_lease *l);

static void micro_time(char *out, size_t n)
{
    struct timespec ts;
    struct tm tm;
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    snprintf(out, n, "%04d-%02d-%02dT%02d:%02d:%02d.%06ldZ", tm.tm_year + 1900, tm.tm_mon + 1,
             tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, ts.tv_nsec / 1000);
}

int k8s_lease_is_leader(const struct k8s_lease *l)
{
    return l->leader && !l->stopping && tkm_now_ms() - l->last_renew_ms < l->o.renew_deadline_ms;
}

const struct k8s_lease_stats *k8s_lease_get_stats(const struct k8s_lease *l)
{
    return &l->st;
}

static void lose(struct k8s_lease *l, const char *why)
{
    if (!l->leader)
        return;
    l->leader = 0;
    l->st.lost++;
    uv_timer_stop(&l->deadline);
    tkm_warn("lease %s/%s: %s stopped leading: %s", l->ns, l->name, l->identity, why);
    if (l->o.on_stopped_leading)
        l->o.on_stopped_leading(l->o.data);
}

static void on_deadline(uv_timer_t *t)
{
    struct k8s_lease *l = t->data;
    lose(l, "no renewal succeeded within the renew deadline");
}

static void on_tick(uv_timer_t *t);

static int lease_send(struct k8s_lease *l, enum pending_op op, const char *method, json_t *body);

static void observe(struct k8s_lease *l, json_t *spec)
{
    char *s =
        json_dumps(spec ? spec : json_null(), JSON_COMPACT | JSON_SORT_KEYS | JSON_ENCODE_ANY);
    const char *holder = json_string_value(json_object_get(spec, "holderIdentity"));
    holder = holder ? holder : "";
    if (!s)
        return;
    if (l->observed_spec && strcmp(s, l->observed_spec) == 0) {
        free(s);
        return;
    }
    free(l->observed_spec);
    l->observed_spec = s;
    l->observed_ms = tkm_now_ms();
    if (!l->observed_holder || strcmp(holder, l->observed_holder) != 0) {
        char *h = strdup(holder);
        if (h) {
            free(l->observed_holder);
            l->observed_holder = h;
            if (l->o.on_new_leader)
                l->o.on_new_leader(h, l->o.data);
        }
    }
}

/* The record we write: ours, with acquireTime and leaseTransitions carried
 * over while we hold it and bumped on a takeover. */
static int fill_spec(struct k8s_lease *l, json_t *spec, int release)
{
    char now[40];
    const char *holder = json_string_value(json_object_get(spec, "holderIdentity"));
    json_int_t trans = json_integer_value(json_object_get(spec, "leaseTransitions"));
    int ours = holder && strcmp(holder, l->identity) == 0;
    micro_time(now, sizeof now);
    int rc = 0;
    rc |= json_object_set_new(spec, "holderIdentity", json_string(release ? "" : l->identity));
    rc |= json_object_set_new(
        spec, "leaseDurationSeconds",
        json_integer(release ? 1 : (json_int_t)((l->o.lease_duration_ms + 999) / 1000)));
    rc |= json_object_set_new(spec, "renewTime", json_string(now));
    if (!ours || release)
        rc |= json_object_set_new(spec, "acquireTime", json_string(now));
    if (!ours && !release)
        rc |= json_object_set_new(spec, "leaseTransitions", json_integer(trans + 1));
    else if (!json_object_get(spec, "leaseTransitions"))
        rc |= json_object_set_new(spec, "leaseTransitions", json_integer(trans));
    return rc ? -ENOMEM : 0;
}

static void on_got(struct k8s_lease *l, json_t *obj)
{
    json_t *spec = json_object_get(obj, "spec");
    observe(l, spec);
    const char *holder = l->observed_holder;
    json_int_t dur_s = json_integer_value(json_object_get(spec, "leaseDurationSeconds"));
    uint64_t dur_ms = dur_s > 0 ? (uint64_t)dur_s * 1000u : l->o.lease_duration_ms;
    l->expiry_ms = 0;
    if (*holder && strcmp(holder, l->identity) != 0) {
        l->expiry_ms = l->observed_ms + dur_ms;
        if (tkm_now_ms() >= l->expiry_ms)
            l->expiry_ms = 0;
    }
    if (l->expiry_ms) {
        lose(l, "another candidate holds the lease");
        round_end(l);
        return;
    }
    json_t *upd = json_deep_copy(obj);
    json_t *nspec = json_object();
    if (!upd || !nspec || json_object_update(nspec, spec ? spec : nspec) < 0 ||
        fill_spec(l, nspec, 0) < 0 || json_object_set(upd, "spec", nspec) < 0) {
        json_decref(upd);
        json_decref(nspec);
        l->st.failures++;
        round_end(l);
        return;
    }
    json_decref(nspec);
    if (lease_send(l, OP_UPDATE, "PUT", upd) < 0)
        round_end(l);
    json_decref(upd);
}

static void on_written(struct k8s_lease *l, json_t *obj)
{
    uint64_t now = tkm_now_ms();
    if (now - l->attempt_ms >= l->o.renew_deadline_ms) {
        /* The write landed, but too late to count on it. */
        l->st.failures++;
        lose(l, "the renewal took longer than the renew deadline");
        round_end(l);
        return;
    }
    l->st.renewals++;
    observe(l, json_object_get(obj, "spec"));
    json_decref(l->last_obj);
    l->last_obj = json_incref(obj);
    l->last_renew_ms = l->attempt_ms;
    uv_timer_start(&l->deadline, on_deadline, l->last_renew_ms + l->o.renew_deadline_ms - now, 0);
    if (!l->leader) {
        l->leader = 1;
        l->st.acquired++;
        tkm_info("lease %s/%s: %s is the leader", l->ns, l->name, l->identity);
        if (l->o.on_started_leading)
            l->o.on_started_leading(l->o.data);
    }
    round_end(l);
}

static json_t *new_lease(struct k8s_lease *l)
{
    json_t *spec = json_object();
    json_t *obj = json_pack("{s:s, s:s, s:{s:s, s:s}}", "apiVersion", "coordination.k8s.io/v1",
                            "kind", "Lease", "metadata", "name", l->name, "namespace", l->ns);
    if (!spec || !obj || fill_spec(l, spec, 0) < 0 || json_object_set(obj, "spec", spec) < 0) {
        json_decref(obj);
        obj = NULL;
    }
    json_decref(spec);
    return obj;
}

static void on_done(struct k8s_req *req, struct k8s_response *resp, void *data)
{
    struct k8s_lease *l = data;
    enum pending_op op = l->op;
    json_t *obj = NULL;
    (void)req;
    l->req = NULL;
    l->op = OP_NONE;
    if (resp->rc == 0) {
        json_error_t je;
        obj = json_loadb(resp->body->data, resp->body->len, JSON_REJECT_DUPLICATES, &je);
    }
    if (l->stopping) {
        if (op == OP_RELEASE && resp->rc < 0)
            tkm_warn("lease %s/%s: release failed: %s", l->ns, l->name,
                     resp->st->message ? resp->st->message : "?");
        json_decref(obj);
        finish_stop(l);
        return;
    }
    if (op == OP_GET && resp->code == 404) {
        json_t *nl = new_lease(l);
        if (!nl || lease_send(l, OP_CREATE, "POST", nl) < 0) {
            l->st.failures++;
            round_end(l);
        }
        json_decref(nl);
        return;
    }
    if (resp->rc < 0 || !obj) {
        if (resp->code == 409)
            l->st.conflicts++;
        else
            l->st.failures++;
        tkm_dbg("lease %s/%s: round failed: HTTP %ld %s", l->ns, l->name, resp->code,
                resp->st->message ? resp->st->message : "");
        round_end(l);
    } else if (op == OP_GET) {
        on_got(l, obj);
    } else {
        on_written(l, obj);
    }
    json_decref(obj);
}

static int lease_send(struct k8s_lease *l, enum pending_op op, const char *method, json_t *body)
{
    struct tkm_buf path = TKM_BUF_INIT(4096);
    struct tkm_err err = {0};
    char *js = NULL;
    int rc = k8s_path(&path, &k8s_res_leases, l->ns, op == OP_CREATE ? NULL : l->name, NULL, &err);
    if (rc == 0 && body && !(js = json_dumps(body, JSON_COMPACT)))
        rc = -ENOMEM;
    if (rc == 0) {
        uint64_t t = l->o.renew_deadline_ms / 2;
        struct k8s_request r = {
            .method = method,
            .path = path.data,
            .body = js,
            .body_len = js ? strlen(js) : 0,
            .timeout_ms = t < 1000 ? 1000 : t,
            .idempotent = op == OP_GET ? K8S_IDEMPOTENT : K8S_NOT_IDEMPOTENT,
            .no_retry = 1,
        };
        l->op = op;
        rc = k8s_request_start(l->c, &r, NULL, on_done, l, &l->req, &err);
        if (rc < 0) {
            l->op = OP_NONE;
            l->req = NULL;
        }
    }
    if (rc < 0)
        tkm_warn("lease %s/%s: %s", l->ns, l->name, tkm_err_str(&err));
    free(js);
    tkm_buf_release(&path);
    return rc;
}

static void round_end(struct k8s_lease *l)
{
    if (l->stopping)
        return;
    if (l->leader && tkm_now_ms() - l->last_renew_ms >= l->o.renew_deadline_ms)
        lose(l, "no renewal succeeded within the renew deadline");
    uint64_t d = l->o.retry_period_ms, now = tkm_now_ms();
    if (!l->leader)
        d += tkm_rand_range(&l->rng, 0, l->o.retry_period_ms / 5);
    /* A candidate waiting for another holder's lease to run out tries at
     * that instant, not up to a retry period after it. */
    if (!l->leader && l->expiry_ms > now && l->expiry_ms - now < d)
        d = l->expiry_ms - now;
    uv_timer_start(&l->tick, on_tick, d, 0);
}

static void on_tick(uv_timer_t *t)
{
    struct k8s_lease *l = t->data;
    if (l->stopping || l->req)
        return;
    l->st.attempts++;
    l->attempt_ms = tkm_now_ms();
    if (l->leader && l->attempt_ms - l->last_renew_ms >= l->o.renew_deadline_ms)
        lose(l, "no renewal succeeded within the renew deadline");
    if (lease_send(l, OP_GET, "GET", NULL) < 0) {
        l->st.failures++;
        round_end(l);
    }
}

static int check(struct k8s_lease_opts *o, struct tkm_err *err)
{
    if (!o->name || !*o->name || !o->identity || !*o->identity)
        return tkm_err_set(err, -EINVAL, "lease: name and identity are required");
    if (!o->lease_duration_ms)
        o->lease_duration_ms = 15000;
    if (!o->renew_deadline_ms)
        o->renew_deadline_ms = 10000;
    if (!o->retry_period_ms)
        o->retry_period_ms = 2000;
    if (o->lease_duration_ms <= o->renew_deadline_ms)
        return tkm_err_set(err, -EINVAL,
                           "lease %s: lease duration (%" PRIu64 " ms) must exceed the renew "
                           "deadline (%" PRIu64 " ms)",
                           o->name, o->lease_duration_ms, o->renew_deadline_ms);
    if (o->renew_deadline_ms * 10 <= o->retry_period_ms * 12)
        return tkm_err_set(err, -EINVAL,
                           "lease %s: renew deadline (%" PRIu64 " ms) must exceed 1.2 x the "
                           "retry period (%" PRIu64 " ms)",
                           o->name, o->renew_deadline_ms, o->retry_period_ms);
    return 0;
}

int k8s_lease_start(struct k8s_client *c, const struct k8s_lease_opts *opts, struct k8s_lease **out,
                    struct tkm_err *err)
{
    *out = NULL;
    if (!c || !opts)
        return tkm_err_set(err, -EINVAL, "lease: client and options are required");
    struct k8s_lease *l = calloc(1, sizeof *l);
    if (!l)
        return tkm_err_set(err, -ENOMEM, "lease: out of memory");
    l->o = *opts;
    int rc = check(&l->o, err);
    if (rc < 0)
        goto fail;
    const char *ns = opts->ns && *opts->ns ? opts->ns : k8s_client_namespace(c);
    l->ns = strdup(ns);
    l->name = strdup(opts->name);
    l->identity = strdup(opts->identity);
    if (!l->ns || !l->name || !l->identity) {
        rc = tkm_err_set(err, -ENOMEM, "lease: out of memory");
        goto fail;
    }
    l->o.ns = l->o.name = l->o.identity = NULL;
    l->c = c;
    l->loop = k8s_client_loop(c);
    l->rng = tkm_now_ms() ^ (uint64_t)(uintptr_t)l;
    uv_timer_init(l->loop, &l->tick);
    uv_timer_init(l->loop, &l->deadline);
    l->tick.data = l->deadline.data = l;
    l->handles_open = 2;
    uv_timer_start(&l->tick, on_tick, 0, 0);
    *out = l;
    return 0;
fail:
    free(l->ns);
    free(l->name);
    free(l->identity);
    free(l);
    return rc;
}

static void on_handle_closed(uv_handle_t *h)
{
    struct k8s_lease *l = h->data;
    if (--l->handles_open > 0)
        return;
    void (*cb)(void *) = l->closed_cb;
    void *d = l->closed_data;
    json_decref(l->last_obj);
    free(l->observed_spec);
    free(l->observed_holder);
    free(l->ns);
    free(l->name);
    free(l->identity);
    free(l);
    if (cb)
        cb(d);
}

/* Runs when no request is in flight any more during a stop. */
static void finish_stop(struct k8s_lease *l)
{
    if (l->leader && l->o.release_on_stop && l->last_obj &&
        tkm_now_ms() - l->last_renew_ms < l->o.renew_deadline_ms) {
        json_t *spec = json_object_get(l->last_obj, "spec");
        l->o.release_on_stop = 0; /* once */
        if (spec && fill_spec(l, spec, 1) == 0 &&
            lease_send(l, OP_RELEASE, "PUT", l->last_obj) == 0)
            return;
    }
    if (l->leader) {
        l->leader = 0;
        if (l->o.on_stopped_leading)
            l->o.on_stopped_leading(l->o.data);
    }
    uv_close((uv_handle_t *)&l->tick, on_handle_closed);
    uv_close((uv_handle_t *)&l->deadline, on_handle_closed);
}

static void on_stop_timer(uv_timer_t *t)
{
    finish_stop(t->data);
}

void k8s_lease_close(struct k8s_lease *l, void (*closed_cb)(void *data), void *data)
{
    if (!l || TKM_BUG(l->stopping)) /* a second stop would wait forever */
        return;
    l->stopping = 1;
    l->closed_cb = closed_cb;
    l->closed_data = data;
    uv_timer_stop(&l->tick);
    uv_timer_stop(&l->deadline);
    if (l->req) {
        k8s_req_cancel(l->req); /* on_done continues with finish_stop() */
        return;
    }
    /* Never call back from inside stop: continue from the loop. */
    uv_timer_start(&l->tick, on_stop_timer, 0, 0);
}
