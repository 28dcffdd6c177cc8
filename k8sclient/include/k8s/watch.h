/*
 * k8s/watch.h - list-then-watch of one resource, with resourceVersion
 * tracking, 410 relists and reconnects (client-go's Reflector, in C).
 *
 * A struct k8s_watch lists a resource (resourceVersion=0: the watch cache may
 * answer), hands every item to the handler, then watches from the list's
 * resourceVersion with allowWatchBookmarks and a random timeoutSeconds in
 * [300 s, 600 s]. It keeps the last resourceVersion seen (an
 * opaque string, compared for equality only) and:
 *   - re-watches from it when a watch ends normally (server timeout);
 *   - on 410 Gone / Expired (an ERROR event or the HTTP status) relists at the
 *     last resourceVersion, and if that list is also 410 (or 504
 *     ResourceVersionTooLarge) relists at "" (a quorum read);
 *   - on 429 or 5xx waits Retry-After (at least) and on connection errors,
 *     cut streams and undecodable events waits a backoff, then re-watches
 *     from the same resourceVersion WITHOUT relisting;
 *   - counts a watch that closes within 1 s with no event as an error
 *     (client-go's VeryShortWatchError), so a broken server is never polled
 *     in a hot loop;
 *   - backs off 800 ms x2 with jitter up to 30 s; the delay resets after 2 min
 *     without errors. While the apiserver is down a list is retried at that
 *     pace (about one request every 15..30 s once capped).
 *
 * Events are framed from the byte stream across any chunk split (see
 * watch-int.h); an event larger than max_event_bytes, or bytes that are not
 * JSON, end that watch (re-watch from the last good resourceVersion).
 *
 * Lifecycle:
 *   k8s_watch_start(client, &opts, &handler, data, &w, err)
 *   ... the loop runs; handler callbacks fire ...
 *   k8s_watch_close(w, closed_cb, data)   cancels the request in flight; the
 *                                         memory is freed before closed_cb
 * The client must outlive the watch (until closed_cb has run).
 *
 * Callback contract: if k8s_watch_start() fails no callback is ever called.
 * Otherwise callbacks run from the loop, never from inside k8s_watch_start()
 * or k8s_watch_close(). A callback may call k8s_watch_close() (nothing more is
 * delivered after it). A handler that returns non-zero halts the watch (the
 * request is cancelled, nothing more is delivered) but does not free it:
 * the owner still calls k8s_watch_close(). Single-threaded: everything runs
 * on the loop's thread.
 */
#ifndef K8S_WATCH_H
#define K8S_WATCH_H

#include <stddef.h>
#include <stdint.h>
#include <jansson.h>

#include <tkm/err.h>
#include <k8s/client.h>

struct k8s_watch;

enum k8s_watch_type {
    K8S_WATCH_ADDED = 1,
    K8S_WATCH_MODIFIED,
    K8S_WATCH_DELETED,
    K8S_WATCH_BOOKMARK,
    K8S_WATCH_ERROR,
};

/* "ADDED", ..., or "?" for an unknown value. Static string. */
const char *k8s_watch_type_str(enum k8s_watch_type t);

/*
 * One decoded event (or one list item, type ADDED). Everything is borrowed
 * and valid only until the callback returns.
 *   object        BOOKMARK and ERROR events only: the parsed object;
 *                 json_incref() it to keep it. NULL for ADDED/MODIFIED/
 *                 DELETED events and list items: those are validated (the
 *                 grammar jansson accepts, duplicate keys refused) and read
 *                 without building a jansson tree
 *   raw, raw_len  the object's exact JSON bytes as the server sent them (not
 *                 NUL-terminated): what an informer stores
 *   ns, name, resource_version, uid
 *                 from object.metadata; "" when absent (ns is "" for
 *                 cluster-scoped objects)
 *   ERROR events: code (the Status's code, e.g. 410), reason, message
 */
struct k8s_watch_event {
    enum k8s_watch_type type;
    json_t *object;
    const char *raw;
    size_t raw_len;
    const char *ns;
    const char *name;
    const char *resource_version;
    const char *uid;
    long code;
    const char *reason;
    const char *message;
};

