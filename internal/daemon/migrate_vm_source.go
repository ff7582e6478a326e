package daemon

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/vesselhost/vessel/internal/api"
	"github.com/vesselhost/vessel/internal/migration"
	"github.com/vesselhost/vessel/internal/operations"
	"github.com/vesselhost/vessel/internal/qemu"
	"github.com/vesselhost/vessel/internal/state"
)

// A VM's live move, source side (migrateOutVM), over the same session
// as a container's (Hello, "accepted", "start", "resumed", "commit"):
//
//  1. disk: QEMU's drive-mirror of the root disk to the target QEMU's NBD
//     export, through a unix socket here that vesseld relays as vm-disk
//     streams; once READY the mirror is in write-blocking mode (every
//     guest write completes on both disks), so it stays converged;
//  2. RAM: QEMU's migration (downtime-limit 50 ms, no bandwidth cap) to a
//     second relayed socket (vm-state); --memory=lazy switches to
//     post-copy at once, auto when the guest dirties memory faster than
//     the link moves it (vmPostcopyVerdict);
//  3. switch-over: QEMU stops the VM for its last pass (its "downtime");
//     the mirror, now idle, is cancelled (it completes without pivoting:
//     the source keeps its disk); "start": the target lets its copy run;
//  4. commit: the source QEMU is killed and its disk deleted.
//
// Any failure before the target runs it cancels the migration and the
// mirror and lets the VM run on here (cont if QEMU had stopped it).

// faultVMSourceDiskMirror fires on the source once the disk mirror has
// started ("fail", "cut").
const faultVMSourceDiskMirror = "migrate.vm.source.disk-mirror"

// faultVMSourceWatch "fail" makes the source poll its migration's status
// only (as before it watched QEMU's MIGRATION events).
const faultVMSourceWatch = "migrate.vm.source.watch"

// movePhaseSwitchover is a VM move's phase between the end of QEMU's
// migration and the target's "resumed".
const movePhaseSwitchover = "switch-over"

// vmDowntimeLimit is the longest stop QEMU plans for a move's last pass.
const vmDowntimeLimit = 50 // ms

func (d *Daemon) migrateOutVM(ctx context.Context, op *operations.Operation, name string, peer state.Peer, req api.InstanceMigratePost) (err error) {
	inst, release, err := d.lock(ctx, name, actLiveMove, false)
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
	defer func() { err = m.failure(ctx, err) }()
	m.timing.Mode = "live/" + req.Memory
	m.timing.VM = &api.VMMoveTiming{}
	start := time.Now()
	defer m.cleanup()
	if inst.live() == nil {
		return errorf(ErrConflict, "%q is not running", name)
	}
	fi, err := os.Stat(d.vmDisk(name))
	if err != nil {
		return err
	}
	m.vmDiskSize = fi.Size()
	var snaps []state.Snapshot
	if !req.InstanceOnly {
		if snaps, err = d.state.ListSnapshots(name); err != nil {
			return err
		}
	}
	m.journal = state.Migration{Instance: name, Role: state.MigrationSource, Peer: req.TargetFingerprint, Name: req.Name,
		Live: true, Start: true, Phase: state.PhaseTransfer, Started: start}
	if err := m.note(); err != nil {
		return err
	}
	if err := m.connect(ctx, peer, true, len(snaps)); err != nil {
		return err
	}
	defer m.sess.Close()
	defer func() {
		if err != nil && !m.committed {
			m.sess.SendError(err)
		}
	}()
	// The snapshots first, as a container's (they do not change).
	m.phase = movePhaseSnapshots
	if err := m.sendSnapshots(ctx, snaps); err != nil {
		return err
	}
	if err := m.liveVM(ctx); err != nil {
		return err
	}
	m.timing.Total = migration.Seconds(time.Since(start))
	op.SetMetadata(map[string]any{"phase": "done", "timing": m.timing})
	return nil
}

