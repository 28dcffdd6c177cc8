/* test_metrics.c - lib/metrics: registry rules, exposition checked line by line by a strict
 * text-format 0.0.4 parser below, and /metrics scraped over HTTP from lib/httpd. */
#include <tkm/http.h>
#include <tkm/httpd.h>
#include <tkm/metrics.h>

#include <math.h>
#include <time.h>

#include "test.h"

/* ---- a strict parser of the exposition ----------------------------------- */

struct sample {
    char name[128];
    int nl;
    char lname[9][64];
    char lval[9][512]; /* unescaped */
    double v;
};

struct expo {
    struct sample s[512];
    int n;
    char err[256];
};

static int ident(const char **p, char *out, size_t n, int colon)
{
    size_t k = 0;
    const char *q = *p;
    while ((*q >= 'a' && *q <= 'z') || (*q >= 'A' && *q <= 'Z') || *q == '_' ||
           (colon && *q == ':') || (k && *q >= '0' && *q <= '9')) {
        if (k + 1 >= n)
            return -1;
        out[k++] = *q++;
    }
    out[k] = '\0';
    *p = q;
    return k ? 0 : -1;
}

static int number(const char *p, double *v)
{
    if (!strcmp(p, "NaN") || !strcmp(p, "+Inf") || !strcmp(p, "-Inf")) {
        *v = p[0] == 'N' ? NAN : (p[0] == '+' ? INFINITY : -INFINITY);
        return 0;
    }
    char *end;
    *v = strtod(p, &end);
    return (end == p || *end || isnan(*v) || isinf(*v)) ? -1 : 0;
}

static int parse_sample(const char *line, struct sample *s)
{
    const char *p = line;
    memset(s, 0, sizeof *s);
    if (ident(&p, s->name, sizeof s->name, 1))
        return -1;
    if (*p == '{') {
        p++;
        while (*p != '}') {
            if (s->nl == 9 || ident(&p, s->lname[s->nl], sizeof s->lname[0], 0) || *p++ != '=' ||
                *p++ != '"')
                return -1;
            size_t k = 0;
            while (*p != '"') {
                char c = *p++;
                if (!c || c == '\n')
                    return -1;
                if (c == '\\') {
                    c = *p++;
                    if (c == 'n')
                        c = '\n';
                    else if (c != '\\' && c != '"')
                        return -1;
                }
                if (k + 1 >= sizeof s->lval[0])
                    return -1;
                s->lval[s->nl][k++] = c;
            }
            p++;
            s->nl++;
            if (*p == ',')
                p++;
            else if (*p != '}')
                return -1;
        }
        p++;
    }
    if (*p++ != ' ')
        return -1;
    return number(p, &s->v);
}

static const char *label(const struct sample *s, const char *name)
{
    for (int i = 0; i < s->nl; i++)
        if (!strcmp(s->lname[i], name))
            return s->lval[i];
    return NULL;
}

/* Checks every line; histograms cumulative, +Inf == _count; families sorted, HELP then TYPE
 * then samples of that family only. Returns 0 or -1 with e->err saying which line. */
