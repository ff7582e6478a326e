package daemon

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vesselhost/vessel/internal/api"
	"github.com/vesselhost/vessel/internal/cgroups"
	"github.com/vesselhost/vessel/internal/client"
	"github.com/vesselhost/vessel/internal/network"
	"github.com/vesselhost/vessel/internal/runtime"
	"github.com/vesselhost/vessel/internal/state"
)

// In-memory fakes of the daemon's seams (seams.go), so that the decision
// logic (transitions, reconcile, settle) runs in unit tests without root,
// runc, CRIU or a kernel to configure. Each fake keeps the state a test
// sets up and asserts on, and records the calls made to it.

// errFakeUnsupported is what a fake answers to what it does not model.
var errFakeUnsupported = errors.New("not supported by the fake")

// fakeContainer is one container the fake runtime knows.
type fakeContainer struct {
	status   runtime.Status // StatusRunning or StatusStopped
	pid      int
	exit     runtime.Exit // once stopped
	watchers []chan runtime.Exit
}

// fakeRuntime implements instanceRuntime with a table of containers. A
// container runs from Start (or Restore, or a test's run) until Kill,
// Delete, a signal the fake is told ends it, or a test's end; its watchers
// then get its exit. A running container whose cgroup the fake cgroups
// hold frozen reports StatusPaused, as runc does.
type fakeRuntime struct {
	cgroups *fakeCgroups
	cgPath  func(id string) string

	mu      sync.Mutex
	ctrs    map[string]*fakeContainer
	nextPid int
	calls   callLog
	// startErr and restoreErr fail Start and a prepared restore's Run,
	// prepareErr PrepareRestore; stateErr fails State.
	startErr, restoreErr, prepareErr, stateErr error
	// endOnSignal makes Signal end the container with the signal.
	endOnSignal bool
}

func newFakeRuntime(cg *fakeCgroups, cgPath func(string) string) *fakeRuntime {
	return &fakeRuntime{cgroups: cg, cgPath: cgPath, ctrs: map[string]*fakeContainer{}, nextPid: 1000}
}

func (f *fakeRuntime) record(format string, args ...any) { f.calls.record(format, args...) }

// count says how many calls began with prefix ("Kill c1").
func (f *fakeRuntime) count(prefix string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls.count(prefix)
}

// callLog records a fake's calls ("Kill c1"); its owner's mutex guards it.
type callLog []string

func (l *callLog) record(format string, args ...any) { *l = append(*l, fmt.Sprintf(format, args...)) }

// count says how many calls began with prefix.
func (l callLog) count(prefix string) int {
	n := 0
	for _, c := range l {
		if strings.HasPrefix(c, prefix) {
			n++
		}
	}
	return n
}

// run makes id a running container (one a previous daemon started) and
// returns its init pid.
func (f *fakeRuntime) run(id string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.launchLocked(id)
}

func (f *fakeRuntime) launchLocked(id string) int {
	f.nextPid++
	f.ctrs[id] = &fakeContainer{status: runtime.StatusRunning, pid: f.nextPid}
	return f.nextPid
}

// exited makes id a container whose init has exited with e (the shim
// recorded it) and whose runtime state is still there.
func (f *fakeRuntime) exited(id string, e runtime.Exit) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ctrs[id] = &fakeContainer{status: runtime.StatusStopped, exit: e}
}

// end ends a running container with e, as a crash or a poweroff from
// inside would; its watchers get e.
func (f *fakeRuntime) end(id string, e runtime.Exit) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.endLocked(id, e)
}

func (f *fakeRuntime) endLocked(id string, e runtime.Exit) {
	c := f.ctrs[id]
	if c == nil || c.status != runtime.StatusRunning {
		return
	}
	if e.Time.IsZero() {
		e.Time = time.Now()
	}
	c.status, c.exit = runtime.StatusStopped, e
	for _, w := range c.watchers {
		w <- e
		close(w)
	}
	c.watchers = nil
}

