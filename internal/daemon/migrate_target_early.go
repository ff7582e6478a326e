package daemon

import (
	"context"
	"os"
	"sync"
	"time"

	"github.com/vesselhost/vessel/internal/api"
	"github.com/vesselhost/vessel/internal/runtime"
)

// earlyStart is what a live move's target does as soon as the images are
// in, while the source writes its journal and says "start": the volume is
// made from the last disk pass (a btrfs snapshot, 1-4 ms), a lazy
// restore's lazy-pages daemon is started (~7 ms), the images are
// checked and shared with the container's root (0.4-2 ms), and the
// restore's root is made ready on the volume (prepareRoot, 1-3 ms). Both used to run after
// "start", inside the frozen window, one after the other. Neither is
// visible to anyone: a move that fails before "start" deletes the volume
// and kills the daemon (endEarly).
type earlyStart struct {
	done     chan struct{}
	lp       *runtime.LazyPages
	lpErr    error
	checkErr error // the images' check (Restorer.CheckImages)
	rootErr  error // prepareRoot's
	// used: start took the results over (and their cleanup with them).
	used bool
}

// beginStart starts the early work of a live move (nothing for a cold
// one, or before any disk).
func (m *migrationTarget) beginStart(ctx context.Context) {
	if m.early != nil || m.disk == nil || !m.hello.Live {
		return
	}
	committed := m.committed // by the last pass (commitDisk)
	e := &earlyStart{done: make(chan struct{})}
	m.early = e
	go func() {
		defer close(e.done)
		var wg sync.WaitGroup
		if m.lazyRestore() {
			wg.Go(func() { e.lp, e.lpErr = m.lazyPagesReady(ctx) })
		}
		if m.rst != nil {
			// Complete: the page files all came before the images
			// (waitPages), and nothing writes here any more but a
			// rename's nameImages, first.
			wg.Go(func() {
				if e.checkErr = m.nameImages(); e.checkErr == nil {
					e.checkErr = m.rst.CheckImages()
				}
			})
		}
		if !committed {
			_ = m.commitDisk(ctx) // start reads its error
		}
		if m.committed {
			e.rootErr = m.prepareRoot()
		}
		wg.Wait()
	}()
}

// prepareRoot makes the restore's root ready on the final volume: an
// unprivileged container's idmapped mount of it (launchPrepared's first
// step) and CRIU's bind of that (Restorer.PrepareRoot). Both hold the
// volume: releaseRoot undoes them before it can be deleted (a daemon
// that dies first leaves them to its successor: reconcile and
// settleIncoming unmount them before the volume goes). A failure leaves
// each step undone or done, never half: launchPrepared and Run do what is
// not done (start goes on, in the frozen window as before).
func (m *migrationTarget) prepareRoot() error {
	if m.rst == nil {
		return nil
	}
	if m.d.fault(faultEarlyRoot) == "fail" {
		return injected(faultEarlyRoot)
	}
	m.rootReady = true
	if u := m.prep.userns; u != nil {
		if err := m.d.mountRootfs(m.name, u); err != nil {
			return err
		}
		m.prep.rootMounted = true
	}
	return m.rst.PrepareRoot()
}

// releaseRoot undoes prepareRoot for a restore that will not run (or
// failed before its launch, which undoes its own): CRIU is hung up on and
// the mounts of the volume go.
func (m *migrationTarget) releaseRoot() {
	if !m.rootReady {
		return
	}
	m.rootReady = false
	m.rst.Abort()
	if m.prep.userns != nil {
		m.prep.rootMounted = false
		m.d.undo("unmount the rootfs", m.name, m.d.rt.UnmountIDMapped(m.d.cfg.rootfsMount(m.name)))
	}
}

func (e *earlyStart) checkErrOrNil() error {
	if e == nil {
		return nil
	}
	return e.checkErr
}

func (e *earlyStart) rootErrOrNil() error {
	if e == nil {
		return nil
	}
	return e.rootErr
}

// takeEarly waits for the early work and hands its results to start (nil
// when there was none).
func (m *migrationTarget) takeEarly() *earlyStart {
	e := m.early
	if e == nil {
		return nil
	}
	<-e.done
	e.used = true
	return e
}

// endEarly undoes early work that start never took over (the move failed
// before "start"); it runs before the disk receiver is closed.
func (m *migrationTarget) endEarly() {
	if e := m.early; e != nil && !e.used {
		<-e.done
		if e.lp != nil {
			e.lp.Kill()
		}
		m.releaseRoot() // before the volume goes
	}
	m.dropPreLazy()
}

