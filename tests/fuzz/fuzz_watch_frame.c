/*
 * fuzz_watch_frame - the watch/list framer and the event decoder on arbitrary
 * bytes split at arbitrary points.
 *
 * Input: byte 0 picks the mode (even: watch stream, odd: list body) and the
 * chunk size (1 + (byte 0 >> 1)); the rest is the stream. Every emitted
 * object is decoded (as an event or a list item). Checks: no crash, no leak,
 * every emitted object lies within the bytes fed and within the size cap,
 * and the same stream fed in one piece emits the same number of objects.
 * Every object is also decoded without a tree (raw_only): both decoders must
 * accept and refuse the same objects and read the same type, span and
 * metadata strings.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "watch-int.h"

#define CAP 4096

struct ctx {
    int list;
    size_t n;
};

static int same(const char *a, const char *b)
{
    return strcmp(a, b) == 0;
}

/* The raw decoder on the same object: same verdict, same fields. */
static void check_raw(int list, const char *p, size_t n, int rc, const struct k8s_watch_event *ev)
{
    struct k8s__rawdec d;
    struct k8s_watch_event r;
    json_t *root = NULL;
    k8s__rawdec_init(&d);
    int rrc = list ? k8s__item_decode_raw(&d, p, n, &r, NULL)
                   : k8s__event_decode_raw(&d, p, n, &r, &root, NULL);
    if ((rc == 0) != (rrc == 0))
        abort();
    if (rc == 0 && (r.type != ev->type || r.raw != ev->raw || r.raw_len != ev->raw_len ||
                    !same(r.ns, ev->ns) || !same(r.name, ev->name) ||
                    !same(r.resource_version, ev->resource_version) || !same(r.uid, ev->uid)))
        abort();
    if (rc == 0 &&
        (r.type == K8S_WATCH_ERROR || r.type == K8S_WATCH_BOOKMARK) != (r.object != NULL))
        abort();
    json_decref(root);
    k8s__rawdec_release(&d);
}

static int on_obj(const char *p, size_t n, void *data)
{
    struct ctx *c = data;
    struct k8s_watch_event ev;
    json_t *root = NULL;
    if (n == 0 || n > CAP || p[0] != '{' || p[n - 1] != '}')
        abort();
    c->n++;
    int rc = c->list ? k8s__item_decode(p, n, &ev, &root, NULL)
                     : k8s__event_decode(p, n, &ev, &root, NULL);
    if (rc == 0) {
        if (!ev.name || !ev.ns || !ev.resource_version || !ev.uid || !ev.object)
            abort();
        if (ev.raw < p || ev.raw + ev.raw_len > p + n)
            abort();
        check_raw(c->list, p, n, rc, &ev);
        json_decref(root);
    } else if (root) {
        abort();
    } else {
        check_raw(c->list, p, n, rc, &ev);
    }
    return 0;
}

static size_t run(const uint8_t *d, size_t n, int list, size_t chunk, int *err)
{
    struct k8s__framer f;
    struct ctx c = {.list = list};
    int rc = 0;
    k8s__framer_init(&f, list ? K8S__FRAME_LIST : K8S__FRAME_STREAM, CAP);
    for (size_t i = 0; i < n && rc == 0; i += chunk) {
        size_t take = n - i < chunk ? n - i : chunk;
        rc = k8s__framer_feed(&f, (const char *)d + i, take, on_obj, &c, NULL);
    }
    if (rc == 0)
        rc = k8s__framer_finish(&f, NULL);
    *err = rc;
    k8s__framer_release(&f);
    return c.n;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    int list = data[0] & 1;
    size_t chunk = 1 + (data[0] >> 1);
    int e1 = 0, e2 = 0;
    size_t a = run(data + 1, size - 1, list, chunk, &e1);
    size_t b = run(data + 1, size - 1, list, size, &e2);
    /* Chunking must not change the outcome (E2BIG may be found at a
     * different point, but only while over the cap either way). */
    if (e1 == 0 && e2 == 0 && a != b)
        abort();
    if ((e1 == 0) != (e2 == 0) && e1 != -E2BIG && e2 != -E2BIG)
        abort();
    return 0;
}