/*
 * What the watch reports. Every member is optional. Returning non-zero from
 * list_item/list_end/event halts the watch (see above).
 *   list_begin  a list (initial or relist) starts; items follow
 *   list_item   one item of that list (type ADDED)
 *   list_end    the list is complete; rv is its resourceVersion (borrowed)
 *   list_abort  the list failed midway (items delivered since list_begin are
 *               to be discarded); a new list_begin follows later
 *   event       one watch event other than ERROR (ERRORs are handled here)
 *   error       something went wrong and the watch backs off for delay_ms:
 *               a sentence for logs (borrowed); purely informational
 */
struct k8s_watch_handler {
    void (*list_begin)(void *data);
    int (*list_item)(const struct k8s_watch_event *ev, void *data);
    int (*list_end)(const char *rv, void *data);
    void (*list_abort)(void *data);
    int (*event)(const struct k8s_watch_event *ev, void *data);
    void (*error)(int rc, const char *msg, uint64_t delay_ms, void *data);
};

/* Options; zero means the default. Strings are copied by k8s_watch_start(). */
struct k8s_watch_opts {
    const struct k8s_resource *res; /* required; borrowed, must outlive the watch */
    const char *ns;                 /* NULL/"" = all namespaces (namespaced kinds) */
    const char *label_selector;
    const char *field_selector;
    /* 1: lists and watches ask for PartialObjectMetadata (metadata only),
     * e.g. for Nodes: objects are then small. */
    int metadata_only;
    size_t max_event_bytes;      /* one event / list item; default 8 MiB */
    uint64_t backoff_initial_ms; /* default 800 */
    uint64_t backoff_max_ms;     /* default 30,000 */
    /* Non-NULL: skip the initial list and watch from this resourceVersion.
     * "0" (start at any: the server first sends the current objects as
     * synthetic ADDEDs, not in RV order) and "" (the same from a quorum
     * read) hold the stored RV until the first non-ADDED event, so a
     * reconnect in between starts over rather than skipping objects. A 410
     * later falls back to list then watch as usual. */
    const char *start_resource_version;
};

/* Counters for tests, metrics and logs. */
struct k8s_watch_stats {
    uint64_t lists;          /* LIST requests completed successfully */
    uint64_t list_failures;  /* LIST requests that failed */
    uint64_t relists_410;    /* relists caused by 410 Gone/Expired */
    uint64_t watches;        /* watch requests started */
    uint64_t watch_failures; /* watches that ended with an error */
    uint64_t events;         /* ADDED/MODIFIED/DELETED delivered */
    uint64_t bookmarks;
    uint64_t throttled;           /* 429 answers */
    uint64_t last_retry_after_ms; /* the last server-requested wait honoured */
    uint64_t oversized_events;    /* events over max_event_bytes (the watch resumed after them) */
};

/* Starts listing on c's loop. c, res and the handler are borrowed (they must
 * outlive the watch); opts strings are copied. *out is owned: end it with
 * k8s_watch_close(). Returns 0, -EINVAL (bad options, err says which),
 * -ENOMEM. */
int k8s_watch_start(struct k8s_client *c, const struct k8s_watch_opts *opts,
                    const struct k8s_watch_handler *h, void *data, struct k8s_watch **out,
                    struct tkm_err *err);

/* Cancels everything and frees the watch from the loop; closed_cb (optional)
 * runs afterwards. No handler callback runs after this call. NULL is a
 * no-op. Calling it twice is a bug (TKM_BUG, <tkm/bug.h>): Debug and
 * sanitizer builds abort; other builds log it and ignore the second call
 * (the first call's closed_cb still runs; the second's never does). */
void k8s_watch_close(struct k8s_watch *w, void (*closed_cb)(void *data), void *data);

/* The last resourceVersion seen ("" before the first list). Borrowed: valid
 * until the next callback. */
const char *k8s_watch_resource_version(const struct k8s_watch *w);

/* Borrowed, valid until k8s_watch_close(). */
const struct k8s_watch_stats *k8s_watch_get_stats(const struct k8s_watch *w);

#endif
