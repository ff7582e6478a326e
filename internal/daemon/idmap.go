package daemon

import (
	"bufio"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"

	"github.com/vesselhost/vessel/internal/runtime"
	"github.com/vesselhost/vessel/internal/state"
)

// Unprivileged containers. Each gets a user namespace of its own mapping
// its ids 0..65535 to a block of root's subordinate ids (/etc/subuid,
// /etc/subgid), disjoint from every other container's on this host, and
// its rootfs is an idmapped mount, so the tree on disk stays unshifted.
// The block is chosen at random among the free ones, so that two hosts
// rarely hand out the same one: a live move keeps its container's block
// (its checkpoint images are in those ids), and a target that already
// uses it refuses the move.

// KeyPrivileged opts a container out of its user namespace.
const KeyPrivileged = "security.privileged"

// idmapSize is the number of ids each container gets.
const idmapSize = 65536

// Default subordinate id files; a daemon's Config may name others.
const (
	defaultSubuid = "/etc/subuid"
	defaultSubgid = "/etc/subgid"
)

// privileged says whether rec runs without a user namespace.
func privileged(rec state.Instance) bool { return rec.Config[KeyPrivileged] == "true" }

// idRange is one subordinate id range: [Start, Start+Count).
type idRange struct{ Start, Count uint64 }

// readSubids returns user's ranges in a subuid/subgid file. A missing
// file has none.
func readSubids(path, user string) ([]idRange, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []idRange
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Split(strings.TrimSpace(sc.Text()), ":")
		if len(fields) != 3 || fields[0] != user {
			continue
		}
		start, err1 := strconv.ParseUint(fields[1], 10, 32)
		count, err2 := strconv.ParseUint(fields[2], 10, 32)
		if err1 != nil || err2 != nil || start == 0 || count == 0 || start+count > 1<<32-1 {
			continue // malformed, or would include host root: ignore
		}
		out = append(out, idRange{start, count})
	}
	return out, sc.Err()
}

// blocks lists the idmapSize-aligned blocks (their first id) inside rs.
func blocks(rs []idRange) []uint64 {
	var out []uint64
	for _, r := range rs {
		first := (r.Start + idmapSize - 1) / idmapSize * idmapSize
		for b := first; b+idmapSize <= r.Start+r.Count; b += idmapSize {
			out = append(out, b)
		}
	}
	return out
}

// within says whether [start, start+size) lies inside one of rs.
func within(rs []idRange, start, size uint64) bool {
	for _, r := range rs {
		if start >= r.Start && start+size <= r.Start+r.Count {
			return true
		}
	}
	return false
}

func overlaps(a, b state.IDMap) bool {
	ov := func(x, y uint32) bool {
		return uint64(x) < uint64(y)+uint64(b.Size) && uint64(y) < uint64(x)+uint64(a.Size)
	}
	return ov(a.UID, b.UID) || ov(a.GID, b.GID)
}

// allocIDMap picks a free block at random: the i-th block of the uid
// ranges with the i-th of the gid ranges.
func allocIDMap(uids, gids []idRange, used []state.IDMap, pick func(n int) int) (state.IDMap, error) {
	ub, gb := blocks(uids), blocks(gids)
	n := min(len(ub), len(gb))
	if n == 0 {
		return state.IDMap{}, errorf(ErrConflict, "no subordinate id range for root in %s and %s: add one (e.g. root:1000000:1000000000) or set %s=true", defaultSubuid, defaultSubgid, KeyPrivileged)
	}
	start := pick(n)
	for i := range n {
		m := state.IDMap{UID: uint32(ub[(start+i)%n]), GID: uint32(gb[(start+i)%n]), Size: idmapSize}
		free := true
		for _, u := range used {
			if overlaps(m, u) {
				free = false
				break
			}
		}
		if free {
			return m, nil
		}
	}
	return state.IDMap{}, errorf(ErrConflict, "all %d subordinate id blocks are in use", n)
}

