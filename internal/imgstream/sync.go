package imgstream

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"

	"golang.org/x/sys/unix"
)

// SyncImages makes a finished images directory durable: it fsyncs every
// regular file under dir except the ones skip names (base names of files
// directly in dir: the page files a Sink stored, durable already), then
// the directories, deepest first. It returns the size of all the image
// files and of the page files among them.
func SyncImages(dir string, skip []string) (total, pageBytes uint64, err error) {
	dir = filepath.Clean(dir)
	var dirs []string
	err = filepath.WalkDir(dir, func(p string, e fs.DirEntry, err error) error {
		switch {
		case err != nil:
			return err
		case e.IsDir():
			dirs = append(dirs, p)
			return nil
		case !e.Type().IsRegular():
			return nil
		}
		fi, err := e.Info()
		if err != nil {
			return err
		}
		total += uint64(fi.Size())
		if IsPages(e.Name()) {
			pageBytes += uint64(fi.Size())
		}
		if filepath.Dir(p) == dir && slices.Contains(skip, e.Name()) {
			return nil
		}
		return syncFile(p)
	})
	for i := len(dirs) - 1; i >= 0 && err == nil; i-- {
		err = syncDir(dirs[i])
	}
	if err != nil {
		return 0, 0, fmt.Errorf("sync images %s: %w", dir, err)
	}
	return total, pageBytes, nil
}

// syncFile fsyncs the file at p.
func syncFile(p string) error {
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}

// SyncPages fsyncs the page files directly in dir (written there by
// someone else: CRIU's own direct writes) and returns their names.
func SyncPages(dir string) ([]string, error) {
	names, err := pageFiles(dir)
	for _, n := range names {
		if err == nil {
			err = syncFile(filepath.Join(dir, n))
		}
	}
	if err != nil {
		return nil, fmt.Errorf("sync page files in %s: %w", dir, err)
	}
	return names, nil
}

// PagesAllocated is the space given to the page files directly in dir
// (st_blocks): the progress of a writer that sets a file's size first
// and fills its holes.
func PagesAllocated(dir string) (int64, error) {
	names, err := pageFiles(dir)
	if err != nil {
		return 0, err
	}
	var n int64
	for _, name := range names {
		var st unix.Stat_t
		if err := unix.Stat(filepath.Join(dir, name), &st); err == nil {
			n += st.Blocks * 512
		}
	}
	return n, nil
}

// pageFiles lists the regular page files directly in dir.
func pageFiles(dir string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, e := range ents {
		if e.Type().IsRegular() && IsPages(e.Name()) {
			names = append(names, e.Name())
		}
	}
	return names, nil
}
