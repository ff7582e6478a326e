/*
 * sleeper sleeps once, in one nanosleep of an hour, the way a program that
 * does not loop on EINTR sleeps (busybox 1.37's sleep among them), and
 * writes why the sleep ended to /tmp/sleeper.out: "usr1" if SIGUSR1 (which
 * it handles) cut it short, "spurious" if it returned early with no signal
 * (a checkpoint that gave it EINTR), "slept" if the hour passed. It writes
 * /tmp/sleeper.ready just before the sleep.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
static volatile sig_atomic_t usr1;
static void on_usr1(int sig) { (void)sig; usr1 = 1; }
int main(void) {
	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_usr1;
	if (sigaction(SIGUSR1, &sa, NULL) < 0) { perror("sigaction"); return 1; }
	FILE *f = fopen("/tmp/sleeper.ready", "w");
	if (f) { fputs("ready\n", f); fclose(f); }
	struct timespec ts = {3600, 0};
	int r = nanosleep(&ts, NULL);
	const char *why = r == 0 ? "slept" : errno != EINTR ? "error" : usr1 ? "usr1" : "spurious";
	f = fopen("/tmp/sleeper.out", "w");
	if (!f) { perror("sleeper.out"); return 1; }
	fprintf(f, "%s\n", why);
	fclose(f);
	return 0;
}
