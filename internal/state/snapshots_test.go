package state

import (
	"errors"
	"testing"
	"time"
)

func TestSnapshotCRUD(t *testing.T) {
	s, path := openTemp(t)
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	recs := []Snapshot{
		{Instance: "web1", Name: "b", Created: t0.Add(time.Minute)},
		{Instance: "web1", Name: "a", Created: t0.Add(2 * time.Minute), Stateful: true, MemoryBytes: 42},
		{Instance: "web10", Name: "a", Created: t0}, // shares a prefix, not an owner
	}
	for _, r := range recs {
		if err := s.CreateSnapshot(r); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.CreateSnapshot(recs[0]); !errors.Is(err, ErrExists) {
		t.Fatalf("duplicate: %v", err)
	}
	got, err := s.ListSnapshots("web1")
	if err != nil || len(got) != 2 || got[0].Name != "b" || got[1].Name != "a" {
		t.Fatalf("list web1 = %+v, %v (want b then a, oldest first)", got, err)
	}
	if got[1].Version != SnapshotVersion || !got[1].Stateful || got[1].MemoryBytes != 42 {
		t.Errorf("record %+v", got[1])
	}
	if _, err := s.GetSnapshot("web1", "zzz"); !errors.Is(err, ErrNotFound) {
		t.Errorf("get missing: %v", err)
	}
	if err := s.DeleteSnapshot("web1", "b"); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteSnapshot("web1", "b"); !errors.Is(err, ErrNotFound) {
		t.Errorf("second delete: %v", err)
	}
	// Reopen: records persist.
	s.Close()
	s2, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if snap, err := s2.GetSnapshot("web10", "a"); err != nil || snap.Instance != "web10" {
		t.Errorf("after reopen: %+v %v", snap, err)
	}
}
