package agent

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"strings"
	"syscall"
)

// rootPath turns an absolute path in the guest into one os.Root takes.
func rootPath(p string) (string, error) {
	if !path.IsAbs(p) {
		return "", fmt.Errorf("path %q is not absolute", p)
	}
	p = strings.TrimPrefix(path.Clean(p), "/")
	if p == "" {
		return "", errors.New("path is the root")
	}
	return p, nil
}

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
	p, err := rootPath(req.Path)
	if err != nil {
		return err
	}
	root, err := os.OpenRoot(s.rootDir())
	if err != nil {
		return err
	}
	defer func() { _ = root.Close() }()
	var rnd [6]byte
	_, _ = rand.Read(rnd[:])
	dir, base := path.Split(p)
	tmp := dir + "." + base + ".vessel-" + hex.EncodeToString(rnd[:])
	f, err := root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	defer func() {
		if f != nil {
			_ = f.Close()
		}
		if err != nil {
			_ = root.Remove(tmp)
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
	if err := root.Rename(tmp, p); err != nil {
		return err
	}
	return syncDir(root, dir)
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

func syncDir(root *os.Root, dir string) error {
	if dir == "" {
		dir = "."
	}
	d, err := root.Open(dir)
	if err != nil {
		return err
	}
	defer func() { _ = d.Close() }()
	return d.Sync()
}

// pull answers with a regular file's metadata, then its bytes as data
// frames.
func (s *Server) pull(fw *frameWriter, req *fileRequest) error {
	if req == nil {
		return fail(fw, errors.New("pull: no file"))
	}
	p, err := rootPath(req.Path)
	if err != nil {
		return fail(fw, fmt.Errorf("pull: %w", err))
	}
	root, err := os.OpenRoot(s.rootDir())
	if err != nil {
		return fail(fw, fmt.Errorf("pull: %w", err))
	}
	defer func() { _ = root.Close() }()
	f, err := root.Open(p)
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
