package agent

import (
	"errors"
	"fmt"
	"os"
	"path"
	"strings"

	"golang.org/x/sys/unix"
)

// guestRoot resolves paths as the guest's processes do, inside its root:
// openat2 with RESOLVE_IN_ROOT, so that absolute symbolic links (an
// image's /bin/sh -> /bin/busybox) stay in the root, and ".." stops at it.
type guestRoot struct {
	fd int // O_PATH of the root directory
}

func openGuestRoot(dir string) (*guestRoot, error) {
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: dir, Err: err}
	}
	return &guestRoot{fd: fd}, nil
}

func (r *guestRoot) Close() error { return unix.Close(r.fd) }

// open opens p (absolute or relative, both taken inside the root).
func (r *guestRoot) open(p string, flags int, mode uint32) (*os.File, error) {
	how := &unix.OpenHow{
		Flags:   uint64(flags | unix.O_CLOEXEC),
		Mode:    uint64(mode),
		Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS,
	}
	rel := strings.TrimPrefix(p, "/")
	if rel == "" {
		rel = "."
	}
	for {
		fd, err := unix.Openat2(r.fd, rel, how)
		if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR) {
			continue // a concurrent rename; resolve again
		}
		if err != nil {
			return nil, &os.PathError{Op: "open", Path: p, Err: err}
		}
		return os.NewFile(uintptr(fd), p), nil
	}
}

// stat follows p's symbolic links inside the root.
func (r *guestRoot) stat(p string) (os.FileInfo, error) {
	f, err := r.open(p, unix.O_PATH, 0)
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }()
	return f.Stat()
}

// createTemp creates an empty file beside p, in p's directory (opened and
// returned, for renameat and fsync), named after p's base.
func (r *guestRoot) createTemp(p, suffix string) (dir *os.File, tmp *os.File, name string, err error) {
	dirPath, base := path.Split(path.Clean(p))
	if base == "" || base == "." || base == ".." || base == "/" {
		return nil, nil, "", fmt.Errorf("%q names no file", p)
	}
	dir, err = r.open(dirPath, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		return nil, nil, "", err
	}
	name = "." + base + suffix
	fd, err := unix.Openat(int(dir.Fd()), name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		_ = dir.Close()
		return nil, nil, "", &os.PathError{Op: "create", Path: path.Join(dirPath, name), Err: err}
	}
	return dir, os.NewFile(uintptr(fd), path.Join(dirPath, name)), name, nil
}
