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

// natRule is one rule Setup installs, and where it goes in its chain.
type natRule struct {
	rule rule
	// top inserts the rule at the head of its chain instead of appending it,
	// so a host firewall's trailing DROP/REJECT in FORWARD cannot shadow it.
	top bool
}

// natComment is the comment on every rule this manager adds.
func (m *Manager) natComment() string { return "vessel:" + m.cfg.Bridge }

// natRules returns the rules for outbound masquerading of the subnet:
//
//	-t nat -A POSTROUTING -s SUBNET ! -o BRIDGE -j MASQUERADE
//	-t filter -I FORWARD -i BRIDGE -j ACCEPT
//	-t filter -I FORWARD -o BRIDGE -j ACCEPT
//
// each tagged with -m comment --comment vessel:BRIDGE.
func (m *Manager) natRules() []natRule {
	br := m.cfg.Bridge
	tag := []string{"-m", "comment", "--comment", m.natComment()}
	spec := slices.Concat[[]string]
	return []natRule{
		{rule: rule{Table: "nat", Chain: "POSTROUTING", Spec: spec(
			[]string{"-s", m.layout.prefix.String(), "!", "-o", br}, tag, []string{"-j", "MASQUERADE"})}},
		{top: true, rule: rule{Table: "filter", Chain: "FORWARD", Spec: spec(
			[]string{"-i", br}, tag, []string{"-j", "ACCEPT"})}},
		{top: true, rule: rule{Table: "filter", Chain: "FORWARD", Spec: spec(
			[]string{"-o", br}, tag, []string{"-j", "ACCEPT"})}},
	}
}

// ensureNAT enables IPv4 forwarding and adds the NAT rules that are missing.
func (m *Manager) ensureNAT(ctx context.Context) error {
	if err := enableIPForward(); err != nil {
		return err
	}
	for _, r := range m.natRules() {
		ok, err := m.ipt.Check(ctx, checkOpts{Rule: r.rule})
		if err != nil {
			return fmt.Errorf("check nat rule: %w", err)
		}
		if ok {
			continue
		}
		if r.top {
			err = m.ipt.Insert(ctx, insertOpts{Rule: r.rule, Position: 1})
		} else {
			err = m.ipt.Append(ctx, appendOpts{Rule: r.rule})
		}
		if err != nil {
			return fmt.Errorf("add nat rule: %w", err)
		}
	}
	return nil
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
