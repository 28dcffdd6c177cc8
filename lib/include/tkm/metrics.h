/*
 * metrics.h - a Prometheus metrics registry: counters, gauges, histograms,
 * exposed in the text format 0.0.4 (docs/metrics.md has the naming rules).
 *
 * A registry (struct tkm_metrics) owns families (struct tkm_metric); a family
 * has a name, HELP text, a type and 0..TKM_METRICS_MAX_LABELS label names;
 * each distinct tuple of label values is one series, created on first use.
 *
 * Cardinality: each family has a cap on its series (max_series, default
 * TKM_METRICS_DEFAULT_SERIES). An update for a new tuple beyond the cap goes
 * to one overflow series whose every label value is "__overflow__" (so totals
 * stay right), the update returns 1 instead of 0, and the registry's own
 * counter tkm_metrics_series_overflow_total{metric="<family>"} counts it.
 * Label values longer than TKM_METRICS_MAX_VALUE bytes are refused (-EINVAL).
 *
 * Removal: tkm_metric_remove() drops every series of a family whose label
 * values match (a NULL value matches any), e.g. every series of a deleted
 * cache. The overflow series is never removed (its totals cannot be split);
 * a removed tuple updated again starts a new series from 0, and removal frees
 * room under the cap.
 *
 * Scrape-time values: a family may have a collect callback, called at every
 * exposition before the family is written. The callback first finds the
 * family emptied of series (so a state that vanished vanishes) and sets the
 * current values with tkm_metric_set() (counters too: a counter read from
 * elsewhere, like process_cpu_seconds_total, is set to its absolute value).
 *
 * Exposition (tkm_metrics_write): families sorted by name, series by label
 * values (byte order), "# HELP" and "# TYPE" per family, label values escaped
 * (\\, \", \n), HELP escaped (\\, \n), histograms as cumulative _bucket
 * lines with le="+Inf" last, then _sum and _count. Values print as the
 * shortest decimal that reads back exactly; NaN, +Inf, -Inf as such.
 *
 * Threads: loop-thread only. Nothing is atomic: update from the loop thread
 * (work done on the libuv pool is measured there and recorded in its
 * after-work callback, which runs on the loop).
 *
 * Ownership: the registry is owned (tkm_metrics_free()); families and series
 * are owned by it and borrowed by the caller until tkm_metrics_free(). Every
 * string argument is copied. Label-value arrays are borrowed for the call.
 */
#ifndef TKM_METRICS_H
#define TKM_METRICS_H

#include <stddef.h>

#include <tkm/buf.h>
#include <tkm/err.h>

struct tkm_metrics;
struct tkm_metric;
struct tkm_httpd;

#define TKM_METRICS_MAX_LABELS     8
#define TKM_METRICS_DEFAULT_SERIES 100
#define TKM_METRICS_MAX_SERIES     10000
#define TKM_METRICS_MAX_VALUE      256
#define TKM_METRICS_MAX_BUCKETS    64
#define TKM_METRICS_OVERFLOW       "__overflow__"
/* The Prometheus text format's content type. */
#define TKM_METRICS_CONTENT_TYPE "text/plain; version=0.0.4; charset=utf-8"

enum tkm_metric_type { TKM_METRIC_COUNTER, TKM_METRIC_GAUGE, TKM_METRIC_HISTOGRAM };

/* Scrape-time values (see above). m and data are borrowed for the call. */
typedef void (*tkm_metric_collect_fn)(struct tkm_metric *m, void *data);

/* One family's definition; every pointer is borrowed for the call. */
struct tkm_metric_opts {
    const char *name;          /* [a-zA-Z_:][a-zA-Z0-9_:]*; counters must end in _total */
    const char *help;          /* required, one line of UTF-8 (escaped on output) */
    const char *const *labels; /* NULL-terminated label names, or NULL; [a-zA-Z_][a-zA-Z0-9_]*,
                                * not "__"-prefixed, no "le" in histograms */
    size_t max_series;         /* 0: TKM_METRICS_DEFAULT_SERIES; at most TKM_METRICS_MAX_SERIES */
    const double *buckets;     /* histograms: finite upper bounds, strictly increasing;
                                  NULL: TKM_METRICS_DEFAULT_BUCKETS (+Inf is implicit) */
    size_t nbuckets;
    tkm_metric_collect_fn collect; /* optional scrape-time callback */
    void *collect_data;            /* borrowed until tkm_metrics_free() */
};

/* Prometheus's default buckets (seconds: 5 ms .. 10 s), 11 bounds. */
extern const double TKM_METRICS_DEFAULT_BUCKETS[11];
/* Buckets for minutes-long work (extraction, pulls): 0.1 s .. 30 min, 11 bounds. */
extern const double TKM_METRICS_SLOW_BUCKETS[11];

/* A new, empty registry. *out is owned: tkm_metrics_free(). */
int tkm_metrics_new(struct tkm_metrics **out, struct tkm_err *err);
/* Frees the registry and every family. NULL is a no-op. */
void tkm_metrics_free(struct tkm_metrics *reg);

/* Registers a family. *out (optional) is borrowed until tkm_metrics_free().
 * Errors: -EINVAL (invalid name, label, help, buckets; err says which),
 * -EEXIST (the name, or a histogram's _bucket/_sum/_count, is taken), -ENOMEM. */
int tkm_metrics_add(struct tkm_metrics *reg, enum tkm_metric_type type,
                    const struct tkm_metric_opts *o, struct tkm_metric **out, struct tkm_err *err);

/* Updates. values: one string per label name, in order (NULL for a family
 * without labels). Return 0, 1 when the update went to the overflow series,
 * or < 0 without any change: -EINVAL (wrong type for the call, a negative or
 * NaN counter increment, a missing or too long value), -ENOMEM.
 * tkm_metric_add: counters v >= 0 (1 for one event); gauges any finite or
 * infinite v. */
int tkm_metric_add(struct tkm_metric *m, const char *const *values, double v);
/* Gauges; counters only from their collect callback. */
int tkm_metric_set(struct tkm_metric *m, const char *const *values, double v);
/* Histograms: counts v into its bucket, adds it to _sum and 1 to _count. */
int tkm_metric_observe(struct tkm_metric *m, const char *const *values, double v);

/* Removes every series of m whose label values match values: one per label
 * name, in order, each a string that must equal the series' value or NULL
 * for any value (all NULL: every series but the overflow one). values is
 * borrowed for the call; the removed series are freed. Returns how many
 * series were removed (0: none matched), or -EINVAL (m NULL, a family
 * without labels, values NULL, or called from a collect callback, which
 * starts from an empty family anyway). */
int tkm_metric_remove(struct tkm_metric *m, const char *const *values);

/* Appends the whole exposition (collect callbacks run first) to out. */
int tkm_metrics_write(struct tkm_metrics *reg, struct tkm_buf *out);

/* The standard families: process_resident_memory_bytes,
 * process_virtual_memory_bytes, process_cpu_seconds_total, process_open_fds,
 * process_max_fds, process_start_time_seconds (from /proc/self, read at
 * scrape time) and tkm_build_info{version="<TKM_VERSION>"} 1. */
int tkm_metrics_add_standard(struct tkm_metrics *reg, struct tkm_err *err);

/* Serves reg at path (normally "/metrics") on srv, with
 * TKM_METRICS_CONTENT_TYPE. reg is borrowed: it must outlive the server
 * (free it after the server's closed_cb). srv NULL: returns 0. */
int tkm_metrics_serve(struct tkm_metrics *reg, struct tkm_httpd *srv, const char *path,
                      struct tkm_err *err);

#endif
