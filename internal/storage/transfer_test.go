package storage

import (
	"errors"
	"io"
	"testing"
)

// TestTransferState walks the legal and illegal call orders.
func TestTransferState(t *testing.T) {
	refused := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, ErrTransferState) {
			t.Errorf("%s: got %v, want ErrTransferState", what, err)
		}
	}
	ct := transferState{vol: ct1}
	refused("Commit before a pass", ct.beginCommit())
	for range 3 {
		if err := ct.beginPass(); err != nil {
			t.Fatal(err)
		}
		_ = ct.endPass(nil)
	}
	if err := ct.beginCommit(); err != nil {
		t.Fatal(err)
	}
	ct.committed = true
	refused("pass after Commit", ct.beginPass())
	refused("second Commit", ct.beginCommit())
	ct.closed = true
	refused("pass after Close", ct.beginPass())

	sn := transferState{vol: snap}
	_ = sn.endPass(nil)
	refused("second pass of a snapshot", sn.beginPass())

	failed := transferState{vol: ct1}
	if err := failed.endPass(io.ErrUnexpectedEOF); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("endPass returned %v", err)
	}
	refused("pass after a failed one", failed.beginPass())
	refused("Commit after a failed pass", failed.beginCommit())
}

func TestCheckTransfer(t *testing.T) {
	img := Volume{Type: VolumeImage, Name: "img1"}
	for _, tc := range []struct {
		vol  Volume
		base *Volume
		ok   bool
	}{
		{ct1, nil, true},
		{snap, nil, true},
		{ct1, &snap, true},
		{img, nil, false},
		{Volume{Type: VolumeCheckpoint, Name: "c1/s1"}, nil, false},
		{ct1, &ct2, false},
		{ct1, &Volume{Type: VolumeSnapshot, Name: "bad"}, false},
		{Volume{Type: VolumeContainer, Name: "../x"}, nil, false},
	} {
		err := checkTransfer(tc.vol, tc.base)
		if tc.ok != (err == nil) || (err != nil && !errors.Is(err, ErrInvalidVolume)) {
			t.Errorf("checkTransfer(%v, %v) = %v", tc.vol, tc.base, err)
		}
	}
}
