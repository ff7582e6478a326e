package network

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
)

// ipForwardPath is the sysctl that lets the host route between the bridge
// and its uplinks.
const ipForwardPath = "/proc/sys/net/ipv4/ip_forward"

// natComment is the comment on every rule this manager adds.
func (m *Manager) natComment() string { return "vessel:" + m.cfg.Bridge }

// masqueradeRule is outbound masquerading of the subnet:
//
//	-t nat -A POSTROUTING -s SUBNET ! -o BRIDGE -m comment --comment vessel:BRIDGE -j MASQUERADE
func (m *Manager) masqueradeRule() rule {
	return rule{Table: "nat", Chain: "POSTROUTING", Spec: slices.Concat(
		[]string{"-s", m.layout.prefix.String(), "!", "-o", m.cfg.Bridge},
		m.tag(), []string{"-j", "MASQUERADE"})}
}

// forwardRules are the FORWARD rules, in the order they must appear at the
// head of the chain (a host firewall's own rules come after them):
//
//	-i BRIDGE -j ACCEPT                                            containers out, and to each other
//	-o BRIDGE -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT  answers to them
//	-o BRIDGE -j REJECT --reject-with icmp-admin-prohibited        nothing else in
//
// each tagged with -m comment --comment vessel:BRIDGE. Containers publish no
// ports: a connection from outside the host to a container is refused,
// whatever the host firewall's policy, and the sender is told at once
// (administratively prohibited). Traffic between containers of the bridge
// is bridged; with br_netfilter it shows up here with the bridge as both
// in and out interface, and the first rule accepts it (the port filters
// have checked its source already). The host itself reaches containers
// through OUTPUT, not FORWARD.
func (m *Manager) forwardRules() []rule {
	br := m.cfg.Bridge
	fwd := func(spec ...[]string) rule {
		return rule{Table: "filter", Chain: "FORWARD", Spec: slices.Concat(spec...)}
	}
	return []rule{
		fwd([]string{"-i", br}, m.tag(), []string{"-j", "ACCEPT"}),
		fwd([]string{"-o", br, "-m", "conntrack", "--ctstate", "RELATED,ESTABLISHED"}, m.tag(), []string{"-j", "ACCEPT"}),
		fwd([]string{"-o", br}, m.tag(), []string{"-j", "REJECT", "--reject-with", "icmp-admin-prohibited"}),
	}
}

// tag is the comment match on every rule of this manager.
func (m *Manager) tag() []string { return []string{"-m", "comment", "--comment", m.natComment()} }

// ensureNAT enables IPv4 forwarding, adds the masquerade rule if it is
// missing and makes this manager's FORWARD rules exactly forwardRules, in
// order (see forwardPlan).
func (m *Manager) ensureNAT(ctx context.Context) error {
	if err := enableIPForward(); err != nil {
		return err
	}
	masq := m.masqueradeRule()
	ok, err := m.ipt.Check(ctx, checkOpts{Rule: masq})
	if err != nil {
		return fmt.Errorf("check nat rule: %w", err)
	}
	if !ok {
		if err := m.ipt.Append(ctx, appendOpts{Rule: masq}); err != nil {
			return fmt.Errorf("add nat rule: %w", err)
		}
	}
	current, err := m.ipt.List(ctx, listOpts{Table: "filter", Chain: "FORWARD"})
	if err != nil {
		return fmt.Errorf("list forward rules: %w", err)
	}
	del, ins := forwardPlan(current, m.forwardRules(), m.natComment())
	for _, r := range del {
		if err := m.ipt.Delete(ctx, deleteOpts{Rule: r}); err != nil {
			return fmt.Errorf("delete forward rule: %w", err)
		}
	}
	// Inserted at the head one by one, last first: they end up in order.
	for _, r := range slices.Backward(ins) {
		if err := m.ipt.Insert(ctx, insertOpts{Rule: r, Position: 1}); err != nil {
			return fmt.Errorf("add forward rule: %w", err)
		}
	}
	return nil
}

// forwardPlan compares the FORWARD chain's rules (current, as listed) with
// the wanted ones: if the rules tagged with comment are exactly want, in
// order, nothing changes; otherwise every tagged rule is deleted (rules of
// an older vessel, such as an unconditional "-o BRIDGE -j ACCEPT", or of
// another subnet) and want is inserted afresh. Rules are compared as
// iptables -S prints them, which is the order and spelling forwardRules
// uses.
func forwardPlan(current, want []rule, comment string) (del, ins []rule) {
	var tagged []rule
	for _, r := range current {
		if hasComment(r.Spec, comment) {
			tagged = append(tagged, r)
		}
	}
	same := slices.EqualFunc(tagged, want, func(a, b rule) bool {
		return a.Chain == b.Chain && slices.Equal(a.Spec, b.Spec)
	})
	if same {
		return nil, nil
	}
	for _, r := range tagged {
		r.Table = "filter"
		del = append(del, r)
	}
	return del, want
}

// removeNAT deletes every rule in the nat and filter tables that carries
// this manager's comment, including rules of an earlier configuration (say,
// another subnet). It does not turn IPv4 forwarding off: other software may
// rely on it.
func (m *Manager) removeNAT(ctx context.Context) error {
	var errs []error
	for _, table := range []string{"nat", "filter"} {
		rules, err := m.ipt.List(ctx, listOpts{Table: table})
		if err != nil {
			errs = append(errs, fmt.Errorf("list %s rules: %w", table, err))
			continue
		}
		for _, r := range rules {
			if !hasComment(r.Spec, m.natComment()) {
				continue
			}
			if err := m.ipt.Delete(ctx, deleteOpts{Rule: r}); err != nil {
				errs = append(errs, fmt.Errorf("delete nat rule: %w", err))
			}
		}
	}
	return errors.Join(errs...)
}

// hasComment reports whether spec has exactly "--comment COMMENT".
func hasComment(spec []string, comment string) bool {
	for i := 0; i+1 < len(spec); i++ {
		if spec[i] == "--comment" && spec[i+1] == comment {
			return true
		}
	}
	return false
}

// enableIPForward sets net.ipv4.ip_forward to 1 if it is 0.
func enableIPForward() error {
	cur, err := os.ReadFile(ipForwardPath)
	if err != nil {
		return fmt.Errorf("read ip_forward: %w", err)
	}
	if string(bytes.TrimSpace(cur)) != "0" {
		return nil
	}
	if err := os.WriteFile(ipForwardPath, []byte("1\n"), 0o644); err != nil {
		return fmt.Errorf("enable ip_forward: %w", err)
	}
	return nil
}
