package qemu

import (
	"errors"
	"slices"
	"sync"
	"testing"
)

// fakeLoader is a QEMU whose receive threads appear after some looks
// (counts, the last repeated); it records the policies set.
type fakeLoader struct {
	mu       sync.Mutex
	counts   []int
	looks    int
	set      []bool
	resetErr error
	idled    chan struct{} // closed at the first setIdle(true)
}

func newFakeLoader(counts ...int) *fakeLoader {
	return &fakeLoader{counts: counts, idled: make(chan struct{})}
}

func (f *fakeLoader) recvThreads() (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := f.counts[min(f.looks, len(f.counts)-1)]
	f.looks++
	return n, nil
}

func (f *fakeLoader) setIdle(idle bool) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.set = append(f.set, idle)
	if idle && len(f.set) == 1 {
		close(f.idled)
	}
	if !idle {
		return f.resetErr
	}
	return nil
}

func (f *fakeLoader) policies() []bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.set)
}

// The main thread goes idle only once all the channels' threads exist
// (before, they would inherit it), and back once the load ends.
func TestDuringLoadIdlesOnceChannelsRun(t *testing.T) {
	f := newFakeLoader(0, 2, 3, 4)
	var during []bool
	err := duringLoad(f, 4, func() error {
		<-f.idled // the load runs until the loader is idle
		during = f.policies()
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(during, []bool{true}) {
		t.Errorf("during the load: policies set %v, want idle", during)
	}
	if got := f.policies(); !slices.Equal(got, []bool{true, false}) {
		t.Errorf("policies set %v, want idle then back", got)
	}
	if f.looks < 4 {
		t.Errorf("idle after %d looks, before the 4 threads existed", f.looks)
	}
}

// A load that fails still leaves the main thread under SCHED_OTHER; one
// that ends before the channels run leaves it untouched; a reset that fails fails the load (QEMU
// is then killed rather than run).
func TestDuringLoadAlwaysResets(t *testing.T) {
	boom := errors.New("migration failed")
	f := newFakeLoader(4)
	err := duringLoad(f, 4, func() error { <-f.idled; return boom })
	if !errors.Is(err, boom) {
		t.Errorf("err %v, want the load's", err)
	}
	if got := f.policies(); !slices.Equal(got, []bool{true, false}) {
		t.Errorf("failed load: policies set %v, want idle then back", got)
	}

	f = newFakeLoader(3) // one channel's thread missing
	if err := duringLoad(f, 4, func() error { return nil }); err != nil {
		t.Fatal(err)
	}
	if got := f.policies(); len(got) != 0 {
		t.Errorf("channels never all running: policies set %v, want none", got)
	}

	f = newFakeLoader(4)
	f.resetErr = errors.New("EPERM")
	if err := duringLoad(f, 4, func() error { <-f.idled; return nil }); !errors.Is(err, f.resetErr) {
		t.Errorf("reset failed: err %v, want it", err)
	}
	f = newFakeLoader(4)
	f.resetErr = errors.New("EPERM")
	if err := duringLoad(f, 4, func() error { <-f.idled; return boom }); !errors.Is(err, boom) {
		t.Errorf("load and reset failed: err %v, want the load's", err)
	}
}

func TestResetLoaderNeedsPid(t *testing.T) {
	if err := ResetLoader(0); err == nil {
		t.Error("ResetLoader(0) would reset the caller's thread")
	}
}
