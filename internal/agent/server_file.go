package agent

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	pathpkg "path"
	"syscall"

	"golang.org/x/sys/unix"
)

// push writes a file from data frames (see WriteFile). It answers once
// the data has ended.
func (s *Server) push(fr *frameReader, fw *frameWriter, req *fileRequest) error {
	if req == nil {
		return fail(fw, errors.New("push: no file"))
	}
	data := &dataReader{fr: fr}
	err := WriteFile(s.rootDir(), req.Path, data, FileOptions{Mode: req.Mode, UID: req.UID, GID: req.GID})
	if err != nil {
		// Read to the data's end: the client writes it all before it
		// reads the answer.
		_, _ = io.Copy(io.Discard, data)
		return fail(fw, fmt.Errorf("push %s: %w", req.Path, err))
	}
	return fw.json(frameHeader, response{Version: ProtocolVersion})
}

// dataReader reads the payloads of data frames up to the empty one (EOF).
type dataReader struct {
	fr   *frameReader
	rest []byte
	err  error
}

func (d *dataReader) Read(p []byte) (int, error) {
	for len(d.rest) == 0 {
		if d.err != nil {
			return 0, d.err
		}
		t, b, err := d.fr.next()
		switch {
		case err != nil:
			d.err = unexpected(err)
		case t != frameData:
			d.err = fmt.Errorf("agent: frame %q among data", t)
		case len(b) == 0:
			d.err = io.EOF
		default:
			d.rest = b
		}
	}
	n := copy(p, d.rest)
	d.rest = d.rest[n:]
	return n, nil
}

// WriteFile writes r's bytes to path (absolute) inside root, resolved as
// the root's own processes would (RESOLVE_IN_ROOT: absolute links and ".."
// stay inside): to a temporary file beside it, owned, moded and fsynced,
// then renamed over the path and the directory fsynced, so the path holds
// its old content or all of the new one. o.Mode 0 means 0o644. vesseld
// uses it for a container's root filesystem; the agent for a guest's.
func WriteFile(root, path string, r io.Reader, o FileOptions) (err error) {
	if !pathpkg.IsAbs(path) {
		return fmt.Errorf("path %q is not absolute", path)
	}
	if o.Mode == 0 {
		o.Mode = 0o644
	}
	gr, err := openGuestRoot(root)
	if err != nil {
		return err
	}
	defer func() { _ = gr.Close() }()
	var rnd [6]byte
	_, _ = rand.Read(rnd[:])
	dir, f, tmp, err := gr.createTemp(path, ".vessel-"+hex.EncodeToString(rnd[:]))
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
	if _, err := io.Copy(f, r); err != nil {
		return err
	}
	// chown before chmod: chown clears the set-id bits.
	if err := f.Chown(int(o.UID), int(o.GID)); err != nil {
		return err
	}
	if err := f.Chmod(unixMode(o.Mode)); err != nil {
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
	base := pathpkg.Base(pathpkg.Clean(path))
	if err := unix.Renameat(int(dir.Fd()), tmp, int(dir.Fd()), base); err != nil {
		return &os.PathError{Op: "rename", Path: path, Err: err}
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
	if !pathpkg.IsAbs(req.Path) {
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