static int expo_check(const char *text, struct expo *e)
{
    char fam[128] = "", prev[128] = "", type[16] = "", line[2048];
    int lineno = 0, help_seen = 0;
    double last_bucket = -1, last_le = -INFINITY;
    e->n = 0;
    for (const char *p = text; *p;) {
        const char *nl = strchr(p, '\n');
        if (!nl)
            return snprintf(e->err, sizeof e->err, "no final newline"), -1;
        size_t len = (size_t)(nl - p);
        lineno++;
        if (len >= sizeof line)
            return snprintf(e->err, sizeof e->err, "line %d too long", lineno), -1;
        memcpy(line, p, len);
        line[len] = '\0';
        p = nl + 1;
        if (!strncmp(line, "# HELP ", 7)) {
            const char *q = line + 7;
            if (ident(&q, fam, sizeof fam, 1) || *q != ' ' || strcmp(fam, prev) <= 0)
                return snprintf(e->err, sizeof e->err, "line %d: bad/unsorted HELP", lineno), -1;
            for (q++; *q; q++)
                if (*q == '\\' && q[1] != '\\' && q[1] != 'n')
                    return snprintf(e->err, sizeof e->err, "line %d: bad escape", lineno), -1;
                else if (*q == '\\')
                    q++;
            snprintf(prev, sizeof prev, "%s", fam);
            help_seen = 1;
            type[0] = '\0';
            continue;
        }
        if (!strncmp(line, "# TYPE ", 7)) {
            char n2[128];
            const char *q = line + 7;
            if (!help_seen || ident(&q, n2, sizeof n2, 1) || strcmp(n2, fam) || *q++ != ' ' ||
                (strcmp(q, "counter") && strcmp(q, "gauge") && strcmp(q, "histogram")))
                return snprintf(e->err, sizeof e->err, "line %d: bad TYPE", lineno), -1;
            snprintf(type, sizeof type, "%s", q);
            help_seen = 0;
            continue;
        }
        struct sample *s = &e->s[e->n];
        if (e->n == 512 || !type[0] || parse_sample(line, s))
            return snprintf(e->err, sizeof e->err, "line %d: bad sample: %s", lineno, line), -1;
        e->n++;
        size_t fl = strlen(fam);
        const char *sfx = strncmp(s->name, fam, fl) ? NULL : s->name + fl;
        if (!sfx || (strcmp(type, "histogram")
                         ? *sfx != '\0'
                         : strcmp(sfx, "_bucket") && strcmp(sfx, "_sum") && strcmp(sfx, "_count")))
            return snprintf(e->err, sizeof e->err, "line %d: not of family %s", lineno, fam), -1;
        if (!strcmp(type, "counter") && s->v < 0)
            return snprintf(e->err, sizeof e->err, "line %d: negative counter", lineno), -1;
        if (!strcmp(type, "histogram")) {
            const char *le = label(s, "le");
            if (!strcmp(sfx, "_bucket")) {
                double lv;
                if (!le || number(le, &lv) || s->v < last_bucket || lv <= last_le || s->nl < 1 ||
                    strcmp(s->lname[s->nl - 1], "le"))
                    return snprintf(e->err, sizeof e->err, "line %d: bad bucket", lineno), -1;
                last_bucket = s->v;
                last_le = lv;
            } else {
                if (le || (!strcmp(sfx, "_sum") && last_le != INFINITY))
                    return snprintf(e->err, sizeof e->err, "line %d: no +Inf bucket", lineno), -1;
                if (!strcmp(sfx, "_count") && s->v != last_bucket)
                    return snprintf(e->err, sizeof e->err, "line %d: _count != +Inf", lineno), -1;
                if (!strcmp(sfx, "_count"))
                    last_bucket = -1, last_le = -INFINITY;
            }
        }
    }
    return 0;
}

static const struct sample *find(const struct expo *e, const char *name, const char *lname,
                                 const char *lval)
{
    for (int i = 0; i < e->n; i++)
        if (!strcmp(e->s[i].name, name) &&
            (!lname || (label(&e->s[i], lname) && !strcmp(label(&e->s[i], lname), lval))))
            return &e->s[i];
    return NULL;
}

static void expose(struct tkm_metrics *reg, struct tkm_buf *b, struct expo *e)
{
    tkm_buf_init(b, 1 << 20);
    ASSERT_OK(tkm_metrics_write(reg, b));
    if (expo_check(b->data, e))
        tkm_test_fail(__FILE__, __LINE__, "exposition invalid: %s\n%s", e->err, b->data);
}

static struct tkm_metrics *registry(void)
{
    struct tkm_metrics *reg = NULL;
    struct tkm_err err = {0};
    ASSERT_OK(tkm_metrics_new(&reg, &err));
    return reg;
}

/* ---- tests ------------------------------------------------------------------- */

