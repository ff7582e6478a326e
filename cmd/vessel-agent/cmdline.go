package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"path"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// bootConfig is what init takes from the kernel command line.
type bootConfig struct {
	Root       string // the root disk, e.g. /dev/vda
	RootFSType string
	ReadOnly   bool
	Init       string
	Net        *netConfig
	Rescue     string // shell, sleep or poweroff
	Hostname   string
	// NewMachineID: empty the root's machine ID before the image's init
	// runs (vessel.newid=1, a copy's first boot).
	NewMachineID bool
	// StopSignal is what the ACPI power button sends PID 1 (0: nothing;
	// an image with an ACPI daemon, systemd's logind, handles it).
	StopSignal unix.Signal
}

// netConfig is vessel.net=<ifname-or-mac>,<cidr>,<gw>,<dns>.
type netConfig struct {
	Name string           // an interface name, or empty when MAC is set
	MAC  net.HardwareAddr // the interface's MAC, or nil
	Addr netip.Prefix
	GW   netip.Addr // invalid: no default route
	DNS  netip.Addr // invalid: resolv.conf is left alone
}

// parseCmdline reads a kernel command line. Unknown words are ignored (the
// kernel and the image's init read them too).
func parseCmdline(line string) (bootConfig, error) {
	c := bootConfig{RootFSType: "ext4", Init: "/sbin/init", Rescue: "poweroff"}
	for _, w := range strings.Fields(line) {
		k, v, _ := strings.Cut(w, "=")
		switch k {
		case "root":
			c.Root = v
		case "rootfstype":
			c.RootFSType = v
		case "ro":
			c.ReadOnly = true
		case "rw":
			c.ReadOnly = false
		case "vessel.init":
			if !path.IsAbs(v) {
				return c, fmt.Errorf("vessel.init=%q: not an absolute path", v)
			}
			c.Init = v
		case "vessel.rescue":
			switch v {
			case "shell", "sleep", "poweroff":
				c.Rescue = v
			default:
				return c, fmt.Errorf("vessel.rescue=%q: not shell, sleep or poweroff", v)
			}
		case "vessel.hostname":
			if v == "" || len(v) > 64 || strings.ContainsAny(v, "/ ") {
				return c, fmt.Errorf("vessel.hostname=%q: not a host name", v)
			}
			c.Hostname = v
		case "vessel.newid":
			c.NewMachineID = v == "1"
		case "vessel.stopsignal":
			sig := unix.SignalNum(strings.ToUpper(v))
			if sig == 0 {
				sig = unix.SignalNum("SIG" + strings.ToUpper(v))
			}
			if n, err := strconv.Atoi(v); err == nil && n > 0 && n < 65 {
				sig = unix.Signal(n)
			}
			if sig == 0 {
				return c, fmt.Errorf("vessel.stopsignal=%q: not a signal", v)
			}
			c.StopSignal = sig
		case "vessel.net":
			n, err := parseNet(v)
			if err != nil {
				return c, fmt.Errorf("vessel.net=%q: %w", v, err)
			}
			c.Net = n
		}
	}
	if c.Root == "" {
		return c, errors.New("no root= on the kernel command line")
	}
	if !strings.HasPrefix(c.Root, "/dev/") {
		return c, fmt.Errorf("root=%q: only /dev/ paths are supported", c.Root)
	}
	return c, nil
}

func parseNet(v string) (*netConfig, error) {
	f := strings.Split(v, ",")
	if len(f) < 2 || len(f) > 4 {
		return nil, errors.New("want <ifname-or-mac>,<cidr>[,<gw>[,<dns>]]")
	}
	for len(f) < 4 {
		f = append(f, "")
	}
	n := &netConfig{}
	if mac, err := net.ParseMAC(f[0]); err == nil {
		n.MAC = mac
	} else if f[0] != "" && !strings.ContainsAny(f[0], "/ ") && len(f[0]) < 16 {
		n.Name = f[0]
	} else {
		return nil, fmt.Errorf("%q is neither an interface name nor a MAC", f[0])
	}
	var err error
	if n.Addr, err = netip.ParsePrefix(f[1]); err != nil {
		return nil, err
	}
	if f[2] != "" {
		if n.GW, err = netip.ParseAddr(f[2]); err != nil {
			return nil, err
		}
	}
	if f[3] != "" {
		if n.DNS, err = netip.ParseAddr(f[3]); err != nil {
			return nil, err
		}
	}
	return n, nil
}

// module is one line of /lib/modules/vessel.load: a module file (relative
// to /lib/modules/, or absolute) and its parameters.
type module struct {
	Path   string
	Params string
}

// parseLoadList reads vessel.load: one module a line in load order, blank
// lines and lines starting with # ignored, parameters after the path.
func parseLoadList(r io.Reader) ([]module, error) {
	var mods []module
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		p, params, _ := strings.Cut(line, " ")
		if !path.IsAbs(p) {
			p = path.Join("/lib/modules", p)
		}
		mods = append(mods, module{Path: p, Params: strings.TrimSpace(params)})
	}
	return mods, sc.Err()
}
