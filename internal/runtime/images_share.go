package runtime

import (
	"fmt"
	"os"
)

// ShareImages lets an unprivileged container's restore read its checkpoint
// images: CRIU's restored tasks open some of them after they have become
// the container's root, which is not the host's. The directory gets the
// container's root group (search and read) and every image is readable by
// that group; nobody else gains access.
func ShareImages(dir string, m IDMap) error {
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