TEST(checker_rejects_bad_text)
{
    static struct expo e;
    ASSERT_OK(expo_check("# HELP a_total x\n# TYPE a_total counter\na_total{k=\"v\"} 1\n", &e));
    ASSERT_NE(expo_check("# HELP a x\n# TYPE a gauge\na{k=\"v\\t\"} 1\n", &e), 0);
    ASSERT_NE(expo_check("# HELP a x\n# TYPE a gauge\nb 1\n", &e), 0);
    ASSERT_NE(expo_check("# HELP b x\n# TYPE b gauge\n# HELP a x\n# TYPE a gauge\n", &e), 0);
    ASSERT_NE(expo_check("# HELP a x\n# TYPE a gauge\na 1x\n", &e), 0);
    ASSERT_NE(expo_check("# HELP h x\n# TYPE h histogram\nh_bucket{le=\"1\"} 2\n"
                         "h_bucket{le=\"+Inf\"} 1\nh_sum 1\nh_count 1\n",
                         &e),
              0);
    ASSERT_NE(expo_check("# HELP h x\n# TYPE h histogram\nh_bucket{le=\"1\"} 1\nh_sum 1\n", &e), 0);
}

TEST(exposition_valid_and_sorted)
{
    struct tkm_metrics *reg = registry();
    struct tkm_metric *ops, *depth, *dur;
    struct tkm_err err = {0};
    static const char *const kind[] = {"kind", NULL};
    struct tkm_metric_opts o = {.name = "tkm_test_zz_total", .help = "Ops.", .labels = kind};
    ASSERT_OK(tkm_metrics_add(reg, TKM_METRIC_COUNTER, &o, &ops, &err));
    o = (struct tkm_metric_opts){.name = "tkm_test_depth", .help = "Depth \\ of\nqueue."};
    ASSERT_OK(tkm_metrics_add(reg, TKM_METRIC_GAUGE, &o, &depth, &err));
    static const double b[] = {0.1, 1, 10};
    o = (struct tkm_metric_opts){
        .name = "tkm_test_dur_seconds", .help = "D.", .labels = kind, .buckets = b, .nbuckets = 3};
    ASSERT_OK(tkm_metrics_add(reg, TKM_METRIC_HISTOGRAM, &o, &dur, &err));
    ASSERT_OK(tkm_metrics_add_standard(reg, &err));
    ASSERT_OK(tkm_metric_add(ops, (const char *[]){"Zeta"}, 1));
    ASSERT_OK(tkm_metric_add(ops, (const char *[]){"Alpha"}, 2));
    ASSERT_OK(tkm_metric_set(depth, NULL, 0.1));
    double obs[] = {0.05, 0.1, 0.5, 3, 100};
    for (int i = 0; i < 5; i++)
        ASSERT_OK(tkm_metric_observe(dur, (const char *[]){"A"}, obs[i]));
    ASSERT_OK(tkm_metric_observe(dur, (const char *[]){"B"}, 1));

    struct tkm_buf out;
    static struct expo e;
    expose(reg, &out, &e);
    const char *t = out.data;
    ASSERT_STRCONTAINS(t, "# HELP tkm_test_depth Depth \\\\ of\\nqueue.\n"
                          "# TYPE tkm_test_depth gauge\ntkm_test_depth 0.1\n");
    ASSERT_STRCONTAINS(t,
                       "tkm_test_zz_total{kind=\"Alpha\"} 2\ntkm_test_zz_total{kind=\"Zeta\"} 1\n");
    ASSERT_STRCONTAINS(t, "tkm_test_dur_seconds_bucket{kind=\"A\",le=\"0.1\"} 2\n"
                          "tkm_test_dur_seconds_bucket{kind=\"A\",le=\"1\"} 3\n"
                          "tkm_test_dur_seconds_bucket{kind=\"A\",le=\"10\"} 4\n"
                          "tkm_test_dur_seconds_bucket{kind=\"A\",le=\"+Inf\"} 5\n"
                          "tkm_test_dur_seconds_sum{kind=\"A\"} 103.65\n"
                          "tkm_test_dur_seconds_count{kind=\"A\"} 5\n"
                          "tkm_test_dur_seconds_bucket{kind=\"B\",le=\"0.1\"} 0\n");
    ASSERT(strstr(t, "# HELP process_") < strstr(t, "# HELP tkm_build_info"));
    ASSERT(strstr(t, "# HELP tkm_test_depth") < strstr(t, "# HELP tkm_test_dur_seconds"));
    /* Same state, same bytes. */
    struct tkm_buf again;
    tkm_buf_init(&again, 1 << 20);
    ASSERT_OK(tkm_metrics_write(reg, &again));
    ASSERT(strstr(again.data, "tkm_test_zz_total{kind=\"Alpha\"} 2\n"));
    ASSERT(find(&e, "tkm_test_dur_seconds_count", "kind", "A")->v == 5);
    ASSERT_NULL(find(&e, "tkm_test_dur_seconds_count", "kind", "C"));
    tkm_buf_release(&again);
    tkm_buf_release(&out);
    tkm_metrics_free(reg);
}

