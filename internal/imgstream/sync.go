package imgstream

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
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
