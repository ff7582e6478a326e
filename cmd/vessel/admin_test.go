package main

import (
	"bufio"
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestHostConfigValidate(t *testing.T) {
	ok := func(mod func(*hostConfig)) hostConfig {
		c := defaultHostConfig()
		mod(&c)
		return c
	}
	for _, c := range []struct {
		name string
		cfg  hostConfig
		bad  string // part of the error; "" for valid
	}{
		{"defaults", defaultHostConfig(), ""},
		{"device", ok(func(c *hostConfig) { c.StorageDevice = "/dev/vdb" }), ""},
		{"relative device", ok(func(c *hostConfig) { c.StorageDevice = "vdb" }), "absolute path"},
		{"unclean device", ok(func(c *hostConfig) { c.StorageDevice = "/dev/../dev/vdb" }), "absolute path"},
		{"device and size", ok(func(c *hostConfig) { c.StorageDevice, c.StorageSize = "/dev/vdb", 30<<30 }), "pool file"},
		{"small pool", ok(func(c *hostConfig) { c.StorageSize = 100 << 20 }), "at least 1GiB"},
		{"long bridge", ok(func(c *hostConfig) { c.Bridge = "abcdefghijklmnop" }), "1 to 15"},
		{"bridge with space", ok(func(c *hostConfig) { c.Bridge = "br 0" }), "spaces"},
		{"empty bridge", ok(func(c *hostConfig) { c.Bridge = "" }), "1 to 15"},
		{"ipv6 subnet", ok(func(c *hostConfig) { c.Subnet = "fd00::/64" }), "IPv4 CIDR"},
		{"no prefix", ok(func(c *hostConfig) { c.Subnet = "10.0.0.1" }), "IPv4 CIDR"},
		{"tiny subnet", ok(func(c *hostConfig) { c.Subnet = "10.0.0.0/31" }), "too small"},
		{"device idle 0", ok(func(c *hostConfig) { c.StorageDevice, c.StorageDeviceIdle = "/dev/vdb", 0 }), ""},
		{"negative device idle", ok(func(c *hostConfig) { c.StorageDeviceIdle = -time.Millisecond }), "storage device idle"},
		{"long device idle", ok(func(c *hostConfig) { c.StorageDeviceIdle = 2 * time.Second }), "storage device idle"},
		{"listen", ok(func(c *hostConfig) { c.Listen = []string{":8443", "[::1]:8443", "192.0.2.1:443"} }), ""},
		{"listen no port", ok(func(c *hostConfig) { c.Listen = []string{"192.0.2.1"} }), "host:port"},
		{"listen port 0", ok(func(c *hostConfig) { c.Listen = []string{":0"} }), "1..65535"},
	} {
		err := c.cfg.validate()
		switch {
		case c.bad == "" && err != nil:
			t.Errorf("%s: %v", c.name, err)
		case c.bad != "" && (!errors.Is(err, errInvalid) || !strings.Contains(err.Error(), c.bad)):
			t.Errorf("%s: error %v, want errInvalid with %q", c.name, err, c.bad)
		}
	}
	c := ok(func(c *hostConfig) { c.Subnet = "10.9.8.7/16" })
	if err := c.validate(); err != nil || c.Subnet != "10.9.0.0/16" {
		t.Errorf("subnet 10.9.8.7/16 became %q (%v), want 10.9.0.0/16", c.Subnet, err)
	}
}

// The environment file sets exactly vesseld's variables for each setting,
// and reads back to the same values.
func TestRenderEnv(t *testing.T) {
	now := time.Date(2026, 11, 20, 10, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		name string
		cfg  hostConfig
		want map[string]string
	}{
		{"defaults", defaultHostConfig(), map[string]string{
			"VESSEL_STORAGE_SIZE": "20480", "VESSEL_BRIDGE": "vesselbr0", "VESSEL_SUBNET": "10.87.0.0/24"}},
		{"device and listen", hostConfig{StorageDevice: "/dev/disk/by-uuid/1234", StorageDeviceIdle: defaultStorageDeviceIdle,
			Bridge: "br1", Subnet: "10.1.0.0/16", Listen: []string{":8443", "[::1]:9443"}}, map[string]string{
			"VESSEL_STORAGE_DEVICE": "/dev/disk/by-uuid/1234", "VESSEL_STORAGE_DEVICE_IDLE": "30ms", "VESSEL_BRIDGE": "br1",
			"VESSEL_SUBNET": "10.1.0.0/16", "VESSEL_LISTEN": ":8443,[::1]:9443"}},
		{"pool size", hostConfig{StorageSize: 50 << 30, Bridge: "vesselbr0", Subnet: "10.87.0.0/24"}, map[string]string{
			"VESSEL_STORAGE_SIZE": "51200", "VESSEL_BRIDGE": "vesselbr0", "VESSEL_SUBNET": "10.87.0.0/24"}},
	} {
		text := renderEnv(c.cfg, now)
		got := parseEnv(text)
		if len(got) != len(c.want) {
			t.Errorf("%s: variables %v, want %v", c.name, got, c.want)
		}
		for k, v := range c.want {
			if got[k] != v {
				t.Errorf("%s: %s=%q, want %q", c.name, k, got[k], v)
			}
		}
		for _, line := range strings.Split(strings.TrimSpace(text), "\n") {
			if !strings.HasPrefix(line, "#") && !strings.HasPrefix(line, "VESSEL_") {
				t.Errorf("%s: line %q is neither a comment nor a VESSEL_ setting", c.name, line)
			}
		}
		if !strings.Contains(text, "2026-11-20T10:00:00Z") {
			t.Errorf("%s: no date in the header", c.name)
		}
	}
}

func TestParseSize(t *testing.T) {
	for in, want := range map[string]int64{
		"20GiB": 20 << 30, "20G": 20 << 30, "500MiB": 500 << 20, "1TiB": 1 << 40, "4096": 4096, "2 gib": 2 << 30,
	} {
		if got, err := parseSize(in); err != nil || got != want {
			t.Errorf("parseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "GiB", "-1GiB", "20XB", "1.5GiB", "99999999999TiB"} {
		if _, err := parseSize(in); !errors.Is(err, errInvalid) {
			t.Errorf("parseSize(%q): %v, want errInvalid", in, err)
		}
	}
	if s := formatSize(20 << 30); s != "20GiB" {
		t.Errorf("formatSize(20GiB) = %s", s)
	}
	if s := formatSize(1536 << 20); s != "1536MiB" {
		t.Errorf("formatSize(1.5GiB) = %s", s)
	}
}

func TestCheckDevice(t *testing.T) {
	for _, c := range []struct {
		name  string
		info  deviceInfo
		force bool
		bad   string
	}{
		{"blank", deviceInfo{Block: true}, false, ""},
		{"not a block device", deviceInfo{}, true, "not a block device"},
		{"in use", deviceInfo{Block: true, InUse: true}, true, "in use"},
		{"filesystem", deviceInfo{Block: true, Signature: "a filesystem (ext4)"}, false, "--force"},
		{"filesystem forced", deviceInfo{Block: true, Signature: "a filesystem (ext4)"}, true, ""},
	} {
		err := checkDevice("/dev/vdb", c.info, c.force)
		switch {
		case c.bad == "" && err != nil:
			t.Errorf("%s: %v", c.name, err)
		case c.bad != "" && (err == nil || !strings.Contains(err.Error(), c.bad)):
			t.Errorf("%s: error %v, want one with %q", c.name, err, c.bad)
		}
	}
	for kv, want := range map[string]string{
		"DEVNAME=/dev/vdb\nTYPE=ext4\nUSAGE=filesystem\n": "a filesystem (ext4)",
		"DEVNAME=/dev/vdb\nPTTYPE=gpt\n":                  "a partition table (gpt)",
		"DEVNAME=/dev/vdb\n":                              "",
	} {
		if got := signature(parseEnv(kv)); got != want {
			t.Errorf("signature(%q) = %q, want %q", kv, got, want)
		}
	}
}

func TestAsk(t *testing.T) {
	var out bytes.Buffer
	c := defaultHostConfig()
	// Enter keeps a default; each answer replaces one.
	in := "\n30GiB\nbr7\n\n:8443\n"
	if err := ask(bufio.NewReader(strings.NewReader(in)), &out, &c); err != nil {
		t.Fatal(err)
	}
	if c.StorageDevice != "" || c.StorageSize != 30<<30 || c.Bridge != "br7" || c.Subnet != defaultSubnet ||
		len(c.Listen) != 1 || c.Listen[0] != ":8443" {
		t.Errorf("answers gave %+v", c)
	}
	if !strings.Contains(out.String(), "[20GiB]") || !strings.Contains(out.String(), "[vesselbr0]") {
		t.Errorf("prompts show no defaults:\n%s", out.String())
	}
	c = defaultHostConfig()
	if err := ask(bufio.NewReader(strings.NewReader("/dev/vdb\nvesselbr0\n10.5.0.0/24\nnone\n")), &out, &c); err != nil {
		t.Fatal(err)
	}
	if c.StorageDevice != "/dev/vdb" || c.StorageSize != 0 || c.Subnet != "10.5.0.0/24" || c.Listen != nil {
		t.Errorf("answers gave %+v", c)
	}
}

// A second init on a set-up host changes nothing without --force, and
// without --auto init refuses to ask where there is no terminal.
func TestInitOnceAndNoTerminal(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("init checks for root first")
	}
	env := filepath.Join(t.TempDir(), "vesseld.env")
	if err := os.WriteFile(env, []byte("VESSEL_BRIDGE=br9\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	o := &initOptions{auto: true, envFile: env, cfg: defaultHostConfig()}
	if err := runInit(t.Context(), strings.NewReader(""), &out, o); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(env); string(b) != "VESSEL_BRIDGE=br9\n" || !strings.Contains(out.String(), "nothing changed") {
		t.Errorf("second init: file %q, output %q", b, out.String())
	}
	o = &initOptions{envFile: filepath.Join(t.TempDir(), "new.env"), cfg: defaultHostConfig()}
	if err := runInit(t.Context(), strings.NewReader(""), &out, o); err == nil || !strings.Contains(err.Error(), "--auto") {
		t.Errorf("init without --auto and a terminal: %v", err)
	}
}

func TestWriteEnvFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "etc", "vessel", "vesseld.env")
	for _, text := range []string{"VESSEL_BRIDGE=a\n", "VESSEL_BRIDGE=b\n"} {
		if err := writeEnvFile(path, text); err != nil {
			t.Fatal(err)
		}
		if b, _ := os.ReadFile(path); string(b) != text {
			t.Errorf("file has %q, want %q", b, text)
		}
	}
	if _, err := os.Stat(path + ".new"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("temporary file left: %v", err)
	}
}
