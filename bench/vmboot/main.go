// Command vmboot measures a VM's boot, from QEMU's start to vessel-agent
// answering its first ping, for QEMU machine types and kernel command
// lines side by side in the same run (interleaved, the order rotating each
// round), without the daemon: vessel's argument builder (internal/qemu),
// its initramfs (the real agent as /init, the boot modules) and disk
// layout (internal/vm), a busybox root with busybox init. Each boot is
// then stopped by the ACPI power button (the agent turns it into the stop
// signal, busybox init powers off) and that time is measured too: a
// variant that boots but cannot stop is reported as failing. It prints
// JSON; the accelerator is in it (tcg figures are not kvm's).
//
//	go run ./bench/vmboot -n 6 -agent bin/vessel-agent
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/vesselhost/vessel/bench/internal/benchutil"
	"github.com/vesselhost/vessel/internal/agent"
	"github.com/vesselhost/vessel/internal/qemu"
	"github.com/vesselhost/vessel/internal/vm"
)

// variant is one way to boot.
type variant struct {
	Name    string `json:"name"`
	Machine string `json:"machine"`
	// Extra is appended to vessel's kernel command line.
	Extra string `json:"cmdline_extra"`
}

var variants = []variant{
	{Name: "q35", Machine: qemu.MachineQ35},
	{Name: "q35-trim", Machine: qemu.MachineQ35, Extra: trim},
	{Name: "microvm", Machine: qemu.MachineMicroVM},
	{Name: "microvm-trim", Machine: qemu.MachineMicroVM, Extra: trim},
}

// tcgMicroVM is what a microvm guest needs on its command line under TCG:
// it has no PIT gate port, HPET or ACPI PM timer to calibrate its TSC
// against (under KVM kvmclock tells it), and without it hangs at boot.
// TCG's guest TSC is the host's, so its frequency is the host's.
func tcgMicroVM() string {
	khz := 0
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "cpu MHz" {
				var mhz float64
				if _, err := fmt.Sscan(strings.TrimSpace(v), &mhz); err == nil {
					khz = int(mhz * 1000)
				}
				break
			}
		}
	}
	return fmt.Sprintf("tsc_early_khz=%d no_timer_check", khz)
}

// trim quiets the console (TCG emulates every byte of it) and skips
// probes a VM does not need: extra 8250 ports, the i8042 controller's aux
// port and PnP lookup.
const trim = "quiet 8250.nr_uarts=1 i8042.noaux i8042.nomux i8042.nopnp i8042.dumbkbd"

// bootTimeout bounds one boot (to the agent's answer).
var bootTimeout = 3 * time.Minute

// VariantResult is one variant's figures.
type VariantResult struct {
	variant
	AgentMs benchutil.Stats `json:"qemu_start_to_agent_ms"`
	// CPUMs is the CPU time QEMU used until the agent answered: under
	// TCG the boot is CPU-bound, and this is less sensitive than the wall
	// time to what else the machine runs.
	CPUMs    benchutil.Stats `json:"qemu_cpu_to_agent_ms"`
	StopMs   benchutil.Stats `json:"acpi_stop_ms"`
	Failures []string        `json:"failures,omitempty"`
}

// Result is the JSON output.
type Result struct {
	Benchmark string            `json:"benchmark"`
	Machine   benchutil.Machine `json:"machine"`
	Accel     string            `json:"accel"`
	N         int               `json:"n"`
	LoadAvg   [2]string         `json:"loadavg_start_end"`
	Variants  []VariantResult   `json:"variants"`
}

func main() {
	n := flag.Int("n", 6, "boots per variant")
	agentBin := flag.String("agent", "bin/vessel-agent", "the vessel-agent binary")
	only := flag.String("only", "", "comma-separated variant names (default all)")
	out := flag.String("o", "", "write JSON here as well as to stdout")
	flag.DurationVar(&bootTimeout, "timeout", bootTimeout, "bound of one boot")
	flag.Parse()
	if err := run(*n, *agentBin, *only, *out); err != nil {
		fmt.Fprintln(os.Stderr, "vmboot:", err)
		os.Exit(1)
	}
}

