package qemu

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"strings"
)

// Accel is the accelerator QEMU runs the guest's CPUs with.
type Accel string

// The accelerators vessel uses.
const (
	// AccelKVM runs guest code on the CPU (hardware virtualization).
	AccelKVM Accel = "kvm"
	// AccelTCG emulates the CPU in software: every host can, slowly.
	AccelTCG Accel = "tcg"
)

// AccelInfo is the accelerator chosen and why.
type AccelInfo struct {
	Accel Accel `json:"accel"`
	// Reason says why KVM is not used (empty with KVM).
	Reason string `json:"reason,omitempty"`
}

// Host is what the accelerator decision reads from the host; HostProbe
// reads the real host, tests pass their own.
type Host struct {
	// CPUFlags are the "flags" of /proc/cpuinfo's first processor.
	CPUFlags []string
	// OpenKVM opens /dev/kvm read-write (nil error: usable).
	OpenKVM func() error
	// Modules are the names of the loaded kernel modules (/sys/module).
	Modules []string
}

// HostProbe reads the host's CPU flags, /dev/kvm and loaded modules.
func HostProbe() Host {
	h := Host{OpenKVM: openKVM}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		h.CPUFlags = cpuFlags(b)
	}
	if ents, err := os.ReadDir("/sys/module"); err == nil {
		for _, e := range ents {
			h.Modules = append(h.Modules, e.Name())
		}
	}
	return h
}

func openKVM() error {
	f, err := os.OpenFile("/dev/kvm", os.O_RDWR, 0)
	if err != nil {
		return err
	}
	return f.Close()
}

// cpuFlags returns the flags of the first processor in a /proc/cpuinfo.
func cpuFlags(cpuinfo []byte) []string {
	sc := bufio.NewScanner(bytes.NewReader(cpuinfo))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if ok && strings.TrimSpace(k) == "flags" {
			return strings.Fields(v)
		}
	}
	return nil
}

// Detect decides the accelerator: KVM only where the CPU has hardware
// virtualization (vmx or svm), /dev/kvm opens read-write, and the KVM
// module is not kvm_pvm (PVM's /dev/kvm runs only PVM-enabled guest
// kernels, not a stock one). Anything else is TCG, with the reason.
func Detect(h Host) AccelInfo {
	if !hasAny(h.CPUFlags, "vmx", "svm") {
		return AccelInfo{Accel: AccelTCG, Reason: "the CPU has no hardware virtualization (no vmx or svm flag)"}
	}
	if hasAny(h.Modules, "kvm_pvm") {
		return AccelInfo{Accel: AccelTCG, Reason: "/dev/kvm is kvm_pvm, which cannot run a stock guest kernel"}
	}
	if h.OpenKVM == nil {
		return AccelInfo{Accel: AccelTCG, Reason: "/dev/kvm not checked"}
	}
	if err := h.OpenKVM(); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return AccelInfo{Accel: AccelTCG, Reason: "no /dev/kvm (the kvm module is not loaded)"}
		}
		return AccelInfo{Accel: AccelTCG, Reason: fmt.Sprintf("/dev/kvm is not usable: %v", err)}
	}
	return AccelInfo{Accel: AccelKVM}
}

func hasAny(list []string, want ...string) bool {
	for _, s := range list {
		for _, w := range want {
			if s == w {
				return true
			}
		}
	}
	return false
}