// endAll ends every running container with SIGKILL.
func (f *fakeRuntime) endAll() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for id := range f.ctrs {
		f.endLocked(id, signalExit(syscall.SIGKILL))
	}
}

// status returns what the fake knows of id (StatusUnknown: nothing).
func (f *fakeRuntime) status(id string) runtime.Status {
	st, _, _ := f.State(context.Background(), id)
	return st
}

func signalExit(sig syscall.Signal) runtime.Exit {
	return runtime.Exit{Status: 128 + int(sig), Signal: unix.SignalName(sig)}
}

func (f *fakeRuntime) Start(ctx context.Context, id, bundle string, o runtime.StartOptions) (runtime.Process, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.record("Start %s", id)
	return f.createLocked(id, f.startErr)
}

func (f *fakeRuntime) PrepareRestore(ctx context.Context, id, bundle string, o runtime.RestoreOptions) (runtime.Restorer, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.record("PrepareRestore %s", id)
	if f.prepareErr != nil {
		return nil, f.prepareErr
	}
	return &fakeRestorer{f: f, id: id, o: o}, nil
}

// fakeRestorer is a prepared restore of the fake runtime: Run makes the
// container ("Restore ID"), Abort after no Run is recorded ("Abort ID").
type fakeRestorer struct {
	f   *fakeRuntime
	id  string
	o   runtime.RestoreOptions
	ran bool
}

func (r *fakeRestorer) Run(ctx context.Context) (runtime.Process, error) {
	r.ran = true
	r.f.mu.Lock()
	r.f.record("Restore %s", r.id)
	proc, err := r.f.createLocked(r.id, r.f.restoreErr)
	r.f.mu.Unlock()
	if err == nil && r.o.Resumed != nil {
		r.o.Resumed()
	}
	return proc, err
}

func (r *fakeRestorer) Abort() {
	if !r.ran {
		r.f.record("Abort %s", r.id)
	}
}

func (r *fakeRestorer) CheckImages() error { return nil }

func (r *fakeRestorer) PrepareRoot() error { return nil }

func (f *fakeRuntime) createLocked(id string, injected error) (runtime.Process, error) {
	if injected != nil {
		return runtime.Process{}, injected
	}
	if c := f.ctrs[id]; c != nil {
		return runtime.Process{}, fmt.Errorf("container %s exists (%s)", id, c.status)
	}
	pid := f.launchLocked(id)
	return runtime.Process{ShimPid: pid - 1, InitPid: pid}, nil
}

func (f *fakeRuntime) State(ctx context.Context, id string) (runtime.Status, int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.stateErr != nil {
		return runtime.StatusUnknown, 0, f.stateErr
	}
	c := f.ctrs[id]
	switch {
	case c == nil:
		return runtime.StatusUnknown, 0, nil
	case c.status == runtime.StatusRunning && f.cgroups != nil && f.cgroups.get(f.cgPath(id)).frozen:
		return runtime.StatusPaused, c.pid, nil
	}
	return c.status, c.pid, nil
}

// Watch works as the real one: an error for a container the runtime does
// not know, the recorded exit at once for one that has ended.
func (f *fakeRuntime) Watch(id string) (<-chan runtime.Exit, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.record("Watch %s", id)
	c := f.ctrs[id]
	if c == nil {
		return nil, fmt.Errorf("watch %s: no such container", id)
	}
	ch := make(chan runtime.Exit, 1)
	if c.status != runtime.StatusRunning {
		ch <- c.exit
		close(ch)
		return ch, nil
	}
	c.watchers = append(c.watchers, ch)
	return ch, nil
}

func (f *fakeRuntime) Signal(ctx context.Context, id string, sig syscall.Signal) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.record("Signal %s %s", id, unix.SignalName(sig))
	c := f.ctrs[id]
	if c == nil || c.status != runtime.StatusRunning {
		return fmt.Errorf("signal %s: not running", id)
	}
	if f.endOnSignal {
		f.endLocked(id, signalExit(sig))
	}
	return nil
}

