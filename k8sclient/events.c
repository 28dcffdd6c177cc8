/*
 * events.c - core/v1 Events with aggregation of repeats. See k8s/events.h.
 *
 * Each remembered Event is an entry keyed by (namespace, kind, name, uid,
 * type, reason, message), kept in most-recently-used order. A repeat within
 * the window bumps count and merge-patches {count, lastTimestamp}; a repeat
 * that arrives while the create is still in flight is folded into the count
 * and patched once the create returns. Entries with a request in flight are
 * never evicted, and in-flight completions find their entry again by key, so
 * eviction and k8s_recorder_free() cannot leave dangling pointers.
 */
#include <k8s/events.h>

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <tkm/log.h>
#include <tkm/util.h>

#define DEFAULT_WINDOW_MS (10u * 60 * 1000)
#define DEFAULT_MAX       4096
#define MSG_MAX           1024

struct ev_entry {
    char *key;
    char *ns;   /* the Event's namespace */
    char *name; /* the Event's name */
    long count;
    long patched_count; /* count the server has (or is being sent) */
    uint64_t last_ms;
    int busy; /* a create or patch is in flight */
    struct ev_entry *prev, *next;
};

struct k8s_recorder {
    struct k8s_client *c;
    char *component, *host;
    uint64_t window_ms;
    size_t max, n;
    struct ev_entry *head, *tail; /* head = most recent */
    struct k8s_recorder_stats stats;
    int freed;
};

struct ev_req {
    struct k8s_recorder *rec;
    char *key;
    int create;
    long count; /* the count this request sends */
};

static void entry_free(struct ev_entry *e)
{
    free(e->key);
    free(e->ns);
    free(e->name);
    free(e);
}

static void entry_unlink(struct k8s_recorder *rec, struct ev_entry *e)
{
    if (e->prev)
        e->prev->next = e->next;
    else
        rec->head = e->next;
    if (e->next)
        e->next->prev = e->prev;
    else
        rec->tail = e->prev;
    e->prev = e->next = NULL;
    rec->n--;
}

static void entry_push(struct k8s_recorder *rec, struct ev_entry *e)
{
    e->prev = NULL;
    e->next = rec->head;
    if (rec->head)
        rec->head->prev = e;
    rec->head = e;
    if (!rec->tail)
        rec->tail = e;
    rec->n++;
}

static struct ev_entry *entry_find(struct k8s_recorder *rec, const char *key)
{
    for (struct ev_entry *e = rec->head; e; e = e->next)
        if (strcmp(e->key, key) == 0)
            return e;
    return NULL;
}

static void recorder_destroy(struct k8s_recorder *rec)
{
    while (rec->head) {
        struct ev_entry *e = rec->head;
        entry_unlink(rec, e);
        entry_free(e);
    }
    free(rec->component);
    free(rec->host);
    free(rec);
}

int k8s_recorder_new(struct k8s_client *c, const struct k8s_recorder_opts *o,
                     struct k8s_recorder **out, struct tkm_err *err)
{
    if (!c || !o || !o->component || !*o->component)
        return tkm_err_set(err, -EINVAL, "event recorder: a client and a component are required");
    struct k8s_recorder *rec = calloc(1, sizeof *rec);
    if (!rec)
        return tkm_err_set(err, -ENOMEM, "event recorder: out of memory");
    rec->c = c;
    rec->window_ms = o->window_ms ? o->window_ms : DEFAULT_WINDOW_MS;
    rec->max = o->max_entries ? o->max_entries : DEFAULT_MAX;
    rec->component = strdup(o->component);
    rec->host = o->host ? strdup(o->host) : NULL;
    if (!rec->component || (o->host && !rec->host)) {
        recorder_destroy(rec);
        return tkm_err_set(err, -ENOMEM, "event recorder: out of memory");
    }
    *out = rec;
    return 0;
}

void k8s_recorder_free(struct k8s_recorder *rec)
{
    if (!rec)
        return;
    rec->freed = 1;
    if (rec->stats.inflight == 0)
        recorder_destroy(rec);
}

void k8s_recorder_stats(const struct k8s_recorder *rec, struct k8s_recorder_stats *out)
{
    *out = rec->stats;
}

