package network

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
)

// iptables runs iptables(8), whichever backend (nft or legacy) the host's
// binary uses. Every command passes -w, so concurrent callers (other daemons,
// other managers) wait for the xtables lock instead of failing.
type iptables struct {
	// path is the binary, looked up in PATH when it has no slash.
	path string
}

// rule is one rule specification in one chain of one table.
type rule struct {
	// Table is the iptables table; empty means "filter".
	Table string
	// Chain is the chain, e.g. "FORWARD" or "POSTROUTING".
	Chain string
	// Spec is the matches and target, as iptables takes them on its command
	// line: {"-i", "br0", "-j", "ACCEPT"}.
	Spec []string
}

// args returns "-t TABLE CMD CHAIN [extra...] SPEC...".
func (r rule) args(cmd string, extra ...string) []string {
	table := r.Table
	if table == "" {
		table = "filter"
	}
	a := []string{"-t", table, cmd, r.Chain}
	a = append(a, extra...)
	return append(a, r.Spec...)
}

// appendOpts are the options of iptables -A (append a rule to a chain).
type appendOpts struct {
	Rule rule
}

func (o appendOpts) args() []string { return o.Rule.args("-A") }

// insertOpts are the options of iptables -I (insert a rule in a chain).
type insertOpts struct {
	Rule rule
	// Position is the 1-based rule number to insert at; 0 means 1 (the top).
	Position int
}

func (o insertOpts) args() []string {
	pos := max(o.Position, 1)
	return o.Rule.args("-I", strconv.Itoa(pos))
}

// checkOpts are the options of iptables -C (does a matching rule exist).
type checkOpts struct {
	Rule rule
}

func (o checkOpts) args() []string { return o.Rule.args("-C") }

// deleteOpts are the options of iptables -D (delete the first matching rule).
type deleteOpts struct {
	Rule rule
}

func (o deleteOpts) args() []string { return o.Rule.args("-D") }

// listOpts are the options of iptables -S (print rules as specifications).
type listOpts struct {
	// Table is the table; empty means "filter".
	Table string
	// Chain limits the listing to one chain; empty lists them all.
	Chain string
}

func (o listOpts) args() []string {
	table := o.Table
	if table == "" {
		table = "filter"
	}
	a := []string{"-t", table, "-S"}
	if o.Chain != "" {
		a = append(a, o.Chain)
	}
	return a
}

// Append adds a rule at the end of its chain.
func (ipt iptables) Append(ctx context.Context, o appendOpts) error {
	_, err := ipt.run(ctx, o.args())
	return err
}

// Insert adds a rule at a position of its chain.
func (ipt iptables) Insert(ctx context.Context, o insertOpts) error {
	_, err := ipt.run(ctx, o.args())
	return err
}

// Check reports whether a rule matching o.Rule exists.
func (ipt iptables) Check(ctx context.Context, o checkOpts) (bool, error) {
	_, err := ipt.run(ctx, o.args())
	var exit *exec.ExitError
	switch {
	case err == nil:
		return true, nil
	case errors.As(err, &exit) && exit.ExitCode() == 1:
		// 1 is "Bad rule (does a matching rule exist in that chain?)";
		// 2 would be a usage error, which stays an error.
		return false, nil
	}
	return false, err
}

// Delete removes the first rule matching o.Rule; it fails if there is none.
func (ipt iptables) Delete(ctx context.Context, o deleteOpts) error {
	_, err := ipt.run(ctx, o.args())
	return err
}

// List returns the rules ("-A" lines) of a table or chain; chain policies and
// chain declarations are left out.
func (ipt iptables) List(ctx context.Context, o listOpts) ([]rule, error) {
	out, err := ipt.run(ctx, o.args())
	if err != nil {
		return nil, err
	}
	var rules []rule
	for line := range strings.Lines(string(out)) {
		line = strings.TrimSpace(line)
		if !strings.HasPrefix(line, "-A ") {
			continue
		}
		words, err := splitRuleLine(line)
		if err != nil || len(words) < 2 {
			return nil, fmt.Errorf("parse iptables rule %q: %w", line, err)
		}
		rules = append(rules, rule{Table: o.Table, Chain: words[1], Spec: words[2:]})
	}
	return rules, nil
}

// run executes iptables -w ARGS and returns its stdout; a failure is wrapped
// with the command line and iptables' stderr.
func (ipt iptables) run(ctx context.Context, args []string) ([]byte, error) {
	path := ipt.path
	if path == "" {
		path = "iptables"
	}
	args = append([]string{"-w"}, args...)
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.Stdout = &stdout
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(stderr.String())
		if msg == "" {
			return nil, fmt.Errorf("iptables %s: %w", strings.Join(args, " "), err)
		}
		return nil, fmt.Errorf("iptables %s: %w: %s", strings.Join(args, " "), err, msg)
	}
	return stdout.Bytes(), nil
}

// splitRuleLine splits a line of iptables -S output into words. iptables
// quotes some strings (comments always) in double quotes, escaping '"' and
// '\' inside them with a backslash.
func splitRuleLine(line string) ([]string, error) {
	var (
		words   []string
		cur     strings.Builder
		inWord  bool
		inQuote bool
	)
	for i := 0; i < len(line); i++ {
		c := line[i]
		switch {
		case inQuote && c == '\\' && i+1 < len(line):
			i++
			cur.WriteByte(line[i])
		case c == '"':
			inQuote = !inQuote
			inWord = true
		case !inQuote && c == ' ':
			if inWord {
				words = append(words, cur.String())
				cur.Reset()
				inWord = false
			}
		default:
			cur.WriteByte(c)
			inWord = true
		}
	}
	if inQuote {
		return nil, errors.New("unterminated quote")
	}
	if inWord {
		words = append(words, cur.String())
	}
	return words, nil
}
