/*
 * beat is a workload for live-migration measurements: it holds MIB
 * MiB of anonymous memory, keeps rewriting it at RATE MiB/s (dirty pages a
 * migration must move), and ticks every millisecond. The largest gap
 * between two ticks since the last reset is the time the process could not
 * run, seen from inside: a migration's real frozen time, post-copy page
 * faults included. It writes that gap in microseconds to /tmp/beat.max
 * whenever it grows; creating /tmp/beat.reset starts a new measurement.
 * It reads the wall clock (CLOCK_REALTIME), which hosts share.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <time.h>
#include <unistd.h>
#include <fcntl.h>

static int64_t now_us(void) {
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static void put(const char *path, int64_t v) {
	char b[32];
	int n = snprintf(b, sizeof b, "%lld\n", (long long)v);
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	if (fd >= 0) { if (write(fd, b, n) < 0) {} close(fd); }
}

int main(int argc, char **argv) {
	if (argc != 3) { fprintf(stderr, "usage: beat MIB RATE_MIB_PER_S\n"); return 2; }
	size_t size = (size_t)atol(argv[1]) << 20;
	size_t rate = (size_t)atol(argv[2]) << 20;
	unsigned char *mem = size ? malloc(size) : NULL;
	if (size && !mem) { perror("malloc"); return 1; }
	uint64_t x = 88172645463325252ULL;
	for (size_t i = 0; i + 8 <= size; i += 8) { /* incompressible */
		x ^= x << 13; x ^= x >> 7; x ^= x << 17;
		*(uint64_t *)(mem + i) = x;
	}
	size_t pos = 0, per_tick = rate / 1000;
	int64_t last = now_us(), max = 0;
	put("/tmp/beat.max", 0);
	put("/tmp/beat.ready", 1);
	struct timespec ms = {0, 1000000};
	for (;;) {
		nanosleep(&ms, NULL);
		int64_t t = now_us(), gap = t - last;
		last = t;
		if (gap > max) { max = gap; put("/tmp/beat.max", max); }
		if (access("/tmp/beat.reset", F_OK) == 0) {
			unlink("/tmp/beat.reset");
			max = 0;
			put("/tmp/beat.max", 0);
		}
		for (size_t n = 0; size && n < per_tick; n += 4096) { /* dirty a page */
			mem[pos] ^= 1;
			pos = (pos + 4096) % size;
		}
	}
}
