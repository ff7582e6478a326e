// Package guest boots the tiny VM bench/vmsnapshot and internal/qemu's
// save/load test use: Debian's cloud kernel, booted directly, with an
// initramfs whose /init is memfill (fills the guest's memory with
// incompressible bytes, then reports a checksum of it on the serial
// console when asked). There is no disk. It starts QEMU itself, with TCG
// unless told otherwise, one process per VM, and kills only that process.
package guest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/digitalocean/go-qemu/qmp"

	"github.com/vesselhost/vessel/internal/qemu"
	"github.com/vesselhost/vessel/internal/vm"
)

// kernelGlobs are where setup caches Debian's cloud kernel: first the
// directory vesseld takes it from (setup.sh's vm_support unpacks it there),
// then older caches and the host image's base.
var kernelGlobs = []string{
	filepath.Join(vm.DefaultKernelDir, "vmlinuz"),
	"/var/cache/vessel-setup/vm/vmlinuz*",
	"/var/cache/vessel-setup/*/vmlinuz*",
	"/var/cache/vessel-setup/host-image/base-*/boot/vmlinuz-*-cloud-amd64",
}

// FindKernel returns $VESSEL_VM_KERNEL or the first cached cloud kernel.
func FindKernel() (string, error) {
	if k := os.Getenv("VESSEL_VM_KERNEL"); k != "" {
		return k, nil
	}
	for _, g := range kernelGlobs {
		m, _ := filepath.Glob(g)
		for _, k := range m {
			if fi, err := os.Stat(k); err == nil && fi.Mode().IsRegular() {
				return k, nil
			}
		}
	}
	return "", errors.New("no guest kernel: set VESSEL_VM_KERNEL or run scripts/setup.sh (unpacks Debian's cloud kernel into " + vm.DefaultKernelDir + ")")
}

// BuildInitramfs builds memfill statically and writes the initramfs to
// dir/initrd.cpio, returning its path.
func BuildInitramfs(ctx context.Context, dir string) (string, error) {
	bin := filepath.Join(dir, "memfill")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "github.com/vesselhost/vessel/bench/vmsnapshot/memfill")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build memfill: %w: %s", err, out)
	}
	initrd := filepath.Join(dir, "initrd.cpio")
	if err := WriteInitramfs(initrd, bin); err != nil {
		return "", fmt.Errorf("initramfs: %w", err)
	}
	return initrd, nil
}

// Config describes one VM.
type Config struct {
	Kernel, Initrd string
	// Dir holds the VM's sockets and log.
	Dir    string
	MemMiB int
	SMP    int
	// Accel is the -accel value; "" means "tcg,thread=multi".
	Accel string
	// FillMiB is the memory memfill fills; 0 means all but 128 MiB.
	FillMiB int
	Seed    uint64
	// StateDrive, if set, is a qcow2 file attached as -drive if=none, for
	// savevm's vmstate.
	StateDrive string
	// Incoming starts QEMU with -incoming defer (and -S).
	Incoming bool
	// Paused starts QEMU with -S (for loadvm).
	Paused bool
	// NoTHP starts QEMU with transparent huge pages off, through this
	// program's own executable as the launcher (its main must hand
	// qemu.IsNoTHPLaunch invocations to qemu.ExecNoTHP), as vessel starts
	// the QEMU of a stateful restore.
	NoTHP bool
}

// VM is one running QEMU.
type VM struct {
	Mon    *qmp.SocketMonitor
	cmd    *exec.Cmd
	done   chan struct{}
	serial net.Conn
	lines  chan string
}

// Args returns QEMU's command line for c.
func (c Config) Args() []string {
	accel := c.Accel
	if accel == "" {
		accel = "tcg,thread=multi"
	}
	smp := max(c.SMP, 1)
	appendLine := fmt.Sprintf("console=ttyS0 quiet loglevel=1 panic=-1 vessel.seed=%d", c.Seed)
	if c.FillMiB > 0 {
		appendLine += fmt.Sprintf(" vessel.fill=%d", c.FillMiB)
	}
	args := []string{
		"-machine", "q35", "-accel", accel, "-cpu", "qemu64", "-smp", fmt.Sprint(smp),
		"-m", fmt.Sprintf("%dM", c.MemMiB), "-nodefaults", "-no-user-config", "-display", "none",
		"-kernel", c.Kernel, "-initrd", c.Initrd, "-append", appendLine,
		"-chardev", "socket,id=ser0,path=" + filepath.Join(c.Dir, "serial.sock") + ",server=on,wait=off",
		"-serial", "chardev:ser0",
		"-qmp", "unix:" + filepath.Join(c.Dir, "qmp.sock") + ",server=on,wait=off",
	}
	if c.StateDrive != "" {
		args = append(args, "-drive", "if=none,id=vmstate,format=qcow2,file="+c.StateDrive)
	}
	if c.Incoming || c.Paused {
		args = append(args, "-S")
	}
	if c.Incoming {
		args = append(args, "-incoming", "defer")
	}
	return args
}

