package testhost

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/vesselhost/vessel/internal/network"
)

// A Cluster is several test hosts on one machine, as live migration needs
// them: each vesseld runs in its own network namespace with its own root,
// pool and bridge, and the hosts share one L2 segment, a bridge in the
// machine's own namespace:
//
//	machine namespace: bridge SEG  GATEWAY/24 (the containers' router) + MGMT.1/24
//	  ├── veth ─ NS(alpha): mgmt0   MGMT.2/24   (API: https://MGMT.2:8443)
//	  ├── veth ─ NS(alpha): uplink0 (enslaved to alpha's vesselbr0)
//	  ├── veth ─ NS(beta):  mgmt0   MGMT.3/24
//	  ├── veth ─ NS(beta):  uplink0 (enslaved to beta's vesselbr0)
//	  └── veth ─ NS(client): eth0   SUBNET.254/24 (the client, ClientNetns)
//
// All hosts use the same container subnet, each allocating from its own
// pool, so a container keeps its address when it moves: after a migration
// its MAC simply appears behind another port of the segment. The machine's
// namespace is "the outside world" tests talk to containers from; the
// client namespace is a machine beside the containers on their segment,
// with an address of their subnet (the last one, which the hosts' pools
// hand out last), for what must be seen from the segment itself (a
// container's gratuitous ARP, its downtime seen by a client during a move).
//
// Every host trusts the others as peers, and the cluster's CLI
// configuration has each host as a remote named after it.
type Cluster struct {
	t    T
	bin  string
	spec ClusterSpec
	// Hosts in the order of spec.Names.
	Hosts []*Host
}

// ClusterSpec names and addresses everything a cluster makes; it is also
// what scripts/testhosts saves to bring the cluster down later.
type ClusterSpec struct {
	Names   []string `json:"names"`
	Netns   []string `json:"netns"`
	Segment string   `json:"segment"`
	Links   []string `json:"links"`
	// Client is the client's network namespace, ClientLink its veth end
	// on the segment.
	Client     string       `json:"client,omitempty"`
	ClientLink string       `json:"client_link,omitempty"`
	Subnet     netip.Prefix `json:"subnet"`
	Mgmt       netip.Prefix `json:"mgmt"`
	Roots      []string     `json:"roots"`
	CLIConfig  string       `json:"cli_config"`
	Pids       []int        `json:"pids,omitempty"`
	// StorageSizeMiB is each host's pool size.
	StorageSizeMiB int `json:"storage_size_mib"`
	// Detached clusters outlive the program that made them.
	Detached bool `json:"detached"`
	// SharedCLIConfig says CLIConfig is the user's own file: teardown
	// removes only the cluster's remotes from it.
	SharedCLIConfig bool `json:"shared_cli_config"`
	// HostArgs are more vesseld flags for every host.
	HostArgs []string `json:"host_args,omitempty"`
}

// ClusterOptions choose a cluster's names; zero values give a private
// cluster for one test (random names and subnets, torn down at cleanup).
type ClusterOptions struct {
	// Names of the hosts (default alpha, beta).
	Names []string
	// Fixed uses the names themselves for the network namespaces and
	// "vslseg0" for the segment (scripts/testhosts), instead of random ones.
	Fixed bool
	// RootDir holds the hosts' roots (default a temporary directory).
	RootDir string
	// CLIConfig is the CLI configuration to register remotes in (default a
	// file in the first host's root).
	CLIConfig string
	// StorageSizeMiB is each host's pool size (default 2048).
	StorageSizeMiB int
	// Detached: see ClusterSpec.
	Detached bool
	// HostArgs are more vesseld flags for every host.
	HostArgs []string
}

// NewCluster builds the network, starts the hosts and introduces them to
// each other and to the CLI.
func NewCluster(t T, bin string, o ClusterOptions) *Cluster {
	t.Helper()
	if len(o.Names) == 0 {
		o.Names = []string{"alpha", "beta"}
	}
	if len(o.Names) > 8 {
		t.Fatalf("at most 8 hosts")
	}
	id := randHex(3)
	spec := ClusterSpec{Names: o.Names, StorageSizeMiB: o.StorageSizeMiB, Detached: o.Detached, HostArgs: o.HostArgs}
	if o.Fixed {
		spec.Segment = "vslseg0"
		spec.Subnet = netip.MustParsePrefix("10.88.0.0/24")
		spec.Mgmt = netip.MustParsePrefix("192.168.250.0/24")
	} else {
		spec.Segment = "vs" + id
		spec.Subnet = freeSubnet(t)
		m := freeSubnet(t).Addr().As4()
		spec.Mgmt = netip.PrefixFrom(netip.AddrFrom4([4]byte{172, 30, m[2], 0}), 24)
	}
	rootDir := o.RootDir
	if rootDir == "" {
		rootDir = os.TempDir()
	}
	for i, n := range o.Names {
		ns := n
		if !o.Fixed {
			ns = "vt" + id + "-" + n
		}
		spec.Netns = append(spec.Netns, ns)
		spec.Links = append(spec.Links, fmt.Sprintf("vs%s%dm", shortID(id, o.Fixed), i), fmt.Sprintf("vs%s%du", shortID(id, o.Fixed), i))
		spec.Roots = append(spec.Roots, filepath.Join(rootDir, "vessel-"+ns))
	}
	spec.Client, spec.ClientLink = "vt"+id+"-client", "vs"+id+"c"
	if o.Fixed {
		spec.Client, spec.ClientLink = "vslclient", "vslc"
	}
	spec.CLIConfig = o.CLIConfig
	spec.SharedCLIConfig = o.CLIConfig != ""
	if spec.CLIConfig == "" {
		spec.CLIConfig = filepath.Join(spec.Roots[0]+"-cli", "config.yml")
	}
	c := &Cluster{t: t, bin: bin, spec: spec}
	if !o.Detached {
		t.Cleanup(c.Teardown)
	}
	c.buildNetwork()
	c.startHosts()
	c.introduce()
	return c
}

