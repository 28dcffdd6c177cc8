/*
 * tkmctl.c - the dispatcher: global flags, help, and the command registry.
 */
#include "tkmctl.h"

#include <curl/curl.h>
#include <stdio.h>
#include <string.h>

#include <tkm/http.h>
#include <tkm/log.h>

static struct tkmctl_command *commands;

void tkmctl_register(struct tkmctl_command *c)
{
    struct tkmctl_command **pp = &commands;
    while (*pp && ((*pp)->order < c->order ||
                   ((*pp)->order == c->order && strcmp((*pp)->name, c->name) < 0)))
        pp = &(*pp)->next;
    c->next = *pp;
    *pp = c;
}

static void usage(FILE *f)
{
    fprintf(f,
            "tkmctl %s - package, sign, inspect and check Triton kernel caches\n\n"
            "Usage: tkmctl [-v|--verbose] COMMAND [ARGS]\n\n"
            "Commands:\n",
            TKM_VERSION);
    for (struct tkmctl_command *c = commands; c; c = c->next)
        fprintf(f, "  %-16s %s\n", c->name, c->summary);
    fprintf(f, "  %-16s %s\n", "version", "print the version");
    fprintf(
        f, "\nRun 'tkmctl COMMAND --help' for a command's flags and examples.\n"
           "A Triton cache is the directory TRITON_CACHE_DIR points at (default ~/.triton/cache).\n"
           "Exit status: 0 success, 1 failure (the message says why), 2 usage error.\n");
}

int main(int argc, char **argv)
{
    int verbose = 0;
    int i = 1;
    /* Before any libuv call: pulls finish (rename, hash) on the pool. */
    if (tkm_threadpool_init(0, NULL) < 0)
        return 1;
    for (; i < argc && argv[i][0] == '-'; i++) {
        if (strcmp(argv[i], "-v") == 0 || strcmp(argv[i], "--verbose") == 0) {
            verbose++;
        } else if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
            usage(stdout);
            return 0;
        } else if (strcmp(argv[i], "--version") == 0) {
            printf("tkmctl %s\n", TKM_VERSION);
            return 0;
        } else {
            fprintf(stderr, "tkmctl: unknown flag '%s'\n\n", argv[i]);
            usage(stderr);
            return 2;
        }
    }
    tkm_log_init("tkmctl", verbose >= 2 ? TKM_LOG_DEBUG : verbose ? TKM_LOG_INFO : TKM_LOG_WARN, 0);
    if (i >= argc) {
        usage(stderr);
        return 2;
    }
    if (strcmp(argv[i], "version") == 0) {
        printf("tkmctl %s\n", TKM_VERSION);
        return 0;
    }
    if (strcmp(argv[i], "help") == 0) {
        if (i + 1 < argc) {
            char *sub[] = {argv[i + 1], "--help", NULL};
            for (struct tkmctl_command *c = commands; c; c = c->next)
                if (strcmp(c->name, argv[i + 1]) == 0)
                    return c->run(2, sub);
        }
        usage(stdout);
        return 0;
    }
    for (struct tkmctl_command *c = commands; c; c = c->next) {
        if (strcmp(c->name, argv[i]) == 0) {
            curl_global_init(CURL_GLOBAL_DEFAULT);
            int rc = c->run(argc - i, argv + i);
            curl_global_cleanup();
            return rc;
        }
    }
    fprintf(stderr, "tkmctl: unknown command '%s'\n\n", argv[i]);
    usage(stderr);
    return 2;
}
