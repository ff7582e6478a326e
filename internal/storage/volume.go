package storage

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// Pool layout: every driver keeps its volumes under its root as
//
//	images/NAME
//	containers/NAME
//	snapshots/CONTAINER/SNAP
//	checkpoints/CONTAINER/SNAP
//	vm-images/NAME
//
// plus stagingDir for work in progress that must not look like a volume.
var typeDirs = map[VolumeType]string{
	VolumeImage:      "images",
	VolumeContainer:  "containers",
	VolumeSnapshot:   "snapshots",
	VolumeCheckpoint: "checkpoints",
	VolumeVMImage:    "vm-images",
}

// pairNamed reports whether volumes of type t are named "CONTAINER/SNAP".
func pairNamed(t VolumeType) bool {
	return t == VolumeSnapshot || t == VolumeCheckpoint
}

// stagingDir holds half-built copies (dir clones, dir deletes) inside the
// pool root, on the same filesystem as the volumes so a rename publishes them.
const stagingDir = ".staging"

// layoutMode is the mode of the pool root and its top-level directories:
// root's alone. A container's root may put setuid files and device nodes
// in its rootfs; no other host user can reach them (nor a container's
// data). The runtime reaches a rootfs as root (or through its own mount).
const layoutMode = 0o700

// maxNameLen is the longest volume name element (NAME_MAX).
const maxNameLen = 255

// String names a volume in messages, e.g. `snapshot volume "c1/s1"`.
func (v Volume) String() string {
	return fmt.Sprintf("%s volume %q", v.Type, v.Name)
}

// validateVolume checks vol's type and that its name is one path element, or
// exactly two ("CONTAINER/SNAP") for a snapshot, so a name can never leave
// its type's directory.
func validateVolume(vol Volume) error {
	if _, ok := typeDirs[vol.Type]; !ok {
		return fmt.Errorf("%s: unknown volume type: %w", vol, ErrInvalidVolume)
	}
	elems := []string{vol.Name}
	if pairNamed(vol.Type) {
		elems = strings.Split(vol.Name, "/")
		if len(elems) != 2 {
			return fmt.Errorf("%s: %s names have the form CONTAINER/SNAP: %w", vol, vol.Type, ErrInvalidVolume)
		}
	}
	for _, e := range elems {
		if err := validateNameElem(e); err != nil {
			return fmt.Errorf("%s: %w: %w", vol, err, ErrInvalidVolume)
		}
	}
	return nil
}

// validateNameElem checks one path element of a volume name.
func validateNameElem(e string) error {
	switch {
	case e == "":
		return errors.New("empty name")
	case e == "." || e == "..":
		return fmt.Errorf("name %q is reserved", e)
	case strings.ContainsAny(e, "/\x00"):
		return errors.New("name contains '/' or NUL")
	case len(e) > maxNameLen:
		return fmt.Errorf("name longer than %d bytes", maxNameLen)
	}
	return nil
}

// volumePath returns the path of vol under root, or "" if vol is invalid.
func volumePath(root string, vol Volume) string {
	if validateVolume(vol) != nil {
		return ""
	}
	return filepath.Join(root, typeDirs[vol.Type], vol.Name)
}

// makeLayout creates the pool's type directories under root and gives
// root and them layoutMode (a pool an older version made has 0711 ones).
func makeLayout(root string) error {
	dirs := []string{root}
	for _, dir := range typeDirs {
		dirs = append(dirs, filepath.Join(root, dir))
	}
	for _, dir := range dirs {
		if err := os.MkdirAll(dir, layoutMode); err != nil {
			return fmt.Errorf("create pool layout: %w", err)
		}
		if err := os.Chmod(dir, layoutMode); err != nil {
			return fmt.Errorf("pool layout: %w", err)
		}
	}
	return nil
}

// makeParent creates the directory a new volume goes in (it exists already
// for images and containers; for a snapshot it is snapshots/CONTAINER).
func makeParent(path string) error {
	if err := os.MkdirAll(filepath.Dir(path), layoutMode); err != nil {
		return fmt.Errorf("create parent of %s: %w", path, err)
	}
	return nil
}

