package runtime

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/checkpoint-restore/go-criu/v7/rpc"
	"google.golang.org/protobuf/proto"
)

// PreDump runs one pre-copy memory pass of a prepared direct checkpoint
// while the container runs (CRIU freezes it only to collect its page
// list and re-arm the tracking; the pages are read after the thaw): the
// pass's images, its pages included, go to dir, a directory beside the
// checkpoint's ImagePath. The first pass holds all memory; each later
// pass, and the final dump (Run), only the pages written since the
// previous pass, the others "in parent" (CRIU's parent images: each
// directory's `parent` link names the previous pass, so a restore needs
// every pass's directory beside the images, under the same names). CRIU
// tracks the writes with soft-dirty bits where the kernel has them, else
// with userfaultfd asynchronous write protection (vessel's CRIU patch
// 0016), kept by the CRIU service between passes. It returns the bytes of
// page data the pass wrote.
//
// Only a direct, copy-mode checkpoint (no Lazy, no runc fallback) can
// pre-dump, and only before Run.
func (c *Checkpoint) PreDump(dir string) (int64, error) {
	c.mu.Lock()
	st := c.state
	c.mu.Unlock()
	switch {
	case st != checkpointPrepared:
		return 0, fmt.Errorf("%w %s: pre-dump of a checkpoint not prepared", ErrCheckpoint, c.id)
	case c.svc == nil || c.lazy != nil:
		return 0, fmt.Errorf("%w %s: pre-dump needs a direct copy-mode dump", ErrCheckpoint, c.id)
	case filepath.Dir(dir) != filepath.Dir(c.opts.ImagePath) || dir == c.opts.ImagePath:
		return 0, fmt.Errorf("%w: pre-dump directory %s is not beside %s", ErrInvalid, dir, c.opts.ImagePath)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return 0, fmt.Errorf("%w %s: %w", ErrCheckpoint, c.id, err)
	}
	d, err := os.Open(dir)
	if err != nil {
		return 0, fmt.Errorf("%w %s: %w", ErrCheckpoint, c.id, err)
	}
	defer d.Close()
	req := proto.CloneOf(c.req)
	req.ImagesDirFd = proto.Int32(int32(d.Fd()))
	req.WorkDirFd = proto.Int32(int32(c.svc.work.Fd()))
	req.LogFile = proto.String("pre-dump-" + filepath.Base(dir) + ".log")
	req.TrackMem = proto.Bool(true)
	req.LeaveRunning = proto.Bool(true)
	req.PreDumpMode = rpc.CriuPreDumpMode_VM_READ.Enum()
	req.ParentImg = nil
	if c.parent != "" {
		req.ParentImg = proto.String(filepath.Join("..", filepath.Base(c.parent)))
	}
	// A dump request's status fd and notify scripts are the final dump's.
	req.StatusFd = nil
	req.NotifyScripts = nil
	if err := c.svc.call(rpc.CriuReqType_PRE_DUMP, req); err != nil {
		return 0, fmt.Errorf("%w %s: criu pre-dump: %w", ErrCheckpoint, c.id,
			criuFailure(err, filepath.Join(c.opts.WorkPath, req.GetLogFile())))
	}
	c.parent = dir
	c.req.TrackMem = proto.Bool(true)
	c.req.ParentImg = proto.String(filepath.Join("..", filepath.Base(dir)))
	return pageBytes(dir)
}

// pageBytes is the size of the page files in dir.
func pageBytes(dir string) (int64, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return 0, err
	}
	var n int64
	for _, e := range ents {
		if !strings.HasPrefix(e.Name(), "pages-") {
			continue
		}
		fi, err := e.Info()
		if err != nil {
			return 0, err
		}
		n += fi.Size()
	}
	return n, nil
}
