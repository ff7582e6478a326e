package integration

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestFilePushIntoAContainer pushes files into an unprivileged container,
// running and stopped: the container sees them with the owner and mode
// asked for (its own ids, through its idmapped rootfs), a directory
// target takes the source's name, links resolve inside the container,
// and a push into a missing directory fails. (The file goes to the root
// filesystem: a tmpfs the container mounted, its /run, hides it.)
func TestFilePushIntoAContainer(t *testing.T) {
	h := newHost(t)
	h.OK("launch", "busybox", "c1")
	src := filepath.Join(t.TempDir(), "run.sh")
	if err := os.WriteFile(src, []byte("#!/bin/sh\necho pushed\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	h.OK("file", "push", src, "c1/usr/bin/")
	if out := h.OK("exec", "c1", "--", "run.sh"); out != "pushed\n" {
		t.Errorf("the pushed script: %q", out)
	}
	h.OK("file", "push", "--uid", "1000", "--gid", "100", "--mode", "0640", src, "c1/tmp/owned")
	if out := h.OK("exec", "c1", "--", "stat", "-c", "%a %u %g", "/tmp/owned"); out != "640 1000 100\n" {
		t.Errorf("owner and mode in the container: %q", out)
	}
	// An absolute link is the container's: /home/r -> /root.
	h.OK("exec", "c1", "--", "ln", "-s", "/root", "/home/r")
	h.OK("file", "push", src, "c1/home/r/x")
	if out := h.OK("exec", "c1", "--", "cat", "/root/x"); !strings.Contains(out, "echo pushed") {
		t.Errorf("push through a link: %q", out)
	}
	h.Fails("no such file", "file", "push", src, "c1/no/such/dir/f")

	h.OK("stop", "c1", "--force")
	h.OK("file", "push", "--mode", "0600", src, "c1/root/offline")
	h.OK("start", "c1")
	if out := h.OK("exec", "c1", "--", "stat", "-c", "%a %u", "/root/offline"); out != "600 0\n" {
		t.Errorf("a file pushed while stopped: %q", out)
	}
	h.OK("delete", "c1", "--force")
}
