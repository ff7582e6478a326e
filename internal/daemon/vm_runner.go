package daemon

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"

	"github.com/vesselhost/vessel/internal/qemu"
	"github.com/vesselhost/vessel/internal/vm"
)

// qemuRunner is the real vmRunner: QEMU through internal/qemu, booted
// from the guest kernel and an initramfs of the agent and the kernel's
// boot modules (built on first use, kept in assetsDir by content).
type qemuRunner struct {
	accel     qemu.AccelInfo
	kernel    vm.Kernel
	agent     string // path of the agent binary ("" until found)
	assetsDir string

	mu     sync.Mutex
	initrd string // built initramfs, once
}

func newQEMURunner(cfg Config) *qemuRunner {
	return &qemuRunner{
		accel:     qemu.Detect(qemu.HostProbe()),
		kernel:    vm.Kernel{Dir: cmp.Or(cfg.VMKernelDir, vm.DefaultKernelDir)},
		agent:     cfg.VMAgent,
		assetsDir: cfg.vmAssetsDir(),
	}
}

func (q *qemuRunner) Accel() qemu.AccelInfo { return q.accel }

func (q *qemuRunner) BuildDisk(ctx context.Context, rootfs, dir string) error {
	return vm.BuildDisk(ctx, rootfs, dir, 0)
}

// qemuProcess adapts qemu.Process to vmProcess.
type qemuProcess struct{ p *qemu.Process }

func (p qemuProcess) Pid() int                       { return p.p.Pid }
func (p qemuProcess) Done() <-chan struct{}          { return p.p.Done() }
func (p qemuProcess) Kill(ctx context.Context) error { return p.p.Kill(ctx) }

func (q *qemuRunner) Start(ctx context.Context, cfg qemu.Config) (vmProcess, error) {
	initrd, err := q.initramfs(ctx)
	if err != nil {
		return nil, err
	}
	cfg.Kernel, cfg.Initrd = q.kernel.Vmlinuz(), initrd
	cfg.Disk = qemu.ProbeDisk(cfg.Disk.Path)
	p, err := qemu.Start(ctx, cfg)
	if err != nil {
		return nil, err
	}
	return qemuProcess{p}, nil
}

func (q *qemuRunner) Find(runDir, name string) (vmProcess, error) {
	p, err := qemu.Find(runDir, name)
	if err != nil {
		return nil, err
	}
	return qemuProcess{p}, nil
}

func (q *qemuRunner) Monitor(ctx context.Context, socket string) (vmMonitor, error) {
	return qemu.Connect(ctx, socket)
}

func (q *qemuRunner) Events(ctx context.Context, socket string) (<-chan qemu.Event, error) {
	return qemu.Events(ctx, socket)
}

// errNoAgent is a host without the guest agent binary.
var errNoAgent = errors.New("vessel-agent not found (next to vesseld, /usr/lib/vessel, PATH)")

// agentPath finds the guest agent binary.
func (q *qemuRunner) agentPath() (string, error) {
	if q.agent != "" {
		return q.agent, nil
	}
	var cands []string
	if exe, err := os.Executable(); err == nil {
		cands = append(cands, filepath.Join(filepath.Dir(exe), "vessel-agent"))
	}
	cands = append(cands, "/usr/lib/vessel/vessel-agent")
	for _, c := range cands {
		if fi, err := os.Stat(c); err == nil && fi.Mode().IsRegular() {
			return c, nil
		}
	}
	if p, err := exec.LookPath("vessel-agent"); err == nil {
		return p, nil
	}
	return "", errNoAgent
}

// initramfs returns the initramfs of the agent and the boot modules,
// building it on first use: assetsDir/initramfs-HASH.img, HASH over the
// agent and the modules, so a new agent or kernel gets a new file.
func (q *qemuRunner) initramfs(ctx context.Context) (string, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.initrd != "" {
		return q.initrd, nil
	}
	if err := q.kernel.Check(); err != nil {
		return "", err
	}
	agentPath, err := q.agentPath()
	if err != nil {
		return "", err
	}
	agent, err := os.ReadFile(agentPath)
	if err != nil {
		return "", fmt.Errorf("vm agent: %w", err)
	}
	mods, err := q.kernel.Modules(ctx, vm.BootModules)
	if err != nil {
		return "", err
	}
	var buf bytes.Buffer
	if err := vm.BuildInitramfs(&buf, agent, mods); err != nil {
		return "", err
	}
	sum := sha256.Sum256(buf.Bytes())
	p := filepath.Join(q.assetsDir, "initramfs-"+hex.EncodeToString(sum[:8])+".img")
	if _, err := os.Stat(p); err != nil {
		if err := os.MkdirAll(q.assetsDir, 0o700); err != nil {
			return "", err
		}
		tmp := p + ".tmp"
		if err := os.WriteFile(tmp, buf.Bytes(), 0o600); err != nil {
			return "", fmt.Errorf("write initramfs: %w", err)
		}
		if err := os.Rename(tmp, p); err != nil {
			return "", fmt.Errorf("write initramfs: %w", err)
		}
	}
	q.initrd = p
	return p, nil
}
