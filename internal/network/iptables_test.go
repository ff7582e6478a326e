package network

import (
	"net/netip"
	"slices"
	"testing"
)

func TestSplitRuleLine(t *testing.T) {
	tests := []struct {
		line string
		want []string
	}{
		{`-A POSTROUTING -s 10.87.0.0/24 ! -o vesselbr0 -m comment --comment "vessel:vesselbr0" -j MASQUERADE`,
			[]string{"-A", "POSTROUTING", "-s", "10.87.0.0/24", "!", "-o", "vesselbr0", "-m", "comment", "--comment", "vessel:vesselbr0", "-j", "MASQUERADE"}},
		{`-A FORWARD -i br0 -m comment --comment "a b\"c\\d" -j ACCEPT`,
			[]string{"-A", "FORWARD", "-i", "br0", "-m", "comment", "--comment", `a b"c\d`, "-j", "ACCEPT"}},
		{`-A X --comment ""`, []string{"-A", "X", "--comment", ""}},
	}
	for _, tt := range tests {
		got, err := splitRuleLine(tt.line)
		if err != nil || !slices.Equal(got, tt.want) {
			t.Errorf("splitRuleLine(%s) = %q, %v; want %q", tt.line, got, err, tt.want)
		}
	}
	if _, err := splitRuleLine(`-A X --comment "open`); err == nil {
		t.Error("splitRuleLine accepted an unterminated quote")
	}
}

func TestHasComment(t *testing.T) {
	spec := []string{"-i", "br0", "-m", "comment", "--comment", "vessel:br0", "-j", "ACCEPT"}
	if !hasComment(spec, "vessel:br0") {
		t.Error("comment not found")
	}
	if hasComment(spec, "vessel:br") || hasComment(spec, "vessel:br01") {
		t.Error("comment matched another bridge's")
	}
}

func TestOptsArgs(t *testing.T) {
	r := rule{Chain: "FORWARD", Spec: []string{"-i", "br0", "-j", "ACCEPT"}}
	tests := []struct {
		got, want []string
	}{
		{appendOpts{Rule: r}.args(), []string{"-t", "filter", "-A", "FORWARD", "-i", "br0", "-j", "ACCEPT"}},
		{insertOpts{Rule: r}.args(), []string{"-t", "filter", "-I", "FORWARD", "1", "-i", "br0", "-j", "ACCEPT"}},
		{insertOpts{Rule: r, Position: 3}.args(), []string{"-t", "filter", "-I", "FORWARD", "3", "-i", "br0", "-j", "ACCEPT"}},
		{checkOpts{Rule: r}.args(), []string{"-t", "filter", "-C", "FORWARD", "-i", "br0", "-j", "ACCEPT"}},
		{deleteOpts{Rule: rule{Table: "nat", Chain: "POSTROUTING", Spec: []string{"-j", "MASQUERADE"}}}.args(),
			[]string{"-t", "nat", "-D", "POSTROUTING", "-j", "MASQUERADE"}},
		{listOpts{}.args(), []string{"-t", "filter", "-S"}},
		{listOpts{Table: "nat", Chain: "POSTROUTING"}.args(), []string{"-t", "nat", "-S", "POSTROUTING"}},
	}
	for _, tt := range tests {
		if !slices.Equal(tt.got, tt.want) {
			t.Errorf("args = %q, want %q", tt.got, tt.want)
		}
	}
}

func TestForwardPlan(t *testing.T) {
	m, err := New(Config{Bridge: "br0", Subnet: netip.MustParsePrefix("10.87.0.0/24"), NetnsDir: "/run/vessel/netns", NAT: true})
	if err != nil {
		t.Fatal(err)
	}
	want := m.forwardRules()
	other := rule{Table: "filter", Chain: "FORWARD", Spec: []string{"-i", "docker0", "-j", "ACCEPT"}}
	legacy := rule{Table: "filter", Chain: "FORWARD", Spec: slices.Concat([]string{"-o", "br0"}, m.tag(), []string{"-j", "ACCEPT"})}
	tests := []struct {
		name    string
		current []rule
		wantDel []rule
		wantIns bool
	}{
		{"in place, among other rules", []rule{other, want[0], want[1], other, want[2]}, nil, false},
		{"missing", []rule{other}, nil, true},
		{"one missing", []rule{want[0], want[2]}, []rule{want[0], want[2]}, true},
		{"out of order", []rule{want[2], want[0], want[1]}, []rule{want[2], want[0], want[1]}, true},
		{"an older vessel's unconditional accept", []rule{want[0], legacy}, []rule{want[0], legacy}, true},
		{"an extra tagged rule", []rule{want[0], want[1], want[2], legacy}, []rule{want[0], want[1], want[2], legacy}, true},
	}
	for _, tt := range tests {
		del, ins := forwardPlan(tt.current, want, m.natComment())
		if !slices.EqualFunc(del, tt.wantDel, func(a, b rule) bool { return a.Chain == b.Chain && slices.Equal(a.Spec, b.Spec) }) {
			t.Errorf("%s: delete %v, want %v", tt.name, del, tt.wantDel)
		}
		if (len(ins) > 0) != tt.wantIns || (tt.wantIns && len(ins) != len(want)) {
			t.Errorf("%s: insert %v, want all: %v", tt.name, ins, tt.wantIns)
		}
		for _, r := range del {
			if r.Table != "filter" {
				t.Errorf("%s: delete from table %q", tt.name, r.Table)
			}
		}
	}
	// The REJECT comes last: nothing a container sends, or answers, hits it.
	if last := want[len(want)-1].Spec; !slices.Contains(last, "REJECT") || !slices.Contains(want[1].Spec, "RELATED,ESTABLISHED") {
		t.Errorf("forward rules out of order: %v", want)
	}
}
