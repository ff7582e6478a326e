package daemon

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/vesselhost/vessel/internal/api"
	"github.com/vesselhost/vessel/internal/migration"
	"github.com/vesselhost/vessel/internal/runtime"
)

// Memory pre-copy (--memory=precopy): CRIU's pre-dump passes while the
// container runs (runtime.Checkpoint.PreDump: the first holds all memory,
// each later one the pages written since the one before, tracked by CRIU
// through userfaultfd write protection), each pass's images sent to the
// target while the next pass runs, until the passes stop shrinking; then
// the freeze, whose dump holds only the last pass's writes (its parent is
// the last pass). The target restores from the chain: nothing is left on
// the source once the container runs there.

const (
	// precopyMemMaxPasses bounds the memory passes of a move.
	precopyMemMaxPasses = 8
	// precopyMemDoneBytes: a pass this small ends the passes. The final
	// dump holds what the container wrote from that pass's snapshot to
	// the freeze (the pass's page read and its transfer), about half of
	// the pass at 64 MiB/s here: a few MiB, 10-15 ms of the freeze.
	precopyMemDoneBytes = 8 << 20
	// precopyMemSettledBytes: passes that stopped shrinking end only
	// above this size. Below it the passes' sizes swing (the container
	// catches up on the writes a pass's freeze held back) and another
	// pass often comes out small, which the final dump then follows; a
	// pass costs the move ~0.1-0.7 s and a pre-dump's short stop.
	precopyMemSettledBytes = 32 << 20
)

// memoryPassesDone says whether the memory passes end after pass i
// (0-based) wrote n bytes, the pass before prev (-1: none): the pass is
// small, the pass limit is reached, or the passes stopped shrinking on a
// dirty set that is not small (a pass over 3/4 of the one before and over
// precopyMemSettledBytes: the dirty set has converged on what the
// container writes in one pass, and another pass gains little). Pass 2 is
// not compared with pass 1: each pass starts once the one before last has
// reached the target, so pass 2 holds what the container wrote while all
// of its memory (pass 0) crossed the link, pass 1 only what it wrote
// during pass 0's dump; from pass 3 on the intervals are alike.
func memoryPassesDone(i int, n, prev int64) bool {
	switch {
	case n < precopyMemDoneBytes:
		return true
	case i+1 >= precopyMemMaxPasses:
		return true
	case i >= 3 && prev >= 0 && n > prev*3/4 && n > precopyMemSettledBytes:
		return true
	}
	return false
}

// finalDumpSmall says whether a final dump frozen now would hold less
// than precopyMemDoneBytes, for a container writing at rate bytes/s (the
// highest rate a pass measured: a pass taken while the container waited
// for the CPU says too little) whose last pass started since ago. A pass
// starts as the one before ends, while that one is sent: a pass after a
// big one is small because it is quick, and the big one's transfer, which
// follows before the freeze, is not in it (2 GiB at 64 MiB/s: passes of
// 2049, 64, 126 and 2 MiB, then a final dump of 34 MiB).
func finalDumpSmall(rate float64, since time.Duration) bool {
	return rate*since.Seconds() < precopyMemDoneBytes
}

// passDir is the directory of memory pass i, beside the images (the
// checkpoint's parent links name it relative to them: ../pre-N).
func passDir(dir string, i int) string {
	return filepath.Join(dir, fmt.Sprintf("pre-%d", i))
}

// memoryPasses runs the pre-copy memory passes of ck (a prepared copy-mode
// checkpoint whose images go to dir/images), each pass sent to the target
// while the next runs, and returns once the last one is on the target.
// keep, if set, is asked after each pass whether to go on at all
// (--memory=auto); a false answer ends the passes with errPrecopyDropped.
func (m *migrationSource) memoryPasses(ctx context.Context, ck *runtime.Checkpoint, dir string,
	keep func(passes []api.MemoryPass) (bool, string)) error {
	type sent struct {
		took time.Duration
		err  error
	}
	var sending chan sent
	// wait collects the pass in flight: its send time goes in its row.
	wait := func() error {
		if sending == nil {
			return nil
		}
		s := <-sending
		sending = nil
		m.timing.MemoryPasses[len(m.timing.MemoryPasses)-1].SendSeconds = migration.Seconds(s.took)
		return s.err
	}
	defer func() { _ = wait() }()
	prev := int64(-1)
	var prevStart time.Time
	rate := 0.0 // the highest write rate a pass measured, bytes/s
	for i := 0; ; i++ {
		m.op.SetMetadata(map[string]any{"phase": "memory pre-copy", "iteration": i})
		pd := passDir(dir, i)
		t := time.Now()
		n, err := ck.PreDump(pd)
		took := time.Since(t)
		if i >= 1 {
			// Pass i holds what was written since pass i-1's snapshot.
			rate = max(rate, float64(n)/t.Sub(prevStart).Seconds())
		}
		// The previous pass went to the target meanwhile.
		if serr := wait(); serr != nil {
			return serr
		}
		if err != nil {
			return err
		}
		m.timing.MemoryPasses = append(m.timing.MemoryPasses, api.MemoryPass{
			Pages: n / int64(pageSize), Bytes: n, Seconds: migration.Seconds(took)})
		m.d.log.Debug("migration source: memory pass", "name", m.name, "pass", i, "bytes", n, "took", took)
		sending = make(chan sent, 1)
		go func(i int) {
			t := time.Now()
			err := m.sendMemoryPass(ctx, i, pd)
			sending <- sent{time.Since(t), err}
		}(i)
		done := memoryPassesDone(i, n, prev)
		if keep != nil && (done || i >= 1) {
			// Measured enough (or no more passes come): the caller's verdict.
			if err := wait(); err != nil {
				return err
			}
			ok, why := keep(m.timing.MemoryPasses)
			m.timing.AutoChoice = why
			if !ok {
				return errPrecopyDropped
			}
			keep = nil
		}
		if done && n < precopyMemDoneBytes && i >= 1 && i+1 < precopyMemMaxPasses {
			// Small, but the final dump holds what is written from this
			// pass's snapshot until the freeze, and the pass began
			// while the one before was still on its way to the target:
			// once it is there, is that still small?
			if err := wait(); err != nil {
				return err
			}
			if !finalDumpSmall(rate, time.Since(t)) {
				m.d.log.Debug("migration source: one more memory pass", "name", m.name, "pass", i,
					"rate", int64(rate), "since", time.Since(t))
				done = false
				// The next pass holds the wait just done: bigger, but
				// not a sign that the passes stopped shrinking.
				n = -1
			}
		}
		if done {
			break
		}
		prev, prevStart = n, t
	}
	// The last pass must be on the target before the freeze.
	return wait()
}

