package storage

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestDirTransferManyDeletions: deleting more paths than one PAX header
// may hold (1 MiB) still moves; a deleted directory is listed alone.
func TestDirTransferManyDeletions(t *testing.T) {
	src, dst := newDirPool(t), newDirPool(t)
	for _, d := range []Driver{src, dst} {
		must(t, d.Mount(t.Context()))
	}
	root := mustCreate(t, src, ct1)
	long := strings.Repeat("x", 200)
	const n = 6000 // 6000 * 206 bytes > 1 MiB
	must(t, os.Mkdir(filepath.Join(root, "many"), 0o755))
	for i := range n {
		f, err := os.Create(filepath.Join(root, "many", fmt.Sprintf("%s%05d", long, i)))
		must(t, err)
		f.Close()
	}
	writeFile(t, filepath.Join(root, "tree/a/b/c"), []byte("deep"))
	s, r := mustSender(t, src, ct1, nil), mustReceiver(t, dst, moved)
	mustPass(t, s, r)
	for i := range n {
		must(t, os.Remove(filepath.Join(root, "many", fmt.Sprintf("%s%05d", long, i))))
	}
	must(t, os.RemoveAll(filepath.Join(root, "tree")))
	mustPass(t, s, r)
	must(t, r.Commit(t.Context()))
	mustClose(t, s)
	mustClose(t, r)
	checkSameTree(t, "after the deletions", root, dst.Path(moved))
}