static void rfc3339_now(char out[32])
{
    struct timespec ts;
    struct tm tm;
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    strftime(out, 32, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

static int send_patch(struct k8s_recorder *rec, struct ev_entry *e);
static int send_create(struct k8s_recorder *rec, struct ev_entry *e, json_t *body);

static void ev_done(int rc, json_t *obj, const struct k8s_status *st, void *data)
{
    (void)obj;
    struct ev_req *q = data;
    struct k8s_recorder *rec = q->rec;
    rec->stats.inflight--;
    struct ev_entry *e = rec->freed ? NULL : entry_find(rec, q->key);
    if (rc == 0) {
        if (q->create)
            rec->stats.created++;
        else
            rec->stats.aggregated++;
    } else {
        char buf[512];
        rec->stats.failed++;
        tkm_warn("k8s: event %s: %s", q->create ? "create" : "update",
                 k8s_status_str(st, buf, sizeof buf));
    }
    if (e) {
        e->busy = 0;
        if (rc != 0 && (q->create || st->code == 404)) {
            /* Gone or never made: forget it; the next repeat creates anew. */
            entry_unlink(rec, e);
            entry_free(e);
        } else if (rc == 0 && e->count > q->count) {
            send_patch(rec, e); /* repeats arrived meanwhile */
        }
    }
    free(q->key);
    free(q);
    if (rec->freed && rec->stats.inflight == 0)
        recorder_destroy(rec);
}

static int start_req(struct k8s_recorder *rec, struct ev_entry *e, int create, json_t *body)
{
    struct ev_req *q = calloc(1, sizeof *q);
    if (!q || !(q->key = strdup(e->key))) {
        free(q);
        return -ENOMEM;
    }
    q->rec = rec;
    q->create = create;
    q->count = e->count;
    int rc;
    if (create) {
        rc = k8s_create_async(rec->c, &k8s_res_events, e->ns, body, ev_done, q);
    } else {
        struct k8s_patch_opts po = {.type = K8S_PATCH_MERGE};
        rc = k8s_patch_async(rec->c, &k8s_res_events, e->ns, e->name, body, &po, ev_done, q);
    }
    if (rc) {
        free(q->key);
        free(q);
        return rc;
    }
    e->busy = 1;
    e->patched_count = e->count;
    rec->stats.inflight++;
    return 0;
}

static int send_patch(struct k8s_recorder *rec, struct ev_entry *e)
{
    char now[32];
    rfc3339_now(now);
    json_t *p = json_pack("{s:I,s:s}", "count", (json_int_t)e->count, "lastTimestamp", now);
    if (!p)
        return -ENOMEM;
    int rc = start_req(rec, e, 0, p);
    json_decref(p);
    return rc;
}

static int send_create(struct k8s_recorder *rec, struct ev_entry *e, json_t *body)
{
    return start_req(rec, e, 1, body);
}

static json_t *event_body(struct k8s_recorder *rec, const struct k8s_object_ref *o, const char *ns,
                          const char *name, const char *type, const char *reason, const char *msg,
                          long count)
{
    char now[32];
    rfc3339_now(now);
    json_t *inv = json_pack("{s:s*,s:s,s:s*,s:s,s:s*,s:s*}", "apiVersion", o->api_version, "kind",
                            o->kind, "namespace", o->namespace, "name", o->name, "uid", o->uid,
                            "resourceVersion", o->resource_version);
    json_t *src = json_pack("{s:s,s:s*}", "component", rec->component, "host", rec->host);
    if (!inv || !src) {
        json_decref(inv);
        json_decref(src);
        return NULL;
    }
    return json_pack("{s:s,s:s,s:{s:s,s:s},s:o,s:s,s:s,s:s,s:I,s:s,s:s,s:o,s:s,s:s}", "apiVersion",
                     "v1", "kind", "Event", "metadata", "name", name, "namespace", ns,
                     "involvedObject", inv, "reason", reason, "message", msg, "type", type, "count",
                     (json_int_t)count, "firstTimestamp", now, "lastTimestamp", now, "source", src,
                     "reportingComponent", rec->component, "reportingInstance",
                     rec->host ? rec->host : rec->component);
}

/* Drops the least recently used idle entries beyond the cap. */
static void evict(struct k8s_recorder *rec)
{
    struct ev_entry *e = rec->tail;
    while (rec->n > rec->max && e) {
        struct ev_entry *prev = e->prev;
        if (!e->busy) {
            entry_unlink(rec, e);
            entry_free(e);
        }
        e = prev;
    }
}

static int emit_new(struct k8s_recorder *rec, struct ev_entry *e, const struct k8s_object_ref *o,
                    const char *type, const char *reason, const char *msg)
{
    char name[320];
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    /* client-go's naming: <object>.<unix nanoseconds in hex>. */
    snprintf(name, sizeof name, "%.240s.%llx", o->name,
             (unsigned long long)ts.tv_sec * 1000000000ull + (unsigned long long)ts.tv_nsec);
    free(e->name);
    if (!(e->name = strdup(name)))
        return -ENOMEM;
    e->count = 1;
    json_t *body = event_body(rec, o, e->ns, name, type, reason, msg, 1);
    if (!body)
        return -ENOMEM;
    int rc = send_create(rec, e, body);
    json_decref(body);
    return rc;
}

int k8s_event_emit(struct k8s_recorder *rec, const struct k8s_object_ref *o, const char *type,
                   const char *reason, const char *fmt, ...)
{
    if (!rec || !o || !o->kind || !o->name || !type || !reason || !fmt || rec->freed)
        return -EINVAL;
    if (strcmp(type, "Normal") != 0 && strcmp(type, "Warning") != 0)
        return -EINVAL;
    char msg[MSG_MAX + 1];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    const char *ns = o->namespace && *o->namespace ? o->namespace : "default";
    struct tkm_buf key = TKM_BUF_INIT(8192);
    if (tkm_buf_printf(&key, "%s\x1f%s\x1f%s\x1f%s\x1f%s\x1f%s\x1f%s", ns, o->kind, o->name,
                       o->uid ? o->uid : "", type, reason, msg))
        return -ENOMEM;
    uint64_t now = tkm_now_ms();
    int rc = 0;
    struct ev_entry *e = entry_find(rec, key.data);
    if (e && now - e->last_ms <= rec->window_ms) {
        entry_unlink(rec, e);
        entry_push(rec, e);
        e->count++;
        e->last_ms = now;
        rc = e->busy ? 0 : send_patch(rec, e); /* busy: patched when it returns */
        tkm_buf_release(&key);
        return rc;
    }
    if (!e) {
        e = calloc(1, sizeof *e);
        if (!e || !(e->ns = strdup(ns))) {
            free(e);
            tkm_buf_release(&key);
            return -ENOMEM;
        }
        e->key = tkm_buf_detach(&key, NULL);
        entry_push(rec, e);
    } else {
        entry_unlink(rec, e);
        entry_push(rec, e);
    }
    tkm_buf_release(&key);
    e->last_ms = now;
    if (e->busy) { /* a stale entry still in flight: fold into it */
        e->count++;
        return 0;
    }
    rc = emit_new(rec, e, o, type, reason, msg);
    if (rc) {
        entry_unlink(rec, e);
        entry_free(e);
    }
    evict(rec);
    return rc;
}
