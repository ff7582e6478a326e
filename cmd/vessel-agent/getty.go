package main

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// A login prompt on the serial console (ttyS0, what `vessel console`
// attaches to) for images whose init starts none there. The agent
// daemon, which runs beside the image's init from the initramfs, starts
// the image's own getty on ttyS0 in the guest's root and starts it again
// when it ends (a logout), as init's respawn would; the image's disk is
// not changed. It decides once the image's init runs (consoleGetty):
//
//   - systemd: nothing; its getty generator starts serial-getty@ttyS0
//     for the kernel's console=ttyS0;
//   - an /etc/inittab (sysvinit, busybox, OpenRC's) with a respawn or
//     askfirst entry on ttyS0 or the console (busybox: an empty tty
//     field is the console): nothing, one reader of the tty is enough;
//   - busybox init without an inittab: nothing (its built-in table runs
//     a shell on the console);
//   - otherwise (an inittab without one, as Debian's and Alpine's ship
//     with their serial lines commented out, vessel's busybox image for
//     containers, runit, a single program as init): agetty or getty
//     from the image, if it has one and a login.

// gettyTTY is the serial console's tty (vm.Cmdline: console=ttyS0).
const gettyTTY = "ttyS0"

// gettyRetry and gettyQuickExits: a getty that ends within gettyRetry
// gettyQuickExits times in a row (no such tty, a broken login) is given
// up; it is started again after a pause of gettyRetry/10 otherwise.
const (
	gettyRetry      = 10 * time.Second
	gettyQuickExits = 5
)

// rootFS reads the guest's root as its processes see it: every path is
// resolved with openat2's RESOLVE_IN_ROOT, so an image's absolute links
// (/sbin/getty -> /bin/busybox) stay inside it (os.Root refuses them).
type rootFS struct{ fd int }

func openRootFS(dir string) (*rootFS, error) {
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: dir, Err: err}
	}
	return &rootFS{fd: fd}, nil
}

func (r *rootFS) Close() error { return unix.Close(r.fd) }

func (r *rootFS) open(name string, flags int) (*os.File, error) {
	rel := strings.TrimPrefix(path.Clean("/"+name), "/")
	if rel == "" {
		rel = "."
	}
	fd, err := unix.Openat2(r.fd, rel, &unix.OpenHow{Flags: uint64(flags | unix.O_CLOEXEC),
		Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS})
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: name, Err: err}
	}
	return os.NewFile(uintptr(fd), name), nil
}

func (r *rootFS) stat(name string, flags int) (fs.FileInfo, error) {
	f, err := r.open(name, unix.O_PATH|flags)
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }()
	return f.Stat()
}

// Stat follows name's links; Lstat does not follow its last component.
func (r *rootFS) Stat(name string) (fs.FileInfo, error)  { return r.stat(name, 0) }
func (r *rootFS) Lstat(name string) (fs.FileInfo, error) { return r.stat(name, unix.O_NOFOLLOW) }

// Readlink reads the link name.
func (r *rootFS) Readlink(name string) (string, error) {
	f, err := r.open(name, unix.O_PATH|unix.O_NOFOLLOW)
	if err != nil {
		return "", err
	}
	defer func() { _ = f.Close() }()
	buf := make([]byte, unix.PathMax)
	n, err := unix.Readlinkat(int(f.Fd()), "", buf)
	if err != nil {
		return "", &os.PathError{Op: "readlink", Path: name, Err: err}
	}
	return string(buf[:n]), nil
}

// ReadFile reads the file name.
func (r *rootFS) ReadFile(name string) ([]byte, error) {
	f, err := r.open(name, unix.O_RDONLY)
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }()
	return io.ReadAll(f)
}

