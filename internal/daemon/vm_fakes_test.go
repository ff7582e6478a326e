package daemon

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"sync"

	"github.com/vesselhost/vessel/internal/network"
	"github.com/vesselhost/vessel/internal/qemu"
)

// fakeVMRunner implements vmRunner: VMs are in-memory records with a done
// channel; the ACPI power button ends a VM unless it ignores it; a
// monitor finds its VM by the QMP socket's run directory. It makes the
// run directory (with a pidfile) as QEMU would, so the daemon's cleanup of
// it shows.
type fakeVMRunner struct {
	mu      sync.Mutex
	vms     map[string]*fakeVM // by run directory
	nextPid int
	calls   callLog
	// ignoreACPI makes new VMs ignore the power button (a guest without
	// an ACPI handler).
	ignoreACPI bool
	// acpiLost makes new VMs miss their first presses (a guest still
	// booting).
	acpiLost int
}

type fakeVM struct {
	cfg        qemu.Config
	pid        int
	running    bool // let run (cont)
	ignoreACPI bool
	acpiLost   int
	throttle   *qemu.IOThrottle
	// status overrides query-status's run state ("paused",
	// "postmigrate"); mig is the fake migration (snapshot_vm_test.go).
	status string
	mig    fakeMigration
	// ramAtStart is what the VM's RAM file held when it started (nil:
	// no file).
	ramAtStart []byte
	// events feeds the VM's events monitor (a test sends RESET).
	events chan qemu.Event
	done   chan struct{}
	once   sync.Once
}

func (v *fakeVM) end() { v.once.Do(func() { close(v.done) }) }

func newFakeVMRunner() *fakeVMRunner {
	return &fakeVMRunner{vms: map[string]*fakeVM{}, nextPid: 5000}
}

func (f *fakeVMRunner) Accel() qemu.AccelInfo {
	return qemu.AccelInfo{Accel: qemu.AccelTCG, Reason: "fake"}
}

func (f *fakeVMRunner) BuildDisk(ctx context.Context, rootfs, dir string) error {
	f.mu.Lock()
	f.calls.record("BuildDisk %s", filepath.Base(rootfs))
	f.mu.Unlock()
	return os.WriteFile(filepath.Join(dir, "disk.img"), []byte("disk of "+filepath.Base(rootfs)), 0o600)
}

