/* fuzz_mirrors.c - the mirrors loader (lib/mirrors.c) over untrusted file
 * bodies: the input up to its first NUL byte is reg.example's hosts.toml,
 * the rest is registries.conf (a NUL is never valid TOML, so no input is
 * lost). Both are written to a private directory and loaded as the agent
 * loads them; an accepted config is resolved for a few references, by tag
 * and by digest. No crash or leak; every refusal explains itself; every
 * resolution ends with the upstream. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <tkm/err.h>
#include <tkm/mirrors.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char root[64], certs[128], hosts[160], conf[128];

static void cleanup(void)
{
    char dir[160];
    snprintf(dir, sizeof dir, "%s/reg.example", certs);
    unlink(hosts);
    unlink(conf);
    rmdir(dir);
    rmdir(certs);
    rmdir(root);
}

static void setup(void)
{
    char tmpl[] = "/tmp/tkm-fuzz-mirrors-XXXXXX";
    char dir[160];
    if (!mkdtemp(tmpl))
        abort();
    snprintf(root, sizeof root, "%s", tmpl);
    snprintf(certs, sizeof certs, "%s/certs.d", root);
    snprintf(dir, sizeof dir, "%s/reg.example", certs);
    snprintf(hosts, sizeof hosts, "%s/hosts.toml", dir);
    snprintf(conf, sizeof conf, "%s/registries.conf", root);
    if (mkdir(certs, 0700) || mkdir(dir, 0700))
        abort();
    atexit(cleanup);
}

static void put(const char *path, const uint8_t *p, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (!f || (n && fwrite(p, 1, n, f) != n) || fclose(f))
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const char *const refs[][2] = {
        {"reg.example", "team/cache"}, {"registry-1.docker.io", "library/busybox"},
        {"example.com", "foo/bar"},    {"a.example.com", "x"},
        {"localhost:5000", "r/s"},
    };
    if (!root[0])
        setup();
    const uint8_t *nul = memchr(data, 0, size);
    size_t hl = nul ? (size_t)(nul - data) : size;
    put(hosts, data, hl);
    put(conf, nul ? nul + 1 : data, nul ? size - hl - 1 : 0);
    struct tkm_mirrors *m = NULL;
    struct tkm_err e = {0};
    if (tkm_mirrors_load(certs, conf, &m, &e) != 0) {
        if (m || e.code == 0 || !e.msg[0])
            abort();
        return 0;
    }
    for (size_t i = 0; i < sizeof refs / sizeof refs[0]; i++)
        for (int by_digest = 0; by_digest < 2; by_digest++) {
            struct tkm_mirror_endpoint *eps = NULL;
            size_t n = 0;
            struct tkm_err re = {0};
            if (tkm_mirrors_resolve(m, refs[i][0], refs[i][1], by_digest, &eps, &n, &re) == 0) {
                if (n == 0 || !eps[n - 1].upstream)
                    abort();
                for (size_t k = 0; k < n; k++)
                    if (!eps[k].host[0] || !eps[k].repo[0] || !eps[k].path)
                        abort();
            } else if (eps || re.code == 0 || !re.msg[0]) {
                abort();
            }
            tkm_mirror_endpoints_free(eps, n);
        }
    if (tkm_mirrors_changed(m, certs, conf) != 0)
        abort();
    tkm_mirrors_free(m);
    return 0;
}
