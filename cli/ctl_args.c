/* ctl_args.c - see ctl_args.h. */
#include "ctl_args.h"

#include <string.h>

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