// removeEmptyParent removes snapshots/CONTAINER (or checkpoints/CONTAINER)
// after a volume is deleted if no other one of that container is left in it.
func removeEmptyParent(vol Volume, path string) error {
	if !pairNamed(vol.Type) {
		return nil
	}
	err := os.Remove(filepath.Dir(path))
	if err == nil || errors.Is(err, fs.ErrNotExist) || errors.Is(err, fs.ErrExist) {
		return nil // ErrExist: ENOTEMPTY, other snapshots remain
	}
	return fmt.Errorf("remove empty snapshot directory: %w", err)
}

// pathExists reports whether path exists (without following a final
// symlink); errors other than "does not exist" are returned.
func pathExists(path string) (bool, error) {
	_, err := os.Lstat(path)
	if err == nil {
		return true, nil
	}
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	return false, err
}

// volumeExists reports whether vol is valid and its path under root exists.
func volumeExists(root string, vol Volume) bool {
	path := volumePath(root, vol)
	if path == "" {
		return false
	}
	ok, _ := pathExists(path)
	return ok
}

// checkNew returns an error wrapping ErrVolumeExists if vol's path exists.
func checkNew(vol Volume, path string) error {
	ok, err := pathExists(path)
	if err != nil {
		return fmt.Errorf("%s: %w", vol, err)
	}
	if ok {
		return fmt.Errorf("%s: %w", vol, ErrVolumeExists)
	}
	return nil
}

// checkExisting returns an error wrapping ErrVolumeNotFound if vol's path
// does not exist.
func checkExisting(vol Volume, path string) error {
	ok, err := pathExists(path)
	if err != nil {
		return fmt.Errorf("%s: %w", vol, err)
	}
	if !ok {
		return fmt.Errorf("%s: %w", vol, ErrVolumeNotFound)
	}
	return nil
}

// volumeUsage is VolumeUsage for a pool rooted at root: a du-like walk of
// the volume's tree.
func volumeUsage(ctx context.Context, root string, vol Volume) (uint64, error) {
	if err := validateVolume(vol); err != nil {
		return 0, err
	}
	path := volumePath(root, vol)
	if err := checkExisting(vol, path); err != nil {
		return 0, fmt.Errorf("volume usage: %w", err)
	}
	return treeUsage(ctx, path)
}

// syncfs flushes the filesystem holding path.
func syncfs(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := unix.Syncfs(int(f.Fd())); err != nil {
		return fmt.Errorf("syncfs %s: %w", path, err)
	}
	return nil
}

// listVolumes is ListVolumes for a pool rooted at root: the entries of
// t's directory (of each CONTAINER directory in it, for pair-named types)
// whose names are volume names. Names beginning with a dot are a driver's
// own (transfer leftovers, staging) and are left out.
func listVolumes(root string, t VolumeType) ([]Volume, error) {
	dir, ok := typeDirs[t]
	if !ok {
		return nil, fmt.Errorf("list %q volumes: unknown volume type: %w", t, ErrInvalidVolume)
	}
	names, err := volumeNames(filepath.Join(root, dir))
	if err != nil {
		return nil, fmt.Errorf("list %s volumes: %w", t, err)
	}
	var vols []Volume
	for _, n := range names {
		if !pairNamed(t) {
			vols = append(vols, Volume{Type: t, Name: n})
			continue
		}
		inner, err := volumeNames(filepath.Join(root, dir, n))
		if err != nil {
			return nil, fmt.Errorf("list %s volumes: %w", t, err)
		}
		for _, s := range inner {
			vols = append(vols, Volume{Type: t, Name: n + "/" + s})
		}
	}
	return vols, nil
}

// volumeNames returns the sorted names in dir that are volume name
// elements and do not begin with a dot; a missing dir has none.
func volumeNames(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir) // sorted
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var names []string
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".") || validateNameElem(e.Name()) != nil {
			continue
		}
		names = append(names, e.Name())
	}
	return names, nil
}