// liveVM mirrors the disk, migrates the RAM, switches over and commits.
func (m *migrationSource) liveVM(ctx context.Context) (err error) {
	d, vt := m.d, m.timing.VM
	dir, err := d.newMigrationDir(m.name)
	if err != nil {
		return err
	}
	defer d.dropMigrationDir(m.name, dir)
	diskSock, stateSock := filepath.Join(dir, "disk.sock"), filepath.Join(dir, "state.sock")
	stopRelay, err := m.relayVM(diskSock)
	if err != nil {
		return err
	}
	defer stopRelay()
	stopState, err := m.relayVMState(ctx, stateSock)
	if err != nil {
		return err
	}
	defer stopState()
	mon, err := qemu.Connect(ctx, qemu.Config{RunDir: d.cfg.vmRunDir(m.name)}.QMPSocket())
	if err != nil {
		return err
	}
	defer mon.Close()
	defer func() {
		if err != nil && !m.committed && !m.unsettled {
			m.abortVM(mon)
		}
	}()

	t0 := time.Now()
	m.phase = movePhasePrecopy
	m.op.SetMetadata(map[string]any{"phase": "disk mirror"})
	if err := mon.DriveMirror(ctx, qemu.MirrorOptions{Target: qemu.NBDUnixURI(diskSock, qemu.NBDExport), Sync: "full"}); err != nil {
		return fmt.Errorf("disk mirror: %w", err)
	}
	switch d.fault(faultVMSourceDiskMirror) {
	case "cut":
		m.sess.Close()
		return injected(faultVMSourceDiskMirror)
	case "fail":
		return injected(faultVMSourceDiskMirror)
	}
	job, err := mon.WaitJobReady(ctx, qemu.MirrorJobID, 50*time.Millisecond, func(j qemu.BlockJob) {
		m.op.SetMetadata(map[string]any{"phase": "disk mirror", "done": j.Offset, "total": j.Len})
	})
	if err != nil {
		return fmt.Errorf("disk mirror: %w", err)
	}
	vt.DiskMirror, vt.DiskBytes = migration.Seconds(time.Since(t0)), job.Len
	d.log.Debug("migration source: disk mirror ready", "name", m.name, "bytes", job.Len, "took", time.Since(t0))

	m.phase = movePhaseMemoryPrecopy
	m.op.SetMetadata(map[string]any{"phase": "memory pre-copy"})
	if err := mon.SetMigrateCapabilities(ctx, vmMigrateCapabilities(m.req.Memory)); err != nil {
		return err
	}
	if err := mon.SetMigrateParameters(ctx, qemu.MigrateParameters{DowntimeLimitMs: vmDowntimeLimit}); err != nil {
		return err
	}
	// The end of the last pass is seen as QEMU reports it: the VM is
	// stopped from its start (a poll's wait was frozen time).
	if d.fault(faultVMSourceWatch) != "fail" {
		if err := mon.WatchMigration(ctx); err != nil {
			return err
		}
	}
	t1 := time.Now()
	if err := mon.Migrate(ctx, "unix:"+stateSock); err != nil {
		return err
	}
	postcopy := false
	var switchErr error
	st, err := mon.WaitMigration(ctx, 20*time.Millisecond, func(s qemu.MigrationStatus) bool {
		if s.Status == "postcopy-active" {
			return true
		}
		if s.RAM != nil {
			m.op.SetMetadata(map[string]any{"phase": "memory pre-copy", "done": s.RAM.Transferred, "remaining": s.RAM.Remaining})
		}
		if postcopy || s.Status != "active" {
			return false
		}
		why := vmPostcopyVerdict(m.req.Memory, s)
		if why == "" {
			return false
		}
		postcopy, vt.PostcopyReason = true, why
		if s.RAM != nil {
			vt.DirtyPagesRate, vt.LinkMbps = s.RAM.DirtyPagesRate, s.RAM.Mbps
		}
		switchErr = mon.MigrateStartPostcopy(ctx)
		return switchErr != nil
	})
	if err == nil {
		err = switchErr
	}
	if err != nil {
		return fmt.Errorf("memory: %w", err)
	}
	// The switch-over counts from QEMU's end of the migration (its
	// total-time after the migrate command), not from when it was seen:
	// the VM is stopped from then on.
	switchAt := time.Now()
	if done := t1.Add(time.Duration(st.TotalTime) * time.Millisecond); st.TotalTime > 0 && done.Before(switchAt) {
		switchAt = done
	}
	vt.RAMPrecopy = migration.Seconds(switchAt.Sub(t1) - time.Duration(st.Downtime)*time.Millisecond)
	if st.RAM != nil {
		vt.RAMIterations, vt.RAMBytes = st.RAM.DirtySyncCount, st.RAM.Transferred
	}
	vt.DowntimeQEMU = float64(st.Downtime) / 1000
	d.log.Debug("migration source: memory", "name", m.name, "status", st.Status, "downtime_ms", st.Downtime, "took", switchAt.Sub(t1), "seen_after", time.Since(switchAt))

	// The VM is stopped here: the mirror has nothing more to copy. The
	// target is told at once (it waits for its QEMU to have loaded the
	// device state meanwhile), and lets the VM run once the mirror has
	// completed (its last flush included) and it hears so.
	m.phase = movePhaseSwitchover
	if err := m.startOnTarget(true); err != nil {
		return err
	}
	if err := mon.BlockJobCancel(ctx, qemu.MirrorJobID, false); err != nil {
		return fmt.Errorf("complete the disk mirror: %w", err)
	}
	if err := mon.WaitJobGone(ctx, qemu.MirrorJobID, 2*time.Millisecond); err != nil {
		return fmt.Errorf("complete the disk mirror: %w", err)
	}
	d.log.Debug("migration source: disk mirror completed", "name", m.name, "took", time.Since(switchAt))
	if err := m.sess.Send(migration.Message{Type: migration.MsgVMDiskDone}); err != nil {
		return err
	}
	m.phase = movePhaseRestore
	_, resumedAgo, err := m.awaitResumed(ctx)
	if err != nil {
		return err
	}
	// Until the target let it run (its bookkeeping after is ResumeReport).
	vt.Switchover = max(migration.Seconds(time.Since(switchAt))-resumedAgo, 0)
	m.timing.ResumeReport = resumedAgo
	m.timing.Precopy = vt.DiskMirror + vt.RAMPrecopy
	m.timing.PrecopyBytes, m.timing.PrecopyIterations = vt.DiskBytes, int(vt.RAMIterations)
	m.timing.SuspendDump, m.timing.DumpBytes = vt.DowntimeQEMU, vt.RAMBytes
	m.timing.FrozenTotal = vt.DowntimeQEMU + vt.Switchover
	m.op.SetMetadata(map[string]any{"phase": "resumed", "frozen_s": m.timing.FrozenTotal})
	if postcopy {
		t2 := time.Now()
		m.phase = movePhasePostcopy
		m.op.SetMetadata(map[string]any{"phase": "post-copy"})
		st, err := mon.WaitMigration(ctx, 50*time.Millisecond, nil)
		vt.Postcopy = migration.Seconds(time.Since(t2))
		if st.RAM != nil {
			vt.PostcopyBytes = st.RAM.PostcopyBytes
		}
		m.timing.Postcopy, m.timing.PostcopyBytes = vt.Postcopy, vt.PostcopyBytes
		if err != nil {
			d.log.Error("POST-COPY FAILED after the VM resumed on the target: it may miss memory pages", "name", m.name, "err", err)
			_ = m.commit(context.WithoutCancel(ctx))
			return fmt.Errorf("post-copy memory transfer failed: %w", err)
		}
	}
	return m.commit(ctx)
}

