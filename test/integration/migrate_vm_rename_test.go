package integration

import (
	"strings"
	"testing"
)

// TestVMMoveRenames: a VM moved under a new name answers to it. Live, the
// running guest is renamed through its agent as the move ends (its kernel's
// hostname and /etc/hostname; the process started before runs on); cold,
// its next boot takes the new name from its kernel command line
// (vessel.hostname=). Its machine ID stays (the same machine).
func TestVMMoveRenames(t *testing.T) {
	c := newCluster(t)
	c.OK("launch", "busybox", "alpha:vm1", "--vm", "-c", "limits.memory=256MiB")
	// The first exec waits for the agent (the guest boots under TCG).
	pid := strings.TrimSpace(c.OK("exec", "alpha:vm1", "--", "sh", "-c", "echo vm1id > /etc/machine-id; sync; setsid sleep 86400 </dev/null >/dev/null 2>&1 & echo $!"))
	const script = "hostname; cat /etc/hostname /etc/machine-id"
	if got := c.OK("exec", "alpha:vm1", "--", "sh", "-c", script); got != "vm1\nvm1\nvm1id\n" {
		t.Fatalf("vm1 before the moves: %q", got)
	}
	c.OK("move", "alpha:vm1", "beta:vm2", "--live")
	// The rename runs beside the move's end (renameGuest): soon after.
	var got string
	eventually(t, "the guest renamed", func() bool {
		got = c.OK("exec", "beta:vm2", "--", "sh", "-c", script+"; kill -0 "+pid+" && echo runs")
		return got == "vm2\nvm2\nvm1id\nruns\n"
	})
	c.OK("move", "beta:vm2", "alpha:vm3")
	if got := c.OK("exec", "alpha:vm3", "--", "sh", "-c", script); got != "vm3\nvm3\nvm1id\n" {
		t.Errorf("vm3 after the cold move: %q", got)
	}
	for _, n := range []string{"vm1", "vm2", "vm3"} {
		noLeftovers(t, c, n)
	}
}
