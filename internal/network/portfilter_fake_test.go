package network

import (
	"bytes"
	"fmt"
	"maps"
	"slices"
	"sync"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// fakeNFT implements nftConn on an in-memory ruleset with the kernel's
// batch rules that matter here: queued changes apply on Flush all together
// or not at all; a chain is deleted only when empty and unreferenced; a map
// element must jump to an existing chain and may be added again only with
// the same verdict; deleting a missing element or chain fails.
type fakeNFT struct {
	mu      sync.Mutex
	state   *fakeRuleset
	pending []func(*fakeRuleset) error
	flushes int   // batches applied
	failing error // if set, Flush fails with it
}

// fakeRuleset is the kernel side of fakeNFT.
type fakeRuleset struct {
	tables map[string]*fakeTable
}

type fakeTable struct {
	sets   map[string]map[string]string // set -> element key -> jump target
	chains map[string]*fakeChain
}

type fakeChain struct {
	base  bool
	rules []*nftables.Rule
}

func newFakeNFT() *fakeNFT { return &fakeNFT{state: &fakeRuleset{tables: map[string]*fakeTable{}}} }

// dial is a portFilters.dial that returns f.
func (f *fakeNFT) dial() (nftConn, error) { return f, nil }

func (r *fakeRuleset) clone() *fakeRuleset {
	c := &fakeRuleset{tables: map[string]*fakeTable{}}
	for name, t := range r.tables {
		ct := &fakeTable{sets: map[string]map[string]string{}, chains: map[string]*fakeChain{}}
		for s, elems := range t.sets {
			ct.sets[s] = maps.Clone(elems)
		}
		for n, ch := range t.chains {
			ct.chains[n] = &fakeChain{base: ch.base, rules: slices.Clone(ch.rules)}
		}
		c.tables[name] = ct
	}
	return c
}

func (r *fakeRuleset) table(name string) (*fakeTable, error) {
	t, ok := r.tables[name]
	if !ok {
		return nil, fmt.Errorf("table %s: %w", name, unix.ENOENT)
	}
	return t, nil
}

func (r *fakeRuleset) chain(table, name string) (*fakeChain, error) {
	t, err := r.table(table)
	if err != nil {
		return nil, err
	}
	ch, ok := t.chains[name]
	if !ok {
		return nil, fmt.Errorf("chain %s: %w", name, unix.ENOENT)
	}
	return ch, nil
}

func (f *fakeNFT) queue(op func(*fakeRuleset) error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.pending = append(f.pending, op)
}

func (f *fakeNFT) AddTable(t *nftables.Table) *nftables.Table {
	f.queue(func(r *fakeRuleset) error {
		if _, ok := r.tables[t.Name]; !ok {
			r.tables[t.Name] = &fakeTable{sets: map[string]map[string]string{}, chains: map[string]*fakeChain{}}
		}
		return nil
	})
	return t
}

func (f *fakeNFT) DelTable(t *nftables.Table) {
	f.queue(func(r *fakeRuleset) error {
		if _, err := r.table(t.Name); err != nil {
			return err
		}
		delete(r.tables, t.Name)
		return nil
	})
}

func (f *fakeNFT) AddSet(s *nftables.Set, vals []nftables.SetElement) error {
	if !s.IsMap || s.KeyType != nftables.TypeIFName || s.DataType != nftables.TypeVerdict || s.ID == 0 {
		return fmt.Errorf("fake: unexpected set %+v", s)
	}
	f.queue(func(r *fakeRuleset) error {
		t, err := r.table(s.Table.Name)
		if err != nil {
			return err
		}
		if _, ok := t.sets[s.Name]; !ok {
			t.sets[s.Name] = map[string]string{}
		}
		return nil
	})
	return f.SetAddElements(s, vals)
}

func (f *fakeNFT) SetAddElements(s *nftables.Set, vals []nftables.SetElement) error {
	f.queue(func(r *fakeRuleset) error {
		t, err := r.table(s.Table.Name)
		if err != nil {
			return err
		}
		elems, ok := t.sets[s.Name]
		if !ok {
			return fmt.Errorf("set %s: %w", s.Name, unix.ENOENT)
		}
		for _, v := range vals {
			if v.VerdictData == nil || v.VerdictData.Kind != expr.VerdictJump {
				return fmt.Errorf("element %q: not a jump: %w", v.Key, unix.EINVAL)
			}
			if _, ok := t.chains[v.VerdictData.Chain]; !ok {
				return fmt.Errorf("element %q: jump to %s: %w", v.Key, v.VerdictData.Chain, unix.ENOENT)
			}
			if old, ok := elems[string(v.Key)]; ok && old != v.VerdictData.Chain {
				return fmt.Errorf("element %q: %w", v.Key, unix.EBUSY)
			}
			elems[string(v.Key)] = v.VerdictData.Chain
		}
		return nil
	})
	return nil
}

func (f *fakeNFT) SetDeleteElements(s *nftables.Set, vals []nftables.SetElement) error {
	f.queue(func(r *fakeRuleset) error {
		t, err := r.table(s.Table.Name)
		if err != nil {
			return err
		}
		for _, v := range vals {
			if _, ok := t.sets[s.Name][string(v.Key)]; !ok {
				return fmt.Errorf("element %q: %w", v.Key, unix.ENOENT)
			}
			delete(t.sets[s.Name], string(v.Key))
		}
		return nil
	})
	return nil
}

func (f *fakeNFT) AddChain(c *nftables.Chain) *nftables.Chain {
	f.queue(func(r *fakeRuleset) error {
		t, err := r.table(c.Table.Name)
		if err != nil {
			return err
		}
		if _, ok := t.chains[c.Name]; !ok {
			t.chains[c.Name] = &fakeChain{base: c.Hooknum != nil}
		}
		return nil
	})
	return c
}

func (f *fakeNFT) FlushChain(c *nftables.Chain) {
	f.queue(func(r *fakeRuleset) error {
		ch, err := r.chain(c.Table.Name, c.Name)
		if err != nil {
			return err
		}
		ch.rules = nil
		return nil
	})
}

func (f *fakeNFT) DelChain(c *nftables.Chain) {
	f.queue(func(r *fakeRuleset) error {
		ch, err := r.chain(c.Table.Name, c.Name)
		if err != nil {
			return err
		}
		if len(ch.rules) > 0 {
			return fmt.Errorf("chain %s has rules: %w", c.Name, unix.EBUSY)
		}
		for _, elems := range r.tables[c.Table.Name].sets {
			if slices.Contains(slices.Collect(maps.Values(elems)), c.Name) {
				return fmt.Errorf("chain %s is a jump target: %w", c.Name, unix.EBUSY)
			}
		}
		delete(r.tables[c.Table.Name].chains, c.Name)
		return nil
	})
}

func (f *fakeNFT) AddRule(rule *nftables.Rule) *nftables.Rule {
	f.queue(func(r *fakeRuleset) error {
		ch, err := r.chain(rule.Table.Name, rule.Chain.Name)
		if err != nil {
			return err
		}
		for _, e := range rule.Exprs {
			if l, ok := e.(*expr.Lookup); ok {
				if _, ok := r.tables[rule.Table.Name].sets[l.SetName]; !ok {
					return fmt.Errorf("lookup %s: %w", l.SetName, unix.ENOENT)
				}
			}
		}
		ch.rules = append(ch.rules, rule)
		return nil
	})
	return rule
}

func (f *fakeNFT) GetRules(t *nftables.Table, c *nftables.Chain) ([]*nftables.Rule, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	ch, err := f.state.chain(t.Name, c.Name)
	if err != nil {
		return nil, err
	}
	return slices.Clone(ch.rules), nil
}

func (f *fakeNFT) ListTablesOfFamily(family nftables.TableFamily) ([]*nftables.Table, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []*nftables.Table
	for _, name := range slices.Sorted(maps.Keys(f.state.tables)) {
		out = append(out, &nftables.Table{Name: name, Family: family})
	}
	return out, nil
}

func (f *fakeNFT) ListChainsOfTableFamily(family nftables.TableFamily) ([]*nftables.Chain, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []*nftables.Chain
	for _, tn := range slices.Sorted(maps.Keys(f.state.tables)) {
		t := &nftables.Table{Name: tn, Family: family}
		for _, cn := range slices.Sorted(maps.Keys(f.state.tables[tn].chains)) {
			out = append(out, &nftables.Chain{Table: t, Name: cn})
		}
	}
	return out, nil
}

func (f *fakeNFT) Flush() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	ops := f.pending
	f.pending = nil
	if f.failing != nil {
		return f.failing
	}
	next := f.state.clone()
	for _, op := range ops {
		if err := op(next); err != nil {
			return err
		}
	}
	f.state = next
	f.flushes++
	return nil
}

