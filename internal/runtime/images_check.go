package runtime

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	criucore "github.com/checkpoint-restore/go-criu/v7/crit/images/criu-core"
	"github.com/checkpoint-restore/go-criu/v7/crit/images/inventory"
	"github.com/checkpoint-restore/go-criu/v7/crit/images/userns"
	"github.com/checkpoint-restore/go-criu/v7/magic"
	"google.golang.org/protobuf/proto"
)

// A peer's checkpoint is data from a host this one does not trust with
// root: CRIU restores whatever credentials, capabilities and namespaces
// its images say. CheckUserns makes sure the tree lands in the user
// namespace the target chose, where even full capabilities are a
// container's, not the host's.

// Limits on the images CheckUserns reads: the ones it reads are tiny.
const (
	maxImageEntry = 1 << 20
	maxImageFile  = 16 << 20
)

// ErrImages marks a checkpoint refused by CheckUserns.
var ErrImages = errors.New("checkpoint images refused")

// CheckUserns checks that the checkpoint in dir restores every task into
// one user namespace that maps exactly m: the inventory's root task and
// every task's ids name the same user namespace, the only one in the
// images, and its maps are m's, nothing more.
func CheckUserns(dir string, m IDMap) error {
	_, ue, err := usernsImage(dir)
	if err != nil {
		return err
	}
	one := func(ext []*userns.UidGidExtent, host uint32) bool {
		return len(ext) == 1 && ext[0].GetFirst() == 0 && ext[0].GetLowerFirst() == host && ext[0].GetCount() == m.Size
	}
	if !one(ue.GetUidMap(), m.HostUID) || !one(ue.GetGidMap(), m.HostGID) {
		return fmt.Errorf("%w: the user namespace's maps are not this container's (%d:%d+%d)", ErrImages, m.HostUID, m.HostGID, m.Size)
	}
	return nil
}

// usernsImage checks that the checkpoint in dir puts every task into one
// user namespace, not the host's (the inventory's root task's), and the
// only one in the images; it returns that namespace's image and entry.
func usernsImage(dir string) (string, *userns.UsernsEntry, error) {
	// The inventory's root ids are the dumping CRIU's own namespaces: the
	// host's. No task may be in that user namespace.
	var inv inventory.InventoryEntry
	if err := readImage(filepath.Join(dir, "inventory.img"), &inv, nil); err != nil {
		return "", nil, err
	}
	host := inv.GetRootIds().GetUserNsId()
	ids, err := filepath.Glob(filepath.Join(dir, "ids-*.img"))
	if err != nil {
		return "", nil, err
	}
	if len(ids) == 0 {
		return "", nil, fmt.Errorf("%w: no task ids", ErrImages)
	}
	var ns uint32
	for _, f := range ids {
		err := readImage(f, &criucore.TaskKobjIdsEntry{}, func(msg proto.Message) error {
			id := msg.(*criucore.TaskKobjIdsEntry).GetUserNsId()
			switch {
			case id == 0 || id == host:
				return fmt.Errorf("%w: %s puts a task in the host's user namespace", ErrImages, filepath.Base(f))
			case ns != 0 && id != ns:
				return fmt.Errorf("%w: tasks in more than one user namespace", ErrImages)
			}
			ns = id
			return nil
		})
		if err != nil {
			return "", nil, err
		}
	}
	files, err := filepath.Glob(filepath.Join(dir, "userns-*.img"))
	if err != nil {
		return "", nil, err
	}
	if want := filepath.Join(dir, fmt.Sprintf("userns-%d.img", ns)); len(files) != 1 || files[0] != want {
		return "", nil, fmt.Errorf("%w: expected one user namespace image, userns-%d.img, found %d", ErrImages, ns, len(files))
	}
	ue := &userns.UsernsEntry{}
	if err := readImage(files[0], ue, nil); err != nil {
		return "", nil, err
	}
	return files[0], ue, nil
}

// readImageMagic reads a CRIU image's magic: one word, or two where the
// first says the image is a common or service one.
func readImageMagic(r io.Reader) ([]byte, error) {
	head := make([]byte, 4, 8)
	if _, err := io.ReadFull(r, head); err != nil {
		return nil, err
	}
	mm := magic.LoadMagic()
	if v := uint64(binary.LittleEndian.Uint32(head)); v == mm.ByName["IMG_COMMON"] || v == mm.ByName["IMG_SERVICE"] {
		head = head[:8]
		if _, err := io.ReadFull(r, head[4:]); err != nil {
			return nil, err
		}
	}
	return head, nil
}

// readImage decodes a CRIU image of protobuf entries into into (the first
// entry) and passes every entry to each, when set. Sizes are bounded.
func readImage(path string, into proto.Message, each func(proto.Message) error) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrImages, err)
	}
	defer f.Close()
	r := io.LimitReader(f, maxImageFile)
	if _, err := readImageMagic(r); err != nil {
		return fmt.Errorf("%w: %s: %w", ErrImages, filepath.Base(path), err)
	}
	var word [4]byte
	n := 0
	for {
		if _, err := io.ReadFull(r, word[:]); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return fmt.Errorf("%w: %s: %w", ErrImages, filepath.Base(path), err)
		}
		size := binary.LittleEndian.Uint32(word[:])
		if size > maxImageEntry {
			return fmt.Errorf("%w: %s: entry of %d bytes", ErrImages, filepath.Base(path), size)
		}
		buf := make([]byte, size)
		if _, err := io.ReadFull(r, buf); err != nil {
			return fmt.Errorf("%w: %s: %w", ErrImages, filepath.Base(path), err)
		}
		msg := into
		if n > 0 {
			msg = into.ProtoReflect().New().Interface()
		}
		if err := (proto.UnmarshalOptions{AllowPartial: true}).Unmarshal(buf, msg); err != nil {
			return fmt.Errorf("%w: %s: %w", ErrImages, filepath.Base(path), err)
		}
		if each != nil {
			if err := each(msg); err != nil {
				return err
			}
		}
		n++
	}
	if n == 0 {
		return fmt.Errorf("%w: %s is empty", ErrImages, filepath.Base(path))
	}
	return nil
}
