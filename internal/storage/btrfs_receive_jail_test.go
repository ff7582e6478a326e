package storage

import (
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/vesselhost/vessel/internal/testutil"
)

// TestSendCheckerRefusesEscapes: paths that leave the received subvolume
// are refused before btrfs receive gets their command; a symlink's target
// is data and passes.
func TestSendCheckerRefusesEscapes(t *testing.T) {
	uuid := bytes.Repeat([]byte{1}, 16)
	ok := testutil.NewSendStream("s").Mkdir("etc").Symlink("etc/abs", "/etc/shadow").Symlink("up", "../../..").
		File("etc/hosts", []byte("x")).Clone("etc/copy", uuid, "etc/hosts", 1).Bytes()
	if err := checkWholeStream(ok); err != nil {
		t.Fatalf("a clean stream: %v", err)
	}
	for name, s := range map[string]*testutil.SendStream{
		"dotdot file":      testutil.NewSendStream("s").File("../../x", []byte("x")),
		"absolute dir":     testutil.NewSendStream("s").Mkdir("/etc/cron.d"),
		"dotdot in middle": testutil.NewSendStream("s").Mkdir("a").File("a/../../x", nil),
		"clone from above": testutil.NewSendStream("s").File("f", nil).Clone("f", uuid, "../../containers/other/rootfs/etc/shadow", 1),
		"second subvolume": testutil.NewSendStream("s").Mkdir("a"),
	} {
		b := s.Bytes()
		if name == "second subvolume" {
			// Splice another stream's SUBVOL command in after the first.
			other := testutil.NewSendStream("t").Bytes()
			first := sendHeaderLen + sendCmdHeaderLen + int(le32(b[sendHeaderLen:]))
			b = append(append(bytes.Clone(b[:first]), other[sendHeaderLen:len(other)-sendCmdHeaderLen]...), b[first:]...)
		}
		if err := checkWholeStream(b); !errors.Is(err, ErrTransferFormat) {
			t.Errorf("%s: got %v, want ErrTransferFormat", name, err)
		}
	}
}

func le32(b []byte) uint32 {
	return uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16 | uint32(b[3])<<24
}

// checkWholeStream runs a stream through readSendHead and a sendChecker.
func checkWholeStream(b []byte) error {
	r := bytes.NewReader(b)
	if _, _, err := readSendHead(r); err != nil {
		return err
	}
	_, err := io.Copy(io.Discard, newSendChecker(r))
	return err
}

// TestBtrfsReceiveHostileStreams: a peer's stream that writes through a
// symlink to an absolute host path, or names a path with "..", writes
// nothing outside the received subvolume; the receive fails and leaves
// nothing.
func TestBtrfsReceiveHostileStreams(t *testing.T) {
	testutil.NeedRoot(t)
	_, dst := mountedLoopPools(t)
	ctx := t.Context()
	canary := t.TempDir()
	for name, stream := range map[string][]byte{
		// btrfs receive follows escape/ to the canary without --chroot
		// (this one wrote canary/pwned as root before the jail).
		"created through a symlink": testutil.NewSendStream(".migrate-0").Symlink("escape", canary).
			CreateAt("escape/pwned", []byte("root was here")).Bytes(),
		"through a symlink": testutil.NewSendStream(".migrate-0").Symlink("escape", canary).
			File("escape/pwned", []byte("root was here")).Bytes(),
		"through a relative symlink": testutil.NewSendStream(".migrate-0").Symlink("escape", "../../../../../../../.."+canary).
			File("escape/pwned", []byte("root was here")).Bytes(),
		"dotdot": testutil.NewSendStream(".migrate-0").File("../../../../../../../.."+canary+"/pwned", []byte("x")).Bytes(),
	} {
		r := mustReceiver(t, dst, moved)
		err := r.ReceivePass(ctx, bytes.NewReader(stream))
		mustClose(t, r)
		if err == nil {
			t.Errorf("%s: received", name)
		}
		t.Logf("%s: %v", name, err)
		if entries, _ := os.ReadDir(canary); len(entries) != 0 {
			t.Fatalf("%s: the stream wrote %s outside the pool", name, entries[0].Name())
		}
		checkSnapshotDir(t, dst, "moved")
	}
}

// TestReceiveJailHidesPool: a process started in the receive jail sees the
// receive directory, and nothing else of the pool; the host's mounts do
// not change.
func TestReceiveJailHidesPool(t *testing.T) {
	testutil.NeedRoot(t)
	d, _ := mountedLoopPool(t)
	ctx := t.Context()
	root := mustCreate(t, d, ct1)
	writeFile(t, filepath.Join(root, "secret"), []byte("tenant data"))
	must(t, d.CloneVolume(ctx, Volume{Type: VolumeSnapshot, Name: "other/s1"}, ct1, true))
	must(t, d.CloneVolume(ctx, Volume{Type: VolumeSnapshot, Name: "moved/s1"}, ct1, true))
	pool := d.(*btrfsDriver).root
	before, _ := os.ReadFile("/proc/self/mountinfo")

	script := `cd "$1" && echo "containers:$(ls containers)" && echo "images:$(ls images)" &&
		echo "other:$(ls snapshots/other)" && echo "moved:$(ls snapshots/moved)" && cat containers/c1/secret 2>/dev/null; true`
	cmd := exec.CommandContext(ctx, "/bin/sh", "-c", script, "sh", pool)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	must(t, jailedStart(cmd, pool, "snapshots", "moved"))
	must(t, cmd.Wait())
	if got, want := out.String(), "containers:\nimages:\nother:\nmoved:s1\n"; got != want {
		t.Errorf("in the jail:\n%s\nwant:\n%s", got, want)
	}
	after, _ := os.ReadFile("/proc/self/mountinfo")
	if !bytes.Equal(before, after) {
		t.Errorf("the host's mounts changed:\nbefore\n%s\nafter\n%s", before, after)
	}
}
