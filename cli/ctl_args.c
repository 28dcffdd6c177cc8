/* ctl_args.c - see ctl_args.h. */
#include "ctl_args.h"

#include <errno.h>
#include <string.h>

#include <tkm/util.h>

#include "ctl_oci.h"

static const struct ctl_arg *find(const struct ctl_arg *args, const char *a,
                                  const char **inline_val)
{
    *inline_val = NULL;
    for (const struct ctl_arg *f = args; f && f->name; f++) {
        size_t n = strlen(f->name);
        if (strncmp(a, f->name, n) != 0)
            continue;
        if (a[n] == '\0')
            return f;
        if (a[n] == '=' && f->str) {
            *inline_val = a + n + 1;
            return f;
        }
    }
    return NULL;
}

int ctl_args_parse(const struct ctl_args_spec *s, int argc, char **argv)
{
    size_t npos = 0;
    for (size_t p = 0; p < s->npos; p++)
        s->pos[p] = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            s->usage(stdout);
            return 0;
        }
        if (s->oci) {
            int k = ctl_oci_flag(s->oci, argc, argv, &i, s->cmd);
            if (k < 0)
                return 2;
            if (k)
                continue;
        }
        if (a[0] == '-' && a[1] != '\0') {
            const char *v = NULL;
            const struct ctl_arg *f = find(s->args, a, &v);
            if (!f) {
                fprintf(stderr, "tkmctl %s: unknown flag '%s' (see tkmctl %s --help)\n", s->cmd, a,
                        s->cmd);
                return 2;
            }
            if (f->set) {
                *f->set = 1;
                continue;
            }
            if (!v) {
                if (i + 1 >= argc) {
                    fprintf(stderr, "tkmctl %s: %s needs a value\n", s->cmd, a);
                    return 2;
                }
                v = argv[++i];
            }
            *f->str = v;
            continue;
        }
        if (npos >= s->npos) {
            fprintf(stderr, "tkmctl %s: unexpected argument '%s'\n", s->cmd, a);
            return 2;
        }
        s->pos[npos++] = a;
    }
    return -1;
}

int ctl_parse_size(const char *s, uint64_t *out)
{
    static const struct {
        const char *sfx;
        uint64_t mul;
    } units[] = {{"", 1},
                 {"B", 1},
                 {"K", 1000ULL},
                 {"KB", 1000ULL},
                 {"M", 1000000ULL},
                 {"MB", 1000000ULL},
                 {"G", 1000000000ULL},
                 {"GB", 1000000000ULL},
                 {"T", 1000000000000ULL},
                 {"TB", 1000000000000ULL},
                 {"Ki", 1ULL << 10},
                 {"KiB", 1ULL << 10},
                 {"Mi", 1ULL << 20},
                 {"MiB", 1ULL << 20},
                 {"Gi", 1ULL << 30},
                 {"GiB", 1ULL << 30},
                 {"Ti", 1ULL << 40},
                 {"TiB", 1ULL << 40}};
    char num[32];
    size_t n = 0;
    uint64_t v;
    if (!s)
        return -EINVAL;
    while (s[n] >= '0' && s[n] <= '9')
        n++;
    if (n == 0 || n >= sizeof num)
        return n == 0 ? -EINVAL : -ERANGE;
    memcpy(num, s, n);
    num[n] = '\0';
    int rc = tkm_parse_u64(num, INT64_MAX, &v);
    if (rc < 0)
        return rc;
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++) {
        if (strcmp(s + n, units[i].sfx) != 0)
            continue;
        if (v == 0)
            return -EINVAL;
        if (v > (uint64_t)INT64_MAX / units[i].mul)
            return -ERANGE;
        *out = v * units[i].mul;
        return 0;
    }
    return -EINVAL;
}

int ctl_size_flag(const char *cmd, const char *flag, const char *v, uint64_t *out)
{
    if (!v)
        return 0;
    int rc = ctl_parse_size(v, out);
    if (rc == 0)
        return 0;
    fprintf(stderr,
            "tkmctl %s: %s '%s': %s; give bytes, or a number with K, M, G, T (powers of 1000) or "
            "Ki, Mi, Gi, Ti (powers of 1024), e.g. 512Mi\n",
            cmd, flag, v,
            rc == -ERANGE ? "too large (the maximum is 2^63-1 bytes)" : "not a positive size");
    return 2;
}