TEST(label_escaping_round_trips)
{
    struct tkm_metrics *reg = registry();
    struct tkm_metric *g;
    static const char *const l[] = {"path", "other", NULL};
    struct tkm_metric_opts o = {.name = "tkm_test_g", .help = "g", .labels = l};
    ASSERT_OK(tkm_metrics_add(reg, TKM_METRIC_GAUGE, &o, &g, NULL));
    const char *weird[] = {"a\"b\\c\nd", "", "{}=,# ", "\\n", "ünïcödé ✓", NULL};
    for (int i = 0; weird[i]; i++)
        ASSERT_OK(tkm_metric_set(g, (const char *[]){weird[i], "x"}, i));
    struct tkm_buf out;
    static struct expo e;
    expose(reg, &out, &e);
    for (int i = 0; weird[i]; i++) {
        const struct sample *s = find(&e, "tkm_test_g", "path", weird[i]);
        ASSERT_NOT_NULL(s);
        ASSERT(s->v == i);
        ASSERT_STREQ(label(s, "other"), "x");
    }
    ASSERT_STRCONTAINS(out.data, "path=\"a\\\"b\\\\c\\nd\"");
    tkm_buf_release(&out);
    tkm_metrics_free(reg);
}

TEST(cardinality_cap_overflows)
{
    struct tkm_metrics *reg = registry();
    struct tkm_metric *c;
    static const char *const l[] = {"image", NULL};
    struct tkm_metric_opts o = {
        .name = "tkm_test_pulls_total", .help = "p", .labels = l, .max_series = 3};
    ASSERT_OK(tkm_metrics_add(reg, TKM_METRIC_COUNTER, &o, &c, NULL));
    const char *imgs[] = {"a", "b", "c", "d", "e", "a"};
    int rcs[6];
    for (int i = 0; i < 6; i++)
        rcs[i] = tkm_metric_add(c, (const char *[]){imgs[i]}, 1);
    ASSERT_EQ(rcs[2], 0);
    ASSERT_EQ(rcs[3], 1);
    ASSERT_EQ(rcs[4], 1);
    ASSERT_EQ(rcs[5], 0); /* an existing series is still updated */
    struct tkm_buf out;
    static struct expo e;
    expose(reg, &out, &e);
    int series = 0;
    for (int i = 0; i < e.n; i++)
        series += strcmp(e.s[i].name, "tkm_test_pulls_total") == 0;
    ASSERT_EQ(series, 4);
    const struct sample *s = find(&e, "tkm_test_pulls_total", "image", TKM_METRICS_OVERFLOW);
    ASSERT_NOT_NULL(s);
    ASSERT(s->v == 2);
    ASSERT(find(&e, "tkm_test_pulls_total", "image", "a")->v == 2);
    ASSERT_NULL(find(&e, "tkm_test_pulls_total", "image", "d"));
    s = find(&e, "tkm_metrics_series_overflow_total", "metric", "tkm_test_pulls_total");
    ASSERT_NOT_NULL(s);
    ASSERT(s->v == 2);
    tkm_buf_release(&out);
    tkm_metrics_free(reg);
}

