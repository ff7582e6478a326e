package runtime

import (
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"

	"github.com/checkpoint-restore/go-criu/v7/crit/images/userns"
	"github.com/checkpoint-restore/go-criu/v7/crit/images/utsns"
	"google.golang.org/protobuf/proto"

	"github.com/vesselhost/vessel/internal/shim"
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
// keeping its magic and mode; the new file takes the old one's place
// atomically.
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
	head, err := readImageMagic(f)
	if err != nil {
		return fmt.Errorf("%w: %s: %w", ErrImages, filepath.Base(path), err)
	}
	p, err := proto.Marshal(e)
	if err != nil {
		return err
	}
	b := binary.LittleEndian.AppendUint32(head, uint32(len(p)))
	if err := shim.WriteBytesAtomic(path, append(b, p...), fi.Mode().Perm(), true); err != nil {
		return fmt.Errorf("rewrite %s: %w", filepath.Base(path), err)
	}
	return nil
}

// SetUTSName makes the checkpoint in dir restore with nodename as the
// name of its UTS namespace. CRIU saves the namespace's nodename and
// domainname in its image (utsns-N.img) and a restore sets them again, so
// a checkpoint taken in another instance (a copy's snapshot) would come
// back under the source's hostname. The images hold at most one UTS
// namespace (CRIU dumps no nested one); more are refused (ErrImages).
// Images without one (the tasks in the dumping CRIU's) are left alone, as
// is a name that is nodename already; the domain name is kept.
func SetUTSName(dir, nodename string) error {
	paths, err := filepath.Glob(filepath.Join(dir, "utsns-*.img"))
	if err != nil {
		return err
	}
	switch {
	case len(paths) == 0:
		return nil
	case len(paths) > 1:
		return fmt.Errorf("%w: %d UTS namespaces", ErrImages, len(paths))
	}
	var ue utsns.UtsnsEntry
	if err := readImage(paths[0], &ue, nil); err != nil {
		return err
	}
	if ue.GetNodename() == nodename {
		return nil
	}
	ue.Nodename = proto.String(nodename)
	return rewriteImage(paths[0], &ue)
}
