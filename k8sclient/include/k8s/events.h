/*
 * k8s/events.h - recording core/v1 Events about objects, with aggregation.
 *
 * A recorder remembers the Events it created recently. Emitting the same
 * (involved object, type, reason, message) again within the window does not
 * create a new Event: it merge-patches the existing one's count and
 * lastTimestamp (as kubectl describe shows "x5 over 3m"). Outside the window,
 * or when the patch finds the Event gone (404), a new Event is created. The
 * memory of recent Events is bounded (max_entries, oldest dropped first).
 *
 * Emitting is fire-and-forget: failures are logged (tkm_warn) and counted,
 * never reported to the caller, because an Event must never fail the work it
 * describes.
 *
 * Lifecycle: k8s_recorder_new() (the client is borrowed and must outlive the
 * recorder), k8s_event_emit() any number of times, k8s_recorder_free() (safe
 * with Events still in flight: their completions are ignored).
 */
#ifndef K8S_EVENTS_H
#define K8S_EVENTS_H

#include <stddef.h>
#include <stdint.h>

#include <k8s/client.h>

struct k8s_recorder;

struct k8s_recorder_opts {
    const char *component; /* source.component / reportingComponent, e.g. "tkm-controller" */
    const char *host;      /* source.host (node name), optional */
    uint64_t window_ms;    /* aggregation window; default 10 min */
    size_t max_entries;    /* remembered Events; default 4096 */
};

/* The object an Event is about. Strings borrowed for the call. */
struct k8s_object_ref {
    const char *api_version; /* "tkm.io/v1alpha1" */
    const char *kind;        /* "TritonKernelCache" */
    const char *namespace;   /* NULL for cluster-scoped objects (the Event goes to "default") */
    const char *name;
    const char *uid;              /* optional */
    const char *resource_version; /* optional */
};

int k8s_recorder_new(struct k8s_client *c, const struct k8s_recorder_opts *o,
                     struct k8s_recorder **out, struct tkm_err *err);
void k8s_recorder_free(struct k8s_recorder *rec);

/* type: "Normal" or "Warning"; reason: UpperCamelCase; message: free text
 * (truncated to 1024 bytes). Returns 0 when the Event was handed to the
 * client, -EINVAL for bad arguments, -ENOMEM. */
int k8s_event_emit(struct k8s_recorder *rec, const struct k8s_object_ref *obj, const char *type,
                   const char *reason, const char *fmt, ...) __attribute__((format(printf, 5, 6)));

/* Counters for tests and metrics. */
struct k8s_recorder_stats {
    uint64_t created;    /* Events created (POST succeeded) */
    uint64_t aggregated; /* repeats folded into an existing Event (PATCH succeeded) */
    uint64_t failed;     /* requests that failed */
    uint64_t inflight;   /* requests not yet completed */
};
void k8s_recorder_stats(const struct k8s_recorder *rec, struct k8s_recorder_stats *out);

#endif
