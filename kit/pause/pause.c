/*
 * Pod sandbox ("pause") process for the devstack offline kit.
 *
 * Holds the pod's namespaces open, reaps zombies when it is PID 1 of a
 * shared PID namespace, and exits cleanly on SIGINT/SIGTERM. Behaves like
 * the upstream Kubernetes pause image (same CLI: -v prints the version).
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef VERSION
#define VERSION "unknown"
#endif

static void on_term(int sig) {
  (void)sig;
  _exit(0);
}

static void on_child(int sig) {
  (void)sig;
  while (waitpid(-1, NULL, WNOHANG) > 0) {
  }
}

int main(int argc, char **argv) {
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "-v") == 0) {
      printf("pause.c %s (devstack kit)\n", VERSION);
      return 0;
    }
  }
  if (getpid() != 1)
    fprintf(stderr, "Warning: pause should be the first process\n");

  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sigemptyset(&sa.sa_mask);
  sa.sa_handler = on_term;
  if (sigaction(SIGINT, &sa, NULL) < 0 || sigaction(SIGTERM, &sa, NULL) < 0)
    return 1;
  sa.sa_handler = on_child;
  sa.sa_flags = SA_NOCLDSTOP;
  if (sigaction(SIGCHLD, &sa, NULL) < 0)
    return 2;

  for (;;)
    pause();
}
