package agent

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"syscall"

	"golang.org/x/sys/unix"
)

// push writes a file from data frames: to a temporary file beside it,
// owned, moded and fsynced, then renamed over the path (and the directory
// fsynced), so the path holds the old file or the whole new one. It
// answers once the data has ended.
func (s *Server) push(fr *frameReader, fw *frameWriter, req *fileRequest) error {
	if req == nil {
		return fail(fw, errors.New("push: no file"))
	}
	err := s.writeFile(fr, req)
	if err != nil {
		// Read to the data's end: the client writes it all before it
		// reads the answer.
		for {
			t, b, rerr := fr.next()
			if rerr != nil || (t == frameData && len(b) == 0) {
				break
			}
		}
		return fail(fw, fmt.Errorf("push %s: %w", req.Path, err))
	}
	return fw.json(frameHeader, response{Version: ProtocolVersion})
}

func (s *Server) writeFile(fr *frameReader, req *fileRequest) (err error) {
	if !path.IsAbs(req.Path) {
		return fmt.Errorf("path %q is not absolute", req.Path)
	}
	root, err := openGuestRoot(s.rootDir())
	if err != nil {
		return err
	}
	defer func() { _ = root.Close() }()
	var rnd [6]byte
	_, _ = rand.Read(rnd[:])
	dir, f, tmp, err := root.createTemp(req.Path, ".vessel-"+hex.EncodeToString(rnd[:]))
	if err != nil {
		return err
	}
	defer func() { _ = dir.Close() }()
	defer func() {
		if f != nil {
			_ = f.Close()
		}
		if err != nil {
			_ = unix.Unlinkat(int(dir.Fd()), tmp, 0)
		}
	}()
	for {
		t, b, err := fr.next()
		if err != nil {
			return err
		}
		if t != frameData {
			return fmt.Errorf("frame %q in a push", t)
		}
		if len(b) == 0 {
			break
		}
		if _, err := f.Write(b); err != nil {
			return err
		}
	}
	// chown before chmod: chown clears the set-id bits.
	if err := f.Chown(int(req.UID), int(req.GID)); err != nil {
		return err
	}
	if err := f.Chmod(unixMode(req.Mode)); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return err
	}
	err = f.Close()
	f = nil
	if err != nil {
		return err
	}
	base := path.Base(path.Clean(req.Path))
	if err := unix.Renameat(int(dir.Fd()), tmp, int(dir.Fd()), base); err != nil {
		return &os.PathError{Op: "rename", Path: req.Path, Err: err}
	}
	return dir.Sync()
}

// unixMode turns permission and set-id bits into an os.FileMode.
func unixMode(m uint32) os.FileMode {
	mode := os.FileMode(m & 0o777)
	if m&syscall.S_ISUID != 0 {
		mode |= os.ModeSetuid
	}
	if m&syscall.S_ISGID != 0 {
		mode |= os.ModeSetgid
	}
	if m&syscall.S_ISVTX != 0 {
		mode |= os.ModeSticky
	}
	return mode
}

// pull answers with a regular file's metadata, then its bytes as data
// frames.
func (s *Server) pull(fw *frameWriter, req *fileRequest) error {
	if req == nil {
		return fail(fw, errors.New("pull: no file"))
	}
	if !path.IsAbs(req.Path) {
		return fail(fw, fmt.Errorf("pull: path %q is not absolute", req.Path))
	}
	root, err := openGuestRoot(s.rootDir())
	if err != nil {
		return fail(fw, fmt.Errorf("pull: %w", err))
	}
	defer func() { _ = root.Close() }()
	f, err := root.open(req.Path, unix.O_RDONLY, 0)
	if err != nil {
		return fail(fw, fmt.Errorf("pull: %w", err))
	}
	defer func() { _ = f.Close() }()
	fi, err := f.Stat()
	if err != nil {
		return fail(fw, fmt.Errorf("pull: %w", err))
	}
	if !fi.Mode().IsRegular() {
		return fail(fw, fmt.Errorf("pull %s: not a regular file", req.Path))
	}
	st, _ := fi.Sys().(*syscall.Stat_t)
	info := &FileInfo{Mode: uint32(fi.Mode().Perm()), Size: fi.Size()}
	if st != nil {
		info.Mode, info.UID, info.GID = st.Mode&0o7777, st.Uid, st.Gid
	}
	if err := fw.json(frameHeader, response{Version: ProtocolVersion, File: info}); err != nil {
		return err
	}
	_, err = copyData(fw, frameData, io.Reader(f))
	return err
}
