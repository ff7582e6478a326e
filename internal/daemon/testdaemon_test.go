package daemon

import (
	"context"
	"errors"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/vesselhost/vessel/internal/network"
	"github.com/vesselhost/vessel/internal/operations"
	"github.com/vesselhost/vessel/internal/runtime"
	"github.com/vesselhost/vessel/internal/state"
	"github.com/vesselhost/vessel/internal/storage"
)

// testDaemon is a daemon wired to the fakes (fakes_test.go), the real
// state store and the real dir storage driver, all in temporary
// directories: no root needed. Tests prepare the store, the pool and the
// fakes as a daemon (possibly a crashed one) would have left them, then
// drive the daemon's own code.
type testDaemon struct {
	*Daemon
	frt   *fakeRuntime
	fnet  *fakeNetwork
	fcg   *fakeCgroups
	fpeer *fakePeer
	fvm   *fakeVMRunner
	logs  *testLog
	once  sync.Once
}

// testPeerFP is the fingerprint of the peer host the tests migrate to.
const testPeerFP = "ab12cd34ef56ab12cd34ef56ab12cd34ef56ab12cd34ef56ab12cd34ef56ab12"

// waitBound bounds every wait for asynchronous work in these tests; it is
// never reached unless something is broken.
const waitBound = 10 * time.Second

