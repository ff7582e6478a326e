package daemon

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// migrationsRoot is RUN/migrate, where every migration's checkpoint images
// and page files are written (migrationDir).
func (c *Config) migrationsRoot() string { return filepath.Join(c.RunDir, "migrate") }

// mountMigrationTmpfs puts RUN/migrate on a tmpfs of vessel's own unless it
// is on one already (RUN is /run/vessel, a tmpfs, on most hosts). A live
// move writes ~100 small image files and reads them back inside the frozen
// window on both hosts (CRIU's dump writes them, vessel sends them, the
// target stores them and CRIU's restore reads them); on a disk file system
// (an ext4 /run, no systemd) each create and write goes through the
// journal: ~3-5 ms of an idle move's freeze. Nothing there outlives a
// move (a crash makes the images worthless: the source resumes), so it
// never needed a disk. The mount stays while containers run (like the
// pool) and is reused by the next start; releaseHost unmounts it.
func (c *Config) mountMigrationTmpfs() error {
	return mountOwnTmpfs(c.migrationsRoot(), migrationTmpfsSource, "", false)
}

// migrationTmpfsSource names the migration tmpfs in mountinfo.
const migrationTmpfsSource = "vessel-migrate"

// mountOwnTmpfs mounts a tmpfs named source (with the extra options opts,
// "" or ending in a comma) on dir, made if missing, unless it is one of
// vessel's already, or (without always) any tmpfs. What dir held before
// goes (the mount would hide it).
func mountOwnTmpfs(dir, source, opts string, always bool) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return fmt.Errorf("statfs %s: %w", dir, err)
	}
	if st.Type == unix.TMPFS_MAGIC && (!always || ownsTmpfs(dir, source)) {
		return nil
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return err
	}
	// Left over from a run without the tmpfs: whatever is below goes (it
	// is a dead move's, and the mount would hide it).
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		_ = os.RemoveAll(filepath.Join(dir, e.Name()))
	}
	opts += fmt.Sprintf("mode=%o", fi.Mode().Perm())
	if err := unix.Mount(source, dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, opts); err != nil {
		return fmt.Errorf("mount a tmpfs on %s: %w", dir, err)
	}
	return nil
}

// unmountMigrationTmpfs undoes mountMigrationTmpfs (nothing when RUN/migrate
// is not a mount of vessel's).
func (c *Config) unmountMigrationTmpfs() error {
	return unmountOwnTmpfs(c.migrationsRoot(), migrationTmpfsSource)
}

// unmountOwnTmpfs undoes mountOwnTmpfs (nothing when dir is not a mount
// of vessel's named source).
func unmountOwnTmpfs(dir, source string) error {
	if !ownsTmpfs(dir, source) {
		return nil
	}
	if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) {
		return fmt.Errorf("unmount %s: %w", dir, err)
	}
	return nil
}

// ownsMigrationTmpfs says whether RUN/migrate is the tmpfs vessel mounted
// (its source is named vessel-migrate in mountinfo).
func (c *Config) ownsMigrationTmpfs() bool {
	return ownsTmpfs(c.migrationsRoot(), migrationTmpfsSource)
}

// ownsTmpfs says whether dir is a tmpfs vessel mounted under the name
// source (mountinfo's source field).
func ownsTmpfs(dir, source string) bool {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return false
	}
	for line := range strings.Lines(string(b)) {
		f := strings.Fields(line)
		// id parent dev root mountpoint opts ... - fstype source superopts
		if len(f) < 10 || f[4] != dir {
			continue
		}
		for i := 5; i+2 < len(f); i++ {
			if f[i] == "-" && f[i+1] == "tmpfs" && f[i+2] == source {
				return true
			}
		}
	}
	return false
}

// keepMigrationFiles moves dir to kept; across file systems (the tmpfs)
// the images are copied file by file, one level deep (a pre-copy move's
// pre-N directories too).
func keepMigrationFiles(dir, kept string) error {
	if err := os.Rename(dir, kept); err == nil || !errors.Is(err, unix.EXDEV) {
		return err
	}
	return filepath.WalkDir(dir, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		to := filepath.Join(kept, rel)
		switch {
		case e.IsDir():
			return os.MkdirAll(to, 0o700)
		case e.Type()&fs.ModeSymlink != 0:
			l, err := os.Readlink(p)
			if err != nil {
				return err
			}
			return os.Symlink(l, to)
		case e.Type().IsRegular():
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			return os.WriteFile(to, b, 0o600)
		}
		return nil
	})
}
