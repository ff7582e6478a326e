package network

import (
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
