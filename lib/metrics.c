/*
 * metrics.c - the Prometheus registry and its text exposition. See metrics.h.
 *
 * A family keeps its series in an array (capped by max_series, so a linear
 * lookup with a hash compare first stays cheap); exposition sorts copies of
 * the pointers, so updates never pay for order.
 */
#include <tkm/metrics.h>

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include <tkm/httpd.h>

const double TKM_METRICS_DEFAULT_BUCKETS[11] = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                                                0.5,   1,    2.5,   5,    10};
const double TKM_METRICS_SLOW_BUCKETS[11] = {0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 1800};

struct series {
    char *values[TKM_METRICS_MAX_LABELS];
    uint64_t hash;
    double value;     /* counter, gauge; histogram: _sum */
    uint64_t count;   /* histogram: _count */
    uint64_t *counts; /* histogram: per bucket (not cumulative), nbuckets + 1 (+Inf) */
};

struct tkm_metric {
    struct tkm_metrics *reg;
    enum tkm_metric_type type;
    char *name;
    char *help;
    char *labels[TKM_METRICS_MAX_LABELS];
    size_t nlabels;
    size_t max_series;
    double *bounds;
    size_t nbounds;
    tkm_metric_collect_fn collect;
    void *collect_data;
    int in_collect;
    struct series **series;
    size_t nseries, cap;
    struct series *overflow;
};

struct tkm_metrics {
    struct tkm_metric **fams;
    size_t nfams, cap;
    struct tkm_metric *overflow_total; /* tkm_metrics_series_overflow_total{metric} */
};

/* ---- validation ------------------------------------------------------------ */

static int name_ok(const char *s, int colon)
{
    if (!s || !*s)
        return 0;
    for (const char *p = s; *p; p++) {
        int alpha = (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || *p == '_' ||
                    (colon && *p == ':');
        if (!alpha && !(p != s && *p >= '0' && *p <= '9'))
            return 0;
    }
    return 1;
}

static int utf8_ok(const unsigned char *s)
{
    while (*s) {
        unsigned c = *s;
        size_t n = c < 0x80             ? 0
                   : (c & 0xe0) == 0xc0 ? 1
                   : (c & 0xf0) == 0xe0 ? 2
                   : (c & 0xf8) == 0xf0 ? 3
                                        : 4;
        if (n == 4 || (n == 1 && c < 0xc2) || (n == 3 && c > 0xf4))
            return 0;
        uint32_t cp = n ? c & (0x3fu >> n) : c;
        for (size_t i = 1; i <= n; i++) {
            if ((s[i] & 0xc0) != 0x80)
                return 0;
            cp = (cp << 6) | (s[i] & 0x3fu);
        }
        if ((n == 2 && (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff))) ||
            (n == 3 && (cp < 0x10000 || cp > 0x10ffff)))
            return 0;
        s += n + 1;
    }
    return 1;
}

/* Is name one of the names the registry already writes? */
static int name_taken(const struct tkm_metrics *reg, const char *name)
{
    static const char *const sfx[] = {"_bucket", "_sum", "_count"};
    size_t nl = strlen(name);
    for (size_t i = 0; i < reg->nfams; i++) {
        const struct tkm_metric *f = reg->fams[i];
        size_t fl = strlen(f->name);
        if (strcmp(f->name, name) == 0)
            return 1;
        if (f->type != TKM_METRIC_HISTOGRAM || nl <= fl || strncmp(name, f->name, fl) != 0)
            continue;
        for (size_t k = 0; k < 3; k++)
            if (strcmp(name + fl, sfx[k]) == 0)
                return 1;
    }
    return 0;
}

