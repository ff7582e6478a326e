package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// guestTree makes a root: files (path: content, executable when the
// content starts with "#!" or is "ELF") and links (path: target).
func guestTree(t *testing.T, files, links map[string]string) *rootFS {
	t.Helper()
	dir := t.TempDir()
	for p, content := range files {
		full := filepath.Join(dir, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		mode := os.FileMode(0o644)
		if strings.HasPrefix(content, "#!") || content == "ELF" {
			mode = 0o755
		}
		if err := os.WriteFile(full, []byte(content), mode); err != nil {
			t.Fatal(err)
		}
	}
	for p, target := range links {
		full := filepath.Join(dir, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(target, full); err != nil {
			t.Fatal(err)
		}
	}
	r, err := openRootFS(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close() })
	return r
}

// busyboxLinks are a busybox image's applets, absolute links as
// Alpine's are (they must resolve inside the root, not the host's).
var busyboxLinks = map[string]string{"sbin/init": "/bin/busybox", "sbin/getty": "/bin/busybox", "bin/login": "/bin/busybox"}

func TestConsoleGetty(t *testing.T) {
	const vesselTab = "::sysinit:/etc/init.d/rcS\n::shutdown:/etc/init.d/rcK\n"
	for _, tc := range []struct {
		name   string
		files  map[string]string
		links  map[string]string
		init   string
		getty  string // "" for none
		reason string // a part of the reason
	}{
		{name: "systemd (its generator serves console=)", init: "/sbin/init",
			files: map[string]string{"lib/systemd/systemd": "ELF", "sbin/agetty": "ELF", "bin/login": "ELF"},
			links: map[string]string{"sbin/init": "/lib/systemd/systemd"}, reason: "systemd"},
		{name: "systemd through usr-merge links", init: "/sbin/init",
			files: map[string]string{"usr/lib/systemd/systemd": "ELF", "usr/sbin/agetty": "ELF", "usr/bin/login": "ELF"},
			links: map[string]string{"sbin": "usr/sbin", "lib": "usr/lib", "usr/sbin/init": "../lib/systemd/systemd"}, reason: "systemd"},
		{name: "vessel's busybox image: no console entry", init: "/sbin/init",
			files: map[string]string{"bin/busybox": "ELF", "etc/inittab": vesselTab},
			links: busyboxLinks, getty: "/sbin/getty"},
		{name: "busybox without inittab: its shell is on the console", init: "/sbin/init",
			files: map[string]string{"bin/busybox": "ELF"}, links: busyboxLinks, reason: "without /etc/inittab"},
		{name: "busybox: askfirst on the console (empty tty field)", init: "/sbin/init",
			files: map[string]string{"bin/busybox": "ELF", "etc/inittab": vesselTab + "::askfirst:-/bin/sh\n"},
			links: busyboxLinks, reason: "inittab"},
		{name: "busybox: a getty on ttyS0 already", init: "/sbin/init",
			files: map[string]string{"bin/busybox": "ELF", "etc/inittab": "ttyS0::respawn:/sbin/getty -L 0 ttyS0 vt100\n"},
			links: busyboxLinks, reason: "inittab"},
		{name: "Alpine-like: serial line commented out, ttys only", init: "/sbin/init",
			files: map[string]string{"bin/busybox": "ELF", "etc/inittab": "::sysinit:/sbin/openrc sysinit\ntty1::respawn:/sbin/getty 38400 tty1\n#ttyS0::respawn:/sbin/getty -L 0 ttyS0 vt100\n"},
			links: busyboxLinks, getty: "/sbin/getty"},
		{name: "sysvinit: serial getty commented out, agetty first", init: "/sbin/init",
			files: map[string]string{"sbin/init": "ELF", "sbin/agetty": "ELF", "sbin/getty": "ELF", "bin/login": "ELF",
				"etc/inittab": "id:2:initdefault:\n1:2345:respawn:/sbin/getty --noclear 38400 tty1\n#T0:23:respawn:/sbin/getty -L ttyS0 9600 vt100\n"},
			getty: "/sbin/agetty"},
		{name: "sysvinit: a getty on the console", init: "/sbin/init",
			files: map[string]string{"sbin/init": "ELF", "sbin/agetty": "ELF", "bin/login": "ELF",
				"etc/inittab": "co:2345:respawn:/sbin/agetty -8 -L /dev/console 115200 vt100\n"},
			reason: "inittab"},
		{name: "sysvinit: ttyS0 only in a once entry", init: "/sbin/init",
			files: map[string]string{"sbin/init": "ELF", "sbin/agetty": "ELF", "bin/login": "ELF",
				"etc/inittab": "x:2345:once:/bin/stty -F /dev/ttyS0 sane\n"},
			getty: "/sbin/agetty"},
		{name: "an application as init, with a getty", init: "/usr/bin/app",
			files: map[string]string{"usr/bin/app": "#!/bin/sh\n", "usr/sbin/agetty": "ELF", "usr/bin/login": "ELF"},
			getty: "/usr/sbin/agetty"},
		{name: "no getty in the image", init: "/usr/bin/app",
			files: map[string]string{"usr/bin/app": "#!/bin/sh\n", "bin/login": "ELF"}, reason: "no getty"},
		{name: "a getty but no login", init: "/usr/bin/app",
			files: map[string]string{"usr/bin/app": "#!/bin/sh\n", "sbin/agetty": "ELF"}, reason: "no login"},
		{name: "a non-executable getty is none", init: "/usr/bin/app",
			files: map[string]string{"usr/bin/app": "#!/bin/sh\n", "sbin/agetty": "text", "bin/login": "ELF"}, reason: "no getty"},
		{name: "a link leaving the root is taken inside it", init: "/sbin/init",
			files: map[string]string{"bin/busybox": "ELF", "etc/inittab": vesselTab},
			links: map[string]string{"sbin/init": "../../../../bin/busybox", "sbin/getty": "/bin/busybox", "bin/login": "/bin/busybox"},
			getty: "/sbin/getty"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			argv, why := consoleGetty(guestTree(t, tc.files, tc.links), tc.init)
			if tc.getty == "" {
				if argv != nil || !strings.Contains(why, tc.reason) {
					t.Fatalf("got %q (%s), want none because %q", argv, why, tc.reason)
				}
				return
			}
			want := []string{tc.getty, "-L", "ttyS0", "115200", "vt100"}
			if strings.Join(argv, " ") != strings.Join(want, " ") {
				t.Fatalf("got %q (%s), want %q", argv, why, want)
			}
		})
	}
}
