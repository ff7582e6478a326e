package qemu_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/vesselhost/vessel/bench/vmsnapshot/guest"
	"github.com/vesselhost/vessel/internal/qemu"
	"github.com/vesselhost/vessel/internal/storage"
	"github.com/vesselhost/vessel/internal/testutil"
)

// TestSaveLoadRoundTrip boots the memfill guest (TCG, 512 MiB, ~380 MiB of
// it filled with a seeded pattern), saves it with each format, loads each
// file into a fresh QEMU started with -incoming defer, resumes it and asks
// the guest for the checksum of its memory: it must be the one the guest
// computed before the save (the mapped-ram file twice: also into a QEMU
// without transparent huge pages). One VM runs at a time.
func TestSaveLoadRoundTrip(t *testing.T) {
	testutil.NeedRoot(t)
	kernel, err := guest.FindKernel()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	dir := t.TempDir()
	initrd, err := guest.BuildInitramfs(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	stateDir := filepath.Join(dir, "state")
	if _, err := storage.PrepareNoDataSumDir(stateDir); err != nil {
		t.Fatal(err)
	}
	cfg := guest.Config{Kernel: kernel, Initrd: initrd, Dir: dir, MemMiB: 512, SMP: 1, Seed: 7}

	src, err := guest.Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Kill()
	want, filled, err := src.Ready(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("guest filled %d MiB, sum %s", filled>>20, want)

	formats := []qemu.Format{qemu.FormatMappedRAM, qemu.FormatStream, qemu.FormatGzipStream}
	files := map[qemu.Format]string{}
	for i, f := range formats {
		if i > 0 {
			// QEMU refuses a second migration of a VM a first one left in
			// "postmigrate"; resume it and let Save stop it again.
			if _, err := src.Mon.Run([]byte(`{"execute":"cont"}`)); err != nil {
				t.Fatal(err)
			}
		}
		path := filepath.Join(stateDir, f.String()+".state")
		var last int64
		st, err := qemu.Save(ctx, src.Mon, path, qemu.SaveOptions{Format: f, Channels: 2,
			Progress: func(done, _ int64) { last = done }})
		if err != nil {
			t.Fatalf("save %v: %v", f, err)
		}
		if st.Bytes < filled || last == 0 {
			t.Errorf("save %v: QEMU transferred %d bytes (progress %d), the guest filled %d", f, st.Bytes, last, filled)
		}
		t.Logf("save %v: %d MiB in %v (sync %v), file %d MiB", f, st.Bytes>>20, st.Migrate, st.Sync, st.FileBytes>>20)
		files[f] = path
	}
	src.Kill()

	// The mapped-ram file also goes into a QEMU without transparent huge
	// pages, as vessel's restore starts it (through this test binary as
	// the launcher: TestMain).
	type load struct {
		f     qemu.Format
		noTHP bool
	}
	loads := []load{{formats[0], true}}
	for _, f := range formats {
		loads = append(loads, load{f, false})
	}
	for _, l := range loads {
		f := l.f
		cfg.Incoming, cfg.NoTHP = true, l.noTHP
		dst, err := guest.Start(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		st, err := qemu.Load(ctx, dst.Mon, files[f], qemu.SaveOptions{Format: f, Channels: 4})
		if err != nil {
			dst.Kill()
			t.Fatalf("load %v: %v", f, err)
		}
		if _, err := dst.Mon.Run([]byte(`{"execute":"cont"}`)); err != nil {
			dst.Kill()
			t.Fatalf("cont after load %v: %v", f, err)
		}
		got, err := dst.Sum(ctx)
		dst.Kill()
		if err != nil {
			t.Fatalf("checksum after load %v: %v", f, err)
		}
		if got != want {
			t.Errorf("load %v: guest memory checksum %s, saved %s", f, got, want)
		}
		t.Logf("load %v (THP off %v): %d MiB file in %v, checksum matches: %v", f, l.noTHP, st.FileBytes>>20, st.Migrate, got == want)
	}
	if err := os.RemoveAll(stateDir); err != nil {
		t.Error(err)
	}
}
