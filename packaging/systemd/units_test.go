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

// wantAll fails unless every value is among the key's values (each line
// may list several, space-separated, as Wants= and After= do).
func (u unit) wantAll(t *testing.T, section, key string, values ...string) {
	t.Helper()
	have := map[string]bool{}
	for _, v := range u[section][key] {
		if key == "Environment" {
			have[v] = true
			continue
		}
		for _, f := range strings.Fields(v) {
			have[f] = true
		}
	}
	for _, v := range values {
		if !have[v] {
			t.Errorf("[%s] %s = %v, want %q among them", section, key, u[section][key], v)
		}
	}
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

// instancesCgroup is vessel-instances.service's cgroup in vessel.slice.
const instancesCgroup = "/vessel.slice/vessel-instances.service"

func TestService(t *testing.T) {
	u := parseUnit(t, "vesseld.service")
	u.want(t, "Service", "Type", "notify")
	u.want(t, "Service", "Slice", "vessel-control.slice")
	// vesseld makes no cgroup below its own: not delegated.
	if d := u["Service"]["Delegate"]; len(d) > 0 {
		t.Errorf("Delegate = %v, want none", d)
	}
	u.want(t, "Service", "KillMode", "process")
	u.want(t, "Service", "ExecStart", "/usr/bin/vesseld")
	u.wantAll(t, "Service", "Environment",
		"VESSEL_CONTROL_CGROUP="+daemon.NoControlCgroup,
		"VESSEL_CGROUP_PARENT="+instancesCgroup)
	u.want(t, "Service", "EnvironmentFile", "-/etc/vessel/vesseld.env")
	u.wantAll(t, "Unit", "Wants", "vessel-instances.service")
	u.wantAll(t, "Unit", "After", "vessel-instances.service")
	u.want(t, "Unit", "PartOf", "vessel-instances.service")
	u.want(t, "Install", "WantedBy", "multi-user.target")
	nofile, err := strconv.Atoi(u["Service"]["LimitNOFILE"][0])
	if err != nil || nofile < 65536 {
		t.Errorf("LimitNOFILE = %v, want a high number", u["Service"]["LimitNOFILE"])
	}
}

func TestContainersSlice(t *testing.T) {
	u := parseUnit(t, "vessel.slice")
	u.want(t, "Slice", "CPUWeight", strconv.Itoa(cgroups.DefaultCPUWeight))
	u.want(t, "Slice", "TasksMax", "infinity")
	// The control plane's slice weighs 10x the containers'.
	c := parseUnit(t, "vessel-control.slice")
	if cw, _ := strconv.Atoi(c["Slice"]["CPUWeight"][0]); cw != 10*cgroups.DefaultCPUWeight {
		t.Errorf("vessel-control.slice CPUWeight %d, want 10x vessel.slice's", cw)
	}
}

func TestInstances(t *testing.T) {
	u := parseUnit(t, "vessel-instances.service")
	// The cgroup systemd gives the unit is the one vesseld.service names.
	if want := "/" + u["Service"]["Slice"][0] + "/vessel-instances.service"; want != instancesCgroup {
		t.Errorf("unit cgroup %s, want %s", want, instancesCgroup)
	}
	u.want(t, "Service", "Slice", "vessel.slice")
	u.want(t, "Service", "Delegate", "yes")
	u.want(t, "Service", "Type", "notify") // hold reports ready from its leaf
	u.want(t, "Service", "ExecStart", "/usr/bin/vesseld hold")
	u.want(t, "Service", "KillMode", "control-group")
	u.want(t, "Service", "OOMScoreAdjust", "-1000")
	u.want(t, "Service", "TasksMax", "infinity")
	u.want(t, "Install", "WantedBy", "multi-user.target")
	if r := u["Service"]["Restart"]; len(r) > 0 && r[len(r)-1] != "no" {
		t.Errorf("Restart = %v: a new holder cannot enter a cgroup with controlled children", r)
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
	out, err := exec.Command(bin, "verify", "--man=no", "vessel-control.slice", "vesseld.service",
		"vessel.slice", "vessel-instances.service").CombinedOutput()
	// verify complains about the ExecStart binary when vessel is not
	// installed; anything else is a real problem.
	for _, l := range strings.Split(string(out), "\n") {
		if l != "" && !strings.Contains(l, "/usr/bin/vesseld") {
			t.Errorf("systemd-analyze verify (%v): %s", err, l)
		}
	}
}