// vmPostcopyVerdict says why a move in memory mode should switch to
// post-copy now, given QEMU's migration status ("": not now). lazy
// switches once the first pass has begun; auto once a full pass has run
// (dirty-sync-count ≥ 2) and the guest dirties memory faster than the
// link moves it, so pre-copy would not converge within the downtime limit;
// copy never does.
func vmPostcopyVerdict(memory string, s qemu.MigrationStatus) string {
	switch memory {
	case api.MemoryLazy:
		return "--memory=lazy"
	case api.MemoryAuto:
	default:
		return ""
	}
	r := s.RAM
	if r == nil || r.DirtySyncCount < 2 || r.Mbps <= 0 {
		return ""
	}
	page := r.PageSize
	if page == 0 {
		page = 4096
	}
	dirtyMbps := float64(r.DirtyPagesRate*page*8) / 1e6
	if dirtyMbps <= r.Mbps {
		return ""
	}
	return fmt.Sprintf("the guest dirties %.0f Mbit/s, the link moves %.0f Mbit/s", dirtyMbps, r.Mbps)
}

// abortVM undoes a failed move's QEMU side: the migration and the mirror
// cancelled, the VM running again (QEMU stops it for the last pass).
func (m *migrationSource) abortVM(mon *qemu.Monitor) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	m.thawErr = m.d.cancelVMMove(ctx, m.name, mon)
	if m.thawErr != nil {
		m.d.log.Error("resume the VM after a failed move", "name", m.name, "err", m.thawErr)
	}
}

