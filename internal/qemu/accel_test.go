package qemu

import (
	"errors"
	"os"
	"strings"
	"testing"
)

func TestDetect(t *testing.T) {
	ok := func() error { return nil }
	for _, tc := range []struct {
		name   string
		host   Host
		want   Accel
		reason string
	}{
		{"vmx, kvm usable", Host{CPUFlags: []string{"fpu", "vmx"}, OpenKVM: ok, Modules: []string{"kvm", "kvm_intel"}}, AccelKVM, ""},
		{"svm, kvm usable", Host{CPUFlags: []string{"svm"}, OpenKVM: ok, Modules: []string{"kvm", "kvm_amd"}}, AccelKVM, ""},
		{"no vmx/svm", Host{CPUFlags: []string{"fpu", "hypervisor"}, OpenKVM: ok, Modules: []string{"kvm"}}, AccelTCG, "no vmx or svm"},
		{"kvm_pvm", Host{CPUFlags: []string{"vmx"}, OpenKVM: ok, Modules: []string{"kvm", "kvm_pvm"}}, AccelTCG, "kvm_pvm"},
		{"TCG guest, emulated svm", Host{CPUFlags: []string{"svm", "hypervisor"}, OpenKVM: ok, Modules: []string{"kvm", "kvm_amd"}, SysVendor: "QEMU", Clocksources: []string{"tsc", "hpet", "acpi_pm"}}, AccelTCG, "TCG"},
		{"KVM guest, nested svm", Host{CPUFlags: []string{"svm", "hypervisor"}, OpenKVM: ok, Modules: []string{"kvm", "kvm_amd"}, SysVendor: "QEMU", Clocksources: []string{"kvm-clock", "tsc"}}, AccelKVM, ""},
		{"bare metal, QEMU-less vendor", Host{CPUFlags: []string{"vmx"}, OpenKVM: ok, Modules: []string{"kvm", "kvm_intel"}, SysVendor: "Dell Inc.", Clocksources: []string{"tsc", "hpet"}}, AccelKVM, ""},
		{"no /dev/kvm", Host{CPUFlags: []string{"vmx"}, OpenKVM: func() error { return os.ErrNotExist }}, AccelTCG, "no /dev/kvm"},
		{"/dev/kvm denied", Host{CPUFlags: []string{"vmx"}, OpenKVM: func() error { return errors.New("permission denied") }}, AccelTCG, "permission denied"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Detect(tc.host)
			if got.Accel != tc.want || !strings.Contains(got.Reason, tc.reason) || (tc.want == AccelKVM) != (got.Reason == "") {
				t.Fatalf("Detect = %+v, want %s with a reason containing %q", got, tc.want, tc.reason)
			}
		})
	}
}

func TestCPUFlags(t *testing.T) {
	info := "processor\t: 0\nvendor_id\t: GenuineIntel\nflags\t\t: fpu vme vmx sse\n\nprocessor\t: 1\nflags\t\t: fpu\n"
	got := cpuFlags([]byte(info))
	if strings.Join(got, " ") != "fpu vme vmx sse" {
		t.Fatalf("cpuFlags = %q", got)
	}
}

// TestHostProbe reads this host: whatever it decides, a TCG decision says
// why.
func TestHostProbe(t *testing.T) {
	a := Detect(HostProbe())
	if a.Accel == AccelTCG && a.Reason == "" {
		t.Fatalf("TCG without a reason: %+v", a)
	}
	t.Logf("this host: %+v", a)
}
