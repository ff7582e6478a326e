package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"sync"
	"time"

	"github.com/vesselhost/vessel/internal/api"
	"github.com/vesselhost/vessel/internal/migration"
	"github.com/vesselhost/vessel/internal/network"
	"github.com/vesselhost/vessel/internal/operations"
	"github.com/vesselhost/vessel/internal/qemu"
	"github.com/vesselhost/vessel/internal/revert"
	"github.com/vesselhost/vessel/internal/state"
	"github.com/vesselhost/vessel/internal/vm"
)

// A VM's live move, target side (migrateInVM): the record and journal
// are registered as a container's are; then an empty sparse disk of the
// source's size, the VM's tap and cgroup, and QEMU started with the same
// configuration, paused and waiting (-incoming defer). Its built-in NBD
// server exports the disk writable on a unix socket and migrate-incoming
// listens on another; vesseld relays the source's vm-disk and vm-state
// streams to them (QEMU never listens on the network). On "start" the
// incoming migration must have completed: the NBD server stops, the VM
// runs (cont) and is recorded running with the journal's end in one
// transaction. QEMU announces the guest's MAC itself after a migration
// (its self-announce RARPs), the equivalent of a container's gratuitous
// ARP. Any failure before that kills QEMU and removes everything.

// The target's sockets in the VM's run directory.
const (
	vmNBDSocket      = "nbd.sock"
	vmIncomingSocket = "incoming.sock"
)

// faultVMTargetIncoming fires on the target as the source's migration
// stream (RAM, after the disk mirror is in sync) arrives, before it
// reaches QEMU: "cut" (a target gone during the memory copy) or "fail".
const faultVMTargetIncoming = "migrate.vm.target.incoming"

// faultVMTargetClaim "fail" makes the target's network.ClaimMAC fail (as
// before it had one: the bridge forwards the guest's MAC where it learnt
// it until the guest sends a frame itself).
const faultVMTargetClaim = "migrate.vm.target.claim"