static int check_opts(const struct tkm_metrics *reg, enum tkm_metric_type type,
                      const struct tkm_metric_opts *o, struct tkm_err *err)
{
    const char *n = o ? o->name : NULL;
    if (!o || !name_ok(n, 1))
        return tkm_err_set(err, -EINVAL, "metric \"%s\": invalid name", n ? n : "(null)");
    size_t nl = strlen(n);
    if (type == TKM_METRIC_COUNTER && (nl < 6 || strcmp(n + nl - 6, "_total") != 0))
        return tkm_err_set(err, -EINVAL, "metric %s: a counter's name must end in _total", n);
    if (!o->help || !*o->help || !utf8_ok((const unsigned char *)o->help))
        return tkm_err_set(err, -EINVAL, "metric %s: HELP must be non-empty UTF-8", n);
    size_t k = 0;
    for (; o->labels && o->labels[k]; k++) {
        const char *l = o->labels[k];
        if (k == TKM_METRICS_MAX_LABELS)
            return tkm_err_set(err, -EINVAL, "metric %s: more than %d labels", n,
                               TKM_METRICS_MAX_LABELS);
        if (!name_ok(l, 0) || strncmp(l, "__", 2) == 0 ||
            (type == TKM_METRIC_HISTOGRAM && strcmp(l, "le") == 0))
            return tkm_err_set(err, -EINVAL, "metric %s: invalid label name \"%s\"", n, l);
        for (size_t j = 0; j < k; j++)
            if (strcmp(o->labels[j], l) == 0)
                return tkm_err_set(err, -EINVAL, "metric %s: label %s appears twice", n, l);
    }
    if (o->max_series > TKM_METRICS_MAX_SERIES)
        return tkm_err_set(err, -EINVAL, "metric %s: max_series %zu exceeds %d", n, o->max_series,
                           TKM_METRICS_MAX_SERIES);
    if (type == TKM_METRIC_HISTOGRAM && o->buckets) {
        if (o->nbuckets == 0 || o->nbuckets > TKM_METRICS_MAX_BUCKETS)
            return tkm_err_set(err, -EINVAL, "metric %s: 1 to %d buckets", n,
                               TKM_METRICS_MAX_BUCKETS);
        for (size_t i = 0; i < o->nbuckets; i++)
            if (!isfinite(o->buckets[i]) || (i && o->buckets[i] <= o->buckets[i - 1]))
                return tkm_err_set(err, -EINVAL,
                                   "metric %s: bucket bounds must be finite and increasing", n);
    }
    int taken = name_taken(reg, n);
    if (type == TKM_METRIC_HISTOGRAM) {
        char d[256];
        static const char *const sfx[] = {"_bucket", "_sum", "_count"};
        for (size_t i = 0; i < 3 && !taken; i++) {
            snprintf(d, sizeof d, "%s%s", n, sfx[i]);
            taken = name_taken(reg, d);
        }
    }
    if (taken)
        return tkm_err_set(err, -EEXIST, "metric %s: the name is already registered", n);
    return 0;
}

/* ---- families and series --------------------------------------------------- */

static void series_free(struct series *s)
{
    if (!s)
        return;
    for (size_t i = 0; i < TKM_METRICS_MAX_LABELS; i++)
        free(s->values[i]);
    free(s->counts);
    free(s);
}

/* Removes every series of m (before a collect callback, and when it is freed). */
static void metric_reset(struct tkm_metric *m)
{
    if (!m)
        return;
    for (size_t i = 0; i < m->nseries; i++)
        series_free(m->series[i]);
    m->nseries = 0;
    m->overflow = NULL;
}

static void family_free(struct tkm_metric *m)
{
    if (!m)
        return;
    metric_reset(m);
    free(m->series);
    free(m->name);
    free(m->help);
    for (size_t i = 0; i < m->nlabels; i++)
        free(m->labels[i]);
    free(m->bounds);
    free(m);
}

static uint64_t values_hash(const struct tkm_metric *m, const char *const *v)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a, with a 0 byte between values */
    for (size_t i = 0; i < m->nlabels; i++) {
        for (const unsigned char *p = (const unsigned char *)v[i]; *p; p++)
            h = (h ^ *p) * 1099511628211ull;
        h = (h ^ 0) * 1099511628211ull;
    }
    return h;
}

