package daemon

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/vesselhost/vessel/internal/api"
	"github.com/vesselhost/vessel/internal/migration"
	"github.com/vesselhost/vessel/internal/operations"
	"github.com/vesselhost/vessel/internal/runtime"
	"github.com/vesselhost/vessel/internal/state"
	"github.com/vesselhost/vessel/internal/storage"
)

// MigrateInstance validates a move (or copy) to a peer host and runs it as
// an operation whose metadata carries the progress and, at the end, the
// per-phase timing report ("timing").
func (d *Daemon) MigrateInstance(ctx context.Context, name string, req api.InstanceMigratePost) (*operations.Operation, error) {
	inst, err := d.instance(name)
	if err != nil {
		return nil, err
	}
	if req.TargetFingerprint == d.fingerprint {
		return nil, errorf(ErrInvalid, "the target is this host")
	}
	peer, err := d.peerByFingerprint(req.TargetFingerprint)
	if err != nil {
		return nil, err
	}
	if req.Name == "" {
		req.Name = name
	}
	if err := ValidateName("instance", req.Name); err != nil {
		return nil, err
	}
	switch req.Memory {
	case "":
		req.Memory = api.MemoryAuto
	case api.MemoryAuto, api.MemoryLazy, api.MemoryCopy, api.MemoryPrecopy:
	default:
		return nil, errorf(ErrInvalid, "unknown memory mode %q (want auto, lazy, copy or precopy)", req.Memory)
	}
	if req.Live && req.Copy {
		return nil, errorf(ErrInvalid, "a copy is not live (drop --live)")
	}
	// A VM's live move is QEMU's (migrateOutVM); its cold move or copy
	// goes the container's way (the VM's parts: migrate_vm_cold.go).
	vmMove := isVM(inst) && req.Live
	if vmMove && req.Memory == api.MemoryPrecopy {
		req.Memory = api.MemoryCopy // QEMU's pre-copy is iterative
	}
	act := actMove
	if req.Live {
		act = actLiveMove
	}
	if _, err := d.checkNow(name, act, false); err != nil {
		return nil, err
	}
	if req.Live && !vmMove {
		if err := d.checkDumpable(name); err != nil {
			return nil, err
		}
	}
	desc := "Moving instance"
	if req.Copy {
		desc = "Copying instance"
	}
	return d.ops.Start(d.ctx, desc, instanceResources(name), func(ctx context.Context, op *operations.Operation) error {
		if vmMove {
			return d.migrateOutVM(ctx, op, name, peer, req) // migrate_vm_source.go
		}
		return d.migrateOut(ctx, op, name, act, peer, req)
	}), nil
}

// migrationSource is one migration seen from the source host. It holds the
// instance's lock from the start to the end; when the outcome is unknown
// at the end (the connection broke while the target restored), the lock
// passes to the settle operation without ever being free, so no other
// action (a snapshot's thaw, say) can touch a container that must stay
// frozen.
type migrationSource struct {
	d      *Daemon
	op     *operations.Operation
	inst   *instance
	name   string
	target string // the target host's name
	req    api.InstanceMigratePost
	sess   *migration.Session
	link   *pageLinkDial // a post-copy move's page link (migrate_pages.go)
	timing api.MigrationTiming
	// disk sends the container's volume in passes (closed at the end:
	// btrfs deletes its transfer snapshots then); passes counts them.
	disk   storage.VolumeSender
	passes int
	// base is the newest snapshot the target already has (the base of
	// the first pre-copy pass), if any.
	base *storage.Volume
	// pageBytes counts memory pages streamed during a copy-mode dump.
	pageBytes atomic.Int64
	// fz freezes the source container; a failure's cleanup thaws it.
	fz *freezer
	// committed: the container runs on the target; the source copy is gone.
	committed bool
	// linkDown: the source container's host veth is down (network lock).
	linkDown bool
	// downSince is when a cold move stopped the container.
	downSince time.Time
	// phase is where the move is (movePhase...), for a failure's error.
	phase string
	// What a failure's handling did: thawing, bringing the link up,
	// restarting after a cold move (restarted) failed with these.
	thawErr, linkErr, restartErr error
	restarted                    bool
	// journal records the move's progress for a daemon restarted in the
	// middle (state.Migration); unsettled means the outcome is unknown
	// and left to settleOutgoing.
	journal   state.Migration
	unsettled bool
	// autoTrial: --memory=auto chose pre-copy, to be dropped for
	// post-copy if its first passes say it would not beat it.
	autoTrial bool
	// vmDiskSize is a VM's disk size (migrate_vm_source.go).
	vmDiskSize int64
}

