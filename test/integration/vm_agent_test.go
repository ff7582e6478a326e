package integration

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestVMExecAndFilePush launches the built-in busybox image as a VM with
// vessel's real guest agent as its initramfs's /init and drives the agent
// through the CLI: exec (output, exit codes, environment, the guest's
// hostname), a file push read back in the guest, and the busybox init it
// switched to.
func TestVMExecAndFilePush(t *testing.T) {
	h := newHost(t)
	h.OK("launch", "busybox", "vm1", "--vm", "-c", "limits.memory=256MiB")

	// The first exec waits for the agent (the guest boots under TCG here).
	if out := h.OK("exec", "vm1", "--", "sh", "-c", "echo hi; hostname; readlink /proc/1/exe"); out != "hi\nvm1\n/bin/busybox\n" {
		t.Fatalf("exec: %q", out)
	}
	// It ran in the guest: its kernel is the VM's, not the host's.
	if out := h.OK("exec", "vm1", "--", "uname", "-r"); !strings.Contains(out, "cloud-amd64") {
		t.Errorf("exec ran on kernel %q, not the guest's", out)
	}
	if r := h.Vessel("exec", "vm1", "--", "sh", "-c", "echo out; echo err >&2; exit 3"); r.Code != 3 || r.Stdout != "out\n" || r.Stderr != "err\n" {
		t.Errorf("exit 3: %s", r)
	}
	if r := h.Vessel("exec", "vm1", "--", "no-such-command"); r.Code != 127 {
		t.Errorf("missing command: %s", r)
	}
	if out := h.OK("exec", "vm1", "--env", "FOO=bar", "--cwd", "/tmp", "--", "sh", "-c", "echo $FOO $PWD"); out != "bar /tmp\n" {
		t.Errorf("env and cwd: %q", out)
	}
	if out := h.VesselIn("line\n", "exec", "vm1", "-T", "--", "cat"); out.Code != 0 || out.Stdout != "line\n" {
		t.Errorf("stdin: %s", out)
	}

	src := filepath.Join(t.TempDir(), "app.conf")
	if err := os.WriteFile(src, []byte(strings.Repeat("key=value\n", 50000)), 0o600); err != nil {
		t.Fatal(err)
	}
	h.OK("file", "push", "--uid", "1000", "--gid", "100", "--mode", "0640", src, "vm1/root/")
	if out := h.OK("exec", "vm1", "--", "sh", "-c", "stat -c '%a %u %g %s' /root/app.conf; md5sum < /root/app.conf"); !strings.HasPrefix(out, "640 1000 100 500000\n") {
		t.Errorf("pushed file in the guest: %q", out)
	}
	h.Fails("", "file", "push", src, "vm1/no/such/dir/f")

	h.OK("delete", "vm1", "--force")
}
