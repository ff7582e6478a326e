package daemon

import (
	"fmt"

	"github.com/vesselhost/vessel/internal/api"
)

// An action is something done to an instance. Each has a rule: the states
// it may start from (stopped: no processes run; running: they do), the
// states it needs --force for, and the busy status list shows while it
// works. An action not allowed in the instance's state gets a clear
// ErrConflict ("instance "web1" is not running"), both when the request is
// checked and again once the action holds the instance's lock.
type action string

// Actions on an instance.
const (
	actStart            action = "start"
	actStop             action = "stop"
	actRestart          action = "restart"
	actDelete           action = "delete"
	actUpdate           action = "update"
	actExec             action = "exec"
	actSnapshot         action = "snapshot"
	actStatefulSnapshot action = "stateful snapshot"
	actDeleteSnapshot   action = "delete snapshot"
	actRestore          action = "restore"
	actStatefulRestore  action = "stateful restore"
	actCopyFrom         action = "copy"
	actMove             action = "move"
	actLiveMove         action = "live move"
	// actSettle ends a migration a crash or a lost connection left
	// unsettled; it takes the instance whatever its state.
	actSettle action = "settle"
)

// states is a set of instance states.
type states uint8

const (
	whenStopped states = 1 << iota
	whenRunning
	anyState = whenStopped | whenRunning
)

// rule is one line of the transitions table.
type rule struct {
	from  states // allowed from these states
	force states // allowed from these with --force only
	busy  string // status shown meanwhile ("" keeps Running/Stopped)
	// why ends the refusal: "instance "x" is not running: WHY".
	why string
}

// transitions is the table of what each action may start from.
var transitions = map[action]rule{
	actStart:            {from: whenStopped, busy: api.StatusStarting},
	actStop:             {from: whenRunning, busy: api.StatusStopping},
	actRestart:          {from: whenRunning, busy: api.StatusStopping},
	actDelete:           {from: whenStopped, force: whenRunning, busy: api.StatusStopping, why: "stop it first or use --force"},
	actUpdate:           {from: anyState},
	actExec:             {from: whenRunning},
	actSnapshot:         {from: anyState},
	actStatefulSnapshot: {from: whenRunning, why: "a stateful snapshot saves running processes"},
	actDeleteSnapshot:   {from: anyState},
	actRestore:          {from: whenStopped, force: whenRunning, busy: api.StatusStopping, why: "restoring stops it, use --force"},
	actStatefulRestore:  {from: whenStopped, force: whenRunning, busy: api.StatusStopping, why: "restoring stops it, use --force"},
	actCopyFrom:         {from: whenStopped, why: "stop it, or copy one of its snapshots"},
	actMove:             {from: anyState, busy: StatusMigrating},
	actLiveMove:         {from: whenRunning, busy: StatusMigrating, why: "a live move needs a running container"},
	actSettle:           {from: anyState, busy: StatusMigrating},
}

// busy is the status list shows while act works on an instance.
func (a action) busy() string { return transitions[a].busy }

// allowed checks that act may start from inst's current state.
func (a action) allowed(inst *instance, force bool) error {
	return a.check(inst.name, inst.live() != nil, force)
}

// check is allowed for an instance called name that runs or not.
func (a action) check(name string, isRunning bool, force bool) error {
	r, ok := transitions[a]
	if !ok {
		return fmt.Errorf("no transition rule for %q", a) // a programming error
	}
	cur, word := whenStopped, "not running"
	if isRunning {
		cur, word = whenRunning, "running"
	}
	switch {
	case r.from&cur != 0:
		return nil
	case r.force&cur != 0 && force:
		return nil
	case a == actStart && isRunning:
		return errorf(ErrConflict, "instance %q is already running", name)
	case r.why != "":
		return errorf(ErrConflict, "instance %q is %s: %s", name, word, r.why)
	}
	return errorf(ErrConflict, "instance %q is %s", name, word)
}

// checkNow checks act against the named instance's state now, before an
// operation starts (the operation checks again once it holds the lock).
func (d *Daemon) checkNow(name string, act action, force bool) (*instance, error) {
	inst, err := d.instance(name)
	if err != nil {
		return nil, err
	}
	return inst, act.allowed(inst, force)
}