func run(n int, agentBin, only, out string) error {
	ctx := context.Background()
	work, err := os.MkdirTemp("", "vmboot-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	initrd, err := buildInitramfs(ctx, agentBin, work)
	if err != nil {
		return err
	}
	if err := vm.BuildDisk(ctx, busyboxRoot(work), work, 0); err != nil {
		return err
	}
	var vs []variant
	for _, v := range variants {
		if only == "" || strings.Contains(","+only+",", ","+v.Name+",") {
			vs = append(vs, v)
		}
	}
	accel := qemu.Detect(qemu.HostProbe())
	if accel.Accel == qemu.AccelTCG {
		for i := range vs {
			if vs[i].Machine == qemu.MachineMicroVM {
				vs[i].Extra = strings.TrimSpace(tcgMicroVM() + " " + vs[i].Extra)
			}
		}
	}
	res := Result{Benchmark: "vmboot", Machine: benchutil.ThisMachine(), Accel: string(accel.Accel), N: n}
	res.LoadAvg[0] = loadavg()
	boot := make([][]float64, len(vs))
	cpu := make([][]float64, len(vs))
	stop := make([][]float64, len(vs))
	fails := make([][]string, len(vs))
	for i := range n {
		for k := range vs {
			j := (i + k) % len(vs)
			b, c, s, err := bootOnce(ctx, vs[j], accel.Accel, work, initrd, i)
			if err != nil {
				fmt.Fprintf(os.Stderr, "%s #%d: %v\n", vs[j].Name, i, err)
				fails[j] = append(fails[j], err.Error())
				continue
			}
			fmt.Fprintf(os.Stderr, "%s #%d: agent %.0f ms (qemu cpu %.0f ms), stop %.0f ms\n", vs[j].Name, i, b, c, s)
			boot[j], cpu[j], stop[j] = append(boot[j], b), append(cpu[j], c), append(stop[j], s)
		}
	}
	res.LoadAvg[1] = loadavg()
	for j, v := range vs {
		res.Variants = append(res.Variants, VariantResult{variant: v,
			AgentMs: benchutil.Summarise(boot[j]), CPUMs: benchutil.Summarise(cpu[j]), StopMs: benchutil.Summarise(stop[j]), Failures: fails[j]})
	}
	return emit(res, out)
}

func emit(res Result, path string) error {
	if err := benchutil.WriteJSON(os.Stdout, res); err != nil {
		return err
	}
	if path == "" {
		return nil
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	return benchutil.WriteJSON(f, res)
}

func loadavg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	return strings.Join(strings.Fields(string(b))[:3], " ")
}

// bootOnce boots v on a copy of the disk: QEMU start to the agent's ping,
// then the ACPI power button to QEMU's end.
func bootOnce(ctx context.Context, v variant, accel qemu.Accel, work, initrd string, i int) (bootMs, cpuMs, stopMs float64, err error) {
	dir := filepath.Join(work, fmt.Sprintf("%s-%d", v.Name, i))
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return 0, 0, 0, err
	}
	defer os.RemoveAll(dir)
	disk := filepath.Join(dir, vm.DiskFile)
	if err := copyFile(filepath.Join(work, vm.DiskFile), disk); err != nil {
		return 0, 0, 0, err
	}
	cmdline := vm.Cmdline(vm.Boot{Hostname: "vmboot", StopSignal: "SIGUSR2"})
	if v.Extra != "" {
		cmdline += " " + v.Extra
	}
	cfg := qemu.Config{
		Name: "vmboot", Accel: accel, Machine: v.Machine, CPUs: 1, MemoryMiB: 256,
		Kernel: vm.Kernel{Dir: vm.DefaultKernelDir}.Vmlinuz(), Initrd: initrd, Cmdline: cmdline,
		Disk:   qemu.ProbeDisk(disk),
		RunDir: filepath.Join(dir, "run"), ConsoleLog: filepath.Join(dir, "console.log"),
	}
	bctx, cancel := context.WithTimeout(ctx, bootTimeout)
	defer cancel()
	t0 := time.Now()
	p, err := qemu.Start(bctx, cfg)
	if err != nil {
		return 0, 0, 0, err
	}
	defer func() {
		kctx, kcancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer kcancel()
		_ = p.Kill(kctx)
		if err != nil {
			con, _ := os.ReadFile(cfg.ConsoleLog)
			err = fmt.Errorf("%w; console:\n%s", err, tail(con))
		}
	}()
	go func() {
		select {
		case <-p.Done():
			cancel() // no agent will answer
		case <-bctx.Done():
		}
	}()
	dial := func(ctx context.Context) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", cfg.AgentSocket())
	}
	c, _, err := agent.Dial(bctx, dial, agent.DialOptions{})
	if err != nil {
		return 0, 0, 0, fmt.Errorf("agent: %w", err)
	}
	bootMs = benchutil.Ms(time.Since(t0))
	cpuMs = cpuTimeMs(p.Pid)
	var o bytes.Buffer
	st, err := c.Exec(bctx, agent.ExecOptions{Args: []string{"cat", "/proc/cmdline"}, Stdout: &o})
	c.Close()
	if err != nil || st.Code != 0 || !strings.Contains(o.String(), "vessel.hostname=vmboot") {
		return 0, 0, 0, fmt.Errorf("exec in the guest: %w, exit %d, %q", err, st.Code, o.String())
	}
	mon, err := qemu.Connect(bctx, cfg.QMPSocket())
	if err != nil {
		return 0, 0, 0, err
	}
	t1 := time.Now()
	err = mon.SystemPowerdown(bctx)
	mon.Close()
	if err != nil {
		return 0, 0, 0, err
	}
	select {
	case <-p.Done():
		return bootMs, cpuMs, benchutil.Ms(time.Since(t1)), nil
	case <-time.After(2 * time.Minute):
		return 0, 0, 0, errors.New("the ACPI power button did not stop the guest in 2 minutes")
	}
}