// consoleGetty returns the getty command line to run on ttyS0 in the
// guest's root, or nil and why none is needed or possible; init is the
// image's init (its path in the root).
func consoleGetty(root *rootFS, init string) ([]string, string) {
	kind := path.Base(resolveLinks(root, init))
	if kind == "systemd" {
		return nil, "systemd starts serial-getty@" + gettyTTY + " itself"
	}
	busybox := kind == "busybox"
	tab, err := root.ReadFile("etc/inittab")
	switch {
	case err != nil && busybox:
		return nil, "busybox init without /etc/inittab runs a shell on the console"
	case err == nil && inittabUsesConsole(string(tab), busybox):
		return nil, "/etc/inittab runs a program on the console"
	}
	getty := firstExecutable(root, "sbin/agetty", "usr/sbin/agetty", "sbin/getty", "usr/sbin/getty", "bin/getty", "usr/bin/getty")
	if getty == "" {
		return nil, "the image has no getty"
	}
	if firstExecutable(root, "bin/login", "usr/bin/login") == "" {
		return nil, "the image has no login"
	}
	// Both agetty and busybox's getty take the tty before the speed;
	// -L: a local line, no carrier detect.
	return []string{"/" + getty, "-L", gettyTTY, "115200", "vt100"}, "init " + kind + " starts no getty on the console"
}

// inittabUsesConsole says whether an inittab keeps a program (a getty, a
// shell) running on the serial console: a respawn or askfirst entry whose
// tty field (busybox's first; empty is the console there) or command line
// names ttyS0 or the console.
func inittabUsesConsole(tab string, busybox bool) bool {
	for line := range strings.Lines(tab) {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.SplitN(line, ":", 4)
		if len(f) < 4 || (f[2] != "respawn" && f[2] != "askfirst") {
			continue
		}
		if busybox && f[0] == "" {
			return true
		}
		for _, w := range append([]string{f[0]}, strings.Fields(f[3])...) {
			switch strings.TrimPrefix(w, "/dev/") {
			case gettyTTY, "console":
				return true
			}
		}
	}
	return false
}

// resolveLinks follows p's symbolic links inside root (at most 16),
// returning the path of what it names, relative to the root.
func resolveLinks(root *rootFS, p string) string {
	p = strings.TrimPrefix(path.Clean("/"+p), "/")
	for range 16 {
		fi, err := root.Lstat(p)
		if err != nil || fi.Mode()&fs.ModeSymlink == 0 {
			return p
		}
		t, err := root.Readlink(p)
		if err != nil {
			return p
		}
		if !path.IsAbs(t) {
			t = path.Join("/", path.Dir(p), t)
		}
		p = strings.TrimPrefix(path.Clean(t), "/")
	}
	return p
}

// firstExecutable returns the first of paths that is an executable file
// in root, its links followed, or "".
func firstExecutable(root *rootFS, paths ...string) string {
	for _, p := range paths {
		fi, err := root.Stat(p)
		if err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p
		}
	}
	return ""
}

// startConsoleGetty decides (consoleGetty) and, if a getty is needed,
// keeps one running on ttyS0 in rootDir for the life of the daemon.
func startConsoleGetty(rootDir, init string) {
	root, err := openRootFS(rootDir)
	if err != nil {
		logf("getty: %v", err)
		return
	}
	argv, why := consoleGetty(root, init)
	_ = root.Close()
	if argv == nil {
		logf("getty: none started on %s: %s", gettyTTY, why)
		return
	}
	logf("getty: starting %s on %s: %s", argv[0], gettyTTY, why)
	go superviseGetty(rootDir, argv)
}

// superviseGetty runs argv chrooted to rootDir in a session of its own
// (the getty opens the tty, makes it its controlling terminal and execs
// login), again each time it ends.
func superviseGetty(rootDir string, argv []string) {
	quick := 0
	for {
		t0 := time.Now()
		cmd := exec.Command(argv[0], argv[1:]...)
		cmd.Dir = "/"
		cmd.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "TERM=vt100"}
		cmd.SysProcAttr = &syscall.SysProcAttr{Chroot: rootDir, Setsid: true}
		err := cmd.Run()
		var exit *exec.ExitError
		if err != nil && !errors.As(err, &exit) {
			logf("getty: %v; given up", err)
			return
		}
		if time.Since(t0) >= gettyRetry {
			quick = 0
		} else if quick++; quick >= gettyQuickExits {
			logf("getty on %s ended %d times within %s (%v); given up", gettyTTY, quick, gettyRetry, err)
			return
		}
		time.Sleep(gettyRetry / 10)
	}
}