func (d *Daemon) migrateOut(ctx context.Context, op *operations.Operation, name string, act action, peer state.Peer, req api.InstanceMigratePost) (err error) {
	inst, release, err := d.lock(ctx, name, act, false)
	if err != nil {
		return err
	}
	m := &migrationSource{d: d, op: op, inst: inst, name: name, target: peer.Name, req: req,
		fz: &freezer{d: d, name: name}, phase: movePhasePrepare}
	defer func() {
		if !m.handOff(release) {
			release()
		}
	}()
	// After cleanup (deferred below), which settles the container's state.
	defer func() { err = m.failure(ctx, err) }()
	if req.Live && req.Memory == api.MemoryAuto {
		req.Memory = d.autoMemoryMode(name)
		m.req = req
		// Pre-copy is a trial: its first passes measure whether it beats
		// post-copy (precopyVerdict).
		m.autoTrial = req.Memory == api.MemoryPrecopy
	}
	m.timing.Mode = "cold"
	if req.Live {
		m.timing.Mode = "live/" + req.Memory
	}
	if req.Copy {
		m.timing.Mode = "copy"
	}
	start := time.Now()
	defer m.cleanup()

	wasRunning := inst.live() != nil
	m.journal = state.Migration{Instance: name, Role: state.MigrationSource, Peer: req.TargetFingerprint, Name: req.Name,
		Live: req.Live, Copy: req.Copy, Start: wasRunning && !req.Copy, WasRunning: wasRunning && !req.Live && !req.Copy,
		Phase: state.PhaseTransfer, Started: start}
	if err := m.note(); err != nil {
		return err
	}
	if wasRunning && !req.Live && !req.Copy {
		// Cold move: stop first; a failure starts it again here. The
		// downtime runs from here until it runs on the target.
		op.SetMetadata(map[string]any{"phase": "stop"})
		m.phase = movePhaseStop
		m.downSince = time.Now()
		if err := d.stopLocked(ctx, inst, false, d.cfg.StopTimeout); err != nil {
			return err
		}
		m.timing.SuspendDump = migration.Seconds(time.Since(m.downSince))
		defer func() {
			if err != nil && !m.committed && !m.unsettled { // unsettled: settleOutgoing decides
				m.restartErr = d.startLocked(context.WithoutCancel(ctx), inst)
				m.restarted = m.restartErr == nil
			}
		}()
	}
	var snaps []state.Snapshot
	if !req.InstanceOnly {
		if snaps, err = d.state.ListSnapshots(name); err != nil {
			return err
		}
	}
	if err := m.connect(ctx, peer, wasRunning, len(snaps)); err != nil {
		return err
	}
	defer m.sess.Close()
	defer func() {
		if err != nil && !m.committed {
			m.sess.SendError(err)
		}
	}()
	m.phase = movePhaseSnapshots
	if err = m.sendSnapshots(ctx, snaps); err != nil {
		return err
	}
	if req.Live {
		err = m.live(ctx)
	} else {
		err = m.cold(ctx, req.Copy && wasRunning)
	}
	if err != nil {
		return err
	}
	m.timing.Total = migration.Seconds(time.Since(start))
	op.SetMetadata(map[string]any{"phase": "done", "timing": m.timing})
	return nil
}

// connect opens the session to the target and says hello; the target
// accepts (it has reserved the name and address) or refuses. On failure
// nothing stays open.
func (m *migrationSource) connect(ctx context.Context, peer state.Peer, wasRunning bool, snapshots int) (err error) {
	d, req := m.d, m.req
	m.op.SetMetadata(map[string]any{"phase": "connect", "target": peer.Name})
	m.phase = movePhaseConnect
	conn, err := d.peerAPIFor(peer).Upgrade(ctx, "/1.0/migration", migration.UpgradeProtocol)
	if err != nil {
		return fmt.Errorf("connect to %s: %w", peer.Name, err)
	}
	sess, err := migration.Client(conn)
	if err != nil {
		conn.Close()
		return err
	}
	defer func() {
		if err != nil {
			sess.Close()
		}
	}()
	wire := toWire(m.inst.record())
	wire.Name = req.Name
	hello := migration.Hello{Version: migration.Version, Source: d.cfg.Name, Instance: wire, SourceName: m.name, Live: req.Live,
		Memory: req.Memory, Start: wasRunning && !req.Copy, KeepAddress: !req.Copy, TransferFormat: d.storage.Info().TransferFormat,
		Snapshots: snapshots, VMDiskSize: m.vmDiskSize}
	// A post-copy move gets a page link, and so does auto's pre-copy
	// trial, which may fall back to post-copy after its passes.
	// A VM's migration stream gets it too (migrate_vm_source.go).
	if req.Live && (req.Memory == api.MemoryLazy || m.autoTrial || m.vmDiskSize > 0) {
		hello.PageToken = migration.NewPageToken()
	}
	if err := sess.Send(hello); err != nil {
		return err
	}
	if _, err := sess.Expect(ctx, migration.MsgAccepted); err != nil {
		return fmt.Errorf("%s refused the migration: %w", peer.Name, err)
	}
	m.sess = sess
	if hello.PageToken != "" {
		m.dialPageLink(ctx, peer, hello.PageToken)
	}
	return nil
}