// Kill works as the real one: killing a container that has ended is not
// an error, one the runtime does not know is.
func (f *fakeRuntime) Kill(ctx context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.record("Kill %s", id)
	if f.ctrs[id] == nil {
		return fmt.Errorf("kill %s: no such container", id)
	}
	f.endLocked(id, signalExit(syscall.SIGKILL))
	return nil
}

// Delete works as runc delete --force: a running container is killed
// first; one the runtime does not know is no error.
func (f *fakeRuntime) Delete(ctx context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.record("Delete %s", id)
	f.endLocked(id, signalExit(syscall.SIGKILL))
	delete(f.ctrs, id)
	return nil
}

func (f *fakeRuntime) Exec(ctx context.Context, id string, o runtime.ExecOptions) (int, error) {
	return -1, errFakeUnsupported
}

func (f *fakeRuntime) NewCheckpoint(ctx context.Context, id string, o runtime.CheckpointOptions) (*runtime.Checkpoint, error) {
	return nil, errFakeUnsupported
}

func (f *fakeRuntime) PrepareIDMap(dst string, m runtime.IDMap) error { return nil }
func (f *fakeRuntime) ReleaseIDMap(m runtime.IDMap)                   {}
func (f *fakeRuntime) UnmountIDMapped(dst string) error               { return nil }

func (f *fakeRuntime) ReleaseRestoreRoot(id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.record("ReleaseRestoreRoot %s", id)
	return nil
}

func (f *fakeRuntime) MountIDMapped(src, dst string, m runtime.IDMap) error {
	f.record("idmap %s %d", dst, m.HostUID)
	return nil
}

func (f *fakeRuntime) StartLazyPages(ctx context.Context, o runtime.LazyPagesOptions) (*runtime.LazyPages, error) {
	return nil, errFakeUnsupported
}

func (f *fakeRuntime) LazyPagesEarly() bool { return false }

// fakeNetwork implements instanceNetwork: endpoints attached by name, the
// state of their host links, addresses from a small subnet (allocated by
// the real, pure, network.Allocate).
type fakeNetwork struct {
	subnet netip.Prefix

	mu       sync.Mutex
	attached map[string]netip.Addr
	linkUp   map[string]bool
	// announced counts Announce calls per instance.
	announced map[string]int
	calls     callLog
}

func newFakeNetwork(subnet netip.Prefix) *fakeNetwork {
	return &fakeNetwork{subnet: subnet, attached: map[string]netip.Addr{}, linkUp: map[string]bool{}, announced: map[string]int{}}
}

func (f *fakeNetwork) record(format string, args ...any) { f.calls.record(format, args...) }

func (f *fakeNetwork) MountSysfs(name, dir string) error {
	f.record("sysfs %s", name)
	return nil
}

func (f *fakeNetwork) UnmountSysfs(dir string) error { return nil }

func (f *fakeNetwork) count(prefix string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls.count(prefix)
}

// isAttached says whether name has an endpoint, and whether its host link
// is up.
func (f *fakeNetwork) isAttached(name string) (attached, up bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	_, attached = f.attached[name]
	return attached, f.linkUp[name]
}

// attach gives name an endpoint with its host link up or down (what a
// previous daemon left).
func (f *fakeNetwork) attach(name string, addr netip.Addr, up bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.attached[name], f.linkUp[name] = addr, up
}

func (f *fakeNetwork) Setup(ctx context.Context) error    { return nil }
func (f *fakeNetwork) Teardown(ctx context.Context) error { return nil }

func (f *fakeNetwork) Allocate(used []netip.Addr) (netip.Addr, error) {
	return network.Allocate(f.subnet, used)
}

func (f *fakeNetwork) CheckAddress(addr netip.Addr, used []netip.Addr) error {
	return network.CheckAddress(f.subnet, addr, used)
}