func (f *fakeVMRunner) Start(ctx context.Context, cfg qemu.Config) (vmProcess, error) {
	if _, err := cfg.Args(); err != nil && cfg.Kernel != "" {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls.record("Start %s", cfg.Name)
	if v := f.vms[cfg.RunDir]; v != nil {
		select {
		case <-v.done:
		default:
			return nil, fmt.Errorf("fake qemu: %s runs already", cfg.Name)
		}
	}
	if err := os.MkdirAll(cfg.RunDir, 0o700); err != nil {
		return nil, err
	}
	f.nextPid++
	if err := os.WriteFile(filepath.Join(cfg.RunDir, qemu.PidFile), fmt.Appendf(nil, "%d\n", f.nextPid), 0o600); err != nil {
		return nil, err
	}
	v := &fakeVM{cfg: cfg, pid: f.nextPid, running: !cfg.Paused, ignoreACPI: f.ignoreACPI, acpiLost: f.acpiLost,
		events: make(chan qemu.Event), done: make(chan struct{})}
	if cfg.RAMFile != "" {
		v.ramAtStart, _ = os.ReadFile(cfg.RAMFile)
	}
	f.vms[cfg.RunDir] = v
	return fakeVMProcess{v}, nil
}

func (f *fakeVMRunner) Find(runDir, name string) (vmProcess, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	v := f.vms[runDir]
	if v == nil || v.cfg.Name != name {
		return nil, fmt.Errorf("%w: no fake vm %s", qemu.ErrNotRunning, name)
	}
	select {
	case <-v.done:
		return nil, fmt.Errorf("%w: fake vm %s ended", qemu.ErrNotRunning, name)
	default:
	}
	return fakeVMProcess{v}, nil
}

func (f *fakeVMRunner) Monitor(ctx context.Context, socket string) (vmMonitor, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	v := f.vms[filepath.Dir(socket)]
	if v == nil {
		return nil, fmt.Errorf("fake qmp %s: no such socket", socket)
	}
	return &fakeMonitor{f: f, v: v}, nil
}

func (f *fakeVMRunner) Events(ctx context.Context, socket string) (<-chan qemu.Event, error) {
	f.mu.Lock()
	v := f.vms[filepath.Dir(socket)]
	f.mu.Unlock()
	if v == nil {
		return nil, fmt.Errorf("fake qmp %s: no such socket", socket)
	}
	out := make(chan qemu.Event)
	go func() {
		defer close(out)
		for {
			select {
			case e := <-v.events:
				select {
				case out <- e:
				case <-ctx.Done():
					return
				}
			case <-ctx.Done():
				return
			case <-v.done:
				return
			}
		}
	}()
	return out, nil
}

// vm returns the live fake VM of an instance, or nil.
func (f *fakeVMRunner) vm(name string) *fakeVM {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, v := range f.vms {
		if v.cfg.Name != name {
			continue
		}
		select {
		case <-v.done:
		default:
			return v
		}
	}
	return nil
}

func (f *fakeVMRunner) count(prefix string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls.count(prefix)
}

type fakeVMProcess struct{ v *fakeVM }

func (p fakeVMProcess) Pid() int              { return p.v.pid }
func (p fakeVMProcess) Done() <-chan struct{} { return p.v.done }
func (p fakeVMProcess) Kill(ctx context.Context) error {
	p.v.end()
	return nil
}

type fakeMonitor struct {
	f *fakeVMRunner
	v *fakeVM
}

func (m *fakeMonitor) do(what string, fn func()) error {
	m.f.mu.Lock()
	defer m.f.mu.Unlock()
	m.f.calls.record("%s %s", what, m.v.cfg.Name)
	select {
	case <-m.v.done:
		return fmt.Errorf("fake qmp %s: qemu ended", what)
	default:
	}
	if fn != nil {
		fn()
	}
	return nil
}

func (m *fakeMonitor) QueryStatus(ctx context.Context) (qemu.Status, error) {
	var s qemu.Status
	err := m.do("query-status", func() {
		s = qemu.Status{Running: m.v.running, Status: map[bool]string{true: "running", false: "prelaunch"}[m.v.running]}
		if m.v.status != "" && !m.v.running {
			s.Status = m.v.status
		}
	})
	return s, err
}

func (m *fakeMonitor) Cont(ctx context.Context) error {
	return m.do("cont", func() { m.v.running, m.v.status = true, "" })
}

func (m *fakeMonitor) SystemPowerdown(ctx context.Context) error {
	return m.do("system_powerdown", func() {
		switch {
		case m.v.acpiLost > 0:
			m.v.acpiLost--
		case !m.v.ignoreACPI:
			m.v.end()
		}
	})
}

func (m *fakeMonitor) SetIOThrottle(ctx context.Context, t qemu.IOThrottle) error {
	return m.do("block_set_io_throttle", func() { m.v.throttle = &t })
}

func (m *fakeMonitor) Close() error { return nil }

func (f *fakeNetwork) AttachTap(ctx context.Context, name string, addr netip.Addr) (network.Endpoint, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.record("AttachTap %s", name)
	f.attached[name], f.linkUp[name] = addr, true
	return network.Endpoint{
		HostVeth: "vt" + name,
		MAC:      network.MACFor(addr),
		Address:  netip.PrefixFrom(addr, f.subnet.Bits()),
		Gateway:  f.subnet.Masked().Addr().Next(),
	}, nil
}
