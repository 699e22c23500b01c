/*
 * The sandbox ("pause") program of the real-runtime tests: the pod's first
 * process, which holds its namespaces and does nothing else. It is built
 * statically by tests/runtimes/install.sh, since the tests have no registry
 * to pull a pause image from. As PID 1 it has no default signal actions, so
 * it ends on SIGINT and SIGTERM itself, and reaps what is re-parented to it.
 */
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

static void quit(int sig) {
    (void)sig;
    _exit(0);
}

static void reap(int sig) {
    (void)sig;
    while (waitpid(-1, NULL, WNOHANG) > 0) {
    }
}

int main(void) {
    struct sigaction q = {0}, r = {0};
    q.sa_handler = quit;
    r.sa_handler = reap;
    r.sa_flags = SA_NOCLDSTOP | SA_RESTART;
    sigaction(SIGINT, &q, NULL);
    sigaction(SIGTERM, &q, NULL);
    sigaction(SIGCHLD, &r, NULL);
    for (;;) {
        pause();
    }
    return 1;
}