// cold sends the stopped container's disk (or, for a copy of a running
// container, a snapshot taken in a short freeze) and lets the target start
// it; a move then deletes the source.
func (m *migrationSource) cold(ctx context.Context, freeze bool) error {
	t0 := time.Now()
	m.phase = movePhaseDisk
	var sent int64
	send := func() (err error) {
		sent, err = m.sendDisk(ctx, true)
		return err
	}
	if freeze {
		// A copy of a running instance: its disk as of one instant.
		if err := m.whilePaused(ctx, send); err != nil {
			return err
		}
	} else if err := send(); err != nil {
		return err
	}
	m.timing.CopyAfterSuspend, m.timing.AfterSuspendBytes = migration.Seconds(time.Since(t0)), sent
	m.phase = movePhaseStartTarget
	if err := m.startOnTarget(true); err != nil {
		return err
	}
	// A lost connection is answered by asking the target, as after a
	// live restore: the instance may run there already.
	took, _, err := m.awaitResumed(ctx)
	if err != nil {
		return err
	}
	m.timing.UndumpResume = took
	if !m.downSince.IsZero() {
		m.timing.FrozenTotal = migration.Seconds(time.Since(m.downSince))
	}
	return m.commit(ctx)
}

// live moves a running container: disk pre-copy while it runs, then a
// short freeze for the checkpoint and the last disk increment, restore on
// the target, and (post-copy) memory pulled after the resume.
func (m *migrationSource) live(ctx context.Context) error {
	d := m.d
	t0 := time.Now()
	m.phase = movePhasePrecopy
	if err := m.precopy(ctx); err != nil {
		return err
	}

	// A pre-copy move here may still be loading memory (the checkpoint
	// would wait for it anyway): its lazy-pages daemon writes its log in
	// the work directory.
	if err := d.awaitMemoryLoad(ctx, m.name); err != nil {
		return err
	}
	dir, err := d.newMigrationDir(m.name)
	if err != nil {
		return err
	}
	images, work := filepath.Join(dir, "images"), d.cfg.migrateWorkDir(m.name)
	_ = os.RemoveAll(work)
	defer d.dropMigrationDir(m.name, dir)
	ck, err := m.prepareMemory(ctx, dir, images, work)
	if err != nil {
		return err
	}
	// A dump that never ran is closed; a lazy one's page server is hung up
	// on (CRIU then lets go of the processes); the container stays frozen
	// until cleanup thaws it.
	defer func() {
		if !m.committed {
			ck.Abort()
		}
	}()
	m.timing.Precopy = migration.Seconds(time.Since(t0))
	lazy := m.req.Memory == api.MemoryLazy
	if lazy {
		// The page link is up before the freeze (the target's restore
		// claims it), or the move fails with the container running.
		if err := m.awaitPageLink(ctx); err != nil {
			return err
		}
		// Recorded before the freeze: a daemon that dies from here on
		// hangs up on the page server by dying (its end of the socket
		// closes), and at its next start waits until CRIU has let go of
		// the processes.
		m.journal.PageServer = runtime.PageServerSocket
		if err := m.note(); err != nil {
			return err
		}
	}

	// vessel's network lock, taken just before the freeze: no packet
	// reaches the sockets while CRIU dumps them (CRIU's own lock is off,
	// see criuOptions), and none is left half-served by a process frozen
	// between reading a request and answering it (the answer would leave
	// the target before its link is up, and wait a second for ARP).
	if err := d.net.SetHostLink(m.name, false); err != nil {
		return err
	}
	m.linkDown = true
	// Frozen from here until the target resumes.
	freezeAt := time.Now()
	m.phase = movePhaseFreeze
	if err := m.fz.freeze(ctx); err != nil {
		return err
	}
	// The last disk increment is snapshotted at once and sent while CRIU
	// dumps the processes: both happen frozen, neither waits for the other.
	type diskResult struct {
		n   int64
		d   time.Duration
		err error
	}
	diskDone := make(chan diskResult, 1)
	go func() {
		t := time.Now()
		n, err := m.sendDisk(ctx, true)
		diskDone <- diskResult{n, time.Since(t), err}
	}()
	// The journal's "restoring" is written (a bbolt commit: two fsyncs,
	// 1-20 ms on a busy disk) while CRIU dumps, not after the images: it
	// only makes a daemon that dies from here on ask the target before
	// it resumes the container, and "start" goes after it.
	noted := make(chan error, 1)
	go func() {
		t := time.Now()
		err := m.noteRestoring()
		d.log.Debug("migration source: journal restoring", "name", m.name, "took", time.Since(t))
		noted <- err
	}()
	tck := time.Now()
	m.phase = movePhaseMemory
	if lazy {
		m.phase = movePhaseCheckpoint
	}
	defer func() {
		// An early return (a failed dump or disk) waits for the journal
		// write: cleanup removes the journal after it.
		if noted != nil {
			if err := <-noted; err != nil {
				d.log.Warn("migration journal", "name", m.name, "err", err) // the move's own error is reported
			}
		}
	}()
	err = ck.Run()
	d.log.Debug("migration source: checkpoint", "name", m.name, "took", time.Since(tck), "since freeze", time.Since(freezeAt))
	disk := <-diskDone
	d.log.Debug("migration source: final disk", "name", m.name, "took", disk.d)
	if err != nil {
		// The disk's step may have read why the target ended it.
		return withPeerReport(err, disk.err)
	}
	d.crashAt(faultSourceFrozen)
	m.timing.SuspendDump = migration.Seconds(time.Since(freezeAt))
	if disk.err != nil {
		m.phase = movePhaseFinalDisk
		return disk.err
	}
	m.timing.CopyAfterSuspend, m.timing.AfterSuspendBytes = migration.Seconds(disk.d), disk.n

	t2 := time.Now()
	m.phase = movePhaseImages
	if lazy {
		// The target starts its lazy-pages daemon as soon as the images
		// are in (before "start"): the page server is there for it.
		go m.servePages(ctx, ck.PageConn())
	}
	n, err := m.sendImages(ctx, images, ck.Pages())
	nerr := <-noted
	noted = nil
	if err == nil {
		err = nerr
	}
	if err != nil {
		return err
	}
	m.timing.CopyDump, m.timing.DumpBytes = migration.Seconds(time.Since(t2)), n+m.pageBytes.Load()
	d.log.Debug("migration source: images sent", "name", m.name, "bytes", n, "took", time.Since(t2))

	t3 := time.Now()
	m.op.SetMetadata(map[string]any{"phase": "restore"})
	m.phase = movePhaseRestore
	if err := m.startOnTarget(false); err != nil {
		return err
	}
	_, resumedAgo, err := m.awaitResumed(ctx)
	if err != nil {
		return err
	}
	// The freeze ended as the tasks resumed on the target; what the
	// target did after (the runtime's state, its journal) and the
	// answer's trip are ResumeReport.
	m.timing.UndumpResume = max(migration.Seconds(time.Since(t3))-resumedAgo, 0)
	m.timing.FrozenTotal = max(migration.Seconds(time.Since(freezeAt))-resumedAgo, 0)
	m.timing.ResumeReport = resumedAgo
	m.op.SetMetadata(map[string]any{"phase": "resumed", "frozen_s": m.timing.FrozenTotal})
	if lazy {
		return m.postCopy(ctx, ck)
	}
	return m.commit(ctx)
}