static struct series *series_new(struct tkm_metric *m, const char *const *v, uint64_t hash)
{
    struct series *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->hash = hash;
    for (size_t i = 0; i < m->nlabels; i++)
        if (!(s->values[i] = strdup(v[i])))
            goto fail;
    if (m->type == TKM_METRIC_HISTOGRAM && !(s->counts = calloc(m->nbounds + 1, sizeof(uint64_t))))
        goto fail;
    return s;
fail:
    series_free(s);
    return NULL;
}

/* A new series for v (hash h) appended to m: 0 (*out, optional, borrowed) or -ENOMEM. */
static int series_add(struct tkm_metric *m, const char *const *v, uint64_t h, struct series **out)
{
    struct series *s;
    if (m->nseries == m->cap) {
        size_t ncap = m->cap ? m->cap * 2 : 4;
        struct series **tmp = realloc(m->series, ncap * sizeof *tmp);
        if (!tmp)
            return -ENOMEM;
        m->series = tmp;
        m->cap = ncap;
    }
    if (!(s = series_new(m, v, h)))
        return -ENOMEM;
    m->series[m->nseries++] = s;
    if (out)
        *out = s;
    return 0;
}

static int values_ok(const struct tkm_metric *m, const char *const *v)
{
    if (m->nlabels && !v)
        return 0;
    for (size_t i = 0; i < m->nlabels; i++)
        if (!v[i] || strlen(v[i]) > TKM_METRICS_MAX_VALUE || !utf8_ok((const unsigned char *)v[i]))
            return 0;
    return 1;
}

static void count_overflow(struct tkm_metric *m)
{
    struct tkm_metric *o = m->reg->overflow_total;
    if (o && o != m) {
        const char *v[] = {m->name};
        tkm_metric_add(o, v, 1);
    }
}

/* Finds or creates the series for v. *ovf = 1 when it is the overflow one. */
static int series_get(struct tkm_metric *m, const char *const *v, struct series **out, int *ovf)
{
    *ovf = 0;
    if (!values_ok(m, v))
        return -EINVAL;
    uint64_t h = values_hash(m, v);
    for (size_t i = 0; i < m->nseries; i++) {
        struct series *s = m->series[i];
        if (s->hash != h || s == m->overflow)
            continue;
        size_t k = 0;
        while (k < m->nlabels && strcmp(s->values[k], v[k]) == 0)
            k++;
        if (k == m->nlabels) {
            *out = s;
            return 0;
        }
    }
    size_t real = m->nseries - (m->overflow ? 1 : 0);
    if (real >= m->max_series) {
        *ovf = 1;
        count_overflow(m);
        if (!m->overflow) {
            const char *ov[TKM_METRICS_MAX_LABELS];
            for (size_t i = 0; i < m->nlabels; i++)
                ov[i] = TKM_METRICS_OVERFLOW;
            if (series_add(m, ov, values_hash(m, ov), &m->overflow))
                return -ENOMEM;
        }
        *out = m->overflow;
        return 0;
    }
    return series_add(m, v, h, out);
}

/* ---- public: registry ------------------------------------------------------ */

int tkm_metrics_new(struct tkm_metrics **out, struct tkm_err *err)
{
    struct tkm_metrics *reg = calloc(1, sizeof *reg);
    if (!reg)
        return tkm_err_set(err, -ENOMEM, "metrics registry: out of memory");
    static const char *const lbl[] = {"metric", NULL};
    struct tkm_metric_opts o = {
        .name = "tkm_metrics_series_overflow_total",
        .help = "Updates folded into a family's " TKM_METRICS_OVERFLOW
                " series because its label cardinality cap was reached.",
        .labels = lbl,
        .max_series = TKM_METRICS_MAX_SERIES,
    };
    int rc = tkm_metrics_add(reg, TKM_METRIC_COUNTER, &o, &reg->overflow_total, err);
    if (rc) {
        tkm_metrics_free(reg);
        return rc;
    }
    *out = reg;
    return 0;
}