// migrateInVM receives a VM's live move (migrateIn sends a cold one down
// the container's path).
func (d *Daemon) migrateInVM(ctx context.Context, op *operations.Operation, peer string, sess *migration.Session, hello migration.Hello) (err error) {
	name := hello.Instance.Name
	if hello.VMDiskSize <= 0 {
		return errorf(ErrInvalid, "a VM move needs its disk size")
	}
	switch hello.Memory {
	case api.MemoryCopy, api.MemoryLazy, api.MemoryAuto:
	default:
		return errorf(ErrInvalid, "memory mode %q for a VM (want copy, lazy or auto)", hello.Memory)
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	deadline := time.AfterFunc(d.cfg.MigrationTimeout, func() {
		err := fmt.Errorf("%w (%s after its hello)", errSessionDeadline, d.cfg.MigrationTimeout)
		sess.SendError(err)
		cancel(err)
		sess.Close()
	})
	defer deadline.Stop()
	rec := fromWire(hello.Instance)
	rec.State, rec.Type, rec.IDMap = state.StateStopped, state.TypeVM, nil
	size, err := sizeVM(name, rec.Config)
	if err != nil {
		return err
	}
	journal := state.Migration{Instance: name, Role: state.MigrationTarget, Peer: peer, Name: name, Live: true,
		Start: hello.Start, Phase: state.PhaseTransfer, Started: time.Now()}
	inst, unlock, err := d.register(rec, StatusMigrating, hello.KeepAddress, func(tx *state.Tx) error { return tx.PutMigration(journal) })
	if err != nil {
		if errors.Is(err, ErrConflict) {
			return fmt.Errorf("on %s: %w", d.cfg.Name, err)
		}
		return err
	}
	release := sync.OnceFunc(unlock)
	defer release()
	d.crashAt(faultTargetReserved)
	r := revert.New()
	defer r.Fail()
	r.Add(func() { d.undo("forget", name, d.forget(inst)) })
	bg := context.WithoutCancel(ctx)
	m := &migrationTarget{d: d, op: op, sess: sess, hello: hello, inst: inst, name: name, peer: peer,
		diskCh: make(chan net.Conn, 1), imagesCh: make(chan net.Conn, 1), logsCh: make(chan net.Conn, 1)}

	// The disk: an empty sparse file of the source's size. (A clone of
	// the image's vm-image volume would give nothing: the disk is a raw
	// file with no backing chain, so the mirror copies it whole either
	// way; holes travel as zero writes.)
	vol := containerVolume(name)
	if err := d.storage.CreateVolume(ctx, vol); err != nil {
		return fmt.Errorf("create the VM's volume: %w", err)
	}
	r.Add(func() { d.undo("delete volume", name, d.storage.DeleteVolume(bg, vol)) })
	if err := vm.CreateEmptyDisk(d.storage.Path(vol), hello.VMDiskSize); err != nil {
		return err
	}

	// The network and cgroup as a start makes them, QEMU paused and
	// waiting for the migration.
	proc, qcfg, ep, err := d.spawnVM(ctx, r, inst.record(), size, vmSpawn{incoming: true})
	if err != nil {
		return err
	}
	mon, err := qemu.Connect(ctx, qcfg.QMPSocket())
	if err != nil {
		return err
	}
	defer mon.Close()
	nbdSock, inSock := filepath.Join(qcfg.RunDir, vmNBDSocket), filepath.Join(qcfg.RunDir, vmIncomingSocket)
	if err := mon.SetMigrateCapabilities(ctx, vmMigrateCapabilities(hello.Memory)); err != nil {
		return err
	}
	if err := mon.NBDServerStart(ctx, nbdSock); err != nil {
		return err
	}
	if err := mon.NBDServerAddRoot(ctx); err != nil {
		return err
	}
	if err := mon.MigrateIncoming(ctx, "unix:"+inSock); err != nil {
		return err
	}
	go m.dispatchVM(ctx, nbdSock)
	if err := sess.Send(migration.Message{Type: migration.MsgAccepted, Address: inst.record().Address}); err != nil {
		return err
	}
	// The migration stream comes on the page link the source dials now.
	go m.relayVMState(ctx, inSock)
	// The snapshots come first, as a container's (receiveSnapshot).
	for range hello.Snapshots {
		var msg migration.Message
		if err := sess.Recv(ctx, &msg); err != nil {
			return err
		}
		if err := migration.Expect(msg, migration.MsgSnapshot); err != nil {
			return err
		}
		if err := m.receiveSnapshot(ctx, msg, r); err != nil {
			return err
		}
	}

	// The source mirrors the disk and migrates the RAM through the
	// relays; then it says "start".
	var start migration.Message
	if err := sess.Recv(ctx, &start); err != nil {
		return err
	}
	if err := migration.Expect(start, migration.MsgStart); err != nil {
		return err
	}
	if err := m.injectFault(faultBeforeRestore); err != nil {
		return err
	}
	t0 := time.Now()
	// The source completed its side; QEMU here has read it all once its
	// incoming migration says completed (or, post-copy, is running it).
	wctx, wcancel := context.WithTimeout(ctx, time.Minute)
	st, err := mon.WaitMigration(wctx, 5*time.Millisecond, func(s qemu.MigrationStatus) bool {
		return s.Status == "postcopy-active"
	})
	wcancel()
	if err != nil {
		return fmt.Errorf("incoming migration: %w", err)
	}
	d.log.Debug("migration target: incoming migration", "name", name, "status", st.Status, "waited", time.Since(t0))
	// The disk is whole once the source's mirror has completed.
	var msg migration.Message
	if err := sess.Recv(ctx, &msg); err != nil {
		return err
	}
	if err := migration.Expect(msg, migration.MsgVMDiskDone); err != nil {
		return err
	}
	if size.Throttle != nil {
		if err := mon.SetIOThrottle(ctx, *size.Throttle); err != nil {
			return fmt.Errorf("disk limits of %s: %w", name, err)
		}
	}
	// Frames for the guest come here from its first instruction on: this
	// bridge forwards its MAC to the tap, the segment hears where it is.
	d.announceVMInBackground(name, ep)
	if err := mon.Cont(ctx); err != nil && st.Status == "completed" {
		return err
	}
	ranAt := time.Now()
	d.log.Debug("migration target: VM runs", "name", name, "after", time.Since(t0))
	if st.Status == "completed" {
		// The mirror is done: its export goes (post-copy's once the
		// pages are all in).
		d.undo("stop the NBD server", name, mon.NBDServerStop(ctx))
	}
	run := d.trackVM(inst, proc)
	r.Add(func() { inst.clearLive(run) })
	if err := d.setState(inst, state.StateRunning, func(tx *state.Tx, rec *state.Instance) error {
		rec.LastStart = time.Now().UTC()
		return tx.DeleteMigration(name)
	}); err != nil {
		return fmt.Errorf("record the start of %s: %w", name, err)
	}
	r.Success()
	deadline.Stop()
	if err := sess.Send(migration.Message{Type: migration.MsgResumed, RestoreSeconds: migration.Seconds(time.Since(t0)),
		ResumedSeconds: migration.Seconds(time.Since(ranAt))}); err != nil {
		d.log.Warn("migration: resumed not delivered", "name", name, "err", err)
	}
	release()
	go m.renameGuest(context.WithoutCancel(ctx)) // migrate_target_rename.go
	if st.Status != "completed" {
		// Post-copy: the pages follow; wait for QEMU to have them all.
		m.op.SetMetadata(map[string]any{"phase": "post-copy"})
		if _, err := mon.WaitMigration(ctx, 50*time.Millisecond, nil); err != nil {
			d.log.Error("POST-COPY FAILED: the VM may miss memory pages", "name", name, "err", err)
			return fmt.Errorf("post-copy failed after resume: %w", err)
		}
		d.undo("stop the NBD server", name, mon.NBDServerStop(ctx))
	}
	return m.finish(ctx)
}

// dispatchVM relays the source's vm-disk streams to the local QEMU's
// NBD server and routes the snapshots' and the console log's streams,
// until the session ends.
func (m *migrationTarget) dispatchVM(ctx context.Context, nbdSock string) {
	for {
		st, h, err := m.sess.AcceptStream(ctx)
		if err != nil {
			return
		}
		if m.streams++; m.streams > migrationMaxStreams {
			st.Close()
			m.abort(errorf(ErrInvalid, "more than %d data streams in one migration", migrationMaxStreams))
			return
		}
		var sock string
		switch h.Kind {
		case migration.StreamVMDisk:
			sock = nbdSock
		case migration.StreamLogs:
			m.logsCh <- st
			continue
		case migration.StreamDisk: // a snapshot's disk
			m.diskCh <- st
			continue
		case migration.StreamImages: // a stateful snapshot's state file
			m.imagesCh <- st
			continue
		default:
			st.Close()
			continue
		}
		go func() {
			defer st.Close()
			c, err := net.Dial("unix", sock)
			if err != nil {
				m.d.log.Warn("migration: relay to qemu", "name", m.name, "socket", sock, "err", err)
				return
			}
			defer c.Close()
			migration.Relay(st, c)
		}()
	}
}

// relayVMState claims the move's page link and relays it to the local
// QEMU's incoming migration socket (relayShallow).
func (m *migrationTarget) relayVMState(ctx context.Context, inSock string) {
	link, err := m.d.pageLinks.claim(ctx, m.hello.PageToken, m.peer)
	if err != nil {
		m.abort(fmt.Errorf("the VM's migration stream: %w", err))
		return
	}
	defer link.Close()
	sess := m.sess
	go func() {
		<-sess.Closed()
		link.Close()
	}()
	c, err := net.Dial("unix", inSock)
	if err != nil {
		m.abort(fmt.Errorf("the VM's migration stream: %w", err))
		return
	}
	defer c.Close()
	// The stream's first bytes: the source's RAM copy has begun.
	first := make([]byte, 1)
	if _, err := io.ReadFull(link, first); err != nil {
		return
	}
	if err := m.injectFault(faultVMTargetIncoming); err != nil {
		m.abort(err)
		return
	}
	if _, err := c.Write(first); err != nil {
		return
	}
	relayShallow(link, c)
}

// announceVMInBackground, as a VM moved in is about to run, points this
// bridge's forwarding entry for its MAC at its tap (network.ClaimMAC: the
// bridge learnt it behind the uplink while the VM ran on the other host)
// and tells the segment where it is now (network.AnnounceFromBridge, its
// first frame before the guest runs, the others after), beside the
// guest's own announcement; a lost one is only a warning.
func (d *Daemon) announceVMInBackground(name string, ep network.Endpoint) {
	mac, err := net.ParseMAC(ep.MAC)
	if err != nil {
		return
	}
	err = injected(faultVMTargetClaim)
	if d.fault(faultVMTargetClaim) != "fail" {
		err = network.ClaimMAC(d.cfg.Bridge, ep.HostVeth, mac)
	}
	if err != nil {
		d.log.Warn("forward a VM's MAC to its tap", "name", name, "err", err)
	}
	if !d.enterBackground() {
		return
	}
	go func() {
		defer d.bg.Done()
		if err := network.AnnounceFromBridge(d.ctx, d.cfg.Bridge, mac, ep.Address.Addr()); err != nil && d.ctx.Err() == nil {
			d.log.Warn("gratuitous ARP for a VM not sent", "name", name, "err", err)
		}
	}()
}

// vmMigrateCapabilities are the QEMU migration capabilities of a memory
// mode, the same on both ends: post-copy where the mode may switch to it;
// MIGRATION events (the source wakes on them, qemu.WatchMigration).
func vmMigrateCapabilities(memory string) map[string]bool {
	return map[string]bool{"postcopy-ram": memory != api.MemoryCopy, qemu.EventsCapability: true}
}
