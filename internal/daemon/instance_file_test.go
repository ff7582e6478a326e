package daemon

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vesselhost/vessel/internal/api"
	"github.com/vesselhost/vessel/internal/state"
)

func TestPushFileIntoAContainer(t *testing.T) {
	td := newTestDaemon(t)
	td.addInstance(t, "c1", state.StateStopped)
	root := td.storage.Path(containerVolume("c1"))
	if err := os.MkdirAll(filepath.Join(root, "etc"), 0o755); err != nil {
		t.Fatal(err)
	}
	// An absolute link in the container's tree is the container's.
	if err := os.Symlink("/etc", filepath.Join(root, "conf")); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	uid, gid := uint32(os.Getuid()), uint32(os.Getgid())
	if err := td.PushFile(ctx, "c1", "/conf/app.conf", strings.NewReader("k=v\n"), api.FilePush{UID: uid, GID: gid, Mode: 0o640}); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(filepath.Join(root, "etc/app.conf"))
	if err != nil || fi.Mode().Perm() != 0o640 {
		t.Fatalf("pushed file: %v %v", fi, err)
	}
	for _, bad := range []string{"relative", "/missing/dir/f"} {
		err := td.PushFile(ctx, "c1", bad, strings.NewReader(""), api.FilePush{UID: uid, GID: gid})
		if !errors.Is(err, ErrInvalid) {
			t.Errorf("push to %q: %v", bad, err)
		}
	}
	if err := td.PushFile(ctx, "nope", "/f", strings.NewReader(""), api.FilePush{}); !errors.Is(err, ErrNotFound) {
		t.Errorf("push into a missing instance: %v", err)
	}
}