func newTestDaemon(t *testing.T) *testDaemon {
	t.Helper()
	dir := t.TempDir()
	// Subordinate ids of the test's own, whatever the machine's /etc has.
	subids := filepath.Join(dir, "subids")
	if err := os.WriteFile(subids, []byte("root:1000000:655360\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := Config{
		Subuid:        subids,
		Subgid:        subids,
		Root:          filepath.Join(dir, "root"),
		RunDir:        filepath.Join(dir, "run"),
		Name:          "test-host",
		StorageDriver: "dir",
		Subnet:        netip.MustParsePrefix("10.99.0.0/27"),
		CgroupParent:  "/vessel-test",
		ControlCgroup: NoControlCgroup,
		StopTimeout:   2 * time.Second,
	}
	if err := cfg.fill(); err != nil {
		t.Fatal(err)
	}
	cgs := newFakeCgroups()
	td := &testDaemon{
		frt:   newFakeRuntime(cgs, cfg.cgroupPath),
		fnet:  newFakeNetwork(cfg.Subnet),
		fcg:   cgs,
		fpeer: newFakePeer(),
		fvm:   newFakeVMRunner(),
	}
	td.wire(t, cfg)
	return td
}

// restart shuts td down and returns a new daemon on the same directories
// and the same fakes: the host as the next daemon finds it. It is not
// started (startDaemon).
func (td *testDaemon) restart(t *testing.T) *testDaemon {
	t.Helper()
	td.shutdown(t)
	next := &testDaemon{frt: td.frt, fnet: td.fnet, fcg: td.fcg, fpeer: td.fpeer, fvm: td.fvm}
	next.wire(t, td.cfg)
	return next
}

// wire makes td's daemon: the store and the pool in cfg's directories,
// the fakes for the rest.
func (td *testDaemon) wire(t *testing.T, cfg Config) {
	t.Helper()
	for _, p := range []string{cfg.Root, cfg.RunDir} {
		if err := os.MkdirAll(p, 0o711); err != nil {
			t.Fatal(err)
		}
	}
	st, err := state.Open(cfg.dbPath())
	if err != nil {
		t.Fatal(err)
	}
	drv, err := storage.New(storage.Config{Driver: "dir", Root: cfg.poolRoot()})
	if err == nil {
		err = drv.Mount(context.Background())
	}
	if err != nil {
		st.Close()
		t.Fatal(err)
	}
	td.logs = &testLog{t: t}
	d := &Daemon{
		cfg:        cfg,
		log:        slog.New(slog.NewTextHandler(td.logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		state:      st,
		storage:    drv,
		net:        td.fnet,
		rt:         td.frt,
		vms:        td.fvm,
		cgroupsFor: td.fcg.open,
		peerAPIFor: td.fpeer.api,
		ops:        operations.NewRegistry(),
	}
	d.cgParent, _ = td.fcg.open(cfg.CgroupParent)
	d.ctx, d.cancel = context.WithCancel(context.Background())
	td.Daemon = d
	logs := td.logs
	t.Cleanup(func() {
		td.shutdown(t)
		logs.close()
	})
}

// inBubble prepares td for a synctest bubble, which ends only once every
// goroutine in it has: at cleanup, before the daemon shuts down, the
// containers still running end, so that their exit watchers return.
func (td *testDaemon) inBubble(t *testing.T) {
	t.Cleanup(func() {
		td.frt.endAll()
		synctest.Wait()
	})
}

// shutdown runs the daemon's Shutdown once (the test's or the cleanup's).
func (td *testDaemon) shutdown(t *testing.T) {
	td.once.Do(func() {
		if err := td.Shutdown(context.Background()); err != nil {
			t.Errorf("shutdown: %v", err)
		}
	})
}

// startDaemon runs the daemon's start: load, reconcile, settle.
func (td *testDaemon) startDaemon(t *testing.T) {
	t.Helper()
	if err := td.start(context.Background()); err != nil {
		t.Fatalf("start: %v", err)
	}
}

// putInstance commits a record of name in state st (edited by edit) and
// creates its container volume, holding a file "disk" that says whose it
// is, as a daemon leaves them; the registry is not touched (load fills it).
func (td *testDaemon) putInstance(t *testing.T, name string, st state.InstanceState, edit ...func(*state.Instance)) state.Instance {
	t.Helper()
	used, err := td.state.UsedAddresses()
	if err != nil {
		t.Fatal(err)
	}
	addr, err := network.Allocate(td.cfg.Subnet, used)
	if err != nil {
		t.Fatal(err)
	}
	rec := state.Instance{
		Name: name, Image: "test-image", Created: time.Now().UTC(), Init: []string{"/sbin/init"},
		StopSignal: "SIGTERM", Address: addr, State: st,
	}
	for _, fn := range edit {
		fn(&rec)
	}
	if err := td.state.CreateInstance(rec); err != nil {
		t.Fatal(err)
	}
	td.writeVolume(t, containerVolume(name), name)
	return rec
}

// putSnapshot commits the record of snapshot snap of instance name and
// creates its volume holding content.
func (td *testDaemon) putSnapshot(t *testing.T, name, snap, content string) {
	t.Helper()
	if err := td.state.CreateSnapshot(state.Snapshot{Instance: name, Name: snap, Created: time.Now().UTC()}); err != nil {
		t.Fatal(err)
	}
	td.writeVolume(t, snapshotVolume(name, snap), content)
}

// writeVolume creates vol holding the file "disk" with content.
func (td *testDaemon) writeVolume(t *testing.T, vol storage.Volume, content string) {
	t.Helper()
	if err := td.storage.CreateVolume(context.Background(), vol); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(td.storage.Path(vol), "disk"), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// readVolume returns the content of vol's file "disk".
func (td *testDaemon) readVolume(t *testing.T, vol storage.Volume) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(td.storage.Path(vol), "disk"))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// addInstance is putInstance, and registers the instance.
func (td *testDaemon) addInstance(t *testing.T, name string, st state.InstanceState, edit ...func(*state.Instance)) *instance {
	t.Helper()
	rec, err := td.state.GetInstance(td.putInstance(t, name, st, edit...).Name)
	if err != nil {
		t.Fatal(err)
	}
	inst := newInstance(rec)
	if !td.insts.add(inst) {
		t.Fatalf("%s registered twice", name)
	}
	return inst
}

// addRunning adds an instance whose container runs: its record says
// running, the runtime runs it, its network is attached and the daemon
// watches it.
func (td *testDaemon) addRunning(t *testing.T, name string) *instance {
	t.Helper()
	inst := td.addInstance(t, name, state.StateRunning)
	pid := td.frt.run(name)
	td.fnet.attach(name, inst.record().Address, true)
	if _, err := td.track(inst, runtime.Process{InitPid: pid}); err != nil {
		t.Fatal(err)
	}
	return inst
}

// cgroup returns the state of name's fake cgroup.
func (td *testDaemon) cgroup(name string) fakeCgroup { return td.fcg.get(td.cfg.cgroupPath(name)) }

// freeze marks name's cgroup frozen (the runtime then reports it paused).
func (td *testDaemon) freeze(name string) {
	td.fcg.set(td.cfg.cgroupPath(name), func(cg *fakeCgroup) { cg.created, cg.frozen = true, true })
}

// storedInstance returns name's record in the store, and whether there is
// one.
func (td *testDaemon) storedInstance(t *testing.T, name string) (state.Instance, bool) {
	t.Helper()
	rec, err := td.state.GetInstance(name)
	if errors.Is(err, state.ErrNotFound) {
		return rec, false
	}
	if err != nil {
		t.Fatal(err)
	}
	return rec, true
}

// journal returns name's migration journal in the store, and whether there
// is one.
func (td *testDaemon) journal(t *testing.T, name string) (state.Migration, bool) {
	t.Helper()
	j, ok, err := td.state.GetMigration(name)
	if err != nil {
		t.Fatal(err)
	}
	return j, ok
}

// addPeer trusts the peer host the fake peer plays.
func (td *testDaemon) addPeer(t *testing.T) {
	t.Helper()
	if err := td.state.PutPeer(state.Peer{Name: "peer", Addresses: []string{"192.0.2.1:8443"}, Fingerprint: testPeerFP}); err != nil {
		t.Fatal(err)
	}
}

// putJournal commits a migration journal.
func (td *testDaemon) putJournal(t *testing.T, j state.Migration) {
	t.Helper()
	if err := td.state.PutMigration(j); err != nil {
		t.Fatal(err)
	}
}

// sourceJournal is the journal of a live move of name to the fake peer.
func sourceJournal(name, phase string) state.Migration {
	return state.Migration{Instance: name, Role: state.MigrationSource, Peer: testPeerFP, Name: name,
		Live: true, Start: true, Phase: phase, Started: time.Now().UTC()}
}

// status returns what list shows for name ("" if it lists no such
// instance).
func (td *testDaemon) status(t *testing.T, name string) string {
	t.Helper()
	list, err := td.ListInstances(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, i := range list {
		if i.Name == name {
			return i.Status
		}
	}
	return ""
}

// opsNamed returns the operations with description desc.
func (td *testDaemon) opsNamed(desc string) []*operations.Operation {
	var out []*operations.Operation
	for _, op := range td.ops.List() {
		if op.Render().Description == desc {
			out = append(out, op)
		}
	}
	return out
}

// settleOp returns the one settle operation.
func (td *testDaemon) settleOp(t *testing.T) *operations.Operation {
	t.Helper()
	ops := td.opsNamed("Settling migration")
	if len(ops) != 1 {
		t.Fatalf("%d settle operations, want 1", len(ops))
	}
	return ops[0]
}

// waitOp waits (bounded) for op to end and returns its error.
func waitOp(t *testing.T, op *operations.Operation) error {
	t.Helper()
	select {
	case <-op.Done():
	case <-time.After(waitBound):
		t.Fatalf("operation %q still running after %s", op.Render().Description, waitBound)
	}
	return op.Wait(context.Background())
}

// pending says whether op has not ended.
func pending(op *operations.Operation) bool {
	select {
	case <-op.Done():
		return false
	default:
		return true
	}
}

// waitFor polls cond until it holds (bounded).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitBound)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// waitAsked waits until the fake peer has been asked n times in all.
func (td *testDaemon) waitAsked(t *testing.T, n int) {
	t.Helper()
	waitFor(t, "the peer to be asked", func() bool { return td.fpeer.callCount() >= n })
}

// lockHeld says whether someone holds inst's lock, without waiting.
func lockHeld(inst *instance) bool {
	select {
	case inst.lock <- struct{}{}:
		<-inst.lock
		return false
	default:
		return true
	}
}

// testLog is the daemon's log in a test: each line goes to t.Log while the
// test runs, and is kept for assertions.
type testLog struct {
	t     *testing.T
	mu    sync.Mutex
	lines []string
	done  bool
}

func (l *testLog) Write(p []byte) (int, error) {
	s := strings.TrimRight(string(p), "\n")
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, s)
	if !l.done {
		l.t.Log(s)
	}
	return len(p), nil
}

// close stops copying lines to the test (goroutines the test leaves, such
// as exit watchers, may log after it).
func (l *testLog) close() {
	l.mu.Lock()
	l.done = true
	l.mu.Unlock()
}

// matching returns the lines that contain every one of subs.
func (l *testLog) matching(subs ...string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
next:
	for _, line := range l.lines {
		for _, s := range subs {
			if !strings.Contains(line, s) {
				continue next
			}
		}
		out = append(out, line)
	}
	return out
}

// mustLock takes an instance's lock for act, failing the test if it cannot.
func (td *testDaemon) mustLock(t *testing.T, name string, act action) (*instance, func()) {
	t.Helper()
	inst, release, err := td.lock(context.Background(), name, act, false)
	if err != nil {
		t.Fatal(err)
	}
	return inst, release
}
