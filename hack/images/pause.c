/* pause: the sandbox ("pause") container of tkm's test node (hack/node.sh).
 *
 * It holds the pod's namespaces open and does nothing else: it sleeps in
 * pause(), reaps any child that is reparented to it (it runs as PID 1 of the
 * sandbox), and exits 0 on SIGTERM or SIGINT. Built static (musl-gcc or
 * cc -static -Os) by hack/images/build.sh into a one-layer OCI image.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static void on_stop(int sig)
{
    (void)sig;
    _exit(0);
}

static void on_child(int sig)
{
    int saved = errno;
    (void)sig;
    while (waitpid(-1, NULL, WNOHANG) > 0) {
    }
    errno = saved;
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "-v") == 0) {
        puts("tkm-pause 1");
        return 0;
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sigemptyset(&sa.sa_mask);
    sa.sa_handler = on_stop;
    if (sigaction(SIGTERM, &sa, NULL) != 0 || sigaction(SIGINT, &sa, NULL) != 0) {
        perror("pause: sigaction");
        return 1;
    }
    sa.sa_handler = on_child;
    sa.sa_flags = SA_NOCLDSTOP | SA_RESTART;
    if (sigaction(SIGCHLD, &sa, NULL) != 0) {
        perror("pause: sigaction");
        return 1;
    }
    if (getpid() != 1) {
        fputs("pause: warning: not running as PID 1\n", stderr);
    }
    for (;;) {
        pause();
    }
}