/* tkm_metric_remove: every series matching the given values (NULL: any) goes,
 * the others and the overflow series stay, and the room under the cap comes back. */
TEST(remove_matching_series)
{
    struct tkm_metrics *reg = registry();
    struct tkm_metric *c, *plain, *g;
    static const char *const l[] = {"namespace", "cache", "part", NULL};
    struct tkm_metric_opts o = {.name = "tkm_test_compiles_total", .help = "c", .labels = l};
    ASSERT_OK(tkm_metrics_add(reg, TKM_METRIC_COUNTER, &o, &c, NULL));
    o = (struct tkm_metric_opts){.name = "tkm_test_plain", .help = "p"};
    ASSERT_OK(tkm_metrics_add(reg, TKM_METRIC_GAUGE, &o, &plain, NULL));
    ASSERT_OK(tkm_metric_add(c, (const char *[]){"a", "ns/x", "triton"}, 3));
    ASSERT_OK(tkm_metric_add(c, (const char *[]){"a", "ns/x", "inductor"}, 1));
    ASSERT_OK(tkm_metric_add(c, (const char *[]){"b", "ns/x", "triton"}, 2));
    ASSERT_OK(tkm_metric_add(c, (const char *[]){"a", "ns/y", "triton"}, 5));
    ASSERT_OK(tkm_metric_add(c, (const char *[]){"a", "ns/xx", "triton"}, 7));
    /* the cache ns/x, every namespace and part: 3 series, not ns/xx's */
    ASSERT_EQ(tkm_metric_remove(c, (const char *[]){NULL, "ns/x", NULL}), 3);
    ASSERT_EQ(tkm_metric_remove(c, (const char *[]){NULL, "ns/x", NULL}), 0);
    struct tkm_buf out;
    static struct expo e;
    expose(reg, &out, &e);
    ASSERT_NULL(find(&e, "tkm_test_compiles_total", "cache", "ns/x"));
    ASSERT(find(&e, "tkm_test_compiles_total", "cache", "ns/y")->v == 5);
    ASSERT(find(&e, "tkm_test_compiles_total", "cache", "ns/xx")->v == 7);
    ASSERT_NOT_NULL(find(&e, "tkm_test_plain", NULL, NULL));
    tkm_buf_release(&out);
    /* a removed tuple updated again starts from 0 */
    ASSERT_OK(tkm_metric_add(c, (const char *[]){"a", "ns/x", "triton"}, 1));
    expose(reg, &out, &e);
    ASSERT(find(&e, "tkm_test_compiles_total", "cache", "ns/x")->v == 1);
    tkm_buf_release(&out);
    /* all values given: exactly that series */
    ASSERT_EQ(tkm_metric_remove(c, (const char *[]){"a", "ns/y", "inductor"}), 0);
    ASSERT_EQ(tkm_metric_remove(c, (const char *[]){"a", "ns/y", "triton"}), 1);
    /* refused: no values, a family without labels, NULL */
    ASSERT_EQ(tkm_metric_remove(c, NULL), -EINVAL);
    ASSERT_EQ(tkm_metric_remove(plain, (const char *[]){NULL}), -EINVAL);
    ASSERT_EQ(tkm_metric_remove(NULL, (const char *[]){NULL}), -EINVAL);
    /* the cap: the overflow series stays; removal frees room for a new tuple */
    static const char *const one[] = {"image", NULL};
    o = (struct tkm_metric_opts){.name = "tkm_test_g", .help = "g", .labels = one, .max_series = 2};
    ASSERT_OK(tkm_metrics_add(reg, TKM_METRIC_GAUGE, &o, &g, NULL));
    ASSERT_EQ(tkm_metric_set(g, (const char *[]){"a"}, 1), 0);
    ASSERT_EQ(tkm_metric_set(g, (const char *[]){"b"}, 2), 0);
    ASSERT_EQ(tkm_metric_set(g, (const char *[]){"c"}, 3), 1);
    ASSERT_EQ(tkm_metric_remove(g, (const char *[]){NULL}), 2);
    ASSERT_EQ(tkm_metric_set(g, (const char *[]){"d"}, 4), 0);
    expose(reg, &out, &e);
    ASSERT(find(&e, "tkm_test_g", "image", TKM_METRICS_OVERFLOW)->v == 3);
    ASSERT(find(&e, "tkm_test_g", "image", "d")->v == 4);
    ASSERT_NULL(find(&e, "tkm_test_g", "image", "a"));
    tkm_buf_release(&out);
    tkm_metrics_free(reg);
}