// evaluate runs a frame that entered the bridge through port iif through
// table's prerouting chain, as the kernel's nf_tables would for the
// expressions the port filters use, and returns the verdict: accept or
// drop. It panics on an expression it does not know (a test bug).
func (f *fakeNFT) evaluate(table, iif string, frame []byte) expr.VerdictKind {
	f.mu.Lock()
	defer f.mu.Unlock()
	t, ok := f.state.tables[table]
	if !ok {
		return expr.VerdictAccept
	}
	if v, ok := t.evalChain(baseChainName, iif, frame); ok {
		return v
	}
	return expr.VerdictAccept // the base chain's policy
}

// evalChain returns the verdict of a chain, and false if the frame falls
// off its end.
func (t *fakeTable) evalChain(name, iif string, frame []byte) (expr.VerdictKind, bool) {
	for _, rule := range t.chains[name].rules {
		if v, ok := t.evalRule(rule.Exprs, iif, frame); ok {
			return v, true
		}
	}
	return 0, false
}

// evalRule returns a rule's verdict, and false if a match failed (or a
// jumped-to chain returned without one).
func (t *fakeTable) evalRule(rule []expr.Any, iif string, frame []byte) (expr.VerdictKind, bool) {
	regs := map[uint32][]byte{}
	for _, e := range rule {
		switch e := e.(type) {
		case *expr.Meta:
			if e.Key != expr.MetaKeyIIFNAME {
				panic(fmt.Sprintf("meta key %v", e.Key))
			}
			regs[e.Register] = ifnameKey(iif)
		case *expr.Payload:
			off := int(e.Offset)
			switch e.Base {
			case expr.PayloadBaseLLHeader:
			case expr.PayloadBaseNetworkHeader:
				off += 14
			default:
				panic(fmt.Sprintf("payload base %v", e.Base))
			}
			if off+int(e.Len) > len(frame) {
				return 0, false // the kernel's NFT_BREAK on a short packet
			}
			regs[e.DestRegister] = frame[off : off+int(e.Len)]
		case *expr.Cmp:
			eq := bytes.Equal(regs[e.Register], e.Data)
			if (e.Op == expr.CmpOpEq) != eq {
				return 0, false
			}
			if e.Op != expr.CmpOpEq && e.Op != expr.CmpOpNeq {
				panic(fmt.Sprintf("cmp op %v", e.Op))
			}
		case *expr.Lookup:
			target, ok := t.sets[e.SetName][string(regs[e.SourceRegister])]
			if !ok {
				return 0, false
			}
			return t.evalChain(target, iif, frame)
		case *expr.Verdict:
			return e.Kind, true
		default:
			panic(fmt.Sprintf("expression %T", e))
		}
	}
	return 0, false
}