void tkm_metrics_free(struct tkm_metrics *reg)
{
    if (!reg)
        return;
    for (size_t i = 0; i < reg->nfams; i++)
        family_free(reg->fams[i]);
    free(reg->fams);
    free(reg);
}

static int family_fill(struct tkm_metric *m, enum tkm_metric_type type,
                       const struct tkm_metric_opts *o)
{
    m->type = type;
    m->max_series = o->max_series ? o->max_series : TKM_METRICS_DEFAULT_SERIES;
    m->collect = o->collect;
    m->collect_data = o->collect_data;
    if (!(m->name = strdup(o->name)) || !(m->help = strdup(o->help)))
        return -ENOMEM;
    for (size_t k = 0; o->labels && o->labels[k]; k++) {
        if (!(m->labels[k] = strdup(o->labels[k])))
            return -ENOMEM;
        m->nlabels = k + 1;
    }
    if (type == TKM_METRIC_HISTOGRAM) {
        const double *b = o->buckets ? o->buckets : TKM_METRICS_DEFAULT_BUCKETS;
        size_t n = o->buckets ? o->nbuckets : 11;
        if (!(m->bounds = malloc(n * sizeof *b)))
            return -ENOMEM;
        memcpy(m->bounds, b, n * sizeof *b);
        m->nbounds = n;
    }
    /* A family without labels has its one series from the start (value 0),
     * unless its values come from a collect callback. */
    if (m->nlabels == 0 && !m->collect)
        return series_add(m, NULL, values_hash(m, NULL), NULL);
    return 0;
}

int tkm_metrics_add(struct tkm_metrics *reg, enum tkm_metric_type type,
                    const struct tkm_metric_opts *o, struct tkm_metric **out, struct tkm_err *err)
{
    int rc = check_opts(reg, type, o, err);
    if (rc)
        return rc;
    struct tkm_metric *m = calloc(1, sizeof *m);
    if (!m)
        return tkm_err_set(err, -ENOMEM, "metric %s: out of memory", o->name);
    m->reg = reg;
    if ((rc = family_fill(m, type, o)))
        goto fail;
    if (reg->nfams == reg->cap) {
        size_t ncap = reg->cap ? reg->cap * 2 : 16;
        struct tkm_metric **tmp = realloc(reg->fams, ncap * sizeof *tmp);
        if (!tmp) {
            rc = -ENOMEM;
            goto fail;
        }
        reg->fams = tmp;
        reg->cap = ncap;
    }
    reg->fams[reg->nfams++] = m;
    if (out)
        *out = m;
    return 0;
fail:
    family_free(m);
    return tkm_err_set(err, rc, "metric %s: out of memory", o->name);
}

/* ---- public: updates ------------------------------------------------------- */

int tkm_metric_add(struct tkm_metric *m, const char *const *values, double v)
{
    struct series *s;
    int ovf, rc;
    if (!m || m->type == TKM_METRIC_HISTOGRAM || isnan(v) ||
        (m->type == TKM_METRIC_COUNTER && v < 0))
        return -EINVAL;
    if ((rc = series_get(m, values, &s, &ovf)))
        return rc;
    s->value += v;
    return ovf;
}

int tkm_metric_set(struct tkm_metric *m, const char *const *values, double v)
{
    struct series *s;
    int ovf, rc;
    if (!m || m->type == TKM_METRIC_HISTOGRAM ||
        (m->type == TKM_METRIC_COUNTER && (!m->in_collect || !(v >= 0))))
        return -EINVAL;
    if ((rc = series_get(m, values, &s, &ovf)))
        return rc;
    s->value = v;
    return ovf;
}

int tkm_metric_observe(struct tkm_metric *m, const char *const *values, double v)
{
    struct series *s;
    int ovf, rc;
    if (!m || m->type != TKM_METRIC_HISTOGRAM || isnan(v))
        return -EINVAL;
    if ((rc = series_get(m, values, &s, &ovf)))
        return rc;
    size_t b = 0;
    while (b < m->nbounds && v > m->bounds[b])
        b++;
    s->counts[b]++;
    s->count++;
    s->value += v;
    return ovf;
}

