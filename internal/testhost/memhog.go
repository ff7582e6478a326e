package testhost

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// memhogSource is a tiny program that allocates MiB of anonymous memory,
// fills every byte (pseudo-random, incompressible), writes "ready" to a
// file and waits: a container workload whose memory state is known in
// size and content, for checkpoint tests and benchmarks. On SIGUSR1 it
// checks every byte against the sequence and writes "ok" or where it
// differs to READYFILE.verify.
const memhogSource = `#include <stdio.h>
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
`

// BuildMemhog compiles memhog (gcc -static) into the file dst.
func BuildMemhog(dst string) error { return buildStatic("memhog", memhogSource, dst) }

// buildStatic compiles a C program (gcc -static) into the file dst.
func buildStatic(name, source, dst string) error {
	dir, err := os.MkdirTemp("", name+"-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	src := filepath.Join(dir, name+".c")
	if err := os.WriteFile(src, []byte(source), 0o644); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	out, err := exec.Command("gcc", "-static", "-O2", "-o", dst, src).CombinedOutput()
	if err != nil {
		return fmt.Errorf("gcc %s: %w: %s", name, err, out)
	}
	return nil
}

// PoolPath returns the host path of the storage pool (btrfs or dir).
func (h *Host) PoolPath() string {
	return filepath.Join(h.root, "storage-pools", "default")
}

// ContainerPath returns the host path of a container's root filesystem.
func (h *Host) ContainerPath(name string) string {
	return filepath.Join(h.PoolPath(), "containers", name)
}

// Install copies a program into a container's /bin.
func (h *Host) Install(name, program string) {
	h.t.Helper()
	b, err := os.ReadFile(program)
	if err != nil {
		h.t.Fatalf("%v", err)
	}
	if err := os.WriteFile(filepath.Join(h.ContainerPath(name), "bin", filepath.Base(program)), b, 0o755); err != nil {
		h.t.Fatalf("%v", err)
	}
}

// VerifyMemhog asks the memhog in container name to check its memory and
// returns its verdict ("ok", or where the first difference is).
func (h *Host) VerifyMemhog(name string) string {
	h.t.Helper()
	h.OK("exec", name, "--", "sh", "-c", "rm -f /tmp/memhog.ready.verify; kill -USR1 $(pidof memhog)")
	h.OK("exec", name, "--", "sh", "-c", "while [ ! -e /tmp/memhog.ready.verify ]; do sleep 0.1; done")
	return strings.TrimSpace(h.OK("exec", name, "--", "cat", "/tmp/memhog.ready.verify"))
}

// StartMemhog copies memhog into a running container and starts it in the
// background holding mib MiB, and waits until its memory is filled.
func (h *Host) StartMemhog(name, memhog string, mib int) {
	h.t.Helper()
	h.Install(name, memhog)
	// exec waits for its command's output pipes: the background process
	// gets its own session and no inherited descriptors.
	h.OK("exec", name, "--", "sh", "-c", fmt.Sprintf("rm -f /tmp/memhog.ready; setsid memhog %d /tmp/memhog.ready </dev/null >/dev/null 2>&1 &", mib))
	h.OK("exec", name, "--", "sh", "-c", "while [ ! -e /tmp/memhog.ready ]; do sleep 0.1; done")
}
