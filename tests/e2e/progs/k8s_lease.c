/*
 * e2e_k8s_lease - one leader-election candidate for the e2e scenarios.
 *
 * Usage: e2e_k8s_lease --name LEASE --identity ID [--namespace NS]
 *          [--kubeconfig FILE] [--lease-ms N] [--renew-ms N] [--retry-ms N]
 *          [--release]
 * Prints lines "<unix-ms> <WHAT> <arg>" on stdout (flushed):
 *   LEADING <id>     this candidate became the leader
 *   STOPPED <id>     it stopped leading (renew deadline passed, or stop)
 *   LEADER <holder>  the holder it observes changed
 *   ACTING <id>      every 200 ms while k8s_lease_is_leader() says 1: the
 *                    "work" a leader does; never printed by a non-leader
 * SIGTERM/SIGINT: stop (releasing the lease with --release), exit 0.
 */
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <uv.h>

#include <tkm/http.h>
#include <k8s/client.h>
#include <k8s/config.h>
#include <k8s/lease.h>
#include <tkm/log.h>
#include <tkm/util.h>

struct app {
    uv_loop_t *loop;
    struct k8s_client *c;
    struct k8s_lease *l;
    uv_timer_t act;
    uv_signal_t sig_term, sig_int;
    const char *id;
};

static void say(const char *what, const char *arg)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    printf("%lld %s %s\n", (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000, what, arg);
}

static void started(void *data)
{
    struct app *a = data;
    say("LEADING", a->id);
}

static void stopped(void *data)
{
    struct app *a = data;
    say("STOPPED", a->id);
}

static void new_leader(const char *id, void *data)
{
    (void)data;
    say("LEADER", *id ? id : "-");
}

static void on_act(uv_timer_t *t)
{
    struct app *a = t->data;
    if (a->l && k8s_lease_is_leader(a->l))
        say("ACTING", a->id);
}

static void on_lease_closed(void *data)
{
    struct app *a = data;
    a->l = NULL;
    k8s_client_close(a->c, NULL, NULL);
}

static void on_term(uv_signal_t *s, int signum)
{
    struct app *a = s->data;
    (void)signum;
    const struct k8s_lease_stats *st = k8s_lease_get_stats(a->l);
    fprintf(stderr,
            "e2e_k8s_lease %s: attempts=%" PRIu64 " renewals=%" PRIu64 " conflicts=%" PRIu64
            " failures=%" PRIu64 " acquired=%" PRIu64 " lost=%" PRIu64 "\n",
            a->id, st->attempts, st->renewals, st->conflicts, st->failures, st->acquired, st->lost);
    uv_close((uv_handle_t *)&a->sig_term, NULL);
    uv_close((uv_handle_t *)&a->sig_int, NULL);
    uv_close((uv_handle_t *)&a->act, NULL);
    k8s_lease_close(a->l, on_lease_closed, a);
}

static int parse_ms(const char *s, uint64_t *out)
{
    return tkm_parse_u64(s, 3600u * 1000u, out);
}

int main(int argc, char **argv)
{
    static const struct option lo[] = {{"name", required_argument, NULL, 'n'},
                                       {"identity", required_argument, NULL, 'i'},
                                       {"namespace", required_argument, NULL, 's'},
                                       {"kubeconfig", required_argument, NULL, 'k'},
                                       {"lease-ms", required_argument, NULL, 'L'},
                                       {"renew-ms", required_argument, NULL, 'R'},
                                       {"retry-ms", required_argument, NULL, 'T'},
                                       {"release", no_argument, NULL, 'r'},
                                       {NULL, 0, NULL, 0}};
    struct app a = {0};
    struct k8s_lease_opts lo_ = {0};
    struct k8s_config cfg;
    struct tkm_err err = {0};
    const char *kubeconfig = NULL;
    int opt, rc = 1;
    k8s_config_init(&cfg);
    while ((opt = getopt_long(argc, argv, "", lo, NULL)) != -1) {
        int bad = 0;
        switch (opt) {
        case 'n':
            lo_.name = optarg;
            break;
        case 'i':
            lo_.identity = a.id = optarg;
            break;
        case 's':
            lo_.ns = optarg;
            break;
        case 'k':
            kubeconfig = optarg;
            break;
        case 'L':
            bad = parse_ms(optarg, &lo_.lease_duration_ms);
            break;
        case 'R':
            bad = parse_ms(optarg, &lo_.renew_deadline_ms);
            break;
        case 'T':
            bad = parse_ms(optarg, &lo_.retry_period_ms);
            break;
        case 'r':
            lo_.release_on_stop = 1;
            break;
        default:
            return 2;
        }
        if (bad) {
            fprintf(stderr, "e2e_k8s_lease: bad number: %s\n", optarg);
            return 2;
        }
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    tkm_log_init("e2e_k8s_lease", TKM_LOG_WARN, 0);
    a.loop = uv_default_loop();
    lo_.on_started_leading = started;
    lo_.on_stopped_leading = stopped;
    lo_.on_new_leader = new_leader;
    lo_.data = &a;
    if (tkm_http_global_init(&err) < 0 || k8s_config_load_default(&cfg, kubeconfig, &err) < 0 ||
        k8s_client_new(a.loop, &cfg, NULL, &a.c, &err) < 0) {
        fprintf(stderr, "e2e_k8s_lease: %s\n", tkm_err_str(&err));
        goto out;
    }
    if (k8s_lease_start(a.c, &lo_, &a.l, &err) < 0) {
        fprintf(stderr, "e2e_k8s_lease: %s\n", tkm_err_str(&err));
        k8s_client_free(a.c);
        goto out;
    }
    uv_timer_init(a.loop, &a.act);
    a.act.data = &a;
    uv_timer_start(&a.act, on_act, 200, 200);
    uv_signal_init(a.loop, &a.sig_term);
    uv_signal_init(a.loop, &a.sig_int);
    a.sig_term.data = a.sig_int.data = &a;
    uv_signal_start(&a.sig_term, on_term, SIGTERM);
    uv_signal_start(&a.sig_int, on_term, SIGINT);
    uv_run(a.loop, UV_RUN_DEFAULT);
    rc = uv_loop_close(a.loop) == 0 ? 0 : 3;
out:
    k8s_config_release(&cfg);
    return rc;
}