int tkm_metric_remove(struct tkm_metric *m, const char *const *values)
{
    if (!m || !m->nlabels || !values || m->in_collect)
        return -EINVAL;
    int removed = 0;
    for (size_t i = 0; i < m->nseries;) {
        struct series *s = m->series[i];
        size_t k = 0;
        while (k < m->nlabels && (!values[k] || strcmp(s->values[k], values[k]) == 0))
            k++;
        if (s == m->overflow || k < m->nlabels) {
            i++;
            continue;
        }
        series_free(s);
        m->series[i] = m->series[--m->nseries]; /* exposition sorts: order does not matter */
        removed++;
    }
    return removed;
}

/* ---- exposition ------------------------------------------------------------ */

/* The shortest of %.15g..%.17g that reads back exactly; NaN, +Inf, -Inf. */
static void fmt_double(char *out, size_t n, double v)
{
    if (isnan(v)) {
        snprintf(out, n, "NaN");
        return;
    }
    if (isinf(v)) {
        snprintf(out, n, "%s", v > 0 ? "+Inf" : "-Inf");
        return;
    }
    for (int prec = 15; prec <= 17; prec++) {
        snprintf(out, n, "%.*g", prec, v);
        if (strtod(out, NULL) == v)
            return;
    }
}

static int put_escaped(struct tkm_buf *b, const char *s, int quote)
{
    int rc = 0;
    for (const char *p = s; *p && !rc; p++) {
        if (*p == '\\')
            rc = tkm_buf_puts(b, "\\\\");
        else if (*p == '\n')
            rc = tkm_buf_puts(b, "\\n");
        else if (quote && *p == '"')
            rc = tkm_buf_puts(b, "\\\"");
        else
            rc = tkm_buf_putc(b, *p);
    }
    return rc;
}

/* name{labels[,le="x"]} value\n */
static int put_sample(struct tkm_buf *b, const struct tkm_metric *m, const struct series *s,
                      const char *suffix, const char *le, double v)
{
    char num[40];
    int rc = tkm_buf_printf(b, "%s%s", m->name, suffix);
    if (!rc && (m->nlabels || le)) {
        rc = tkm_buf_putc(b, '{');
        for (size_t i = 0; i < m->nlabels && !rc; i++) {
            rc = tkm_buf_printf(b, "%s%s=\"", i ? "," : "", m->labels[i]);
            if (!rc)
                rc = put_escaped(b, s->values[i], 1);
            if (!rc)
                rc = tkm_buf_putc(b, '"');
        }
        if (!rc && le)
            rc = tkm_buf_printf(b, "%sle=\"%s\"", m->nlabels ? "," : "", le);
        if (!rc)
            rc = tkm_buf_putc(b, '}');
    }
    fmt_double(num, sizeof num, v);
    if (!rc)
        rc = tkm_buf_printf(b, " %s\n", num);
    return rc;
}

static int put_histogram(struct tkm_buf *b, const struct tkm_metric *m, const struct series *s)
{
    char le[40];
    uint64_t cum = 0;
    int rc = 0;
    for (size_t i = 0; i <= m->nbounds && !rc; i++) {
        cum += s->counts[i];
        if (i < m->nbounds)
            fmt_double(le, sizeof le, m->bounds[i]);
        else
            snprintf(le, sizeof le, "+Inf");
        rc = put_sample(b, m, s, "_bucket", le, (double)cum);
    }
    if (!rc)
        rc = put_sample(b, m, s, "_sum", NULL, s->value);
    if (!rc)
        rc = put_sample(b, m, s, "_count", NULL, (double)s->count);
    return rc;
}