TEST(registration_rules)
{
    struct tkm_metrics *reg = registry();
    struct tkm_err err = {0};
    static const char *const le[] = {"le", NULL}, *const dup[] = {"a", "a", NULL},
                             *const under[] = {"__x", NULL};
    struct tkm_metric_opts o = {.name = "tkm_test_pulls", .help = "x"};
    ASSERT_EQ(tkm_metrics_add(reg, TKM_METRIC_COUNTER, &o, NULL, &err), -EINVAL);
    ASSERT_STRCONTAINS(err.msg, "_total");
    o.name = "9bad";
    ASSERT_EQ(tkm_metrics_add(reg, TKM_METRIC_GAUGE, &o, NULL, NULL), -EINVAL);
    o.name = "tkm_test_x";
    o.help = "";
    ASSERT_EQ(tkm_metrics_add(reg, TKM_METRIC_GAUGE, &o, NULL, NULL), -EINVAL);
    o.help = "h";
    o.labels = le;
    ASSERT_EQ(tkm_metrics_add(reg, TKM_METRIC_HISTOGRAM, &o, NULL, NULL), -EINVAL);
    o.labels = dup;
    ASSERT_EQ(tkm_metrics_add(reg, TKM_METRIC_GAUGE, &o, NULL, NULL), -EINVAL);
    o.labels = under;
    ASSERT_EQ(tkm_metrics_add(reg, TKM_METRIC_GAUGE, &o, NULL, NULL), -EINVAL);
    o.labels = NULL;
    static const double bad[] = {1, 1};
    o.buckets = bad;
    o.nbuckets = 2;
    ASSERT_EQ(tkm_metrics_add(reg, TKM_METRIC_HISTOGRAM, &o, NULL, NULL), -EINVAL);
    o.buckets = NULL;
    o.nbuckets = 0;
    ASSERT_OK(tkm_metrics_add(reg, TKM_METRIC_HISTOGRAM, &o, NULL, NULL));
    ASSERT_EQ(tkm_metrics_add(reg, TKM_METRIC_GAUGE, &o, NULL, NULL), -EEXIST);
    o.name = "tkm_test_x_count";
    tkm_err_clear(&err);
    ASSERT_EQ(tkm_metrics_add(reg, TKM_METRIC_GAUGE, &o, NULL, &err), -EEXIST);
    ASSERT_STRCONTAINS(err.msg, "tkm_test_x_count");
    o.name = "tkm_test_x_bucket";
    ASSERT_EQ(tkm_metrics_add(reg, TKM_METRIC_GAUGE, &o, NULL, NULL), -EEXIST);
    o.max_series = TKM_METRICS_MAX_SERIES + 1;
    o.name = "tkm_test_y";
    ASSERT_EQ(tkm_metrics_add(reg, TKM_METRIC_GAUGE, &o, NULL, NULL), -EINVAL);
    tkm_metrics_free(reg);
}

