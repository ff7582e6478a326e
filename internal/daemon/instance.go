package daemon

import (
	"context"
	"maps"
	"net/netip"
	"sort"
	"sync"

	"github.com/vesselhost/vessel/internal/api"
	"github.com/vesselhost/vessel/internal/runtime"
	"github.com/vesselhost/vessel/internal/state"
	"github.com/vesselhost/vessel/internal/storage"
)

// An instance is one container of this host, and the one owner of its
// state:
//
//   - its record: the copy in the state store changes only through save,
//     which commits the change (and anything that must change with it,
//     such as a migration journal) in one transaction and then updates
//     the copy held here;
//   - its lock: one action at a time, taken with Daemon.lock, which also
//     checks the action is allowed in the instance's current state (the
//     transitions table) and shows the action's status to list;
//   - its runtime handle while it runs (running): the processes' pids and
//     their exit.
//
// The runtime's own view (runc state, shim files) and the storage pool are
// reconciled with the records when the daemon starts (reconcile.go).
type instance struct {
	name string
	// lock holds one token while an action has the instance. A lock can be
	// handed from one goroutine to another (a failed migration's settle
	// goroutine takes over the migration's lock): it is never free in
	// between.
	lock chan struct{}

	mu   sync.Mutex     // guards the fields below
	rec  state.Instance // the committed record
	run  *running       // the live processes; nil when none run
	busy string         // what list shows while an action works on it
	gone bool           // deleted: whoever takes the lock next finds nothing
}

// running is the runtime handle of an instance's processes.
type running struct {
	proc   runtime.Process
	vm     vmProcess     // a VM's QEMU (nil for a container)
	exited chan struct{} // closed when init has exited
	exit   runtime.Exit  // valid once exited is closed
}

func newInstance(rec state.Instance) *instance {
	return &instance{name: rec.Name, rec: rec, lock: make(chan struct{}, 1)}
}

// record returns a copy of the committed record.
func (i *instance) record() state.Instance {
	i.mu.Lock()
	defer i.mu.Unlock()
	r := i.rec
	r.Config = maps.Clone(r.Config)
	return r
}

// live returns the running processes, or nil.
func (i *instance) live() *running {
	i.mu.Lock()
	defer i.mu.Unlock()
	return i.run
}

func (i *instance) setLive(run *running) {
	i.mu.Lock()
	i.run = run
	i.mu.Unlock()
}

// clearLive forgets run, unless another run replaced it meanwhile.
func (i *instance) clearLive(run *running) {
	i.mu.Lock()
	if i.run == run {
		i.run = nil
	}
	i.mu.Unlock()
}

func (i *instance) setBusy(status string) {
	i.mu.Lock()
	i.busy = status
	i.mu.Unlock()
}

// status is what list shows: an action's busy status while one works on
// the instance, else Running or Stopped.
func (i *instance) status() (string, *running) {
	i.mu.Lock()
	defer i.mu.Unlock()
	switch {
	case i.busy != "":
		return i.busy, i.run
	case i.run != nil:
		return api.StatusRunning, i.run
	}
	return api.StatusStopped, nil
}

// registry is the table of the host's instances, by name.
type registry struct {
	mu sync.Mutex
	m  map[string]*instance
}

func (r *registry) get(name string) *instance {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.m[name]
}

// add inserts inst unless the name is taken.
func (r *registry) add(inst *instance) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.m == nil {
		r.m = map[string]*instance{}
	}
	if _, ok := r.m[inst.name]; ok {
		return false
	}
	r.m[inst.name] = inst
	return true
}

// remove drops inst (not another instance that took the name since) and
// marks it gone.
func (r *registry) remove(inst *instance) {
	r.mu.Lock()
	if r.m[inst.name] == inst {
		delete(r.m, inst.name)
	}
	r.mu.Unlock()
	inst.mu.Lock()
	inst.gone = true
	inst.mu.Unlock()
}

// list returns every instance, sorted by name.
func (r *registry) list() []*instance {
	r.mu.Lock()
	out := make([]*instance, 0, len(r.m))
	for _, i := range r.m {
		out = append(out, i)
	}
	r.mu.Unlock()
	sort.Slice(out, func(a, b int) bool { return out[a].name < out[b].name })
	return out
}

// addresses returns every address an instance holds.
func (r *registry) addresses() []netip.Addr {
	var out []netip.Addr
	for _, i := range r.list() {
		if a := i.record().Address; a.IsValid() {
			out = append(out, a)
		}
	}
	return out
}

// countRunning counts the instances with live processes.
func (r *registry) countRunning() int {
	n := 0
	for _, i := range r.list() {
		if i.live() != nil {
			n++
		}
	}
	return n
}

// instance returns the named instance, or ErrNotFound.
func (d *Daemon) instance(name string) (*instance, error) {
	if inst := d.insts.get(name); inst != nil {
		return inst, nil
	}
	return nil, errorf(ErrNotFound, "instance %q not found", name)
}

