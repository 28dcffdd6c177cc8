/* ctl_signal.c - see ctl_signal.h. */
#include "ctl_signal.h"

#include <errno.h>
#include <signal.h>
#include <string.h>

/* The one mutable static of tkmctl outside main(): a signal handler can reach
 * nothing else. A lock-free atomic store is async-signal-safe. */
static atomic_int caught;

static void on_signal(int signo)
{
    atomic_store(&caught, signo);
}

int ctl_signal_install(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sa.sa_flags = SA_RESTART | SA_RESETHAND; /* the second signal acts as if none were caught */
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGINT, &sa, NULL) < 0 || sigaction(SIGTERM, &sa, NULL) < 0)
        return -errno;
    return 0;
}

const atomic_int *ctl_signal_flag(void)
{
    return &caught;
}

int ctl_signal_status(void)
{
    int s = atomic_load(&caught);
    return s ? 128 + s : 0;
}
