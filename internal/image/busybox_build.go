package image

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
)

// BuildBusybox builds vessel's built-in system image from the busybox binary
// at path busybox (a static one, such as Debian's busybox-static) and stores
// it. The archive is assembled in Go and is deterministic: the same binary
// always gives the same fingerprint.
//
// The image holds /bin/busybox, a symbolic link to it for every applet of
// `busybox --list-full` (unless the path is taken), the usual directories,
// and a minimal /etc: an inittab without getty, boot and shutdown scripts
// (/etc/init.d/rcS, rcK; see busyboxRcS), an os-release with ID=busybox, and
// root with a locked password. PID 1 is busybox init (/sbin/init), stopped
// with SIGUSR2.
func (s *Store) BuildBusybox(ctx context.Context, busybox string) (Metadata, error) {
	bb := busyboxCmd{path: busybox}
	version, err := bb.version(ctx)
	if err != nil {
		return Metadata{}, fmt.Errorf("build busybox image: %w", err)
	}
	applets, err := bb.applets(ctx)
	if err != nil {
		return Metadata{}, fmt.Errorf("build busybox image: %w", err)
	}
	binary, err := os.ReadFile(busybox)
	if err != nil {
		return Metadata{}, fmt.Errorf("build busybox image: %w", err)
	}
	rootfs := busyboxRootfs(binary, version, applets)

	st, err := s.stageFrom(ctx, rootfs.writeTo)
	if err != nil {
		return Metadata{}, fmt.Errorf("build busybox image: %w", err)
	}
	defer st.discard()
	md, err := st.systemMetadata(SourceBuiltin)
	if err != nil {
		return Metadata{}, fmt.Errorf("build busybox image: %w", err)
	}
	md.Env = busyboxEnv()
	if err := s.commit(st); err != nil {
		return Metadata{}, err
	}
	return md, nil
}

// busyboxRootfs lays out the built-in image.
func busyboxRootfs(binary []byte, version string, applets []string) *rootfsTar {
	r := newRootfsTar()
	for _, d := range []string{"bin", "sbin", "dev", "etc", "etc/init.d", "home", "mnt", "opt",
		"run", "usr", "usr/bin", "usr/sbin", "var", "var/log"} {
		r.dir(d, 0o755)
	}
	r.dir("proc", 0o555)
	r.dir("sys", 0o555)
	r.dir("root", 0o700)
	r.dir("tmp", 0o1777)
	r.dir("var/tmp", 0o1777)
	r.symlink("var/run", "../run")
	r.symlink("etc/mtab", "../proc/self/mounts")

	r.file("bin/busybox", 0o755, binary)
	r.file("etc/inittab", 0o644, []byte(busyboxInittab))
	r.file("etc/init.d/rcS", 0o755, []byte(busyboxRcS))
	r.file("etc/init.d/rcK", 0o755, []byte(busyboxRcK))
	r.file("etc/os-release", 0o644, []byte(busyboxOSRelease(version)))
	r.file("etc/passwd", 0o644, []byte(busyboxPasswd))
	r.file("etc/group", 0o644, []byte(busyboxGroup))
	r.file("etc/shadow", 0o600, []byte(busyboxShadow))
	r.file("etc/hostname", 0o644, []byte("busybox\n"))
	r.file("etc/hosts", 0o644, []byte(busyboxHosts))
	r.file("etc/fstab", 0o644, nil)
	r.file("etc/profile", 0o644, []byte(busyboxProfile))

	for _, applet := range applets {
		r.symlink(applet, "/bin/busybox")
	}
	return r
}

// stageFrom stages the tar stream that write produces. If write fails, its
// error is returned rather than the truncated stream's.
func (s *Store) stageFrom(ctx context.Context, write func(io.Writer) error) (*staged, error) {
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		err := write(pw)
		pw.CloseWithError(err)
		done <- err
	}()
	st, err := s.stage(ctx, pr)
	pr.Close() // unblocks write if stage stopped early
	if werr := <-done; werr != nil && !errors.Is(werr, io.ErrClosedPipe) {
		if st != nil {
			st.discard()
		}
		return nil, werr
	}
	return st, err
}
