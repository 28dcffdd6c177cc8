/* ctl_oci.c - see ctl_oci.h. */
#include "ctl_oci.h"

#include <string.h>
#include <unistd.h>

#include <tkm/util.h>

const char ctl_oci_flags_help[] =
    "Registry flags:\n"
    "  --auth-file FILE   docker config.json with the credentials (default: $REGISTRY_AUTH_FILE,\n"
    "                     $DOCKER_CONFIG/config.json, ~/.docker/config.json)\n"
    "  --anonymous        never send credentials\n"
    "  --insecure HOST    allow plain HTTP to HOST[:PORT] (repeatable); loopback registries\n"
    "                     (127.0.0.0/8, ::1, localhost) always use plain HTTP\n"
    "  --ca-file FILE     CA bundle for the registry's TLS certificate (implies https, also\n"
    "                     for loopback registries)\n"
    "  --mirrors-hosts-dir DIR  pull and extract: try the mirrors of containerd's hosts.toml\n"
    "                     directory (DIR/<host>/hosts.toml, e.g. /etc/containerd/certs.d) first,\n"
    "                     by digest (docs/mirrors.md)\n"
    "  --registries-conf FILE   pull and extract: the same from CRI-O's registries.conf\n";

void ctl_oci_flags_init(struct ctl_oci_flags *f, const char *label)
{
    memset(f, 0, sizeof *f);
    f->progress.label = label;
    f->progress.tty = isatty(STDERR_FILENO);
}

int ctl_oci_flag(struct ctl_oci_flags *f, int argc, char **argv, int *i, const char *cmd)
{
    const char *a = argv[*i];
    const char **slot = NULL;
    if (strcmp(a, "--auth-file") == 0)
        slot = &f->auth_file;
    else if (strcmp(a, "--ca-file") == 0)
        slot = &f->ca_file;
    else if (strcmp(a, "--mirrors-hosts-dir") == 0)
        slot = &f->mirrors_dir;
    else if (strcmp(a, "--registries-conf") == 0)
        slot = &f->registries_conf;
    else if (strcmp(a, "--insecure") == 0) {
        if (f->n_insecure >= CTL_OCI_INSECURE_MAX) {
            fprintf(stderr, "tkmctl %s: at most %d --insecure hosts\n", cmd, CTL_OCI_INSECURE_MAX);
            return -1;
        }
        slot = &f->insecure[f->n_insecure++];
    } else if (strcmp(a, "--anonymous") == 0) {
        f->anonymous = 1;
        return 1;
    } else if (strcmp(a, "-o") == 0 || strcmp(a, "--output-format") == 0) {
        if (*i + 1 >= argc ||
            (strcmp(argv[*i + 1], "json") != 0 && strcmp(argv[*i + 1], "text") != 0)) {
            fprintf(stderr, "tkmctl %s: %s takes 'json' or 'text'\n", cmd, a);
            return -1;
        }
        f->json = strcmp(argv[++*i], "json") == 0;
        return 1;
    } else {
        return 0;
    }
    if (*i + 1 >= argc) {
        fprintf(stderr, "tkmctl %s: %s needs a value\n", cmd, a);
        return -1;
    }
    *slot = argv[++*i];
    return 1;
}

void ctl_oci_registry_opts(struct ctl_oci_flags *f, struct tkm_oci_registry_opts *o)
{
    memset(o, 0, sizeof *o);
    o->insecure = f->n_insecure ? f->insecure : NULL;
    o->auth_file = f->auth_file;
    o->ca_file = f->ca_file;
    o->anonymous = f->anonymous;
    o->deadline_ms = TKM_OCI_NO_DEADLINE; /* interactive: interrupted by the person, not a clock */
    o->progress = ctl_progress_cb;
    o->progress_ud = &f->progress;
}

const char *ctl_human_bytes(uint64_t n, char *out, size_t len)
{
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = (double)n;
    size_t u = 0;
    while (v >= 1024 && u + 1 < TKM_ARRAY_SIZE(units)) {
        v /= 1024;
        u++;
    }
    snprintf(out, len, u ? "%.1f %s" : "%.0f %s", v, units[u]);
    return out;
}

void ctl_progress_cb(void *ud, uint64_t done, uint64_t total)
{
    struct ctl_progress *p = ud;
    uint64_t now = tkm_now_ms();
    char a[32], b[32], c[32];
    if (!p || !p->tty || (total && total < (1u << 20)))
        return; /* small blobs (configs, manifests) need no progress line */
    if (!p->start_ms || done < p->last_done)
        p->start_ms = now; /* a new transfer */
    p->last_done = done;
    if (done != total && now - p->last_ms < 100)
        return;
    p->last_ms = now;
    double secs = (double)(now - p->start_ms) / 1000.0;
    uint64_t rate = secs > 0.05 ? (uint64_t)((double)done / secs) : 0;
    fprintf(stderr, "\r%s %s / %s  %s/s   ", p->label ? p->label : "",
            ctl_human_bytes(done, a, sizeof a), total ? ctl_human_bytes(total, b, sizeof b) : "?",
            ctl_human_bytes(rate, c, sizeof c));
    p->drawn = 1;
}

void ctl_progress_end(struct ctl_progress *p)
{
    if (p->drawn)
        fputc('\n', stderr);
    p->drawn = 0;
}
