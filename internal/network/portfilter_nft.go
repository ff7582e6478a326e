package network

import (
	"fmt"
	"net"
	"net/netip"

	"github.com/google/nftables"
	"github.com/google/nftables/userdata"
)

// nftConn is the part of *nftables.Conn the port filters use (the unit
// tests use a fake). The Add, Flush-chain and Del calls only queue
// messages; Flush sends them as one batch, which the kernel applies
// atomically or not at all. The List calls ask the kernel at once.
type nftConn interface {
	AddTable(t *nftables.Table) *nftables.Table
	DelTable(t *nftables.Table)
	AddSet(s *nftables.Set, vals []nftables.SetElement) error
	SetAddElements(s *nftables.Set, vals []nftables.SetElement) error
	SetDeleteElements(s *nftables.Set, vals []nftables.SetElement) error
	AddChain(c *nftables.Chain) *nftables.Chain
	FlushChain(c *nftables.Chain)
	DelChain(c *nftables.Chain)
	AddRule(r *nftables.Rule) *nftables.Rule
	GetRules(t *nftables.Table, c *nftables.Chain) ([]*nftables.Rule, error)
	ListTablesOfFamily(family nftables.TableFamily) ([]*nftables.Table, error)
	ListChainsOfTableFamily(family nftables.TableFamily) ([]*nftables.Chain, error)
	Flush() error
}

// dialNFT opens a netlink connection to nf_tables in the calling thread's
// network namespace (a socket per operation).
func dialNFT() (nftConn, error) { return nftables.New() }

// portFilters keeps one bridge's port filter table (see portfilter.go).
// Its methods may run concurrently for different ports: each change is one
// batch.
type portFilters struct {
	bridge string
	dial   func() (nftConn, error)
}

// Deleting rules is what costs in an nf_tables batch (about 13 ms on the
// test VM, against 0.5 ms to create a chain with its rules): the kernel
// waits for readers of the old rules. So the filters look first (a dump,
// tens of microseconds) and only replace what is missing or different: a
// port's chain carries its MAC and address in its last rule's comment, and
// a filter already in place is left alone.

// dispatchComment tags the base chain's rule.
const dispatchComment = "vessel: dispatch v1"

// portComment tags the last rule of a port's chain with what it enforces.
func portComment(mac net.HardwareAddr, ip netip.Addr) string {
	return fmt.Sprintf("vessel: port v1 %s %s", mac, ip.Unmap())
}

// tableState is what inspect found of a bridge's table.
type tableState struct {
	// base says the base chain holds exactly the dispatch rule (which
	// implies the table and the map: they are made in one batch).
	base bool
	// ports maps each port with a chain to its comment ("" if none).
	ports map[string]string
}

// inspect reads the table's chains, and the rules of the base chain and of
// port's chain (port "" reads no port chain).
func (f portFilters) inspect(c nftConn, port string) (tableState, error) {
	st := tableState{ports: map[string]string{}}
	chains, err := c.ListChainsOfTableFamily(nftables.TableFamilyBridge)
	if err != nil {
		return st, fmt.Errorf("list chains: %w", err)
	}
	t := filterTable(f.bridge)
	hasBase := false
	for _, ch := range chains {
		if ch.Table == nil || ch.Table.Name != t.Name {
			continue
		}
		if ch.Name == baseChainName {
			hasBase = true
		}
		if p, ok := portOfChain(ch.Name); ok {
			st.ports[p] = ""
		}
	}
	if hasBase {
		rules, err := c.GetRules(t, baseChain(t))
		if err != nil {
			return st, fmt.Errorf("list rules of %s: %w", baseChainName, err)
		}
		st.base = len(rules) == 1 && ruleComment(rules[0]) == dispatchComment
	}
	if _, ok := st.ports[port]; ok {
		rules, err := c.GetRules(t, portChain(t, port))
		if err != nil {
			return st, fmt.Errorf("list rules of %s: %w", portChainName(port), err)
		}
		if n := len(rules); n > 0 {
			st.ports[port] = ruleComment(rules[n-1])
		}
	}
	return st, nil
}

// ruleComment returns a rule's comment.
func ruleComment(r *nftables.Rule) string {
	s, _ := userdata.GetString(r.UserData, userdata.TypeComment)
	return s
}

// queueBase queues the table, the ports map and the base chain with its one
// rule. Each is created if missing; the base chain is flushed and its rule
// added again, so the batch leaves exactly one rule whatever was there.
func (f portFilters) queueBase(c nftConn) error {
	t := c.AddTable(filterTable(f.bridge))
	set := portsSet(t)
	if err := c.AddSet(set, nil); err != nil {
		return fmt.Errorf("queue map %s: %w", portsMap, err)
	}
	base := c.AddChain(baseChain(t))
	c.FlushChain(base)
	c.AddRule(&nftables.Rule{Table: t, Chain: base, Exprs: dispatchRule(set),
		UserData: userdata.AppendString(nil, userdata.TypeComment, dispatchComment)})
	return nil
}