// subids reads root's subordinate ranges.
func (d *Daemon) subids() (uids, gids []idRange, err error) {
	if uids, err = readSubids(d.cfg.subuidPath(), "root"); err != nil {
		return nil, nil, fmt.Errorf("read subordinate uids: %w", err)
	}
	if gids, err = readSubids(d.cfg.subgidPath(), "root"); err != nil {
		return nil, nil, fmt.Errorf("read subordinate gids: %w", err)
	}
	return uids, gids, nil
}

// usedIDMaps lists the id maps of every instance but skip.
func (d *Daemon) usedIDMaps(skip string) []state.IDMap {
	var used []state.IDMap
	for _, inst := range d.insts.list() {
		if inst.name == skip {
			continue
		}
		if m := inst.record().IDMap; m != nil {
			used = append(used, *m)
		}
	}
	return used
}

// ensureIDMap returns the id map inst runs with: nil for a privileged
// container; its recorded one; or a new one, recorded now.
func (d *Daemon) ensureIDMap(inst *instance) (*runtime.IDMap, error) {
	rec := inst.record()
	if privileged(rec) {
		return nil, nil
	}
	if rec.IDMap == nil {
		d.idmapMu.Lock()
		defer d.idmapMu.Unlock()
		uids, gids, err := d.subids()
		if err != nil {
			return nil, err
		}
		m, err := allocIDMap(uids, gids, d.usedIDMaps(inst.name), rand.IntN)
		if err != nil {
			return nil, err
		}
		if err := d.save(inst, func(_ *state.Tx, r *state.Instance) error { r.IDMap = &m; return nil }); err != nil {
			return nil, err
		}
		rec = inst.record()
	}
	return &runtime.IDMap{HostUID: rec.IDMap.UID, HostGID: rec.IDMap.GID, Size: rec.IDMap.Size}, nil
}

// checkPeerIDMap decides whether an id map a peer sends with a live move
// may be used here: inside root's subordinate ranges, and disjoint from
// every other container's. A peer cannot ask for host ids that way.
func (d *Daemon) checkPeerIDMap(name string, m *state.IDMap) error {
	if m == nil {
		return nil
	}
	if m.Size != idmapSize {
		return errorf(ErrInvalid, "id map of %d ids; this host gives containers %d", m.Size, idmapSize)
	}
	uids, gids, err := d.subids()
	if err != nil {
		return err
	}
	if !within(uids, uint64(m.UID), uint64(m.Size)) || !within(gids, uint64(m.GID), uint64(m.Size)) {
		return errorf(ErrForbidden, "id map %d:%d+%d is outside this host's subordinate ids", m.UID, m.GID, m.Size)
	}
	for _, u := range d.usedIDMaps(name) {
		if overlaps(*m, u) {
			return errorf(ErrConflict, "id map %d:%d+%d is in use by another container on %s", m.UID, m.GID, m.Size, d.cfg.Name)
		}
	}
	return nil
}

// admitPeerInstance decides whether a container a peer sends may live
// here, and how. A privileged container would be root on this host: only
// a host configured to accept them takes one. An unprivileged one keeps
// its id map through a live move (its checkpoint is in those ids; checked
// by checkPeerIDMap) and gets a new one at its first start otherwise.
func (d *Daemon) admitPeerInstance(rec *state.Instance, live bool) error {
	if privileged(*rec) {
		if !d.cfg.AcceptPrivileged {
			return errorf(ErrForbidden, "%s is a privileged container (%s=true); %s does not accept those from peers", rec.Name, KeyPrivileged, d.cfg.Name)
		}
		rec.IDMap = nil
		return nil
	}
	if !live {
		rec.IDMap = nil
		return nil
	}
	if rec.IDMap == nil {
		return errorf(ErrInvalid, "a live move of unprivileged %s needs its id map", rec.Name)
	}
	return nil
}