func shortID(id string, fixed bool) string {
	if fixed {
		return "l"
	}
	return id
}

// Spec returns what the cluster is made of.
func (c *Cluster) Spec() ClusterSpec {
	s := c.spec
	s.Pids = nil
	for _, h := range c.Hosts {
		s.Pids = append(s.Pids, h.PID())
	}
	return s
}

// Host returns the host called name.
func (c *Cluster) Host(name string) *Host {
	for _, h := range c.Hosts {
		if h.Name() == name {
			return h
		}
	}
	c.t.Fatalf("no host %q", name)
	return nil
}

// Gateway is the segment's router address (in the machine's namespace):
// the address tests reach containers from.
func (c *Cluster) Gateway() netip.Addr { return c.spec.Subnet.Addr().Next() }

// ClientNetns is the client's network namespace (under /run/netns): a
// machine on the containers' segment and subnet, at ClientAddr.
func (c *Cluster) ClientNetns() string { return c.spec.Client }

// ClientAddr is the client's address: the subnet's last host address.
func (c *Cluster) ClientAddr() netip.Addr {
	b := c.spec.Subnet.Masked().Addr().As4()
	v := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
	v |= 1<<(32-c.spec.Subnet.Bits()) - 2 // all host bits but the last: broadcast - 1
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}

func (c *Cluster) mgmtAddr(i int) netip.Addr {
	a := c.spec.Mgmt.Addr().Next()
	for j := 0; j <= i; j++ {
		a = a.Next()
	}
	return a
}

// pool is host i's share of the container subnet.
func (c *Cluster) pool(i int) netip.Prefix {
	bits := c.spec.Subnet.Bits()
	for n := 1; n < len(c.spec.Names); n *= 2 {
		bits++ // one bit per doubling: 2 hosts get halves, 3-4 quarters
	}
	size := uint32(1) << (32 - bits)
	b := c.spec.Subnet.Addr().As4()
	v := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
	v += uint32(i) * size
	return netip.PrefixFrom(netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)}), bits)
}

func (c *Cluster) run(args ...string) {
	c.t.Helper()
	if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
		c.t.Fatalf("%s: %v: %s", strings.Join(args, " "), err, out)
	}
}

func (c *Cluster) buildNetwork() {
	s := c.spec
	c.run("ip", "link", "add", s.Segment, "type", "bridge")
	c.run("ip", "addr", "add", netip.PrefixFrom(c.Gateway(), s.Subnet.Bits()).String(), "dev", s.Segment)
	c.run("ip", "addr", "add", netip.PrefixFrom(s.Mgmt.Addr().Next(), s.Mgmt.Bits()).String(), "dev", s.Segment)
	c.run("ip", "link", "set", s.Segment, "up")
	for i, ns := range s.Netns {
		mg, up := s.Links[2*i], s.Links[2*i+1]
		c.run("ip", "netns", "add", ns)
		c.run("ip", "link", "add", mg, "type", "veth", "peer", "name", "mgmt0", "netns", ns)
		c.run("ip", "link", "add", up, "type", "veth", "peer", "name", "uplink0", "netns", ns)
		for _, l := range []string{mg, up} {
			c.run("ip", "link", "set", l, "master", s.Segment)
			c.run("ip", "link", "set", l, "up")
		}
		c.run("ip", "-n", ns, "addr", "add", netip.PrefixFrom(c.mgmtAddr(i), s.Mgmt.Bits()).String(), "dev", "mgmt0")
		c.run("ip", "-n", ns, "link", "set", "mgmt0", "up")
		c.run("ip", "-n", ns, "link", "set", "lo", "up")
	}
	c.run("ip", "netns", "add", s.Client)
	c.run("ip", "link", "add", s.ClientLink, "type", "veth", "peer", "name", "eth0", "netns", s.Client)
	c.run("ip", "link", "set", s.ClientLink, "master", s.Segment)
	c.run("ip", "link", "set", s.ClientLink, "up")
	c.run("ip", "-n", s.Client, "addr", "add", netip.PrefixFrom(c.ClientAddr(), s.Subnet.Bits()).String(), "dev", "eth0")
	c.run("ip", "-n", s.Client, "link", "set", "eth0", "up")
	c.run("ip", "-n", s.Client, "link", "set", "lo", "up")
}

