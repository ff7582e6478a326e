package daemon

import (
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/vesselhost/vessel/internal/state"
)

var errBoom = errors.New("boom")

// TestSaveFailedTransaction: a change whose transaction fails leaves the
// record as it was, in memory and in the store, and nothing written with
// it.
func TestSaveFailedTransaction(t *testing.T) {
	td := newTestDaemon(t)
	inst := td.addInstance(t, "c1", state.StateStopped, func(r *state.Instance) {
		r.Config = map[string]string{"limits.memory": "1GiB"}
	})
	before := inst.record()
	stored, _ := td.storedInstance(t, "c1")

	err := td.save(inst, func(tx *state.Tx, rec *state.Instance) error {
		rec.State = state.StateRunning
		rec.Config["limits.memory"] = "2GiB" // in place: the map must be a copy
		rec.Config["limits.cpu"] = "1"
		if err := tx.PutMigration(sourceJournal("c1", state.PhaseTransfer)); err != nil {
			return err
		}
		return errBoom
	})
	if !errors.Is(err, errBoom) {
		t.Fatalf("save: %v, want the callback's error", err)
	}
	if got := inst.record(); !reflect.DeepEqual(got, before) {
		t.Errorf("record in memory changed:\n got %+v\nwant %+v", got, before)
	}
	if got, _ := td.storedInstance(t, "c1"); !reflect.DeepEqual(got, stored) {
		t.Errorf("stored record changed:\n got %+v\nwant %+v", got, stored)
	}
	if _, ok := td.journal(t, "c1"); ok {
		t.Error("the failed transaction's journal was committed")
	}

	// The same change without the failure commits both.
	err = td.setState(inst, state.StateRunning, func(tx *state.Tx, rec *state.Instance) error {
		return tx.PutMigration(sourceJournal("c1", state.PhaseTransfer))
	})
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := td.storedInstance(t, "c1"); got.State != state.StateRunning || inst.record().State != state.StateRunning {
		t.Errorf("state stored %q, in memory %q", got.State, inst.record().State)
	}
	if _, ok := td.journal(t, "c1"); !ok {
		t.Error("journal not committed with the state")
	}
}

// TestSaveAfterForget: a forgotten instance's record is not written again
// by a late save.
func TestSaveAfterForget(t *testing.T) {
	td := newTestDaemon(t)
	inst := td.addInstance(t, "c1", state.StateStopped)
	if err := td.forget(inst); err != nil {
		t.Fatal(err)
	}
	err := td.setState(inst, state.StateRunning, nil)
	if !errors.Is(err, ErrNotFound) {
		t.Errorf("save of a forgotten instance: %v, want ErrNotFound", err)
	}
	if _, ok := td.storedInstance(t, "c1"); ok {
		t.Error("the forgotten record is back")
	}
}

func newRecord(name string) state.Instance {
	return state.Instance{Name: name, Image: "test-image", Created: time.Now().UTC(), Init: []string{"/sbin/init"},
		State: state.StateCreating}
}

// TestRegisterTakenName: a name is taken once; a second register is
// refused and changes nothing.
func TestRegisterTakenName(t *testing.T) {
	td := newTestDaemon(t)
	orig := td.addInstance(t, "c1", state.StateStopped)
	rec := newRecord("c1")
	rec.Image = "other-image"
	_, _, err := td.register(rec, "", false, func(tx *state.Tx) error {
		return tx.PutMigration(state.Migration{Instance: "c1", Role: state.MigrationTarget, Phase: state.PhaseTransfer})
	})
	if !errors.Is(err, ErrConflict) || err.Error() != `instance "c1" already exists` {
		t.Fatalf("register of a taken name: %v, want ErrConflict", err)
	}
	recs, err := td.state.ListInstances()
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 1 || recs[0].Image != "test-image" {
		t.Errorf("stored records %+v, want only the first", recs)
	}
	if _, ok := td.journal(t, "c1"); ok {
		t.Error("journal committed")
	}
	if td.insts.get("c1") != orig || lockHeld(orig) {
		t.Error("the registered instance was replaced or locked")
	}
}

// TestRegisterWithJournal: the record and what also writes (a migration
// target's journal) commit together, or neither does and the name and
// address stay free.
func TestRegisterWithJournal(t *testing.T) {
	td := newTestDaemon(t)
	other := td.addInstance(t, "c1", state.StateStopped)
	journal := func(tx *state.Tx) error {
		return tx.PutMigration(state.Migration{Instance: "c2", Role: state.MigrationTarget, Peer: "source-host", Phase: state.PhaseTransfer})
	}

	_, _, err := td.register(newRecord("c2"), StatusMigrating, false, func(tx *state.Tx) error {
		if err := journal(tx); err != nil {
			return err
		}
		return errBoom
	})
	if !errors.Is(err, errBoom) {
		t.Fatalf("register: %v, want the callback's error", err)
	}
	if _, ok := td.storedInstance(t, "c2"); ok {
		t.Error("record committed without its journal")
	}
	if _, ok := td.journal(t, "c2"); ok {
		t.Error("journal of a failed register committed")
	}
	if td.insts.get("c2") != nil {
		t.Error("a failed register keeps the name")
	}

	inst, release, err := td.register(newRecord("c2"), StatusMigrating, false, journal)
	if err != nil {
		t.Fatalf("register after a failed one: %v", err)
	}
	if got := td.status(t, "c2"); got != StatusMigrating || !lockHeld(inst) {
		t.Errorf("new instance: list shows %q, locked %v; want %q, locked", got, lockHeld(inst), StatusMigrating)
	}
	release()
	stored, ok := td.storedInstance(t, "c2")
	if !ok {
		t.Fatal("record not committed")
	}
	if _, ok := td.journal(t, "c2"); !ok {
		t.Error("journal not committed with the record")
	}
	if !stored.Address.IsValid() || stored.Address == other.record().Address || inst.record().Address != stored.Address {
		t.Errorf("address stored %v, in memory %v, other instance's %v", stored.Address, inst.record().Address, other.record().Address)
	}
	if td.insts.get("c2") != inst || lockHeld(inst) {
		t.Error("registered instance missing, or still locked after release")
	}
}

// TestRegisterKeptAddressTaken: a move that keeps its address is refused
// when the address is taken here, and leaves nothing.
func TestRegisterKeptAddressTaken(t *testing.T) {
	td := newTestDaemon(t)
	other := td.addInstance(t, "c1", state.StateStopped)
	rec := newRecord("c2")
	rec.Address = other.record().Address
	_, _, err := td.register(rec, StatusMigrating, true, nil)
	if !errors.Is(err, ErrConflict) {
		t.Fatalf("register with a taken address: %v, want ErrConflict", err)
	}
	if _, ok := td.storedInstance(t, "c2"); ok || td.insts.get("c2") != nil {
		t.Error("refused instance left a record or a name")
	}
}
