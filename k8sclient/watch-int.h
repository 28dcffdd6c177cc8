/*
 * watch-int.h - private parts of the watch: the stream framer and the event
 * decoder (framer.c), shared by watch.c, the unit tests and the fuzz target.
 *
 * The framer turns a byte stream into complete JSON objects without ever
 * re-reading bytes it has scanned: it keeps the pending bytes of the one
 * object in progress in a capped struct tkm_buf and the scanner's state
 * (depth, inside-string, escape) between calls, so the cost per byte is
 * constant whatever the chunking. Two modes:
 *   K8S__FRAME_STREAM  a watch body: a sequence of top-level objects, with
 *                      optional whitespace (Go writes "\n") between them;
 *                      anything else between objects is an error.
 *   K8S__FRAME_LIST    a LIST body: one object whose "items" array elements
 *                      are emitted one by one as they complete; everything
 *                      else of the list (kind, apiVersion, metadata) is kept
 *                      in `rest` (capped at 64 KiB) with "items":[] emptied,
 *                      so it is a small valid JSON document once finished.
 * Each emitted object is at most max_event bytes; a larger one is -E2BIG.
 * The framer validates structure only (brackets, strings); the decoder parses
 * each object with jansson (duplicate keys rejected).
 */
#ifndef K8S_WATCH_INT_H
#define K8S_WATCH_INT_H

#include <stddef.h>
#include <stdint.h>
#include <jansson.h>

#include <tkm/buf.h>
#include <tkm/err.h>
#include <tkm/jscan.h>
#include <k8s/watch.h>

enum k8s__frame_mode { K8S__FRAME_STREAM = 0, K8S__FRAME_LIST };

#define K8S__FRAME_MAX_DEPTH 1000u
#define K8S__FRAME_REST_MAX  (64u * 1024u)

struct k8s__framer {
    enum k8s__frame_mode mode;
    size_t max_event;
    struct tkm_buf buf; /* unconsumed bytes: the object in progress */
    size_t start;       /* offset in buf of the object in progress */
    int in_obj;         /* an object (event or item) is in progress */
    unsigned depth;     /* nesting depth at the scan position */
    int in_str, esc;
    /* bracket kinds of the open levels, one bit per depth (1 = '[') */
    unsigned char kinds[K8S__FRAME_MAX_DEPTH / 8 + 1];
    uint64_t offset;  /* stream offset of buf.data[0] (for messages) */
    uint64_t emitted; /* objects emitted so far */
    /* LIST mode */
    struct tkm_buf rest;
    int done;       /* the top-level list object has closed */
    int expect_key; /* depth 1: the next string is a member name */
    int key_items;  /* depth 1: the member being read is "items" */
    int in_items;   /* inside the "items" array */
    char key[8];    /* depth-1 member name being read (first bytes) */
    size_t key_len;
};

/* Emitted object p[0..n) (borrowed for the call; p[n] is not NUL). Return 0
 * to go on, non-zero to stop: k8s__framer_feed() then returns that value. */
typedef int (*k8s__frame_cb)(const char *p, size_t n, void *data);

void k8s__framer_init(struct k8s__framer *f, enum k8s__frame_mode mode, size_t max_event);
void k8s__framer_release(struct k8s__framer *f);
/* Scans n more bytes, calling cb for each object completed. Returns 0, cb's
 * non-zero value, -E2BIG (object over max_event), -EPROTO (not JSON framing)
 * or -ENOMEM, with err naming the stream offset. After an error the framer
 * must be released (the stream is unusable). */
int k8s__framer_feed(struct k8s__framer *f, const char *p, size_t n, k8s__frame_cb cb, void *data,
                     struct tkm_err *err);
/* End of stream: 0 when nothing is pending (LIST mode: the list object was
 * complete), -EPROTO for a truncated object, with err saying so. */
int k8s__framer_finish(struct k8s__framer *f, struct tkm_err *err);

/*
 * Decodes one object emitted by the framer.
 * k8s__event_decode: a watch event {"type": ..., "object": {...}}.
 * k8s__item_decode: a bare object (a list item), type ADDED.
 * On success ev's strings point into *root (owned: json_decref() it after
 * use) or into p (raw); 0, or -EPROTO with err saying what is wrong. For
 * ERROR events code/reason/message come from the Status object.
 */
int k8s__event_decode(const char *p, size_t n, struct k8s_watch_event *ev, json_t **root,
                      struct tkm_err *err);
int k8s__item_decode(const char *p, size_t n, struct k8s_watch_event *ev, json_t **root,
                     struct tkm_err *err);

/*
 * Raw decoding (what a watch does): no jansson tree. The object is
 * validated with tkm_jscan (the same grammar jansson accepts, duplicate keys
 * refused), then type, the object's span and metadata name, namespace,
 * resourceVersion and uid are read from the bytes; the strings are unescaped
 * into d->str, valid until the next decode with d. ev->object is NULL and
 * *root stays NULL, except for BOOKMARK and ERROR events: those are small and
 * rare, and are decoded by k8s__event_decode (their reader wants the tree:
 * annotations, Status code/reason/message), so *root is then owned as there.
 * Errors as k8s__event_decode / k8s__item_decode: -EPROTO (or -ENOMEM) with
 * err saying what is wrong.
 */
struct k8s__rawdec {
    struct tkm_jscan js;
    struct tkm_buf str; /* the unescaped metadata strings of the last event */
};
void k8s__rawdec_init(struct k8s__rawdec *d);
void k8s__rawdec_release(struct k8s__rawdec *d);
int k8s__event_decode_raw(struct k8s__rawdec *d, const char *p, size_t n,
                          struct k8s_watch_event *ev, json_t **root, struct tkm_err *err);
int k8s__item_decode_raw(struct k8s__rawdec *d, const char *p, size_t n, struct k8s_watch_event *ev,
                         struct tkm_err *err);

/* The span [*cut, *cut + *cut_len) of p[0..n) (a validated JSON object) to
 * drop to remove metadata.managedFields with its separating comma; 0 and
 * *cut_len 0 when there is none. */
void k8s__managed_fields_span(const char *p, size_t n, size_t *cut, size_t *cut_len);

/* Finds the value of top-level member `key` in the JSON object text p[0..n)
 * (already validated): off and len get its span. 0, or -ENOENT. */
int k8s__json_member_span(const char *p, size_t n, const char *key, size_t *off, size_t *len);

#endif