TEST(update_rules)
{
    struct tkm_metrics *reg = registry();
    struct tkm_metric *c, *g, *h;
    static const char *const l[] = {"k", NULL};
    struct tkm_metric_opts o = {.name = "tkm_test_c_total", .help = "c", .labels = l};
    ASSERT_OK(tkm_metrics_add(reg, TKM_METRIC_COUNTER, &o, &c, NULL));
    o.name = "tkm_test_g";
    ASSERT_OK(tkm_metrics_add(reg, TKM_METRIC_GAUGE, &o, &g, NULL));
    o.name = "tkm_test_h";
    ASSERT_OK(tkm_metrics_add(reg, TKM_METRIC_HISTOGRAM, &o, &h, NULL));
    const char *v[] = {"x"};
    ASSERT_EQ(tkm_metric_add(c, v, -1), -EINVAL);
    ASSERT_EQ(tkm_metric_add(c, v, NAN), -EINVAL);
    ASSERT_EQ(tkm_metric_set(c, v, 3), -EINVAL); /* only from collect */
    ASSERT_EQ(tkm_metric_add(c, NULL, 1), -EINVAL);
    ASSERT_EQ(tkm_metric_add(c, (const char *[]){NULL}, 1), -EINVAL);
    ASSERT_EQ(tkm_metric_add(c, (const char *[]){"\xff\xfe"}, 1), -EINVAL);
    char big[TKM_METRICS_MAX_VALUE + 2];
    memset(big, 'a', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    ASSERT_EQ(tkm_metric_add(c, (const char *[]){big}, 1), -EINVAL);
    ASSERT_EQ(tkm_metric_observe(g, v, 1), -EINVAL);
    ASSERT_EQ(tkm_metric_add(h, v, 1), -EINVAL);
    ASSERT_EQ(tkm_metric_observe(h, v, NAN), -EINVAL);
    ASSERT_OK(tkm_metric_add(g, v, -2.5));
    ASSERT_OK(tkm_metric_set(g, v, INFINITY));
    struct tkm_buf out;
    static struct expo e;
    expose(reg, &out, &e);
    ASSERT_NULL(find(&e, "tkm_test_c_total", NULL, NULL)); /* no refused update made a series */
    ASSERT_STRCONTAINS(out.data, "tkm_test_g{k=\"x\"} +Inf\n");
    ASSERT_STRCONTAINS(out.data, "# TYPE tkm_test_c_total counter\n# HELP tkm_test_g");
    tkm_buf_release(&out);
    tkm_metrics_free(reg);
}

struct states {
    int ready, failed;
};

static void collect_states(struct tkm_metric *m, void *data)
{
    struct states *st = data;
    if (st->ready >= 0)
        tkm_metric_set(m, (const char *[]){"Ready"}, st->ready);
    tkm_metric_set(m, (const char *[]){"Failed"}, st->failed);
}

TEST(collect_at_scrape_time)
{
    struct tkm_metrics *reg = registry();
    struct states st = {3, 1};
    static const char *const l[] = {"state", NULL};
    struct tkm_metric_opts o = {.name = "tkm_test_caches",
                                .help = "Caches by state.",
                                .labels = l,
                                .collect = collect_states,
                                .collect_data = &st};
    ASSERT_OK(tkm_metrics_add(reg, TKM_METRIC_GAUGE, &o, NULL, NULL));
    struct tkm_buf out;
    static struct expo e;
    expose(reg, &out, &e);
    ASSERT_STRCONTAINS(out.data, "tkm_test_caches{state=\"Failed\"} 1\n"
                                 "tkm_test_caches{state=\"Ready\"} 3\n");
    tkm_buf_release(&out);
    st.ready = -1; /* the state vanished */
    st.failed = 7;
    expose(reg, &out, &e);
    ASSERT_STRCONTAINS(out.data, "tkm_test_caches{state=\"Failed\"} 7\n");
    ASSERT(!strstr(out.data, "Ready"));
    tkm_buf_release(&out);
    tkm_metrics_free(reg);
}

TEST(standard_metrics)
{
    struct tkm_metrics *reg = registry();
    ASSERT_OK(tkm_metrics_add_standard(reg, NULL));
    struct tkm_buf out;
    static struct expo e;
    expose(reg, &out, &e);
    const struct sample *s;
    ASSERT((s = find(&e, "process_resident_memory_bytes", NULL, NULL)) && s->v > 1e5);
    ASSERT((s = find(&e, "process_virtual_memory_bytes", NULL, NULL)) && s->v > 1e6);
    ASSERT((s = find(&e, "process_cpu_seconds_total", NULL, NULL)) && s->v >= 0 && s->v < 1e6);
    ASSERT((s = find(&e, "process_open_fds", NULL, NULL)) && s->v >= 3 && s->v < 1e5);
    ASSERT((s = find(&e, "process_max_fds", NULL, NULL)) && s->v >= 64);
    double now = (double)time(NULL);
    ASSERT((s = find(&e, "process_start_time_seconds", NULL, NULL)) && s->v > now - 600 &&
           s->v <= now + 2);
    s = find(&e, "tkm_build_info", "version", TKM_VERSION);
    ASSERT_NOT_NULL(s);
    ASSERT(s->v == 1);
    ASSERT_STRCONTAINS(out.data, "# TYPE process_cpu_seconds_total counter\n");
    tkm_buf_release(&out);
    tkm_metrics_free(reg);
}

static void on_done(struct tkm_http_req *req, struct tkm_http_resp *resp, void *data)
{
    (void)req;
    struct tkm_http_resp *dst = data;
    dst->status = resp->status;
    dst->code = 1;
    tkm_buf_append(&dst->body, resp->body.data, resp->body.len);
    tkm_buf_append(&dst->headers, resp->headers.data, resp->headers.len);
}

TEST(scrape_over_http)
{
    uv_loop_t loop;
    struct tkm_http *h;
    struct tkm_httpd *srv;
    struct tkm_err err = {0};
    struct tkm_metrics *reg = registry();
    ASSERT_OK(tkm_metrics_add_standard(reg, &err));
    ASSERT_OK(tkm_http_global_init(&err));
    ASSERT_OK(uv_loop_init(&loop));
    ASSERT_OK(tkm_http_new(&loop, NULL, &h, &err));
    ASSERT_OK(tkm_httpd_new(&loop, "127.0.0.1:0", NULL, &srv, &err));
    ASSERT_OK(tkm_metrics_serve(reg, srv, "/metrics", &err));
    ASSERT_OK(tkm_metrics_serve(reg, NULL, "/metrics", &err)); /* disabled server */
    char url[128];
    snprintf(url, sizeof url, "http://%s/metrics", tkm_httpd_addr(srv)); /* 127.0.0.1:<port> */
    struct tkm_http_resp got;
    tkm_http_resp_init(&got);
    struct tkm_http_req_opts o = {
        .url = url, .timeout_ms = 10000, .done_cb = on_done, .data = &got};
    ASSERT_OK(tkm_http_start(h, &o, NULL, &err));
    while (!got.code)
        uv_run(&loop, UV_RUN_ONCE);
    ASSERT_EQ(got.status, 200);
    char ct[128];
    ASSERT(tkm_http_resp_header(&got, "content-type", ct, sizeof ct) > 0);
    ASSERT_STREQ(ct, TKM_METRICS_CONTENT_TYPE);
    static struct expo e;
    if (expo_check(got.body.data, &e))
        tkm_test_fail(__FILE__, __LINE__, "scrape invalid: %s", e.err);
    ASSERT_NOT_NULL(find(&e, "tkm_build_info", "version", TKM_VERSION));
    tkm_http_resp_release(&got);
    tkm_httpd_close(srv, NULL, NULL);
    tkm_http_close(h, NULL, NULL);
    uv_run(&loop, UV_RUN_DEFAULT);
    ASSERT_EQ(uv_loop_close(&loop), 0);
    tkm_metrics_free(reg); /* after the server is gone */
}