// pageSize is the size of the pages CRIU counts.
const pageSize = 4096

// errPrecopyDropped ends the memory passes of --memory=auto when they
// would not beat post-copy.
var errPrecopyDropped = errors.New("memory pre-copy dropped")

// sendMemoryPass sends the images of memory pass i (its directory, its
// parent link left to the target) and waits until the target has them.
func (m *migrationSource) sendMemoryPass(ctx context.Context, i int, dir string) error {
	if err := m.sess.Send(migration.Message{Type: migration.MsgMemoryPass, Iteration: i}); err != nil {
		return err
	}
	st, err := m.sess.OpenStream(migration.StreamHeader{Kind: migration.StreamImages})
	if err != nil {
		return err
	}
	n, err := migration.SendDir(st, dir)
	st.Close()
	if err != nil {
		select {
		case <-m.sess.Closed():
			return fmt.Errorf("connection to the target lost while sending memory pass %d: %w", i, err)
		default:
		}
		return fmt.Errorf("send memory pass %d: %w", i, err)
	}
	if _, err := m.sess.Expect(ctx, migration.MsgMemoryOK); err != nil {
		return fmt.Errorf("target could not store memory pass %d (%d bytes): %w", i, n, err)
	}
	return nil
}

// prepareMemory prepares the move's checkpoint (everything CRIU can do
// while the container runs) and, with --memory=precopy, runs the memory
// passes. When --memory=auto's trial of pre-copy finds it would not beat
// post-copy, the passes are dropped: the target is told to restore
// lazily, and a lazy checkpoint replaces the pre-copy one.
func (m *migrationSource) prepareMemory(ctx context.Context, dir, images, work string) (*runtime.Checkpoint, error) {
	m.op.SetMetadata(map[string]any{"phase": "checkpoint"})
	m.phase = movePhaseDumpPrepare
	ck, err := m.newCheckpoint(ctx, images, work)
	if err != nil || m.req.Memory != api.MemoryPrecopy {
		return ck, err
	}
	m.phase = movePhaseMemoryPrecopy
	var keep func([]api.MemoryPass) (bool, string)
	if m.autoTrial {
		keep = func(p []api.MemoryPass) (bool, string) {
			if m.d.fault(faultPrecopyVerdict) == "fail" {
				return false, "post-copy: forced (fault " + faultPrecopyVerdict + ")"
			}
			return precopyVerdict(p)
		}
	}
	err = m.memoryPasses(ctx, ck, dir, keep)
	if err == nil {
		return ck, nil
	}
	ck.Abort()
	if !errors.Is(err, errPrecopyDropped) {
		return nil, err
	}
	m.phase = movePhaseDumpPrepare
	m.d.log.Info("memory mode auto: pre-copy dropped for post-copy", "name", m.name, "why", m.timing.AutoChoice)
	if err := m.sess.Send(migration.Message{Type: migration.MsgMemoryMode, Memory: api.MemoryLazy}); err != nil {
		return nil, err
	}
	if _, err := m.sess.Expect(ctx, migration.MsgMemoryOK); err != nil {
		return nil, fmt.Errorf("target could not switch to post-copy: %w", err)
	}
	for i := range m.timing.MemoryPasses {
		_ = os.RemoveAll(passDir(dir, i))
	}
	m.req.Memory = api.MemoryLazy
	m.timing.Mode = "live/" + api.MemoryLazy
	return m.newCheckpoint(ctx, images, work)
}

// newCheckpoint prepares the move's checkpoint in its memory mode.
func (m *migrationSource) newCheckpoint(ctx context.Context, images, work string) (*runtime.Checkpoint, error) {
	lazy := m.req.Memory == api.MemoryLazy
	o := runtime.CheckpointOptions{ImagePath: images, WorkPath: work, TCPEstablished: true, Lazy: lazy}
	if !lazy {
		// Copy and pre-copy: the (final) memory pages go to the target as
		// CRIU writes them, not to this host's disk first.
		o.Pages = &pageSink{m: m}
	}
	return m.d.newCheckpoint(ctx, m.name, o)
}
