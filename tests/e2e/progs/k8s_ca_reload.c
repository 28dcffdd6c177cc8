/*
 * k8s_ca_reload.c - one long-lived k8s client that reads the default namespace
 * every 200 ms, for tests/e2e/k8s_ca_rotation.sh: the kubeconfig's
 * certificate-authority file is replaced while it runs.
 *
 *   e2e_k8s_ca_reload --kubeconfig PATH TIMEOUT_S [CA_RELOAD_MS]
 *
 * Prints a line each time the outcome changes ("ok", or "ERROR rc=<n>
 * code=<http>: <message>") and exits 0 at the first success that follows a
 * failure, 3 when TIMEOUT_S passes first, 1 on local errors.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <curl/curl.h>

#include <tkm/http.h>
#include <tkm/util.h>
#include <k8s/client.h>
#include <k8s/config.h>
#include "sup_k8s.h"

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static int poll_until_recovered(struct k8s_client *c, uint64_t timeout_ms)
{
    uint64_t end = tkm_now_ms() + timeout_ms;
    int failed = 0, last = 1;
    while (tkm_now_ms() < end) {
        struct k8s_status st = K8S_STATUS_INIT;
        int rc = sup_k8s_get(c, &k8s_res_namespaces, NULL, "default", NULL, NULL, &st);
        if (rc == 0 && last != 0)
            printf("ok\n");
        if (rc != 0 && rc != last) {
            char line[1024];
            printf("ERROR rc=%d code=%ld: %s\n", rc, st.code,
                   k8s_status_str(&st, line, sizeof line));
        }
        fflush(stdout);
        k8s_status_release(&st);
        if (rc == 0 && failed)
            return 0;
        failed |= rc != 0;
        last = rc;
        sleep_ms(200);
    }
    return 3;
}

int main(int argc, char **argv)
{
    struct tkm_err err = {0};
    struct k8s_config cfg;
    struct k8s_client *c = NULL;
    uv_loop_t loop;
    int ret = 1;
    if (argc < 4 || strcmp(argv[1], "--kubeconfig") != 0) {
        fprintf(stderr, "usage: e2e_k8s_ca_reload --kubeconfig PATH TIMEOUT_S [CA_RELOAD_MS]\n");
        return 1;
    }
    struct k8s_client_opts o = {.max_retries = -1, .timeout_ms = 10000};
    if (argc > 4)
        o.ca_reload_ms = strtoull(argv[4], NULL, 10);
    if (tkm_http_global_init(&err)) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    k8s_config_init(&cfg);
    uv_loop_init(&loop);
    if (k8s_config_load_default(&cfg, argv[2], &err) || k8s_client_new(&loop, &cfg, &o, &c, &err)) {
        fprintf(stderr, "client: %s\n", err.msg);
        goto out;
    }
    ret = poll_until_recovered(c, strtoull(argv[3], NULL, 10) * 1000u);
out:
    k8s_config_release(&cfg);
    k8s_client_free(c);
    uv_run(&loop, UV_RUN_DEFAULT);
    uv_loop_close(&loop);
    curl_global_cleanup();
    return ret;
}
