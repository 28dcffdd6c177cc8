/* The RSS floor of a daemon built the way tkm's are: a process that links only
 * libcurl and libuv (both required by the design: libcurl's multi interface on
 * one libuv loop), initializes libcurl (which initializes OpenSSL, and whose
 * Debian build loads gnutls, krb5, ldap, rtmp, ssh2 ... as dependencies) and
 * then idles on a libuv timer. bench/agent.sh prints its VmRSS beside
 * tkm-agent's: whatever tkm-agent uses above it is tkm's own.
 *
 * Usage: bench_rss_floor [SECONDS]   (default 600; exits after that) */
#include <curl/curl.h>
#include <stdio.h>
#include <stdlib.h>
#include <uv.h>

static void on_timer(uv_timer_t *t)
{
    uv_stop(t->loop);
}

int main(int argc, char **argv)
{
    long secs = argc > 1 ? strtol(argv[1], NULL, 10) : 600;
    if (secs <= 0)
        secs = 600;
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
        fprintf(stderr, "bench_rss_floor: curl_global_init failed\n");
        return 1;
    }
    CURLM *m = curl_multi_init();
    uv_loop_t loop;
    uv_timer_t t;
    if (!m || uv_loop_init(&loop) != 0) {
        fprintf(stderr, "bench_rss_floor: init failed\n");
        return 1;
    }
    uv_timer_init(&loop, &t);
    uv_timer_start(&t, on_timer, (uint64_t)secs * 1000, 0);
    printf("ready\n");
    fflush(stdout);
    uv_run(&loop, UV_RUN_DEFAULT);
    uv_close((uv_handle_t *)&t, NULL);
    uv_run(&loop, UV_RUN_DEFAULT);
    uv_loop_close(&loop);
    curl_multi_cleanup(m);
    curl_global_cleanup();
    return 0;
}
