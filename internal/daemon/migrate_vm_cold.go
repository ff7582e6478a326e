package daemon

import (
	"context"

	"github.com/vesselhost/vessel/internal/state"
	"github.com/vesselhost/vessel/internal/storage"
)

// A VM's cold move and its copies, to another host or on this one, go
// the container's way: the same session, journal, disk transfer
// (storage.VolumeSender of the VM's volume, vm.DiskFile in it: btrfs send
// or the dir pool's passes), snapshots (a stateful one's vmStateFile in
// its checkpoint volume) and fault points. What differs is here:
//
//   - a running VM is stopped first (ACPI, then kill: stopLocked) and
//     started again on the source if the move fails, as a container;
//   - a copy of a running VM sends its disk with the vCPUs stopped (QMP
//     stop drains and flushes the disk: whilePaused), not frozen;
//   - the target starts it as a VM (startVM below), recorded running
//     with the journal's end in one transaction;
//   - a copy gets the target's new name and address, hence a new MAC
//     (network.MACFor) and hostname (the kernel command line's
//     vessel.hostname=): nothing of the identity is on the disk for
//     vessel to rewrite.

// faultVMTargetStart fires on the target as it starts a VM received
// cold, before QEMU runs ("fail", "cut", "crash").
const faultVMTargetStart = "migrate.vm.target.start"

// whilePaused runs fn with the source instance stopped in its tracks: a
// container frozen, a VM's vCPUs stopped. It runs again whatever
// happens.
func (m *migrationSource) whilePaused(ctx context.Context, fn func() error) error {
	if isVM(m.inst) {
		_, err := m.d.whileVMStopped(ctx, m.name, fn)
		return err
	}
	if err := m.fz.freeze(ctx); err != nil {
		return err
	}
	err := fn()
	_, _ = m.fz.thaw() // logged
	return err
}

// startVM starts a VM received cold (its disk committed); also runs in
// the transaction that records it running.
func (m *migrationTarget) startVM(ctx context.Context, also func(*state.Tx) error) error {
	if err := m.injectFault(faultVMTargetStart); err != nil {
		return err
	}
	return m.d.launchVMWith(ctx, m.inst, nil, also)
}

// prepareCheckpoint readies a received stateful snapshot's checkpoint
// volume and returns how many bytes it may take: a container's CRIU
// images (imageLimit), or a VM's state file, whose directory is NODATASUM
// as the snapshot's own was (storage.PrepareNoDataSumDir: a restore loads it
// with direct I/O) and which holds at most the guest's RAM (cfg, the
// snapshot's configuration) and its device state.
func (m *migrationTarget) prepareCheckpoint(ck storage.Volume, cfg map[string]string) (int64, error) {
	if !m.inst.record().IsVM() {
		return m.d.imageLimit(cfg), nil
	}
	if _, err := storage.PrepareNoDataSumDir(m.d.storage.Path(ck)); err != nil {
		return 0, err
	}
	return vmStateLimit(cfg)
}

// vmStateLimit is the largest state file a VM of configuration cfg
// saves: its RAM (a mapped-ram file has a place for every page) and
// room for the header and the devices.
func vmStateLimit(cfg map[string]string) (int64, error) {
	size, err := sizeVM("", cfg)
	if err != nil {
		return 0, err
	}
	return int64(size.MemoryMiB)<<20 + migrationImageSlack, nil
}
