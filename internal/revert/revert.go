// Package revert undoes multi-step work in reverse order when a later step
// fails:
//
//	r := revert.New()
//	defer r.Fail()
//	if err := createA(); err != nil { return err }
//	r.Add(func() { deleteA() })
//	if err := createB(); err != nil { return err } // deleteA runs
//	r.Success()                                    // nothing runs
package revert

// Reverter holds undo functions, run last-added first by Fail.
type Reverter struct {
	undo []func()
}

// New returns an empty Reverter.
func New() *Reverter { return &Reverter{} }

// Add registers an undo function.
func (r *Reverter) Add(f func()) { r.undo = append(r.undo, f) }

// Fail runs the registered undo functions in reverse order, once. After
// Success it does nothing.
func (r *Reverter) Fail() {
	for i := len(r.undo) - 1; i >= 0; i-- {
		r.undo[i]()
	}
	r.undo = nil
}

// Success forgets the undo functions: the work is kept.
func (r *Reverter) Success() { r.undo = nil }

// Clone returns a Reverter holding the same undo functions, for handing the
// undo duty to a caller while this one succeeds.
func (r *Reverter) Clone() *Reverter {
	return &Reverter{undo: append([]func(){}, r.undo...)}
}