func (f *fakeNetwork) Attach(ctx context.Context, name string, addr netip.Addr) (network.Endpoint, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.record("Attach %s", name)
	f.attached[name], f.linkUp[name] = addr, true
	return network.Endpoint{
		Netns:    "/run/fake-netns/" + name,
		HostVeth: "vf" + name,
		Address:  netip.PrefixFrom(addr, f.subnet.Bits()),
		Gateway:  f.subnet.Masked().Addr().Next(),
	}, nil
}

func (f *fakeNetwork) Detach(ctx context.Context, name string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.record("Detach %s", name)
	delete(f.attached, name)
	delete(f.linkUp, name)
	return nil
}

func (f *fakeNetwork) Guard(ctx context.Context, name string, addr netip.Addr) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.record("Guard %s %s", name, addr)
	return nil
}

func (f *fakeNetwork) SetHostLink(name string, up bool) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.record("SetHostLink %s %v", name, up)
	if _, ok := f.attached[name]; !ok {
		return fmt.Errorf("host link of %s: no such link", name)
	}
	f.linkUp[name] = up
	return nil
}

// Announce counts announcements apart from the calls: it runs in the
// background, so its place among them is not fixed.
func (f *fakeNetwork) Announce(ctx context.Context, name string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.attached[name]; !ok {
		return fmt.Errorf("announce %s: no such link", name)
	}
	f.announced[name]++
	return nil
}

// fakeCgroup is the state of one fake cgroup.
type fakeCgroup struct {
	created, destroyed bool
	destroys           int // Destroy calls
	frozen             bool
	pids               []int
	sets               []cgroups.Resources // every Set, in order
}

// fakeCgroups hands out fake cgroup managers (its open is a cgroupsFunc);
// managers of one path share its state. events records Freeze and Thaw
// calls of every cgroup in order ("freeze /vessel-test/c1").
type fakeCgroups struct {
	mu     sync.Mutex
	m      map[string]*fakeCgroup
	events []string
}

func newFakeCgroups() *fakeCgroups { return &fakeCgroups{m: map[string]*fakeCgroup{}} }

func (f *fakeCgroups) open(path string, opts ...cgroups.Option) (cgroups.Manager, error) {
	return &fakeCgroupManager{f: f, path: path}, nil
}

func (f *fakeCgroups) cgLocked(path string) *fakeCgroup {
	cg := f.m[path]
	if cg == nil {
		cg = &fakeCgroup{}
		f.m[path] = cg
	}
	return cg
}

// get returns a copy of the state of the cgroup at path.
func (f *fakeCgroups) get(path string) fakeCgroup {
	f.mu.Lock()
	defer f.mu.Unlock()
	cg := *f.cgLocked(path)
	cg.pids = slices.Clone(cg.pids)
	cg.sets = slices.Clone(cg.sets)
	return cg
}

// set changes the state of the cgroup at path (what a test sets up).
func (f *fakeCgroups) set(path string, fn func(*fakeCgroup)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn(f.cgLocked(path))
}

// eventLog returns the Freeze and Thaw calls so far.
func (f *fakeCgroups) eventLog() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.events)
}

// fakeCgroupManager implements cgroups.Manager on a fakeCgroups.
type fakeCgroupManager struct {
	f    *fakeCgroups
	path string
}

func (m *fakeCgroupManager) do(fn func(*fakeCgroup)) {
	m.f.mu.Lock()
	defer m.f.mu.Unlock()
	fn(m.f.cgLocked(m.path))
}

func (m *fakeCgroupManager) Path() string { return m.path }

func (m *fakeCgroupManager) Create() error {
	m.do(func(cg *fakeCgroup) { cg.created, cg.destroyed = true, false })
	return nil
}

func (m *fakeCgroupManager) Exists() (ok bool) {
	m.do(func(cg *fakeCgroup) { ok = cg.created && !cg.destroyed })
	return ok
}

func (m *fakeCgroupManager) Pids() (pids []int, err error) {
	m.do(func(cg *fakeCgroup) { pids = slices.Clone(cg.pids) })
	return pids, nil
}

