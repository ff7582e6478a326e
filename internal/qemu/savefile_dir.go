package qemu

import (
	"os"
	"syscall"
)

// allocated returns the bytes a file occupies on disk (a mapped-ram file
// is sparse where the guest's pages were zero).
func allocated(fi os.FileInfo) int64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return st.Blocks * 512
	}
	return fi.Size()
}
