package testhost

import (
	_ "embed"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
)

// The C workloads tests and benchmarks run inside containers. Their
// sources are testdata/*.c (each one's header says what it does); the
// Build functions compile them with gcc -static, so the binaries run in
// any container image.
var (
	//go:embed testdata/memhog.c
	memhogSource string
	//go:embed testdata/beat.c
	beatSource string
	//go:embed testdata/memtick.c
	memtickSource string
	//go:embed testdata/undumpable.c
	undumpableSource string
	//go:embed testdata/netprobe.c
	netprobeSource string
	//go:embed testdata/vping.c
	vpingSource string
	//go:embed testdata/udpecho.c
	udpechoSource string
	//go:embed testdata/sleeper.c
	sleeperSource string
)

// vpings holds the vping built in each binary directory.
var vpings sync.Map // bin dir -> *vpingBuild

type vpingBuild struct {
	once sync.Once
	path string
	err  error
}

// Ping sends one ICMP echo from container name to ip (vping, installed on
// first use): how tests check reachability from unprivileged containers,
// whose root may not open the raw socket busybox's ping needs.
func (h *Host) Ping(name, ip string) Result {
	h.t.Helper()
	v, _ := vpings.LoadOrStore(h.bin, &vpingBuild{path: filepath.Join(h.bin, "vping")})
	b := v.(*vpingBuild)
	b.once.Do(func() { b.err = buildStatic("vping", vpingSource, b.path) })
	if b.err != nil {
		h.t.Fatalf("build vping: %v", b.err)
	}
	if _, err := os.Stat(filepath.Join(h.ContainerPath(name), "bin", "vping")); err != nil {
		h.Install(name, b.path)
	}
	return h.Vessel("exec", name, "--", "vping", ip)
}

// BuildMemhog compiles memhog (testdata/memhog.c: fills MiB of anonymous
// memory with a known sequence and verifies it on SIGUSR1) into dst.
func BuildMemhog(dst string) error { return buildStatic("memhog", memhogSource, dst) }

// BuildMemtick compiles memtick (testdata/memtick.c: keeps rewriting MiB
// of anonymous memory, in place and by remapping, at a set rate, and checks
// on SIGUSR1 that its memory is one instant's) into dst.
func BuildMemtick(dst string) error { return buildStatic("memtick", memtickSource, dst) }

// BuildBeat compiles beat (testdata/beat.c: rewrites its memory at a set
// rate and records the largest gap between its 1 ms ticks, the freeze seen
// from inside) into dst.
func BuildBeat(dst string) error { return buildStatic("beat", beatSource, dst) }

// BuildUndumpable compiles undumpable (testdata/undumpable.c: a process
// tree CRIU refuses to checkpoint) into dst.
func BuildUndumpable(dst string) error { return buildStatic("undumpable", undumpableSource, dst) }

// BuildSleeper compiles sleeper (testdata/sleeper.c: one nanosleep with no
// EINTR loop, and why it ended: "usr1", "spurious" or "slept" in
// /tmp/sleeper.out) into dst.
func BuildSleeper(dst string) error { return buildStatic("sleeper", sleeperSource, dst) }

// BuildNetprobe compiles netprobe (testdata/netprobe.c: sends a UDP
// datagram from a chosen source address, or prints the datagrams it
// receives until a marker) into dst.
func BuildNetprobe(dst string) error { return buildStatic("netprobe", netprobeSource, dst) }

// BuildUDPEcho compiles udpecho (testdata/udpecho.c: a UDP echo server,
// and a client that sends every millisecond and records the largest gap
// between replies: service downtime seen from outside) into dst.
func BuildUDPEcho(dst string) error { return buildStatic("udpecho", udpechoSource, dst) }

// buildStatic compiles a C program (gcc -static) into the file dst.
func buildStatic(name, source, dst string) error {
	if ok, err := copyPrebuilt(name, dst); ok {
		return err
	}
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