func (m *fakeCgroupManager) Freeze(ctx context.Context) error {
	m.do(func(cg *fakeCgroup) {
		cg.frozen = true
		m.f.events = append(m.f.events, "freeze "+m.path)
	})
	return nil
}

func (m *fakeCgroupManager) Thaw() error {
	m.do(func(cg *fakeCgroup) {
		cg.frozen = false
		m.f.events = append(m.f.events, "thaw "+m.path)
	})
	return nil
}

func (m *fakeCgroupManager) Stats() (st cgroups.Stats, err error) {
	m.do(func(cg *fakeCgroup) { st.Pids = uint64(len(cg.pids)) })
	return st, nil
}

func (m *fakeCgroupManager) Set(r cgroups.Resources) error {
	m.do(func(cg *fakeCgroup) { cg.sets = append(cg.sets, r) })
	return nil
}

func (m *fakeCgroupManager) AddProc(pid int) error {
	m.do(func(cg *fakeCgroup) { cg.created, cg.pids = true, append(cg.pids, pid) })
	return nil
}

func (m *fakeCgroupManager) Destroy() error {
	m.do(func(cg *fakeCgroup) {
		cg.created, cg.destroyed, cg.frozen, cg.pids = false, true, false, nil
		cg.destroys++
	})
	return nil
}

// fakePeer implements peerAPI (its api method is a peerFunc). Instance
// gives the configured answer: an instance, a 404, or another error. With
// a gate set, Instance first waits until the gate is opened (a target
// that has not answered yet).
type fakePeer struct {
	mu    sync.Mutex
	inst  api.Instance
	err   error
	gate  chan struct{}
	calls int
	// asked gets a value (if there is room) on every Instance call.
	asked chan struct{}
}

func newFakePeer() *fakePeer {
	return &fakePeer{err: errPeerUnreachable, asked: make(chan struct{}, 1000)}
}

// errPeerUnreachable is the error of a peer that does not answer.
var errPeerUnreachable = &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connection refused")}

func (p *fakePeer) api(state.Peer) peerAPI { return p }

// answer makes the peer show the instance with status.
func (p *fakePeer) answer(status string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.inst, p.err = api.Instance{Name: "c1", Status: status}, nil
}

// notFound makes the peer answer 404, as the client reports it.
func (p *fakePeer) notFound() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.inst, p.err = api.Instance{}, &client.Error{Code: 404, Message: "instance not found"}
}

// fail makes the peer answer with err.
func (p *fakePeer) fail(err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.inst, p.err = api.Instance{}, err
}

// hold makes Instance wait until its context ends (a target that
// never answers).
func (p *fakePeer) hold() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.gate = make(chan struct{})
}

func (p *fakePeer) callCount() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.calls
}

func (p *fakePeer) Instance(ctx context.Context, name string) (api.Instance, error) {
	p.mu.Lock()
	p.calls++
	gate := p.gate
	p.mu.Unlock()
	select {
	case p.asked <- struct{}{}:
	default:
	}
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return api.Instance{}, ctx.Err()
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.err != nil {
		return api.Instance{}, p.err
	}
	out := p.inst
	out.Name = name
	return out, nil
}

func (p *fakePeer) Upgrade(ctx context.Context, path, protocol string) (net.Conn, error) {
	return nil, errFakeUnsupported
}

func (p *fakePeer) UpgradeWith(ctx context.Context, path, protocol string, raw func(net.Conn) net.Conn) (net.Conn, error) {
	return nil, errFakeUnsupported
}

var (
	_ instanceRuntime = (*fakeRuntime)(nil)
	_ instanceNetwork = (*fakeNetwork)(nil)
	_ cgroupsFunc     = (*fakeCgroups)(nil).open
	_ peerFunc        = (*fakePeer)(nil).api
	_ cgroups.Manager = (*fakeCgroupManager)(nil)
)
