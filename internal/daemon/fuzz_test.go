package daemon

import (
	"encoding/json"
	"testing"

	"github.com/vesselhost/vessel/internal/api"
	"github.com/vesselhost/vessel/internal/migration"
)

// FuzzInstanceConfig: the configuration a client sends (POST
// /1.0/instances, PATCH /1.0/instances/NAME) or a peer's Hello carries, as
// the daemon validates it. A configuration that validates must convert to
// cgroup limits without error, with or without the host's defaults, and
// every limit must be in the kernel's range.
func FuzzInstanceConfig(f *testing.F) {
	f.Add([]byte(`{"name":"web1","source":{"type":"image","image":"busybox"},"config":{"limits.memory":"512MiB","limits.cpu":"1.5","limits.processes":"100"},"start":true}`))
	f.Add([]byte(`{"name":"c","config":{"limits.memory":"unlimited","limits.disk.read":"20MB/s","limits.disk.write_iops":"100iops","limits.disk.weight":"500","user.x":"y"}}`))
	f.Add([]byte(`{"name":"c","config":{"limits.memory":"1e400","limits.cpu":"NaN","limits.processes":"99999999999999999999"}}`))
	f.Add([]byte(`{"name":"../x","config":{"limits.cpu.weight":"0"}}`))
	defaults := deriveDefaultLimits(8<<30, 32768)
	f.Fuzz(func(t *testing.T, body []byte) {
		var req api.InstancesPost
		if json.Unmarshal(body, &req) != nil {
			return
		}
		_ = ValidateName("instance", req.Name)
		if validateConfig(req.Config) != nil {
			return
		}
		for _, cfg := range []map[string]string{req.Config, withDefaultsOf(defaults, req.Config)} {
			r, err := resourcesFromConfig(cfg, []string{"7:3"})
			if err != nil {
				t.Fatalf("validated configuration %v does not convert: %v", cfg, err)
			}
			if r.MemoryMax < 0 || r.PidsMax < 0 || r.PidsMax > maxProcesses || r.CPUQuota < 0 || r.CPUQuota > maxCores {
				t.Fatalf("validated configuration %v gives limits out of range: %+v", cfg, r)
			}
		}
	})
}

// withDefaultsOf is Daemon.withDefaults for a given set of defaults.
func withDefaultsOf(defaults, cfg map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range defaults {
		out[k] = v
	}
	for k, v := range cfg {
		out[k] = v
	}
	return out
}

// FuzzPeerHello: the Hello a migration peer opens its session with, as far
// as the target checks it before reserving anything: the instance's name
// and configuration.
func FuzzPeerHello(f *testing.F) {
	f.Add([]byte(`{"version":1,"source":"alpha","instance":{"name":"web1","image":"busybox","init":["/sbin/init"],"config":{"limits.memory":"64MiB"},"stop_signal":"SIGUSR2","address":"10.87.0.5"},"live":true,"memory":"lazy","snapshots":2,"keep_address":true,"transfer_format":"btrfs"}`))
	f.Add([]byte(`{"instance":{"name":"","address":"::1","config":{"limits.bogus":"1"}}}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		var h migration.Hello
		if json.Unmarshal(body, &h) != nil {
			return
		}
		_ = ValidateName("instance", h.Instance.Name)
		if validateConfig(h.Instance.Config) == nil {
			if _, err := resourcesFromConfig(h.Instance.Config, nil); err != nil {
				t.Fatalf("validated configuration %v does not convert: %v", h.Instance.Config, err)
			}
		}
	})
}

// FuzzSizes: the size, rate, IOPS and core values of limits keys.
func FuzzSizes(f *testing.F) {
	for _, s := range []string{"512MiB", "1.5GB", "4096", "10MB/s", "100iops", "0.5", "1e9", "9223372036854775807", "  2g ", "1.0000000000000000001TiB"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if n, err := parseSize(s); err == nil && (n < 0 || n > maxSize) {
			t.Fatalf("parseSize(%q) = %d: out of range", s, n)
		}
		if n, err := parseRate(s); err == nil && (n < 0 || n > maxSize) {
			t.Fatalf("parseRate(%q) = %d: out of range", s, n)
		}
		if n, err := parseIOPS(s); err == nil && n < 0 {
			t.Fatalf("parseIOPS(%q) = %d", s, n)
		}
		_, _ = parseCores(s)
	})
}
