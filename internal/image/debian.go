package image

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// DebianOptions configure BuildDebian. Zero fields take the defaults.
type DebianOptions struct {
	// Suite is the Debian release, default "bookworm".
	Suite string
	// Mirror is the archive to install from, default
	// "http://deb.debian.org/debian".
	Mirror string
	// Variant is debootstrap's package selection, default "minbase".
	Variant string
	// Progress, if set, receives every line debootstrap prints, as it
	// prints it, one call at a time from another goroutine.
	Progress func(line string)
}

// withDefaults fills in the zero fields and rejects values debootstrap
// would take for options.
func (o DebianOptions) withDefaults() (DebianOptions, error) {
	if o.Suite == "" {
		o.Suite = "bookworm"
	}
	if o.Mirror == "" {
		o.Mirror = "http://deb.debian.org/debian"
	}
	if o.Variant == "" {
		o.Variant = "minbase"
	}
	for _, v := range []string{o.Suite, o.Mirror, o.Variant} {
		if strings.HasPrefix(v, "-") || strings.ContainsAny(v, " \t\n") {
			return o, fmt.Errorf("invalid debootstrap argument %q", v)
		}
	}
	return o, nil
}

// debianPackages are installed on top of the variant's. sysvinit-core makes
// PID 1 a real init that reaps orphans and shuts down on a signal; the rest
// is the least a shell in a container needs to look at its network and
// processes.
func debianPackages() []string {
	return []string{"sysvinit-core", "iproute2", "iputils-ping", "procps"}
}

// BuildDebian builds a Debian system image with debootstrap and stores it.
// It needs root and the mirror, and takes minutes; Progress reports
// debootstrap's output meanwhile.
//
// The root filesystem is made in a temporary directory of the store, with
// sysvinit as init (see debianInittab: no gettys, SIGPWR halts), the root
// password locked, downloaded packages removed, and os-release as Debian
// ships it; /etc/resolv.conf stays as debootstrap copied it from the host.
// It is archived with GNU tar (numeric owners, extended attributes, sorted
// names) into the store the same way Import stores a tarball, and the
// directory is removed, after making sure nothing is still mounted in it.
func (s *Store) BuildDebian(ctx context.Context, opts DebianOptions) (md Metadata, err error) {
	opts, err = opts.withDefaults()
	if err != nil {
		return Metadata{}, fmt.Errorf("build debian image: %w", err)
	}
	dir, err := os.MkdirTemp(s.dir, tmpPrefix+"debian-*")
	if err != nil {
		return Metadata{}, fmt.Errorf("build debian image: %w", err)
	}
	defer func() {
		if rerr := removeTree(dir); rerr != nil && err == nil {
			md, err = Metadata{}, fmt.Errorf("build debian image: %w", rerr)
		}
	}()
	// debootstrap makes rootfs itself, mode 0755; the temporary directory
	// is 0700 and must not become the image's root.
	rootfs := filepath.Join(dir, "rootfs")
	err = runDebootstrap(ctx, debootstrapOptions{
		Suite:   opts.Suite,
		Mirror:  opts.Mirror,
		Variant: opts.Variant,
		Include: debianPackages(),
		Target:  rootfs,
	}, opts.Progress)
	if err != nil {
		return Metadata{}, fmt.Errorf("build debian image: %w", err)
	}
	if err := configureDebian(rootfs); err != nil {
		return Metadata{}, fmt.Errorf("build debian image: configure: %w", err)
	}
	return s.storeDirectory(ctx, rootfs, SourceDebootstrap)
}

// storeDirectory archives the root filesystem in dir with GNU tar and stores
// it as a system image.
func (s *Store) storeDirectory(ctx context.Context, dir, source string) (Metadata, error) {
	st, err := s.stageFrom(ctx, func(w io.Writer) error {
		return tarCreate(ctx, tarCreateOptions{Dir: dir}, w)
	})
	if err != nil {
		return Metadata{}, fmt.Errorf("store %s: %w", dir, err)
	}
	defer st.discard()
	md, err := st.systemMetadata(source)
	if err != nil {
		return Metadata{}, fmt.Errorf("store %s: %w", dir, err)
	}
	if err := s.commit(st); err != nil {
		return Metadata{}, err
	}
	return md, nil
}

// debianInittab replaces Debian's: no gettys (a container has no tty), and
// SIGPWR shuts down. sysvinit reads /run/powerstatus on SIGPWR; without one
// it runs the powerwait and powerfail entries. shutdown moves to runlevel 0,
// whose scripts stop services and end in `halt -f`, that is reboot(2): in a
// PID namespace the kernel then kills the namespace's init instead of
// halting the host, and the container is stopped.
const debianInittab = `# /etc/inittab for sysvinit: vessel's Debian image.
# No gettys: a container has no console tty.
id:2:initdefault:
si::sysinit:/etc/init.d/rcS

l0:0:wait:/etc/init.d/rc 0
l1:1:wait:/etc/init.d/rc 1
l2:2:wait:/etc/init.d/rc 2
l3:3:wait:/etc/init.d/rc 3
l4:4:wait:/etc/init.d/rc 4
l5:5:wait:/etc/init.d/rc 5
l6:6:wait:/etc/init.d/rc 6

# SIGPWR (vessel's stop signal for this image) without /run/powerstatus runs
# this entry: runlevel 0 stops services and halts, which ends the container.
pf::powerwait:/sbin/shutdown -h now
`

// configureDebian adapts a fresh debootstrap root filesystem to run in a
// container. It writes through an os.Root so links in the tree cannot lead
// outside it.
func configureDebian(rootfs string) error {
	root, err := os.OpenRoot(rootfs)
	if err != nil {
		return err
	}
	defer root.Close()
	files := map[string]string{
		"etc/inittab":  debianInittab,
		"etc/hostname": "debian\n",
		"etc/hosts":    "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n",
	}
	for name, content := range files {
		if err := root.WriteFile(name, []byte(content), 0o644); err != nil {
			return err
		}
	}
	if err := lockRoot(root); err != nil {
		return err
	}
	return removeDownloadedPackages(root)
}

// removeDownloadedPackages deletes the .deb files debootstrap leaves in
// apt's cache, as `apt-get clean` would; the package lists stay, so apt
// works in the container without an update first.
func removeDownloadedPackages(root *os.Root) error {
	const cache = "var/cache/apt/archives"
	d, err := root.Open(cache)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	entries, err := d.ReadDir(-1)
	d.Close()
	if err != nil {
		return err
	}
	for _, e := range entries {
		if e.Type().IsRegular() && strings.HasSuffix(e.Name(), ".deb") {
			if err := root.Remove(cache + "/" + e.Name()); err != nil {
				return err
			}
		}
	}
	return nil
}

// lockRoot sets root's password in /etc/shadow to "*", which no password
// matches.
func lockRoot(root *os.Root) error {
	data, err := root.ReadFile("etc/shadow")
	if err != nil {
		return err
	}
	lines := strings.Split(string(data), "\n")
	found := false
	for i, line := range lines {
		fields := strings.Split(line, ":")
		if len(fields) > 1 && fields[0] == "root" {
			fields[1] = "*"
			lines[i] = strings.Join(fields, ":")
			found = true
		}
	}
	if !found {
		return errors.New("etc/shadow has no root entry")
	}
	return root.WriteFile("etc/shadow", []byte(strings.Join(lines, "\n")), 0o640)
}
