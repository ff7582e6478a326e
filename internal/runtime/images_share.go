package runtime

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// ShareImages lets an unprivileged container's restore read its checkpoint
// images: CRIU's restored tasks open some of them after they have become
// the container's root, which is not the host's. The directory gets the
// container's root group (search and read) and every image is readable by
// that group; nobody else gains access. A pre-copy chain's parent
// images (dir's `parent` link, ../NAME, and theirs) are shared too, and
// the directory they share with dir becomes searchable by that group (not
// readable): the tasks open the links.
func ShareImages(dir string, m IDMap) error {
	for i := 0; ; i++ {
		if err := shareDir(dir, m); err != nil {
			return err
		}
		l, err := os.Readlink(filepath.Join(dir, "parent"))
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("share checkpoint images: %w", err)
		}
		name, ok := strings.CutPrefix(l, "../")
		if !ok || name == "" || name == "." || name == ".." || strings.Contains(name, "/") || i >= 64 {
			return fmt.Errorf("share checkpoint images: parent link %q of %s is not a directory beside it", l, dir)
		}
		up := filepath.Dir(dir)
		if i == 0 {
			if err := os.Chown(up, 0, int(m.HostGID)); err != nil {
				return fmt.Errorf("share checkpoint images: %w", err)
			}
			if err := os.Chmod(up, 0o710); err != nil {
				return fmt.Errorf("share checkpoint images: %w", err)
			}
		}
		dir = filepath.Join(up, name)
	}
}

// shareDir shares one directory of images (ShareImages).
func shareDir(dir string, m IDMap) error {
	if err := os.Chown(dir, 0, int(m.HostGID)); err != nil {
		return fmt.Errorf("share checkpoint images: %w", err)
	}
	if err := os.Chmod(dir, 0o750); err != nil {
		return fmt.Errorf("share checkpoint images: %w", err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("share checkpoint images: %w", err)
	}
	for _, e := range entries {
		if !e.Type().IsRegular() {
			continue
		}
		fi, err := e.Info()
		if err != nil {
			return err
		}
		if fi.Mode().Perm()&0o040 == 0 {
			p := dir + "/" + e.Name()
			if err := os.Chown(p, 0, int(m.HostGID)); err != nil {
				return fmt.Errorf("share checkpoint images: %w", err)
			}
			if err := os.Chmod(p, fi.Mode().Perm()|0o040); err != nil {
				return fmt.Errorf("share checkpoint images: %w", err)
			}
		}
	}
	return nil
}
