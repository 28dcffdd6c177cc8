/* daemon.c - signals and the stop (daemon.h). */
#include <signal.h>
#include <string.h>

#include <tkm/daemon.h>
#include <tkm/log.h>

static const char *sig_name(int signum)
{
    return signum == SIGTERM ? "SIGTERM" : signum == SIGINT ? "SIGINT" : "SIGHUP";
}

static void signals_close(struct tkm_daemon *d)
{
    uv_handle_t *hs[] = {(uv_handle_t *)&d->sig_term, (uv_handle_t *)&d->sig_int,
                         (uv_handle_t *)&d->sig_hup};
    for (size_t i = 0; i < sizeof hs / sizeof hs[0]; i++)
        if (hs[i]->loop && !uv_is_closing(hs[i]))
            uv_close(hs[i], NULL);
}

void tkm_closer_init(struct tkm_closer *g, void (*done)(void *data), void *data)
{
    g->pending = 1;
    g->done = done;
    g->data = data;
}

void *tkm_closer_add(struct tkm_closer *g)
{
    g->pending++;
    return g;
}

void tkm_closer_done(void *data)
{
    struct tkm_closer *g = data;
    if (--g->pending == 0 && g->done)
        g->done(g->data);
}

static void all_closed(void *data)
{
    struct tkm_daemon *d = data;
    tkm_dbg("every component closed");
    signals_close(d);
}

void *tkm_daemon_closing(struct tkm_daemon *d)
{
    tkm_closer_add(&d->closes);
    return d;
}

void tkm_daemon_closed(void *data)
{
    struct tkm_daemon *d = data;
    tkm_closer_done(&d->closes);
}

static void begin_stop(struct tkm_daemon *d, int signum, int code)
{
    if (d->stopping) {
        if (signum)
            tkm_info("%s: already stopping (%u close(s) in flight)", sig_name(signum),
                     d->closes.pending);
        return;
    }
    d->stopping = 1;
    d->exit_code = code;
    /* held while on_stop starts the closes */
    tkm_closer_init(&d->closes, all_closed, d);
    if (d->o.on_stop)
        d->o.on_stop(d, signum, d->o.data);
    tkm_closer_done(&d->closes);
}

static void on_signal(uv_signal_t *s, int signum)
{
    struct tkm_daemon *d = s->data;
    if (signum == SIGHUP) {
        d->o.on_hup(d, d->o.data);
        return;
    }
    if (!d->stopping)
        tkm_info("%s: stopping", sig_name(signum));
    begin_stop(d, signum, 0);
}

void tkm_daemon_stop(struct tkm_daemon *d, int code)
{
    begin_stop(d, 0, code);
}

int tkm_daemon_init(struct tkm_daemon *d, uv_loop_t *loop, const struct tkm_daemon_opts *o,
                    struct tkm_err *err)
{
    uv_signal_t *ss[] = {&d->sig_term, &d->sig_int, &d->sig_hup};
    int nums[] = {SIGTERM, SIGINT, SIGHUP};
    memset(d, 0, sizeof *d);
    d->loop = loop;
    d->o = *o;
    signal(SIGPIPE, SIG_IGN);
    for (int i = 0; i < 3; i++) {
        if (nums[i] == SIGHUP && !o->on_hup)
            continue;
        int rc = uv_signal_init(loop, ss[i]);
        ss[i]->data = d;
        if (rc == 0)
            rc = uv_signal_start(ss[i], on_signal, nums[i]);
        if (rc < 0)
            return tkm_err_set(err, rc, "signal handler for %s: %s", sig_name(nums[i]),
                               uv_strerror(rc));
    }
    return 0;
}

int tkm_daemon_run(struct tkm_daemon *d)
{
    uv_run(d->loop, UV_RUN_DEFAULT);
    return d->exit_code;
}