// postCopy waits while the target, which runs the container now, pulls
// the memory pages from the dump's page server, then commits.
func (m *migrationSource) postCopy(ctx context.Context, ck *runtime.Checkpoint) error {
	t4 := time.Now()
	m.op.SetMetadata(map[string]any{"phase": "post-copy"})
	m.phase = movePhasePostcopy
	msg, err := m.sess.Expect(ctx, migration.MsgPagesDone)
	if werr := ck.Wait(); err == nil && werr != nil {
		err = werr
	}
	m.timing.Postcopy, m.timing.PostcopyBytes = migration.Seconds(time.Since(t4)), msg.Bytes
	if err != nil {
		m.d.log.Error("POST-COPY FAILED after the container resumed on the target: it may miss memory pages",
			"name", m.name, "err", err)
		// The target owns the container now; finish the source side.
		_ = m.commit(context.WithoutCancel(ctx))
		return fmt.Errorf("post-copy memory transfer failed: %w", err)
	}
	return m.commit(ctx)
}

// noteRestoring records in the journal that the target may be told to
// start the container.
func (m *migrationSource) noteRestoring() error {
	m.journal.Phase = state.PhaseRestoring
	return m.note()
}

// startOnTarget tells the target to start the container (note: record it
// in the journal first; a live move did already, while the images
// travelled): from here on, whether it runs there can only be known by
// asking.
func (m *migrationSource) startOnTarget(note bool) error {
	if note {
		if err := m.noteRestoring(); err != nil {
			return err
		}
	}
	if err := m.sess.Send(migration.Message{Type: migration.MsgStart}); err != nil {
		return err
	}
	m.d.crashAt(faultSourceStarted)
	return nil
}
