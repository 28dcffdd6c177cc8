/*
 * tkmctl.h - how tkmctl subcommands plug into the dispatcher (cli/tkmctl.c).
 *
 * Each command lives in its own cli/cmd_<name>.c and registers itself:
 *
 *     static int cmd_inspect(int argc, char **argv) { ... }
 *     TKMCTL_COMMAND(inspect, "show an image's summary and kernels", cmd_inspect);
 *
 * run() gets argv with argv[0] = the command name and returns the process
 * exit status: 0 success, 1 a failure the message explains, 2 a usage error.
 * Every command prints its own --help (what it does, its flags, an example).
 */
#ifndef TKMCTL_H
#define TKMCTL_H

struct tkmctl_command {
    const char *name;
    const char *summary;
    int (*run)(int argc, char **argv);
    int order; /* position in `tkmctl --help`; lower first */
    struct tkmctl_command *next;
};

void tkmctl_register(struct tkmctl_command *c);

#define TKMCTL_COMMAND_ORDERED(cname, csummary, fn, pos)                                           \
    static struct tkmctl_command tkmctl_cmd_##cname = {#cname, csummary, fn, pos, 0};              \
    __attribute__((constructor)) static void tkmctl_reg_##cname(void)                              \
    {                                                                                              \
        tkmctl_register(&tkmctl_cmd_##cname);                                                      \
    }
#define TKMCTL_COMMAND(cname, csummary, fn) TKMCTL_COMMAND_ORDERED(cname, csummary, fn, 50)

#endif
