package daemon

import "testing"

func TestSystemdUnitCgroup(t *testing.T) {
	for path, want := range map[string]bool{
		"/vessel.slice/vessel-instances.service": true,
		"/machine.slice/vessel.scope":            true,
		"/vessel.slice":                          true,
		"/vessel":                                false,
		"/vessel-test-ab12":                      false,
		"/system.slice/x.service/vessel":         false,
	} {
		if got := systemdUnitCgroup(path); got != want {
			t.Errorf("systemdUnitCgroup(%q) = %v, want %v", path, got, want)
		}
	}
}
