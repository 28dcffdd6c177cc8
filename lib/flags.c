/* flags.c - the daemons' command line (flags.h). */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tkm/flags.h>
#include <tkm/log.h>
#include <tkm/util.h>

#define DURATION_EXAMPLES "500ms, 10s, 5m, 1h or 1m30s"
#define SIZE_EXAMPLES     "10Gi, 500Mi or 1000000"

int tkm_parse_duration(const char *s, uint64_t *ms)
{
    static const struct {
        const char *unit;
        uint64_t ms;
    } units[] = {{"ms", 1}, {"s", 1000}, {"m", 60000}, {"h", 3600000}};
    uint64_t total = 0;
    const char *p = s;
    if (!s || !*s)
        return -EINVAL;
    if (strcmp(s, "0") == 0) {
        *ms = 0;
        return 0;
    }
    while (*p) {
        uint64_t v = 0, mul = 0;
        if (*p < '0' || *p > '9')
            return -EINVAL;
        for (; *p >= '0' && *p <= '9'; p++) {
            if (v > (UINT64_MAX - 9) / 10)
                return -ERANGE;
            v = v * 10 + (uint64_t)(*p - '0');
        }
        for (size_t i = 0; i < TKM_ARRAY_SIZE(units) && !mul; i++) {
            size_t l = strlen(units[i].unit);
            /* "m" must not eat the "m" of "ms" */
            if (strncmp(p, units[i].unit, l) == 0 && !(l == 1 && p[0] == 'm' && p[1] == 's')) {
                mul = units[i].ms;
                p += l;
            }
        }
        if (!mul)
            return -EINVAL;
        if (v > UINT64_MAX / mul || total > UINT64_MAX - v * mul)
            return -ERANGE;
        total += v * mul;
    }
    *ms = total;
    return 0;
}

int tkm_parse_size(const char *s, uint64_t *bytes)
{
    static const struct {
        const char *suf;
        uint64_t mul;
    } units[] = {{"Ki", 1ULL << 10}, {"Mi", 1ULL << 20}, {"Gi", 1ULL << 30},  {"Ti", 1ULL << 40},
                 {"K", 1000ULL},     {"M", 1000000ULL},  {"G", 1000000000ULL}};
    char num[32];
    size_t n = s ? strlen(s) : 0;
    uint64_t mul = 1, v;
    for (size_t i = 0; i < TKM_ARRAY_SIZE(units); i++) {
        size_t l = strlen(units[i].suf);
        if (n > l && strcmp(s + n - l, units[i].suf) == 0) {
            mul = units[i].mul;
            n -= l;
            break;
        }
    }
    if (n == 0 || n >= sizeof num)
        return -EINVAL;
    memcpy(num, s, n);
    num[n] = 0;
    int rc = tkm_parse_u64(num, UINT64_MAX / mul, &v);
    if (rc < 0)
        return rc;
    *bytes = v * mul;
    return 0;
}

/* ---- notes and errors ------------------------------------------------------------------- */

