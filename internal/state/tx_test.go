package state

import (
	"encoding/json"
	"errors"
	"path/filepath"
	"strconv"
	"testing"

	bolt "go.etcd.io/bbolt"
)

// An instance's record and its migration journal change together or not
// at all.
func TestTxAtomic(t *testing.T) {
	s, _ := openTemp(t)
	boom := errors.New("boom")
	err := s.Update(func(tx *Tx) error {
		if err := tx.CreateInstance(Instance{Name: "c1", State: StateStopped}); err != nil {
			return err
		}
		if err := tx.PutMigration(Migration{Instance: "c1", Role: MigrationTarget, Phase: PhaseTransfer}); err != nil {
			return err
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("update: %v", err)
	}
	if _, err := s.GetInstance("c1"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("record of a rolled back transaction: %v", err)
	}
	if _, ok, _ := s.GetMigration("c1"); ok {
		t.Fatal("journal of a rolled back transaction")
	}

	err = s.Update(func(tx *Tx) error {
		if err := tx.CreateInstance(Instance{Name: "c1", State: StateStopped}); err != nil {
			return err
		}
		return tx.PutMigration(Migration{Instance: "c1", Role: MigrationTarget, Phase: PhaseTransfer})
	})
	if err != nil {
		t.Fatal(err)
	}
	ms, err := s.ListMigrations()
	if err != nil || len(ms) != 1 || ms["c1"].Role != MigrationTarget || ms["c1"].Version != MigrationVersion {
		t.Fatalf("migrations = %+v, %v", ms, err)
	}
	// The instance starts and its journal goes, in one transaction.
	err = s.Update(func(tx *Tx) error {
		inst, err := tx.Instance("c1")
		if err != nil {
			return err
		}
		inst.State = StateRunning
		if err := tx.PutInstance(inst); err != nil {
			return err
		}
		return tx.DeleteMigration("c1")
	})
	if err != nil {
		t.Fatal(err)
	}
	if inst, _ := s.GetInstance("c1"); !inst.Running() {
		t.Fatalf("state %q", inst.State)
	}
	if _, ok, _ := s.GetMigration("c1"); ok {
		t.Fatal("journal kept")
	}
	if err := s.DeleteMigration("c1"); err != nil {
		t.Fatalf("deleting a missing journal: %v", err)
	}
}

func TestTxDeleteSnapshots(t *testing.T) {
	s, _ := openTemp(t)
	for _, k := range [][2]string{{"c1", "a"}, {"c1", "b"}, {"c10", "a"}, {"c2", "a"}} {
		if err := s.CreateSnapshot(Snapshot{Instance: k[0], Name: k[1]}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Update(func(tx *Tx) error { return tx.DeleteSnapshots("c1") }); err != nil {
		t.Fatal(err)
	}
	for inst, want := range map[string]int{"c1": 0, "c10": 1, "c2": 1} {
		if got, _ := s.ListSnapshots(inst); len(got) != want {
			t.Errorf("%s has %d snapshots, want %d", inst, len(got), want)
		}
	}
}

// A version 1 database ("running" flags, no migrations bucket) is
// upgraded in place when opened.
func TestUpgradeV1(t *testing.T) {
	path := filepath.Join(t.TempDir(), "vessel.db")
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		meta, _ := tx.CreateBucket(bucketMeta)
		insts, _ := tx.CreateBucket(bucketInstances)
		for name, running := range map[string]bool{"up": true, "down": false} {
			v, _ := json.Marshal(map[string]any{"version": 1, "name": name, "running": running})
			if err := insts.Put([]byte(name), v); err != nil {
				return err
			}
		}
		return meta.Put(keySchema, []byte(strconv.Itoa(1)))
	})
	db.Close()
	if err != nil {
		t.Fatal(err)
	}
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for name, want := range map[string]InstanceState{"up": StateRunning, "down": StateStopped} {
		inst, err := s.GetInstance(name)
		if err != nil || inst.State != want || inst.Version != InstanceVersion {
			t.Errorf("%s: %+v %v, want state %s", name, inst, err, want)
		}
	}
	if err := s.PutMigration(Migration{Instance: "up", Role: MigrationSource}); err != nil {
		t.Fatalf("migrations bucket after upgrade: %v", err)
	}
}
