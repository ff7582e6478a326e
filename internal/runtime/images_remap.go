package runtime

import (
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/checkpoint-restore/go-criu/v7/crit/images/userns"
	"github.com/checkpoint-restore/go-criu/v7/magic"
	"google.golang.org/protobuf/proto"
)

// MapUserns makes the checkpoint in dir restore into the user namespace
// of map m. CRIU writes the tasks' credentials and the files' owners as
// the container sees them (userns_uid()), and the namespace's maps, in
// host ids, into one image (userns-N.img), from which a restore makes the
// namespace. A checkpoint taken under another id block (a copy's
// snapshot, or one that moved cold: each gets a block of its own) thus
// restores into m's block once that image's maps are m's. The images must
// put every task in one user namespace (as CheckUserns) whose maps are
// each one extent of m.Size ids from 0; anything else is refused
// (ErrImages). Maps that are m's already are left alone.
func MapUserns(dir string, m IDMap) error {
	if err := m.Validate(); err != nil {
		return err
	}
	path, ue, err := usernsImage(dir)
	if err != nil {
		return err
	}
	block := func(ext []*userns.UidGidExtent) bool {
		return len(ext) == 1 && ext[0].GetFirst() == 0 && ext[0].GetCount() == m.Size
	}
	if !block(ue.GetUidMap()) || !block(ue.GetGidMap()) {
		return fmt.Errorf("%w: the user namespace's maps are not one block of %d ids", ErrImages, m.Size)
	}
	if ue.GetUidMap()[0].GetLowerFirst() == m.HostUID && ue.GetGidMap()[0].GetLowerFirst() == m.HostGID {
		return nil
	}
	ue.GetUidMap()[0].LowerFirst = proto.Uint32(m.HostUID)
	ue.GetGidMap()[0].LowerFirst = proto.Uint32(m.HostGID)
	return rewriteImage(path, ue)
}

// rewriteImage replaces the one entry of the CRIU image at path with e,
// keeping its magic; the new file takes the old one's place atomically.
func rewriteImage(path string, e proto.Message) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrImages, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	var head [8]byte
	if _, err := io.ReadFull(f, head[:4]); err != nil {
		return fmt.Errorf("%w: %s: %w", ErrImages, filepath.Base(path), err)
	}
	n := 4
	mm := magic.LoadMagic()
	if v := uint64(binary.LittleEndian.Uint32(head[:4])); v == mm.ByName["IMG_COMMON"] || v == mm.ByName["IMG_SERVICE"] {
		if _, err := io.ReadFull(f, head[4:]); err != nil {
			return fmt.Errorf("%w: %s: %w", ErrImages, filepath.Base(path), err)
		}
		n = 8
	}
	p, err := proto.Marshal(e)
	if err != nil {
		return err
	}
	b := append(append([]byte{}, head[:n]...), binary.LittleEndian.AppendUint32(nil, uint32(len(p)))...)
	b = append(b, p...)
	tmp, err := os.CreateTemp(filepath.Dir(path), ".remap-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // gone once renamed
	_, err = tmp.Write(b)
	if err == nil {
		err = tmp.Chmod(fi.Mode().Perm())
	}
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("rewrite %s: %w", filepath.Base(path), err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("rewrite %s: %w", filepath.Base(path), err)
	}
	return nil
}
