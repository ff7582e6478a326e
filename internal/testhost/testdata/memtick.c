/*
 * memtick holds MIB MiB of anonymous memory in blocks of 1 MiB and keeps
 * rewriting them, block after block, at RATE MiB/s: a workload whose
 * memory changes while a checkpoint of it is written, with a state that
 * is checkable at any instant. Word w of block b written in sweep s is
 * mix(b, s, w). Between two block writes, blocks [0, pos) hold sweep s+1
 * and blocks [pos, n) sweep s; the frozen instant of a checkpoint may fall
 * inside a block write, which a restored memtick finishes first. Even
 * blocks are rewritten in place; odd ones are replaced (a new mapping is
 * filled, then the old one unmapped), so memory also moves and goes away.
 *
 * It writes "ready" to READYFILE once its memory is filled. On SIGUSR1 it
 * checks every word against (pos, s) and writes "ok" or the first
 * mismatch to READYFILE.verify. A checkpoint that saved pages at
 * different instants (some after the task changed them) fails the check.
 */
#define _GNU_SOURCE
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define BLOCK (1 << 20)
#define WORDS (BLOCK / 8)

static volatile sig_atomic_t verify;
static void on_usr1(int sig) { (void)sig; verify = 1; }

static uint64_t mix(uint64_t b, uint64_t s, uint64_t w) {
	uint64_t x = (b << 40) ^ (s << 20) ^ w ^ 0x9e3779b97f4a7c15ULL;
	x ^= x >> 30; x *= 0xbf58476d1ce4e5b9ULL;
	x ^= x >> 27; x *= 0x94d049bb133111ebULL;
	return x ^ (x >> 31);
}

static double now(void) {
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static uint64_t *newblock(void) {
	void *p = mmap(NULL, BLOCK, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED) { perror("mmap"); exit(1); }
	return p;
}

static void fill(uint64_t *p, uint64_t b, uint64_t s) {
	for (uint64_t w = 0; w < WORDS; w++)
		p[w] = mix(b, s, w);
}

/* The first word of the blocks that differs from the state (pos, s), or -1. */
static long long check(uint64_t **blk, size_t n, size_t pos, uint64_t s) {
	for (size_t b = 0; b < n; b++) {
		uint64_t want = b < pos ? s + 1 : s;
		for (uint64_t w = 0; w < WORDS; w++)
			if (blk[b][w] != mix(b, want, w))
				return (long long)(b * WORDS + w);
	}
	return -1;
}

int main(int argc, char **argv) {
	if (argc != 4) { fprintf(stderr, "usage: memtick MIB RATE READYFILE\n"); return 2; }
	size_t n = (size_t)atol(argv[1]);
	double rate = atof(argv[2]);
	uint64_t **blk = calloc(n, sizeof(*blk));
	if (!blk || n == 0 || rate <= 0) { fprintf(stderr, "bad arguments\n"); return 2; }
	for (size_t b = 0; b < n; b++) {
		blk[b] = newblock();
		fill(blk[b], b, 0);
	}
	signal(SIGUSR1, on_usr1);
	FILE *f = fopen(argv[3], "w");
	if (!f) { perror(argv[3]); return 1; }
	fprintf(f, "ready\n");
	fclose(f);
	char vpath[4096], tmp[4200];
	snprintf(vpath, sizeof vpath, "%s.verify", argv[3]);
	snprintf(tmp, sizeof tmp, "%s.new", vpath);

	uint64_t s = 0; /* blocks [0, pos) hold sweep s+1, the rest sweep s */
	size_t pos = 0;
	double t0 = now(), done = 0;
	for (;;) {
		if (verify) {
			verify = 0;
			long long bad = check(blk, n, pos, s);
			FILE *v = fopen(tmp, "w");
			if (v) {
				if (bad < 0) fprintf(v, "ok\n");
				else fprintf(v, "bad at word %lld (block %lld, pos %zu, sweep %llu)\n",
					     bad, bad / WORDS, pos, (unsigned long long)s);
				fclose(v);
				rename(tmp, vpath);
			}
		}
		if (pos % 2 == 0) {
			fill(blk[pos], pos, s + 1);
		} else {
			uint64_t *p = newblock(), *old = blk[pos];
			fill(p, pos, s + 1);
			blk[pos] = p;
			munmap(old, BLOCK);
		}
		if (++pos == n) { pos = 0; s++; }
		done += 1;
		double ahead = done / rate - (now() - t0);
		if (ahead > 0) {
			struct timespec ts = { (time_t)ahead, (long)((ahead - (time_t)ahead) * 1e9) };
			nanosleep(&ts, NULL);
		}
	}
}
