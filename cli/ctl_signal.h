/*
 * ctl_signal.h - SIGINT/SIGTERM in tkmctl: stop, clean up, exit 128+signo.
 *
 * ctl_signal_install() sets handlers that only store the signal number in an
 * atomic flag (and re-arm the default action, so a second Ctrl-C ends the
 * process at once). Long work polls the flag -- lib/archive takes it as
 * opts.cancel and stops with -ECANCELED between reads and entries; the
 * registry client takes it as tkm_oci_registry_opts.cancel and cancels the
 * pull job (its staged layout removed) within about 50 ms -- and work
 * unwinds through its normal cleanup; the command then returns
 * ctl_signal_status() (130 for SIGINT, 143 for SIGTERM). A SIGKILL cannot be
 * caught: what it leaves is attributable (lib/archive staging names) and
 * removed by the next run.
 */
#ifndef CTL_SIGNAL_H
#define CTL_SIGNAL_H

#include <stdatomic.h>

/* Installs the handlers for SIGINT and SIGTERM. 0 or -errno. */
int ctl_signal_install(void);
/* The flag (borrowed, valid for the process): 0, or the signal caught. */
const atomic_int *ctl_signal_flag(void);
/* 128 + the signal caught, or 0 when none was. */
int ctl_signal_status(void);

#endif
