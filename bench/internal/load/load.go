// Package load puts switchable CPU and disk hogs into the busybox
// containers of a test host, for the control-plane and boot-storm
// benchmarks.
//
// A hog is a line in the container's /etc/inittab, so busybox init starts
// it at boot and respawns it. It works while the file /hog.on exists in the
// container and sleeps otherwise; the benchmark creates and removes that
// file from the host, through the container's root filesystem in the pool.
package load

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/vesselhost/vessel/internal/testhost"
)

// Kinds of hogs.
const (
	// CPU spins a shell loop.
	CPU = "cpu"
	// Disk writes a 32 MiB file with direct I/O, over and over.
	Disk = "disk"
)

// flag is the file, at the container's root, that turns its hogs on.
const flag = "hog.on"

var hogs = map[string]string{
	CPU:  `::respawn:/bin/sh -c 'while :; do if [ -e /` + flag + ` ]; then i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done; else sleep 1; fi; done'`,
	Disk: `::respawn:/bin/sh -c 'while :; do if [ -e /` + flag + ` ]; then dd if=/dev/zero of=/hog.dat bs=1M count=32 oflag=direct 2>/dev/null; else sleep 1; fi; done'`,
}

// Rootfs returns a container's root filesystem on the host.
func Rootfs(h *testhost.Host, name string) string {
	return filepath.Join(h.Root(), "storage-pools", "default", "containers", name)
}

// Install adds hogs of the given kinds to a container's inittab; they run
// from its next start.
func Install(h *testhost.Host, name string, kinds ...string) error {
	p := filepath.Join(Rootfs(h, name), "etc", "inittab")
	b, err := os.ReadFile(p)
	if err != nil {
		return fmt.Errorf("install hogs in %s: %w", name, err)
	}
	lines := []string{strings.TrimRight(string(b), "\n")}
	for _, k := range kinds {
		line, ok := hogs[k]
		if !ok {
			return fmt.Errorf("unknown hog %q", k)
		}
		lines = append(lines, line)
	}
	return os.WriteFile(p, []byte(strings.Join(lines, "\n")+"\n"), 0o644)
}

// Set turns the hogs of the named containers on or off.
func Set(h *testhost.Host, names []string, on bool) error {
	var errs []error
	for _, n := range names {
		p := filepath.Join(Rootfs(h, n), flag)
		var err error
		if on {
			err = os.WriteFile(p, nil, 0o644)
		} else if err = os.Remove(p); errors.Is(err, os.ErrNotExist) {
			err = nil
		}
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