static void note(struct tkm_flagset *fs, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void note(struct tkm_flagset *fs, const char *fmt, ...)
{
    char line[sizeof fs->notes[0]];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    for (unsigned i = 0; i < fs->n_notes; i++)
        if (strcmp(fs->notes[i], line) == 0)
            return;
    if (fs->n_notes < TKM_FLAGS_MAX_NOTES)
        memcpy(fs->notes[fs->n_notes++], line, sizeof line);
}

static int bad(const struct tkm_flagset *fs, const char *flag, const char *v, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int bad(const struct tkm_flagset *fs, const char *flag, const char *v, const char *fmt, ...)
{
    char why[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    fprintf(stderr, "%s: %s%s%s: %s (see %s --help)\n", fs->prog, flag, v ? " " : "", v ? v : "",
            why, fs->prog);
    return -EINVAL;
}

/* ---- the logging flags ------------------------------------------------------------------- */

static int parse_level(const char *v, int *verbosity, int *level)
{
    int64_t n;
    int l;
    if (tkm_parse_i64(v, 0, 10, &n) == 0) { /* the controller took 0..10 */
        *verbosity = (int)n;
        *level = -1;
        return 0;
    }
    if ((l = tkm_log_level_parse(v)) < 0)
        return -EINVAL;
    *verbosity = 0;
    *level = l;
    return 0;
}

static int is_level(const char *v)
{
    int a, b;
    return v && parse_level(v, &a, &b) == 0;
}

#define LEVEL_WHY "expected a verbosity 0..10 or error|warn|info|debug|trace"

/* The logging flags of every daemon, the current and the deprecated ones.
 * name is the flag without dashes; val its "=value" (NULL when none); *i may
 * move on to take the next argument. 1 = handled, 0 = not a logging flag,
 * -EINVAL after the message. */
static int log_flag(struct tkm_flagset *fs, const char *name, size_t nl, const char *val, int *i,
                    int argc, char **argv, int single_dash)
{
    const char *next = *i + 1 < argc ? argv[*i + 1] : NULL;
    char flag[48];
    if (single_dash && strspn(name, "v") != nl) /* one dash: -v, -vv only */
        return 0;
    snprintf(flag, sizeof flag, "%s%.*s", single_dash ? "-" : "--", (int)nl, name);
#define IS(s) (nl == strlen(s) && strncmp(name, s, nl) == 0)
    if (IS("v") && !val && !is_level(next)) {
        note(fs, "-v without a level is deprecated (it goes in the next release): write -v 1");
        fs->verbosity++;
        fs->level = -1;
        return 1;
    }
    if (single_dash && nl > 1 && strspn(name, "v") == nl && !val) { /* -vv */
        note(fs, "-%.*s is deprecated (it goes in the next release): write -v %zu", (int)nl, name,
             nl);
        fs->verbosity += (int)nl;
        fs->level = -1;
        return 1;
    }
    if (IS("verbose") && !val) {
        note(fs, "--verbose is deprecated (it goes in the next release): write -v 1");
        fs->verbosity++;
        fs->level = -1;
        return 1;
    }
    if (IS("log-json") && !val) {
        note(fs, "--log-json is deprecated (it goes in the next release): write --log-format json");
        fs->log_format = "json";
        return 1;
    }
    int v = IS("v"), lvl = IS("log-level") || IS("zap-log-level"), fmt = IS("log-format");
    if (!v && !lvl && !fmt)
        return 0;
    if (!val) {
        if (!next)
            return bad(fs, flag, NULL, "needs a value");
        val = argv[++*i];
    }
    if (lvl)
        note(fs, "--%.*s is deprecated (it goes in the next release): write -v %s", (int)nl, name,
             val);
    if (fmt) {
        if (strcmp(val, "text") != 0 && strcmp(val, "json") != 0)
            return bad(fs, "--log-format", val, "expected text or json");
        fs->log_format = strcmp(val, "json") == 0 ? "json" : "text";
        return 1;
    }
    if (parse_level(val, &fs->verbosity, &fs->level) < 0)
        return bad(fs, flag, val, LEVEL_WHY);
    return 1;
#undef IS
}

/* ---- table flags ------------------------------------------------------------------------- */

static const struct tkm_flag *lookup(const struct tkm_flagset *fs, const char *name, size_t nl)
{
    for (unsigned i = 0; i < fs->n_flags; i++) {
        const struct tkm_flag *f = &fs->flags[i];
        if ((strlen(f->name) == nl && strncmp(f->name, name, nl) == 0) ||
            (f->alias && strlen(f->alias) == nl && strncmp(f->alias, name, nl) == 0))
            return f;
    }
    return NULL;
}

static const char *unit_name(uint64_t ms)
{
    return ms == 1 ? "milliseconds" : ms == 1000 ? "seconds" : ms == 60000 ? "minutes" : "hours";
}

static const char *bare_suffix(uint64_t ms)
{
    return ms == 1 ? "ms" : ms == 1000 ? "s" : ms == 60000 ? "m" : "h";
}

/* 90061000 -> "25h1m1s", 1500 -> "1s500ms", 0 -> "0". */
static const char *fmt_duration(uint64_t ms, char *out, size_t n)
{
    static const struct {
        const char *unit;
        uint64_t ms;
    } units[] = {{"h", 3600000}, {"m", 60000}, {"s", 1000}, {"ms", 1}};
    size_t o = 0;
    out[0] = 0;
    if (ms == 0)
        snprintf(out, n, "0");
    for (size_t i = 0; i < TKM_ARRAY_SIZE(units) && o < n; i++)
        if (ms / units[i].ms) {
            o += (size_t)snprintf(out + o, n - o, "%llu%s", (unsigned long long)(ms / units[i].ms),
                                  units[i].unit);
            ms %= units[i].ms;
        }
    return out;
}

static int in_range(const struct tkm_flag *f, uint64_t x)
{
    return x >= f->min && (!f->max || x <= f->max);
}

static int set_value(struct tkm_flagset *fs, const struct tkm_flag *f, const char *flag,
                     const char *v)
{
    uint64_t x = 0;
    int rc;
    struct tkm_err err = {0};
    switch (f->type) {
    case TKM_FLAG_STRING:
        *(const char **)f->dst = v;
        return 0;
    case TKM_FLAG_BOOL:
        if (!v || strcmp(v, "true") == 0 || strcmp(v, "1") == 0)
            *(int *)f->dst = 1;
        else if (strcmp(v, "false") == 0 || strcmp(v, "0") == 0)
            *(int *)f->dst = 0;
        else
            return bad(fs, flag, v, "expected true or false");
        return 0;
    case TKM_FLAG_CHOICE:
        for (const char *p = f->choices; *p;) { /* "json|yaml" */
            size_t l = strcspn(p, "|");
            if (l == strlen(v) && strncmp(p, v, l) == 0) {
                *(const char **)f->dst = v;
                return 0;
            }
            p += l + (p[l] == '|');
        }
        return bad(fs, flag, v, "expected %s", f->choices);
    case TKM_FLAG_DURATION:
        rc = tkm_parse_duration(v, &x);
        if (rc == -EINVAL && f->bare_ms && tkm_parse_u64(v, UINT64_MAX / f->bare_ms, &x) == 0) {
            note(fs,
                 "%s %s: a duration without a unit is deprecated (it goes in the next "
                 "release): write %s%s",
                 flag, v, v, bare_suffix(f->bare_ms));
            x *= f->bare_ms;
            rc = 0;
        }
        if (rc < 0)
            return bad(fs, flag, v, "expected a duration such as " DURATION_EXAMPLES);
        if (!in_range(f, x)) {
            char lo[32], hi[32];
            return bad(fs, flag, v, "use %s..%s", fmt_duration(f->min, lo, sizeof lo),
                       f->max ? fmt_duration(f->max, hi, sizeof hi) : "");
        }
        *(uint64_t *)f->dst = x;
        return 0;
    case TKM_FLAG_SIZE:
        if (tkm_parse_size(v, &x) < 0)
            return bad(fs, flag, v, "expected a size such as " SIZE_EXAMPLES);
        if (!in_range(f, x))
            return bad(fs, flag, v, "must be at least %llu bytes", (unsigned long long)f->min);
        *(uint64_t *)f->dst = x;
        return 0;
    case TKM_FLAG_UINT:
        if (tkm_parse_u64(v, UINT64_MAX, &x) < 0 || !in_range(f, x)) {
            if (f->max)
                return bad(fs, flag, v, "use %llu..%llu", (unsigned long long)f->min,
                           (unsigned long long)f->max);
            return bad(fs, flag, v, "expected a number from %llu", (unsigned long long)f->min);
        }
        *(uint64_t *)f->dst = x;
        return 0;
    case TKM_FLAG_FUNC:
        if (f->set(v, f->dst, &err) < 0)
            return bad(fs, flag, v, "%s", tkm_err_str(&err));
        return 0;
    }
    return bad(fs, flag, v, "unknown flag type");
}

int tkm_flags_parse(struct tkm_flagset *fs, int argc, char **argv)
{
    fs->verbosity = 0;
    fs->level = -1;
    fs->log_format = "text";
    fs->n_notes = 0;
    for (int i = 1; i < argc; i++) {
        const char *s = argv[i], *val, *eq;
        char flag[128];
        int single = 0, rc;
        if (strcmp(s, "-h") == 0 || strcmp(s, "--help") == 0) {
            tkm_flags_usage(fs, stdout);
            return 1;
        }
        if (s[0] != '-' || s[1] == '\0' || strcmp(s, "--") == 0)
            return bad(fs, s, NULL, "unexpected argument");
        single = s[1] != '-';
        const char *name = s + (single ? 1 : 2);
        eq = strchr(name, '=');
        size_t nl = eq ? (size_t)(eq - name) : strlen(name);
        val = eq ? eq + 1 : NULL;
        snprintf(flag, sizeof flag, "%.*s", (int)(name - s + nl), s);
        if ((rc = log_flag(fs, name, nl, val, &i, argc, argv, single)) != 0) {
            if (rc < 0)
                return rc;
            continue;
        }
        const struct tkm_flag *f = lookup(fs, name, nl);
        /* one dash only before a one-letter name (-o), two before a long one */
        if (!f || (single && nl > 1) || (!single && nl == 1 && strcmp(name, "v") != 0))
            return bad(fs, flag, NULL, "unknown flag");
        if (f->type != TKM_FLAG_BOOL && !val) {
            if (i + 1 >= argc)
                return bad(fs, flag, NULL, "needs a value");
            val = argv[++i];
        }
        if ((rc = set_value(fs, f, flag, val)) < 0)
            return rc;
    }
    return 0;
}

/* ---- --help -------------------------------------------------------------------------------- */

/* Prints text's lines indented, then "(default DEF)" on the last one, or on
 * a line of its own when that would pass 90 columns. */
static void print_indented(FILE *f, const char *text, const char *def)
{
    const char *p = text ? text : "";
    size_t last = 0;
    while (*p) {
        size_t l = strcspn(p, "\n");
        fprintf(f, "        %.*s", (int)l, p);
        last = l;
        p += l;
        if (*p == '\n')
            p++;
        if (*p)
            fputc('\n', f);
    }
    if (def && last && 8 + last + 11 + strlen(def) > 90)
        fprintf(f, "\n        (default %s)", def);
    else if (def)
        fprintf(f, "%s(default %s)", last ? " " : "        ", def);
    fputc('\n', f);
}

void tkm_flags_usage(const struct tkm_flagset *fs, FILE *f)
{
    int any_bare = 0, any_duration = 0, any_size = 0;
    fprintf(f, "Usage: %s\n\n%s%s", fs->synopsis, fs->about ? fs->about : "",
            fs->about ? "\n" : "");
    fprintf(f, "Flags (--flag VALUE or --flag=VALUE):\n");
    for (unsigned i = 0; i < fs->n_flags; i++) {
        const struct tkm_flag *fl = &fs->flags[i];
        const char *arg = fl->arg ? fl->arg : fl->type == TKM_FLAG_CHOICE ? fl->choices : NULL;
        fprintf(f, "  ");
        if (fl->alias)
            fprintf(f, "-%s, ", fl->alias);
        fprintf(f, "%s%s%s%s\n", strlen(fl->name) == 1 ? "-" : "--", fl->name, arg ? " " : "",
                arg ? arg : "");
        print_indented(f, fl->help, fl->def);
        any_bare |= fl->type == TKM_FLAG_DURATION && fl->bare_ms;
        any_duration |= fl->type == TKM_FLAG_DURATION;
        any_size |= fl->type == TKM_FLAG_SIZE;
    }
    fprintf(f, "  -v LEVEL\n");
    print_indented(f,
                   "log verbosity: 0 info, 1 debug, 2 trace; or a level name:\n"
                   "error, warn, info, debug, trace",
                   "0");
    fprintf(f, "  --log-format text|json\n");
    print_indented(f,
                   "log lines as text, or as one JSON object a line\n"
                   "({\"ts\":...,\"level\":...,\"prog\":...,\"msg\":...})",
                   "text");
    fprintf(f, "  -h, --help\n");
    print_indented(f, "this text", NULL);
    if (any_duration || any_size)
        fputc('\n', f);
    if (any_duration)
        fprintf(f, "Durations: one or more <integer><unit>, unit ms, s, m or h: " DURATION_EXAMPLES
                   ".\n");
    if (any_size)
        fprintf(f, "Sizes: bytes, or with Ki Mi Gi Ti (1024^n) or K M G (1000^n): " SIZE_EXAMPLES
                   ".\n");
    fprintf(f, "\nDeprecated spellings, still accepted until the next release (each logs a "
               "warning):\n"
               "  --log-level LEVEL, --zap-log-level LEVEL (write -v LEVEL); -v without a level,\n"
               "  --verbose (write -v 1); --log-json (write --log-format json)\n");
    if (any_bare) {
        fprintf(f, "  a duration without a unit:");
        for (unsigned i = 0; i < fs->n_flags; i++)
            if (fs->flags[i].type == TKM_FLAG_DURATION && fs->flags[i].bare_ms)
                fprintf(f, "\n    --%s N (N %s)", fs->flags[i].name,
                        unit_name(fs->flags[i].bare_ms));
        fputc('\n', f);
    }
    if (fs->epilogue)
        fprintf(f, "\n%s", fs->epilogue);
}

/* ---- logging ------------------------------------------------------------------------------- */

enum tkm_log_level tkm_flags_log_level(const struct tkm_flagset *fs, enum tkm_log_level base)
{
    if (fs->level >= 0)
        return (enum tkm_log_level)fs->level;
    int l = (int)base + fs->verbosity;
    return l > TKM_LOG_TRACE ? TKM_LOG_TRACE : (enum tkm_log_level)l;
}

void tkm_flags_log_init(struct tkm_flagset *fs, enum tkm_log_level base)
{
    tkm_log_init(fs->prog, tkm_flags_log_level(fs, base),
                 fs->log_format && strcmp(fs->log_format, "json") == 0);
    for (unsigned i = 0; i < fs->n_notes; i++)
        tkm_warn("%s", fs->notes[i]);
}
