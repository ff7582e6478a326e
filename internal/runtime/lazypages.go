package runtime

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
)

// LazyPagesOptions configure the CRIU lazy-pages daemon of a post-copy
// restore.
type LazyPagesOptions struct {
	// ImagePath holds the checkpoint images (all but the memory pages).
	ImagePath string
	// WorkPath is where it listens for the restored tasks (lazy-pages.socket)
	// and writes lazy-pages.log; the restore must use the same work path.
	WorkPath string
	// PageServer is this end of a socket pair (SocketPair) whose other
	// end reaches the source's page server; the daemon inherits it and
	// the caller closes its copy once StartLazyPages returns. No port,
	// no path: nobody else can reach the page stream. Without it the
	// daemon reads the pages from the images (ImagePath and its parent
	// chain: a pre-copy move's passes, all on this host).
	PageServer *os.File
	// ImagesLater starts the daemon before the images are all in: it
	// does what needs none, then waits for ImagesIn (CRIU's
	// --images-ready-fd, vessel's patch 0027; LazyPagesEarly says
	// whether Criu has it). ImagePath must exist already.
	ImagesLater bool
}

// LazyPagesEarly reports whether Criu's lazy-pages can be started before
// its images are in (LazyPagesOptions.ImagesLater).
func (r *Runtime) LazyPagesEarly() bool {
	return r.criuHas("--images-ready-fd", "a migration target starts criu lazy-pages once the images are in (no --images-ready-fd: run setup)")
}

// lazyPagesSocketFd is the page server socket's descriptor number in
// `criu lazy-pages` (its first inherited file).
const lazyPagesSocketFd = 3

// LazyPages is a running `criu lazy-pages` daemon: it hands the restored
// tasks their memory pages on first touch (userfaultfd) and pulls the rest
// in the background, from the source's page server.
type LazyPages struct {
	cmd  *exec.Cmd
	done chan struct{}
	err  error
	log  string
	// ready is closed when CRIU wrote its status byte (--status-fd: it
	// listens for the restore) or closed the pipe without it.
	ready chan struct{}
	// imagesW is the write end of an ImagesLater daemon's images-ready
	// pipe until ImagesIn or Kill closes it.
	imagesMu sync.Mutex
	imagesW  *os.File
}

// StartLazyPages starts the lazy-pages daemon; start the restore (with
// RestoreOptions.LazyPages and the same work path) afterwards.
func (r *Runtime) StartLazyPages(ctx context.Context, o LazyPagesOptions) (*LazyPages, error) {
	if r.cfg.Criu == "" {
		return nil, ErrNoCRIU
	}
	if err := os.MkdirAll(o.WorkPath, 0o700); err != nil {
		return nil, err
	}
	log := filepath.Join(o.WorkPath, "lazy-pages.log")
	// CRIU writes a byte on the status pipe once it listens for the
	// restore: no polling for its socket.
	statusR, statusW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer statusW.Close()
	args := []string{"lazy-pages", "--images-dir", o.ImagePath, "--work-dir", o.WorkPath, "--log-file", log, "-v4"}
	var files []*os.File
	if o.PageServer != nil {
		args = append(args, "--page-server", "--ps-socket", strconv.Itoa(lazyPagesSocketFd))
		files = append(files, o.PageServer) // lazyPagesSocketFd
	}
	args = append(args, "--status-fd", strconv.Itoa(lazyPagesSocketFd+len(files)))
	files = append(files, statusW)
	var imagesW *os.File
	if o.ImagesLater {
		imagesR, w, err := os.Pipe()
		if err != nil {
			statusR.Close()
			return nil, err
		}
		defer imagesR.Close()
		imagesW = w
		args = append(args, "--images-ready-fd", strconv.Itoa(lazyPagesSocketFd+len(files)))
		files = append(files, imagesR)
	}
	cmd := exec.Command(r.cfg.Criu, args...)
	cmd.ExtraFiles = files
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	// Its own process group: it must outlive a cancelled request, and the
	// caller ends it explicitly.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		statusR.Close()
		if imagesW != nil {
			imagesW.Close()
		}
		return nil, fmt.Errorf("start criu lazy-pages: %w", err)
	}
	lp := &LazyPages{cmd: cmd, done: make(chan struct{}), log: log, ready: make(chan struct{}), imagesW: imagesW}
	go func() {
		defer statusR.Close()
		var b [1]byte
		_, _ = statusR.Read(b[:]) // the byte, or EOF: WaitReady checks the socket
		close(lp.ready)
	}()
	go func() {
		if err := cmd.Wait(); err != nil {
			lp.err = fmt.Errorf("criu lazy-pages: %w: %s%s", err, bytes.TrimSpace(stderr.Bytes()), criuLogErrors(log))
		}
		lp.closeImages()
		close(lp.done)
	}()
	return lp, nil
}

// WaitReady waits until the daemon listens for the restore (its status
// byte; its socket exists), so the restore that follows does not race it.
func (lp *LazyPages) WaitReady(ctx context.Context, workPath string) error {
	select {
	case <-lp.ready:
	case <-ctx.Done():
		return ctx.Err()
	}
	// The byte, or the pipe closed without it by an exit: the socket
	// tells which.
	if _, err := os.Stat(filepath.Join(workPath, "lazy-pages.socket")); err == nil {
		return nil
	}
	select {
	case <-lp.done:
	case <-ctx.Done():
		return ctx.Err()
	}
	if lp.err != nil {
		return lp.err
	}
	return fmt.Errorf("criu lazy-pages exited before it was ready%s", criuLogErrors(lp.log))
}

// ImagesIn tells an ImagesLater daemon that its images are all in: it
// reads them and listens for the restore (WaitReady).
func (lp *LazyPages) ImagesIn() error {
	lp.imagesMu.Lock()
	defer lp.imagesMu.Unlock()
	if lp.imagesW == nil {
		return fmt.Errorf("criu lazy-pages: not waiting for its images")
	}
	_, err := lp.imagesW.Write([]byte{1})
	lp.imagesW.Close()
	lp.imagesW = nil
	if err != nil {
		return fmt.Errorf("criu lazy-pages: tell it the images are in: %w", err)
	}
	return nil
}

// closeImages closes an ImagesLater daemon's images pipe unsaid (EOF:
// the images will not come).
func (lp *LazyPages) closeImages() {
	lp.imagesMu.Lock()
	defer lp.imagesMu.Unlock()
	if lp.imagesW != nil {
		lp.imagesW.Close()
		lp.imagesW = nil
	}
}

// Done is closed when the daemon exits: every page has been handed over,
// or the transfer failed (see Err).
func (lp *LazyPages) Done() <-chan struct{} { return lp.done }

// Err returns why the daemon failed, once Done is closed.
func (lp *LazyPages) Err() error { return lp.err }

// Kill stops the daemon (after a failed restore).
func (lp *LazyPages) Kill() {
	lp.closeImages()
	_ = lp.cmd.Process.Kill()
	<-lp.done
}
