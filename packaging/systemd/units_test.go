package systemd

import (
	"bufio"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/vesselhost/vessel/internal/cgroups"
	"github.com/vesselhost/vessel/internal/daemon"
)

// unit is a parsed unit file: section -> key -> values (keys may repeat).
type unit map[string]map[string][]string

// parseUnit reads a systemd unit file: [Section] headers, Key=Value lines,
// # and ; comments, and backslash continuations.
func parseUnit(t *testing.T, path string) unit {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	u := unit{}
	section := ""
	sc := bufio.NewScanner(f)
	n := 0
	for sc.Scan() {
		n++
		line := strings.TrimSpace(sc.Text())
		for strings.HasSuffix(line, "\\") && sc.Scan() {
			n++
			line = strings.TrimSuffix(line, "\\") + " " + strings.TrimSpace(sc.Text())
		}
		switch {
		case line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, ";"):
		case strings.HasPrefix(line, "[") && strings.HasSuffix(line, "]"):
			section = line[1 : len(line)-1]
			if u[section] == nil {
				u[section] = map[string][]string{}
			}
		default:
			k, v, ok := strings.Cut(line, "=")
			if !ok || section == "" || strings.TrimSpace(k) == "" {
				t.Fatalf("%s:%d: not a Key=Value line in a section: %q", path, n, line)
			}
			k = strings.TrimSpace(k)
			u[section][k] = append(u[section][k], strings.TrimSpace(v))
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return u
}

func (u unit) want(t *testing.T, section, key, value string) {
	t.Helper()
	vs := u[section][key]
	if len(vs) == 0 || vs[len(vs)-1] != value {
		t.Errorf("[%s] %s = %v, want %q", section, key, vs, value)
	}
}

func TestSlice(t *testing.T) {
	u := parseUnit(t, "vessel-control.slice")
	u.want(t, "Slice", "CPUWeight", strconv.Itoa(daemon.DefaultControlCPUWeight))
	// The same 10x as vesseld's own control cgroup, and as XenServer's
	// CPUShares=10240 on v1 through the linear conversion.
	if got := cgroups.CPUWeightToShares(daemon.DefaultControlCPUWeight); got != 10240 {
		t.Errorf("CPUWeight=%d is cpu.shares=%d on v1, want 10240", daemon.DefaultControlCPUWeight, got)
	}
	if u["Unit"]["Description"] == nil {
		t.Errorf("no description")
	}
}

func TestService(t *testing.T) {
	u := parseUnit(t, "vesseld.service")
	u.want(t, "Service", "Slice", "vessel-control.slice")
	u.want(t, "Service", "Delegate", "yes")
	u.want(t, "Service", "KillMode", "process")
	u.want(t, "Service", "ExecStart", "/usr/bin/vesseld")
	u.want(t, "Service", "Environment", "VESSEL_CONTROL_CGROUP="+daemon.NoControlCgroup)
	u.want(t, "Install", "WantedBy", "multi-user.target")
	nofile, err := strconv.Atoi(u["Service"]["LimitNOFILE"][0])
	if err != nil || nofile < 65536 {
		t.Errorf("LimitNOFILE = %v, want a high number", u["Service"]["LimitNOFILE"])
	}
}

// TestVerify runs systemd-analyze verify (the systemd package is installed
// on the development VM even though systemd is not running there).
func TestVerify(t *testing.T) {
	bin, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Logf("systemd-analyze not installed: only the Go checks ran")
		return
	}
	out, err := exec.Command(bin, "verify", "--man=no", "vessel-control.slice", "vesseld.service").CombinedOutput()
	// verify complains about the ExecStart binary when vessel is not
	// installed; anything else is a real problem.
	for _, l := range strings.Split(string(out), "\n") {
		if l != "" && !strings.Contains(l, "/usr/bin/vesseld") {
			t.Errorf("systemd-analyze verify (%v): %s", err, l)
		}
	}
}
