package integration

import (
	"testing"
)

// TestMoveRenames: a move that renames (`move alpha:web1 beta:web2`, cold,
// then live) moves the same machine under a new name: its hostname (the
// UTS namespace's: a live move's checkpoint is renamed), /etc/hostname and
// /etc/hosts say the new name, and its machine ID stays (live: with its
// memory copied while frozen, and post-copy). Its snapshots, taken under
// the first name, restore under the current one, a disk and a stateful
// one alike, and keep the machine ID. A copy's snapshots stay another
// machine's after the copy is renamed by a move: restored, they still
// empty the machine ID.
func TestMoveRenames(t *testing.T) {
	c := newCluster(t)
	const machineID = sourceMachineID
	c.OK("launch", "busybox", "alpha:web1")
	c.OK("exec", "alpha:web1", "--", "sh", "-c", "echo one > /root/v; printf '"+machineID+"' > /etc/machine-id")
	c.OK("snapshot", "create", "alpha:web1", "first")
	c.OK("exec", "alpha:web1", "--", "sh", "-c", "echo two > /root/v")
	c.OK("snapshot", "create", "alpha:web1", "second", "--stateful")
	c.OK("exec", "alpha:web1", "--", "sh", "-c", "echo three > /root/v")
	check := func(ref, name, id, v string) {
		t.Helper()
		if got := identity(t, c.OK, ref); got != identityOf(name, id) {
			t.Errorf("%s:\n%s\nwant\n%s", ref, got, identityOf(name, id))
		}
		if v == "" {
			return
		}
		if got := c.OK("exec", ref, "--", "cat", "/root/v"); got != v+"\n" {
			t.Errorf("%s's /root/v: %q, want %q", ref, got, v)
		}
	}
	restore := func(ref, snap string, stateful bool) {
		t.Helper()
		args := []string{"snapshot", "restore", ref, snap, "--force"}
		if stateful {
			args = append(args, "--stateful")
		}
		c.OK(args...)
	}
	check("alpha:web1", "web1", machineID, "three")

	// Cold: stopped, moved, started under the new name.
	c.OK("move", "alpha:web1", "beta:web2")
	check("beta:web2", "web2", machineID, "three")
	restore("beta:web2", "first", false)
	check("beta:web2", "web2", machineID, "one")
	restore("beta:web2", "second", true)
	check("beta:web2", "web2", machineID, "two")

	// Live: the checkpoint's UTS namespace gets the new name too.
	c.OK("exec", "beta:web2", "--", "sh", "-c", "echo four > /root/v")
	t.Logf("live rename move:\n%s", c.OK("move", "beta:web2", "alpha:web3", "--live", "--timing"))
	check("alpha:web3", "web3", machineID, "four")
	restore("alpha:web3", "second", true)
	check("alpha:web3", "web3", machineID, "two")
	restore("alpha:web3", "first", false)
	check("alpha:web3", "web3", machineID, "one")

	// A live move that keeps the name keeps it.
	t.Logf("live move:\n%s", c.OK("move", "alpha:web3", "beta:", "--live", "--timing"))
	check("beta:web3", "web3", machineID, "one")

	// Live with post-copy: the lazy-pages daemon reads the same images.
	c.OK("move", "beta:web3", "alpha:web4", "--live", "--memory", "lazy")
	check("alpha:web4", "web4", machineID, "one")

	// A copy renamed by a move: its snapshots (web4's) are still
	// another machine's.
	c.OK("copy", "alpha:web4", "beta:cp1")
	if got := c.OK("exec", "alpha:web4", "--", "cat", "/etc/machine-id"); got != machineID {
		t.Errorf("the copy's source's machine ID: %q", got)
	}
	c.OK("delete", "--force", "alpha:web4") // its address is the copy's on alpha
	c.OK("move", "beta:cp1", "alpha:cp2")
	restore("alpha:cp2", "second", true)
	check("alpha:cp2", "cp2", "", "two")
	restore("alpha:cp2", "first", false)
	check("alpha:cp2", "cp2", "", "one")
	for _, n := range []string{"web1", "web2", "web3", "web4", "cp1", "cp2"} {
		noLeftovers(t, c, n)
	}
}
