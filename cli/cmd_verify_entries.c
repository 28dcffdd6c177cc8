/*
 * cmd_verify_entries.c - tkmctl verify-entries: checks the TCE per-entry
 * signatures of a Triton cache directory (body in cmd_sign_entries.c).
 */
#include "ctl_tce.h"
#include "tkmctl.h"

static int cmd_verify_entries(int argc, char **argv)
{
    return ctl_tce_run(argc, argv, 1);
}

static struct tkmctl_command tkmctl_cmd_verify_entries = {
    "verify-entries", "check the TCE per-file signatures of a cache directory", cmd_verify_entries,
    41, 0};
__attribute__((constructor)) static void tkmctl_reg_verify_entries(void)
{
    tkmctl_register(&tkmctl_cmd_verify_entries);
}
