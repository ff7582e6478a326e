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
	// SysVendor is the machine's DMI system vendor
	// (/sys/class/dmi/id/sys_vendor; "QEMU" in a QEMU guest).
	SysVendor string
	// Clocksources are the kernel's available clocksources; a KVM
	// guest has "kvm-clock", a QEMU guest under TCG has not (kvmclock is
	// KVM's paravirtual interface, which TCG does not offer).
	Clocksources []string
}

// tcgGuest reports whether the host is itself a QEMU guest emulated by
// TCG: QEMU's DMI vendor and the CPU's hypervisor bit, without KVM's
// clock. Such a guest's vmx or svm is TCG's emulation (qemu64 has svm), so
// kvm_amd loads and /dev/kvm opens, but a VM there would be an emulator
// inside an emulator; scripts/vmlab refuses such a machine the same way
// (systemd-detect-virt --vm says "qemu", not "kvm").
func (h Host) tcgGuest() bool {
	return h.SysVendor == "QEMU" && hasAny(h.CPUFlags, "hypervisor") && !hasAny(h.Clocksources, "kvm-clock")
}

// HostProbe reads the host's CPU flags, /dev/kvm, loaded modules, DMI
// vendor and clocksources.
func HostProbe() Host {
	h := Host{OpenKVM: openKVM}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		h.CPUFlags = cpuFlags(b)
	}
	if b, err := os.ReadFile("/sys/class/dmi/id/sys_vendor"); err == nil {
		h.SysVendor = strings.TrimSpace(string(b))
	}
	if b, err := os.ReadFile("/sys/devices/system/clocksource/clocksource0/available_clocksource"); err == nil {
		h.Clocksources = strings.Fields(string(b))
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
// virtualization (vmx or svm), the host is not itself a TCG guest (whose
// svm is emulated), /dev/kvm opens read-write, and the KVM module is not
// kvm_pvm (PVM's /dev/kvm runs only PVM-enabled guest kernels, not a
// stock one). Anything else is TCG, with the reason.
func Detect(h Host) AccelInfo {
	if !hasAny(h.CPUFlags, "vmx", "svm") {
		return AccelInfo{Accel: AccelTCG, Reason: "the CPU has no hardware virtualization (no vmx or svm flag)"}
	}
	if h.tcgGuest() {
		return AccelInfo{Accel: AccelTCG, Reason: "this machine is itself a QEMU guest under TCG: its vmx/svm is emulated (a VM here would be an emulator inside an emulator)"}
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
