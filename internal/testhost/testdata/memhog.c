/*
 * memhog is a tiny program that allocates MiB of anonymous memory,
 * fills every byte (pseudo-random, incompressible), writes "ready" to a
 * file and waits: a container workload whose memory state is known in
 * size and content, for checkpoint tests and benchmarks. On SIGUSR1 it
 * checks every byte against the sequence and writes "ok" or where it
 * differs to READYFILE.verify.
 */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <stdint.h>
#include <signal.h>
static volatile sig_atomic_t verify;
static void on_usr1(int sig) { (void)sig; verify = 1; }
int main(int argc, char **argv) {
	if (argc != 3) { fprintf(stderr, "usage: memhog MIB READYFILE\n"); return 2; }
	size_t n = (size_t)atol(argv[1]) << 20;
	uint64_t *p = malloc(n), x = 88172645463325252ULL;
	if (!p) { perror("malloc"); return 1; }
	for (size_t i = 0; i < n / 8; i++) {
		x ^= x << 13; x ^= x >> 7; x ^= x << 17;
		p[i] = x;
	}
	signal(SIGUSR1, on_usr1);
	FILE *f = fopen(argv[2], "w");
	if (!f) { perror(argv[2]); return 1; }
	fprintf(f, "ready\n");
	fclose(f);
	char vpath[4096];
	snprintf(vpath, sizeof vpath, "%s.verify", argv[2]);
	for (;;) {
		pause();
		if (!verify)
			continue;
		verify = 0;
		size_t bad = n / 8;
		x = 88172645463325252ULL;
		for (size_t i = 0; i < n / 8; i++) {
			x ^= x << 13; x ^= x >> 7; x ^= x << 17;
			if (p[i] != x) { bad = i; break; }
		}
		char tmp[4200];
		snprintf(tmp, sizeof tmp, "%s.new", vpath);
		FILE *v = fopen(tmp, "w");
		if (!v) continue;
		if (bad == n / 8) fprintf(v, "ok\n");
		else fprintf(v, "bad at byte %zu\n", bad * 8);
		fclose(v);
		rename(tmp, vpath);
	}
}