// cancelVMMove cancels a VM's outgoing migration and disk mirror, if
// any, and lets the VM run again (QEMU stops it for the last pass).
func (d *Daemon) cancelVMMove(ctx context.Context, name string, mon *qemu.Monitor) error {
	if s, err := mon.QueryMigrate(ctx); err == nil && !s.Done() && s.Status != "none" {
		d.undo("cancel the migration", name, mon.MigrateCancel(ctx))
		_, _ = mon.WaitMigration(ctx, 10*time.Millisecond, nil) // cancelled: an error by design
	}
	if _, ok, err := mon.QueryBlockJob(ctx, qemu.MirrorJobID); err == nil && ok {
		d.undo("cancel the disk mirror", name, mon.BlockJobCancel(ctx, qemu.MirrorJobID, true))
		d.undo("cancel the disk mirror", name, mon.WaitJobGone(ctx, qemu.MirrorJobID, 10*time.Millisecond))
	}
	s, err := mon.QueryStatus(ctx)
	if err != nil {
		return err
	}
	if s.Running {
		return nil
	}
	return mon.Cont(ctx)
}

// resumeVM lets a VM run again whose move was interrupted (settle).
func (d *Daemon) resumeVM(ctx context.Context, name string) {
	mctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	mon, err := qemu.Connect(mctx, qemu.Config{RunDir: d.cfg.vmRunDir(name)}.QMPSocket())
	if err == nil {
		err = d.cancelVMMove(mctx, name, mon)
		mon.Close()
	}
	if err != nil {
		d.log.Error("resume the VM after an interrupted move", "name", name, "err", err)
	}
}

// relayVM listens on a unix socket for the source QEMU's NBD
// connections (the disk mirror) and relays each over a new session
// stream (vm-disk). The returned function closes the listener.
func (m *migrationSource) relayVM(path string) (func(), error) {
	_ = os.Remove(path)
	l, err := net.Listen("unix", path)
	if err != nil {
		return nil, err
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				if !errors.Is(err, net.ErrClosed) {
					m.d.log.Warn("migration: relay accept", "name", m.name, "err", err)
				}
				return
			}
			st, err := m.sess.OpenStream(migration.StreamHeader{Kind: migration.StreamVMDisk})
			if err != nil {
				c.Close()
				continue
			}
			go func() {
				defer c.Close()
				defer st.Close()
				migration.Relay(c, st)
			}()
		}
	}()
	return func() { l.Close(); wg.Wait() }, nil
}

// relayVMState listens on a unix socket for the source QEMU's migration
// stream and relays it over the page link, a TLS connection of its own:
// the RAM does not queue behind (or hold up) the session's control
// messages, and shallow buffers (vmRelayBuf each way, no ring) keep
// QEMU's own view of the link's speed, from which it plans the last
// pass's downtime, close to what reaches the target.
func (m *migrationSource) relayVMState(ctx context.Context, path string) (func(), error) {
	if err := m.awaitPageLink(ctx); err != nil {
		return nil, err
	}
	_ = os.Remove(path)
	l, err := net.Listen("unix", path)
	if err != nil {
		return nil, err
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		c, err := l.Accept()
		l.Close() // one migration stream
		if err != nil {
			return
		}
		defer c.Close()
		defer m.link.conn.Close()
		relayShallow(c, m.link.conn)
	}()
	return func() { l.Close(); <-done }, nil
}

// vmRelayBuf is a VM migration stream's relay buffer, each way.
const vmRelayBuf = 128 << 10

// relayShallow copies both ways between a and b until both directions
// end, through one vmRelayBuf each way (a side with a Flush method, the
// source's page link, is flushed after each write); each side's write
// half closes when its source ends.
func relayShallow(a, b net.Conn) {
	var wg sync.WaitGroup
	one := func(dst, src net.Conn) {
		defer wg.Done()
		fl, _ := dst.(interface{ Flush() error })
		buf := make([]byte, vmRelayBuf)
		for {
			n, err := src.Read(buf)
			if n > 0 {
				if _, werr := dst.Write(buf[:n]); werr != nil {
					break
				}
				if fl != nil && fl.Flush() != nil {
					break
				}
			}
			if err != nil {
				break
			}
		}
		if cw, ok := dst.(interface{ CloseWrite() error }); ok {
			_ = cw.CloseWrite()
		} else {
			dst.Close()
		}
	}
	wg.Add(2)
	go one(a, b)
	go one(b, a)
	wg.Wait()
}
