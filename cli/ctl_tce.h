/*
 * ctl_tce.h - the shared body of tkmctl sign-entries and verify-entries.
 */
#ifndef CTL_TCE_H
#define CTL_TCE_H

/* argv as given to the command; verify: 0 sign, 1 verify. Returns the exit status. */
int ctl_tce_run(int argc, char **argv, int verify);

#endif