// Start starts QEMU and connects to its QMP socket and serial console.
func Start(ctx context.Context, c Config) (*VM, error) {
	for _, s := range []string{"serial.sock", "qmp.sock"} {
		os.Remove(filepath.Join(c.Dir, s))
	}
	logf, err := os.Create(filepath.Join(c.Dir, "qemu.log"))
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	argv := append([]string{qemu.Binary}, c.Args()...)
	if c.NoTHP {
		exe, err := os.Executable()
		if err != nil {
			return nil, err
		}
		argv = append([]string{exe, qemu.NoTHPArg}, argv...)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start qemu: %w", err)
	}
	vm := &VM{cmd: cmd, done: make(chan struct{}), lines: make(chan string, 64)}
	go func() { _ = cmd.Wait(); close(vm.done) }()
	if err := vm.connect(ctx, c.Dir); err != nil {
		vm.Kill()
		log, _ := os.ReadFile(filepath.Join(c.Dir, "qemu.log"))
		return nil, fmt.Errorf("%w: %s", err, strings.TrimSpace(string(log)))
	}
	return vm, nil
}

// connect waits for QEMU's sockets and connects to both.
func (vm *VM) connect(ctx context.Context, dir string) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		select {
		case <-vm.done:
			return errors.New("qemu exited")
		case <-ctx.Done():
			return ctx.Err()
		default:
		}
		s, err := net.Dial("unix", filepath.Join(dir, "serial.sock"))
		if err == nil {
			mon, merr := qmp.NewSocketMonitor("unix", filepath.Join(dir, "qmp.sock"), 10*time.Second)
			if merr == nil {
				merr = mon.Connect()
			}
			if merr == nil {
				vm.Mon, vm.serial = mon, s
				go vm.readSerial()
				return nil
			}
			s.Close()
			err = merr
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("connect to qemu: %w", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// readSerial forwards memfill's lines.
func (vm *VM) readSerial() {
	sc := bufio.NewScanner(vm.serial)
	for sc.Scan() {
		l := sc.Text()
		if i := strings.Index(l, "memfill: "); i >= 0 {
			vm.lines <- l[i+len("memfill: "):]
		}
	}
	close(vm.lines)
}

// line waits for memfill's next line starting with prefix.
func (vm *VM) line(ctx context.Context, prefix string) (string, error) {
	for {
		select {
		case l, ok := <-vm.lines:
			if !ok {
				return "", errors.New("serial console closed")
			}
			if strings.HasPrefix(l, prefix) {
				return l, nil
			}
			if !strings.HasPrefix(l, "sum=") && !strings.HasPrefix(l, "ready") {
				return "", fmt.Errorf("guest: %s", l)
			}
		case <-vm.done:
			return "", errors.New("qemu exited")
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}
}

// Ready waits for memfill to finish filling and returns its checksum and
// the bytes filled.
func (vm *VM) Ready(ctx context.Context) (sum string, bytes int64, err error) {
	l, err := vm.line(ctx, "ready")
	if err != nil {
		return "", 0, err
	}
	for _, f := range strings.Fields(l) {
		k, v, _ := strings.Cut(f, "=")
		switch k {
		case "sum":
			sum = v
		case "bytes":
			bytes, _ = strconv.ParseInt(v, 10, 64)
		}
	}
	return sum, bytes, nil
}

// Sum asks the (running) guest for the checksum of its filled memory.
func (vm *VM) Sum(ctx context.Context) (string, error) {
	if _, err := vm.serial.Write([]byte("sum\n")); err != nil {
		return "", err
	}
	l, err := vm.line(ctx, "sum=")
	if err != nil {
		return "", err
	}
	return strings.TrimPrefix(l, "sum="), nil
}

// Pid is QEMU's process id.
func (vm *VM) Pid() int { return vm.cmd.Process.Pid }

// Kill kills this VM's QEMU process (by its pid) and waits for it.
func (vm *VM) Kill() {
	if vm.Mon != nil {
		_ = vm.Mon.Disconnect()
	}
	if vm.serial != nil {
		vm.serial.Close()
	}
	_ = vm.cmd.Process.Kill()
	<-vm.done
}