// cpuTimeMs is a process's user+system CPU time (/proc/PID/stat).
func cpuTimeMs(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	var ut, st float64
	if len(f) > 12 {
		_, _ = fmt.Sscan(f[11], &ut)
		_, _ = fmt.Sscan(f[12], &st)
	}
	return (ut + st) * 1000 / 100 // USER_HZ
}

func tail(b []byte) string {
	if len(b) > 3000 {
		b = b[len(b)-3000:]
	}
	return string(b)
}

func copyFile(src, dst string) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	return os.WriteFile(dst, b, 0o600)
}

// buildInitramfs writes vessel's initramfs (the agent as /init and the
// boot modules) into work.
func buildInitramfs(ctx context.Context, agentBin, work string) (string, error) {
	a, err := os.ReadFile(agentBin)
	if err != nil {
		return "", fmt.Errorf("the agent (make build): %w", err)
	}
	mods, err := vm.Kernel{Dir: vm.DefaultKernelDir}.Modules(ctx, vm.BootModules)
	if err != nil {
		return "", err
	}
	var buf bytes.Buffer
	if err := vm.BuildInitramfs(&buf, a, mods); err != nil {
		return "", err
	}
	p := filepath.Join(work, "initramfs.img")
	return p, os.WriteFile(p, buf.Bytes(), 0o600)
}

// busyboxRoot makes a root tree: the host's static busybox, its applets
// as links, busybox init with an inittab that says it booted.
func busyboxRoot(work string) string {
	root := filepath.Join(work, "rootfs")
	for _, d := range []string{"bin", "sbin", "etc", "dev", "proc", "sys", "tmp", "root", "run"} {
		must(os.MkdirAll(filepath.Join(root, d), 0o755))
	}
	bb, err := os.ReadFile("/bin/busybox")
	must(err)
	must(os.WriteFile(filepath.Join(root, "bin/busybox"), bb, 0o755))
	for _, l := range []string{"bin/sh", "bin/cat", "bin/echo", "bin/mount", "sbin/init", "sbin/poweroff"} {
		must(os.Symlink("/bin/busybox", filepath.Join(root, l)))
	}
	must(os.WriteFile(filepath.Join(root, "etc/inittab"),
		[]byte("::sysinit:/bin/echo vmboot: booted\n::shutdown:/bin/echo vmboot: bye\n"), 0o644))
	return root
}

func must(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "vmboot:", err)
		os.Exit(1)
	}
}