static int series_cmp(const void *a, const void *b)
{
    const struct series *x = *(const struct series *const *)a;
    const struct series *y = *(const struct series *const *)b;
    for (size_t i = 0; i < TKM_METRICS_MAX_LABELS && x->values[i] && y->values[i]; i++) {
        int c = strcmp(x->values[i], y->values[i]);
        if (c)
            return c;
    }
    return 0;
}

static int family_cmp(const void *a, const void *b)
{
    const struct tkm_metric *x = *(const struct tkm_metric *const *)a;
    const struct tkm_metric *y = *(const struct tkm_metric *const *)b;
    return strcmp(x->name, y->name);
}

static int write_family(struct tkm_buf *b, struct tkm_metric *m)
{
    static const char *const tnames[] = {"counter", "gauge", "histogram"};
    if (m->collect) {
        metric_reset(m);
        m->in_collect = 1;
        m->collect(m, m->collect_data);
        m->in_collect = 0;
    }
    int rc = tkm_buf_printf(b, "# HELP %s ", m->name);
    if (!rc)
        rc = put_escaped(b, m->help, 0);
    if (!rc)
        rc = tkm_buf_printf(b, "\n# TYPE %s %s\n", m->name, tnames[m->type]);
    if (rc || !m->nseries)
        return rc;
    qsort(m->series, m->nseries, sizeof *m->series, series_cmp);
    for (size_t i = 0; i < m->nseries && !rc; i++) {
        if (m->type == TKM_METRIC_HISTOGRAM)
            rc = put_histogram(b, m, m->series[i]);
        else
            rc = put_sample(b, m, m->series[i], "", NULL, m->series[i]->value);
    }
    return rc;
}

int tkm_metrics_write(struct tkm_metrics *reg, struct tkm_buf *out)
{
    int rc = 0;
    qsort(reg->fams, reg->nfams, sizeof *reg->fams, family_cmp);
    for (size_t i = 0; i < reg->nfams && !rc; i++)
        rc = write_family(out, reg->fams[i]);
    return rc;
}

/* ---- standard families ----------------------------------------------------- */

/* Fields of /proc/self/stat we use: utime, stime (ticks), starttime (ticks
 * after boot), vsize (bytes), rss (pages). */
struct proc_stat {
    unsigned long long utime, stime, starttime, vsize, rss;
};

static int read_small_file(const char *path, char *buf, size_t n)
{
    FILE *f = fopen(path, "re");
    if (!f)
        return -errno;
    size_t got = fread(buf, 1, n - 1, f);
    int bad = ferror(f);
    fclose(f);
    if (bad)
        return -EIO;
    buf[got] = '\0';
    return 0;
}

static int proc_stat_read(struct proc_stat *ps)
{
    char buf[4096];
    int rc = read_small_file("/proc/self/stat", buf, sizeof buf);
    if (rc)
        return rc;
    char *p = strrchr(buf, ')'); /* the command name may hold spaces and ')' */
    if (!p)
        return -EIO;
    p++;
    memset(ps, 0, sizeof *ps);
    for (int field = 3; field <= 24; field++) {
        char *end;
        while (*p == ' ')
            p++;
        unsigned long long v = strtoull(p, &end, 10);
        if (field == 14)
            ps->utime = v;
        else if (field == 15)
            ps->stime = v;
        else if (field == 22)
            ps->starttime = v;
        else if (field == 23)
            ps->vsize = v;
        else if (field == 24)
            ps->rss = v;
        p = strchr(p, ' ');
        if (!p)
            return field == 24 ? 0 : -EIO;
    }
    return 0;
}