// preLazy is a lazy-pages daemon started as the move is accepted, before
// the source freezes: its exec and setup (7-12 ms) leave the frozen
// window, and it waits for its images (runtime.LazyPagesOptions
// ImagesLater) until beginStart hands it over.
type preLazy struct {
	done   chan struct{}
	cancel context.CancelFunc
	lp     *runtime.LazyPages
	err    error
}

// startPreLazy starts the lazy-pages daemon of a live move whose restore
// is lazy, where Criu can wait for its images (nothing otherwise: it is
// started once they are in).
func (m *migrationTarget) startPreLazy(ctx context.Context) {
	if !m.hello.Live || !m.lazyRestore() || !m.d.rt.LazyPagesEarly() {
		return
	}
	ctx, cancel := context.WithCancel(ctx)
	p := &preLazy{done: make(chan struct{}), cancel: cancel}
	m.pre = p
	go func() {
		defer close(p.done)
		p.lp, p.err = m.startLazyPages(ctx, true)
	}()
}

// dropPreLazy kills a daemon startPreLazy started that nothing took over
// (the move failed, or its memory mode changed).
func (m *migrationTarget) dropPreLazy() {
	p := m.pre
	if p == nil {
		return
	}
	m.pre = nil
	p.cancel()
	<-p.done
	if p.lp != nil {
		p.lp.Kill()
	}
}

// lazyPagesReady gives the restore its lazy-pages daemon once the images
// are in: the one started early, told so, or a new one.
func (m *migrationTarget) lazyPagesReady(ctx context.Context) (*runtime.LazyPages, error) {
	p := m.pre
	if p == nil {
		return m.startLazyPages(ctx, false)
	}
	m.pre = nil // taken over: the caller kills it on failure
	defer p.cancel()
	<-p.done
	if p.err != nil {
		return nil, p.err
	}
	t0 := time.Now()
	if err := p.lp.ImagesIn(); err != nil {
		p.lp.Kill()
		return nil, err
	}
	if err := p.lp.WaitReady(ctx, m.work); err != nil {
		p.lp.Kill()
		return nil, err
	}
	m.d.log.Debug("migration target: early lazy-pages daemon ready", "name", m.name, "took", time.Since(t0))
	return p.lp, nil
}

// dropUnstartedVolume deletes a volume commitDisk made for a move that
// failed before start took it over (start registers its own revert).
func (m *migrationTarget) dropUnstartedVolume() {
	if m.committed && !m.started {
		m.d.undo("delete volume", m.name, m.d.storage.DeleteVolume(context.Background(), containerVolume(m.name)))
	}
}

// commitDisk makes the container's volume from the last disk pass, once:
// on a driver whose commit is durable (btrfs) as the final pass of a live
// move arrives, in place of the sync before its acknowledgement (one
// transaction commit instead of two, while the source still dumps);
// otherwise once the images are in (beginStart) or at "start". The
// outcome stays for start (commitErr).
func (m *migrationTarget) commitDisk(ctx context.Context) error {
	if m.committed || m.commitErr != nil {
		return m.commitErr
	}
	t0 := time.Now()
	m.commitErr = m.disk.Commit(ctx)
	m.committed = m.commitErr == nil
	m.d.log.Debug("migration target: volume made", "name", m.name, "took", time.Since(t0))
	return m.commitErr
}

// startLazyPages starts the restore's lazy-pages daemon: post-copy's pulls
// the pages from the source's page server, pre-copy's copies them in from
// the images here (the passes and the final dump). Unless imagesLater, it
// returns once the daemon listens for the restore; with it, at once (the
// daemon waits for ImagesIn).
func (m *migrationTarget) startLazyPages(ctx context.Context, imagesLater bool) (*runtime.LazyPages, error) {
	tlp := time.Now()
	var ps *os.File
	var err error
	if m.hello.Memory == api.MemoryLazy {
		if ps, err = m.tunnelPages(ctx); err != nil {
			return nil, err
		}
	}
	lp, err := m.d.rt.StartLazyPages(ctx, runtime.LazyPagesOptions{ImagePath: m.images, WorkPath: m.work, PageServer: ps, ImagesLater: imagesLater})
	if ps != nil {
		ps.Close() // the daemon has it
	}
	if err != nil || imagesLater {
		return lp, err
	}
	if err := lp.WaitReady(ctx, m.work); err != nil {
		lp.Kill()
		return nil, err
	}
	m.d.log.Debug("migration target: lazy-pages daemon ready", "name", m.name, "took", time.Since(tlp))
	return lp, nil
}