// lock takes an instance's lock for act and returns it with the function
// that releases it. It waits for the action before (honouring ctx), then
// checks that act is allowed in the state the instance is in now (see
// transitions) and shows act's busy status until released.
func (d *Daemon) lock(ctx context.Context, name string, act action, force bool) (*instance, func(), error) {
	inst, err := d.instance(name)
	if err != nil {
		return nil, nil, err
	}
	release, err := d.lockInstance(ctx, inst, act.busy())
	if err != nil {
		return nil, nil, err
	}
	if err := act.allowed(inst, force); err != nil {
		release()
		return nil, nil, err
	}
	return inst, release, nil
}

// lockInstance takes inst's lock, showing busy (if not empty) until the
// returned function releases it. An instance deleted while we waited is
// ErrNotFound.
func (d *Daemon) lockInstance(ctx context.Context, inst *instance, busy string) (func(), error) {
	select {
	case inst.lock <- struct{}{}:
	case <-ctx.Done():
		return nil, errorf(ErrConflict, "instance %q is busy: %w", inst.name, ctx.Err())
	}
	inst.mu.Lock()
	gone := inst.gone
	if !gone && busy != "" {
		inst.busy = busy
	}
	inst.mu.Unlock()
	if gone {
		<-inst.lock
		return nil, errorf(ErrNotFound, "instance %q not found", inst.name)
	}
	return sync.OnceFunc(func() {
		if busy != "" {
			inst.setBusy("")
		}
		<-inst.lock
	}), nil
}

// register adds a new instance, its lock held by the caller, and commits
// its record (with whatever else also writes in the same transaction): a
// name can be taken only once, and only with a record. The address is
// allocated in the same step unless keep says rec's must be kept.
func (d *Daemon) register(rec state.Instance, busy string, keepAddress bool, also func(*state.Tx) error) (*instance, func(), error) {
	d.addrMu.Lock()
	defer d.addrMu.Unlock()
	used := d.insts.addresses()
	inst := newInstance(rec)
	inst.lock <- struct{}{}
	inst.busy = busy
	if !d.insts.add(inst) {
		return nil, nil, errorf(ErrConflict, "instance %q already exists", rec.Name)
	}
	release := sync.OnceFunc(func() {
		inst.setBusy("")
		<-inst.lock
	})
	fail := func(err error) (*instance, func(), error) {
		d.insts.remove(inst)
		release()
		return nil, nil, err
	}
	if keepAddress {
		if err := d.net.CheckAddress(rec.Address, used); err != nil {
			return fail(errorf(ErrConflict, "address %s of %s is not available on %s: %w", rec.Address, rec.Name, d.cfg.Name, err))
		}
	} else {
		addr, err := d.net.Allocate(used)
		if err != nil {
			return fail(errorf(ErrConflict, "%w", err))
		}
		rec.Address = addr
	}
	err := d.state.Update(func(tx *state.Tx) error {
		if err := tx.CreateInstance(rec); err != nil {
			return err
		}
		if also != nil {
			return also(tx)
		}
		return nil
	})
	if err != nil {
		return fail(err)
	}
	rec.Version = state.InstanceVersion
	inst.mu.Lock()
	inst.rec = rec
	inst.mu.Unlock()
	return inst, release, nil
}

// save changes inst's record with fn and commits the change, with anything
// fn also writes through tx, in one transaction; the record held in memory
// changes only once the commit succeeded. The caller holds inst's lock.
func (d *Daemon) save(inst *instance, fn func(tx *state.Tx, rec *state.Instance) error) error {
	inst.mu.Lock()
	gone := inst.gone
	inst.mu.Unlock()
	if gone {
		return errorf(ErrNotFound, "instance %q not found", inst.name)
	}
	rec := inst.record()
	err := d.state.Update(func(tx *state.Tx) error {
		if err := fn(tx, &rec); err != nil {
			return err
		}
		return tx.PutInstance(rec)
	})
	if err != nil {
		return err
	}
	rec.Version = state.InstanceVersion
	inst.mu.Lock()
	inst.rec = rec
	inst.mu.Unlock()
	return nil
}

// setState commits a new lifecycle state (and what fn also changes).
func (d *Daemon) setState(inst *instance, s state.InstanceState, also func(tx *state.Tx, rec *state.Instance) error) error {
	return d.save(inst, func(tx *state.Tx, rec *state.Instance) error {
		rec.State = s
		if also != nil {
			return also(tx, rec)
		}
		return nil
	})
}

// forget removes inst's record, its snapshot records and any migration
// journal in one transaction, and drops it from the registry. The caller
// holds its lock and has removed its volumes.
func (d *Daemon) forget(inst *instance) error {
	err := d.state.Update(func(tx *state.Tx) error {
		if err := tx.DeleteSnapshots(inst.name); err != nil {
			return err
		}
		if err := tx.DeleteMigration(inst.name); err != nil {
			return err
		}
		return tx.DeleteInstance(inst.name)
	})
	if err != nil {
		return err
	}
	d.insts.remove(inst)
	return nil
}

func containerVolume(name string) storage.Volume {
	return storage.Volume{Type: storage.VolumeContainer, Name: name}
}