static void collect_proc(struct tkm_metric *m, void *data)
{
    (void)data;
    struct proc_stat ps;
    long tick = sysconf(_SC_CLK_TCK), page = sysconf(_SC_PAGESIZE);
    if (proc_stat_read(&ps) || tick <= 0 || page <= 0)
        return; /* no sample: better than a wrong one */
    if (strcmp(m->name, "process_cpu_seconds_total") == 0)
        tkm_metric_set(m, NULL, (double)(ps.utime + ps.stime) / (double)tick);
    else if (strcmp(m->name, "process_virtual_memory_bytes") == 0)
        tkm_metric_set(m, NULL, (double)ps.vsize);
    else if (strcmp(m->name, "process_resident_memory_bytes") == 0)
        tkm_metric_set(m, NULL, (double)ps.rss * (double)page);
    else if (strcmp(m->name, "process_start_time_seconds") == 0) {
        char buf[65536];
        if (read_small_file("/proc/stat", buf, sizeof buf))
            return;
        const char *bt = strstr(buf, "\nbtime ");
        if (bt)
            tkm_metric_set(
                m, NULL, (double)strtoull(bt + 7, NULL, 10) + (double)ps.starttime / (double)tick);
    }
}

static void collect_fds(struct tkm_metric *m, void *data)
{
    (void)data;
    if (strcmp(m->name, "process_max_fds") == 0) {
        struct rlimit rl;
        if (getrlimit(RLIMIT_NOFILE, &rl) == 0)
            tkm_metric_set(m, NULL, rl.rlim_cur == RLIM_INFINITY ? INFINITY : (double)rl.rlim_cur);
        return;
    }
    DIR *d = opendir("/proc/self/fd");
    if (!d)
        return;
    double n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        if (e->d_name[0] != '.')
            n++;
    closedir(d);
    tkm_metric_set(m, NULL, n - 1); /* not the directory's own fd */
}

int tkm_metrics_add_standard(struct tkm_metrics *reg, struct tkm_err *err)
{
    static const struct {
        enum tkm_metric_type type;
        const char *name, *help;
        tkm_metric_collect_fn fn;
    } std[] = {
        {TKM_METRIC_COUNTER, "process_cpu_seconds_total",
         "Total user and system CPU time spent in seconds.", collect_proc},
        {TKM_METRIC_GAUGE, "process_max_fds", "Maximum number of open file descriptors.",
         collect_fds},
        {TKM_METRIC_GAUGE, "process_open_fds", "Number of open file descriptors.", collect_fds},
        {TKM_METRIC_GAUGE, "process_resident_memory_bytes", "Resident memory size in bytes.",
         collect_proc},
        {TKM_METRIC_GAUGE, "process_start_time_seconds",
         "Start time of the process since unix epoch in seconds.", collect_proc},
        {TKM_METRIC_GAUGE, "process_virtual_memory_bytes", "Virtual memory size in bytes.",
         collect_proc},
    };
    int rc;
    for (size_t i = 0; i < sizeof std / sizeof std[0]; i++) {
        struct tkm_metric_opts o = {.name = std[i].name, .help = std[i].help, .collect = std[i].fn};
        if ((rc = tkm_metrics_add(reg, std[i].type, &o, NULL, err)))
            return rc;
    }
    static const char *const lbl[] = {"version", NULL};
    struct tkm_metric_opts bo = {
        .name = "tkm_build_info",
        .help = "A metric with a constant '1' value labeled by the version tkm was built from.",
        .labels = lbl,
        .max_series = 1,
    };
    struct tkm_metric *bi = NULL;
    if ((rc = tkm_metrics_add(reg, TKM_METRIC_GAUGE, &bo, &bi, err)))
        return rc;
    const char *v[] = {TKM_VERSION};
    if ((rc = tkm_metric_set(bi, v, 1)) < 0)
        return tkm_err_set(err, rc, "metric tkm_build_info: cannot set");
    return 0;
}

static int serve_metrics(struct tkm_httpd *srv, const struct tkm_httpd_req *req,
                         struct tkm_httpd_resp *resp, void *data)
{
    (void)srv;
    (void)req;
    snprintf(resp->content_type, sizeof resp->content_type, "%s", TKM_METRICS_CONTENT_TYPE);
    return tkm_metrics_write(data, &resp->body);
}

int tkm_metrics_serve(struct tkm_metrics *reg, struct tkm_httpd *srv, const char *path,
                      struct tkm_err *err)
{
    return tkm_httpd_handle(srv, path, serve_metrics, reg, err);
}