// ensure creates the table, map and base chain, or repairs them.
func (f portFilters) ensure() error {
	c, err := f.dial()
	if err != nil {
		return fmt.Errorf("port filters: open nftables: %w", err)
	}
	st, err := f.inspect(c, "")
	if err != nil {
		return fmt.Errorf("port filters: %w", err)
	}
	if st.base {
		return nil
	}
	if err := f.queueBase(c); err != nil {
		return fmt.Errorf("port filters: %w", err)
	}
	if err := c.Flush(); err != nil {
		return fmt.Errorf("port filters: create table %s: %w", filterTableName(f.bridge), err)
	}
	return nil
}

// install makes port's chain hold exactly the rules for mac and ip and
// routes the port's frames to it, in one batch that also creates or
// repairs the table if needed. It replaces an earlier filter of the port
// with other addresses, and leaves one with the same addresses alone.
func (f portFilters) install(port string, mac net.HardwareAddr, ip netip.Addr) error {
	c, err := f.dial()
	if err != nil {
		return fmt.Errorf("port filter %s: open nftables: %w", port, err)
	}
	st, err := f.inspect(c, port)
	if err != nil {
		return fmt.Errorf("port filter %s: %w", port, err)
	}
	comment, exists := st.ports[port]
	want := portComment(mac, ip)
	if st.base && comment == want {
		return nil
	}
	t := filterTable(f.bridge)
	set := portsSet(t)
	if !st.base {
		if err := f.queueBase(c); err != nil {
			return fmt.Errorf("port filter %s: %w", port, err)
		}
	}
	ch := c.AddChain(portChain(t, port))
	if exists {
		c.FlushChain(ch)
	}
	rules := portRules(mac, ip)
	for i, exprs := range rules {
		r := &nftables.Rule{Table: t, Chain: ch, Exprs: exprs}
		if i == len(rules)-1 {
			r.UserData = userdata.AppendString(nil, userdata.TypeComment, want)
		}
		c.AddRule(r)
	}
	if err := c.SetAddElements(set, []nftables.SetElement{portElement(port)}); err != nil {
		return fmt.Errorf("port filter %s: queue map element: %w", port, err)
	}
	if err := c.Flush(); err != nil {
		return fmt.Errorf("port filter %s (%s %s): %w", port, mac, ip, err)
	}
	return nil
}

// remove deletes port's map element and chain; a port without a filter is
// not an error.
func (f portFilters) remove(port string) error {
	return f.prune(func(p string) bool { return p != port })
}

// prune deletes the filter of every port for which keep returns false, in
// one batch.
func (f portFilters) prune(keep func(port string) bool) error {
	c, err := f.dial()
	if err != nil {
		return fmt.Errorf("port filters: open nftables: %w", err)
	}
	ports, err := f.ports(c)
	if err != nil {
		return err
	}
	t := filterTable(f.bridge)
	set := portsSet(t)
	n := 0
	for _, port := range ports {
		if keep(port) {
			continue
		}
		// The element and the chain were added in one batch and go in one.
		if err := c.SetDeleteElements(set, []nftables.SetElement{portElement(port)}); err != nil {
			return fmt.Errorf("port filter %s: queue map element deletion: %w", port, err)
		}
		ch := portChain(t, port)
		c.FlushChain(ch)
		c.DelChain(ch)
		n++
	}
	if n == 0 {
		return nil
	}
	if err := c.Flush(); err != nil {
		return fmt.Errorf("port filters: delete %d port filter(s): %w", n, err)
	}
	return nil
}

// ports lists the ports that have a chain in the table (none if the table
// does not exist).
func (f portFilters) ports(c nftConn) ([]string, error) {
	chains, err := c.ListChainsOfTableFamily(nftables.TableFamilyBridge)
	if err != nil {
		return nil, fmt.Errorf("port filters: list chains: %w", err)
	}
	name := filterTableName(f.bridge)
	var ports []string
	for _, ch := range chains {
		if ch.Table == nil || ch.Table.Name != name {
			continue
		}
		if port, ok := portOfChain(ch.Name); ok {
			ports = append(ports, port)
		}
	}
	return ports, nil
}

// destroy deletes the table with every port's filter; a missing table is
// not an error.
func (f portFilters) destroy() error {
	c, err := f.dial()
	if err != nil {
		return fmt.Errorf("port filters: open nftables: %w", err)
	}
	tables, err := c.ListTablesOfFamily(nftables.TableFamilyBridge)
	if err != nil {
		return fmt.Errorf("port filters: list tables: %w", err)
	}
	name := filterTableName(f.bridge)
	for _, t := range tables {
		if t.Name != name {
			continue
		}
		c.DelTable(filterTable(f.bridge))
		if err := c.Flush(); err != nil {
			return fmt.Errorf("port filters: delete table %s: %w", name, err)
		}
	}
	return nil
}