func (c *Cluster) hostOptions(i int) Options {
	s := c.spec
	return Options{
		Name:           s.Names[i],
		Netns:          s.Netns[i],
		Root:           s.Roots[i],
		Bridge:         "vesselbr0",
		Subnet:         s.Subnet,
		CgroupParent:   "/vessel-" + s.Netns[i],
		CLIConfig:      s.CLIConfig,
		Detached:       s.Detached,
		StorageSizeMiB: s.StorageSizeMiB,
		ExtraArgs: append([]string{
			"--ip-pool", c.pool(i).String(), "--uplink", "uplink0", "--external-gateway",
			"--listen", c.mgmtAddr(i).String() + ":8443",
		}, s.HostArgs...),
	}
}

func (c *Cluster) startHosts() {
	for i := range c.spec.Names {
		c.Hosts = append(c.Hosts, New(c.t, c.bin, c.hostOptions(i)))
	}
}

// introduce registers every host as a remote of the CLI and makes every
// host a trusted peer of every other.
func (c *Cluster) introduce() {
	for _, h := range c.Hosts {
		tok := strings.TrimSpace(h.OK("trust", "add", "cli"))
		c.Hosts[0].OK("remote", "add", h.Name(), "--token", tok)
	}
	for _, a := range c.Hosts {
		for _, b := range c.Hosts {
			if a == b {
				continue
			}
			tok := strings.TrimSpace(b.OK("trust", "add", a.Name(), "--peer"))
			a.OK("peer", "add", b.Name(), tok)
		}
	}
}

// Vessel runs the CLI with the cluster's configuration (hosts are remotes
// named after them; "local" is the first host).
func (c *Cluster) Vessel(args ...string) Result {
	c.t.Helper()
	return c.Hosts[0].Vessel(args...)
}

// OK runs the CLI and fails unless it exits 0.
func (c *Cluster) OK(args ...string) string {
	c.t.Helper()
	return c.Hosts[0].OK(args...)
}

// Save writes the cluster's spec to path (scripts/testhosts up).
func (c *Cluster) Save(path string) error {
	b, err := json.MarshalIndent(c.Spec(), "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o600)
}

// LoadCluster returns the cluster saved at path, its daemons attached.
func LoadCluster(t T, bin, path string) (*Cluster, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var s ClusterSpec
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	c := &Cluster{t: t, bin: bin, spec: s}
	for i := range s.Names {
		pid := 0
		if i < len(s.Pids) {
			pid = s.Pids[i]
		}
		c.Hosts = append(c.Hosts, Attach(t, bin, c.hostOptions(i), pid))
	}
	return c, nil
}

// Teardown stops every host (deleting its containers, checking for leaks)
// and removes the network and the CLI configuration. It is idempotent and
// also cleans up a half-built cluster.
func (c *Cluster) Teardown() {
	for _, h := range c.Hosts {
		h.Teardown()
	}
	if c.spec.SharedCLIConfig {
		for _, n := range c.spec.Names {
			cmd := exec.Command(filepath.Join(c.bin, "vessel"), "remote", "remove", n)
			cmd.Env = append(os.Environ(), "VESSEL_CONFIG="+c.spec.CLIConfig)
			_ = cmd.Run()
		}
	} else {
		_ = os.RemoveAll(filepath.Dir(c.spec.CLIConfig))
	}
	for _, l := range c.spec.Links {
		_ = exec.Command("ip", "link", "del", l).Run()
	}
	if c.spec.ClientLink != "" {
		_ = exec.Command("ip", "link", "del", c.spec.ClientLink).Run()
	}
	for _, ns := range append(c.spec.Netns, c.spec.Client) {
		if ns != "" {
			_ = exec.Command("ip", "netns", "del", ns).Run()
		}
	}
	_ = exec.Command("ip", "link", "del", c.spec.Segment).Run()
	for _, r := range c.spec.Roots {
		_ = os.RemoveAll(r)
	}
}

// InClient runs fn on an OS thread of its own moved into the client's
// network namespace (network.InNamed).
func (c *Cluster) InClient(fn func() error) error {
	return network.InNamed(c.spec.Client, fn)
}

// ClientCommand is a command run in the client's network namespace.
func (c *Cluster) ClientCommand(name string, args ...string) *exec.Cmd {
	return exec.Command("ip", append([]string{"netns", "exec", c.spec.Client, name}, args...)...)
}
