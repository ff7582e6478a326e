package integration

import (
	"encoding/json"
	"net/netip"
	"os/exec"
	"strings"
	"testing"

	"github.com/vesselhost/vessel/internal/api"
	"github.com/vesselhost/vessel/internal/network"
)

// TestVMLiveMoveRoundTrip moves a small VM (256 MiB, TCG here) alpha ->
// beta -> alpha live: the disk mirrored to the target QEMU's NBD export,
// the RAM by QEMU's pre-copy (there) and post-copy (back), all through
// the daemons' session. A
// process started in the guest before the moves runs on after each (same
// pid, so the same guest kernel), a file written to the disk before is
// there, the VM keeps its address and MAC, the segment hears gratuitous
// ARP for it and forwards its MAC to the new host (the target's bridge to
// the VM's tap as the move returns), and the timing report
// is QEMU's. Then
// the target is cut as the RAM stream arrives: the move fails naming
// that, the VM keeps running on alpha (the process too), beta keeps
// nothing; so does the source failing once its disk mirror runs.
func TestVMLiveMoveRoundTrip(t *testing.T) {
	c := newCluster(t)
	c.OK("launch", "busybox", "alpha:vm1", "--vm", "-c", "limits.memory=256MiB")
	addr := instanceOn(t, c, "alpha:vm1").IPv4
	// The first exec waits for the agent (the guest boots under TCG).
	c.OK("exec", "alpha:vm1", "--", "sh", "-c", "setsid sleep 86400 </dev/null >/dev/null 2>&1 & echo $! > /root/sleep.pid; echo moved-disk > /root/marker; sync")
	pid := strings.TrimSpace(c.OK("exec", "alpha:vm1", "--", "cat", "/root/sleep.pid"))
	check := func(at string) {
		t.Helper()
		// The disk takes writes too (after a failed move: its mirror is gone).
		if out := c.OK("exec", at, "--", "sh", "-c", "cat /root/marker; kill -0 "+pid+" && cat /proc/"+pid+"/comm; echo "+at+" > /root/written; sync; cat /root/written"); out != "moved-disk\nsleep\n"+at+"\n" {
			t.Fatalf("%s: marker file and sleep %s: %q", at, pid, out)
		}
	}
	check("alpha:vm1")
	ip := netip.MustParseAddr(addr)
	mac := strings.TrimSpace(c.OK("exec", "alpha:vm1", "--", "cat", "/sys/class/net/eth0/address"))
	uplinks := map[string]string{"alpha": c.Spec().Links[1], "beta": c.Spec().Links[3]}
	arps := captureAnnouncements(t, c)

	for i, hop := range [][3]string{{"alpha", "beta", api.MemoryCopy}, {"beta", "alpha", api.MemoryLazy}} {
		from, to, mode := hop[0], hop[1], hop[2]
		out := c.OK("move", from+":vm1", to+":", "--live", "--memory", mode, "--format", "json")
		var tm api.MigrationTiming
		if err := json.Unmarshal([]byte(out), &tm); err != nil {
			t.Fatalf("move %d: timing JSON: %v\n%s", i, err, out)
		}
		if tm.VM == nil || tm.VM.DiskBytes <= 0 || tm.VM.RAMBytes <= 0 || tm.FrozenTotal <= 0 || tm.Total < tm.FrozenTotal {
			t.Fatalf("move %d: implausible timing %+v (vm %+v)", i, tm, tm.VM)
		}
		if post := tm.VM.PostcopyReason != ""; post != (mode == api.MemoryLazy) {
			t.Errorf("move %d (%s): post-copy %q", i, mode, tm.VM.PostcopyReason)
		}
		t.Logf("move %d %s->%s (%s): post-copy %.3fs (%d KiB), disk mirror %.2fs (%d MiB), RAM %.2fs in %d passes (%d MiB), QEMU downtime %.3fs, switch-over %.3fs, frozen %.3fs, total %.2fs",
			i, from, to, mode, tm.VM.Postcopy, tm.VM.PostcopyBytes>>10, tm.VM.DiskMirror, tm.VM.DiskBytes>>20, tm.VM.RAMPrecopy, tm.VM.RAMIterations, tm.VM.RAMBytes>>20,
			tm.VM.DowntimeQEMU, tm.VM.Switchover, tm.FrozenTotal, tm.Total)
		// The target's bridge forwards the VM's MAC to its tap as the
		// move returns (it learnt the MAC behind its uplink while the VM
		// ran on the other host: the target claims it before the guest
		// runs, network.ClaimMAC).
		fdb, err := exec.Command("ip", "netns", "exec", c.Host(to).Netns(), "bridge", "fdb", "show", "br", "vesselbr0").CombinedOutput()
		if err != nil {
			t.Fatalf("move %d: bridge fdb on %s: %v\n%s", i, to, err, fdb)
		}
		if want := mac + " dev " + network.HostVethName("vesselbr0", "vm1") + " master vesselbr0"; !strings.Contains(string(fdb), want) {
			t.Errorf("move %d: %s's bridge does not forward %s to the VM's tap (want %q):\n%s", i, to, mac, want, fdb)
		}
		if _, still := listOn(t, c, from)["vm1"]; still {
			t.Fatalf("move %d: vm1 still on %s", i, from)
		}
		inst := listOn(t, c, to)["vm1"]
		if inst.Status != api.StatusRunning || inst.IPv4 != addr || inst.Type != "virtual-machine" {
			t.Fatalf("move %d: vm1 on %s: %+v (address was %s)", i, to, inst, addr)
		}
		check(to + ":vm1")
		noLeftovers(t, c, "vm1")
		// The segment learns where the VM's MAC is now.
		waitAnnouncement(t, arps, ip, mac, to)
		eventually(t, "the segment forwarding "+mac+" to "+to, func() bool {
			out, _ := exec.Command("bridge", "fdb", "show", "br", c.Spec().Segment).Output()
			for _, l := range strings.Split(string(out), "\n") {
				if strings.HasPrefix(l, mac+" ") {
					return strings.Contains(l, " dev "+uplinks[to]+" ")
				}
			}
			return false
		})
	}

	// The target goes away as the RAM stream reaches it (the disk mirror
	// is in sync by then): the move fails and vm1 runs on where it was.
	beta := c.Host("beta")
	beta.RestartWith("--fault", "migrate.vm.target.incoming=cut")
	r := c.Vessel("move", "alpha:vm1", "beta:", "--live", "--memory", api.MemoryCopy)
	beta.RestartWith()
	if r.Code == 0 {
		t.Fatal("move succeeded although the target went away")
	}
	msg := strings.TrimPrefix(strings.TrimSpace(r.Stderr), "Error: ")
	t.Logf("move error:\n%s", msg)
	if first, _, _ := strings.Cut(msg, "\n"); first != "beta went away during the memory pre-copy; vm1 keeps running on alpha" {
		t.Errorf("first line of the error: %q", first)
	}
	if inst := instanceOn(t, c, "alpha:vm1"); inst.Status != api.StatusRunning {
		t.Fatalf("vm1 on alpha after the failed move: %+v", inst)
	}
	check("alpha:vm1")
	if _, ok := listOn(t, c, "beta")["vm1"]; ok {
		t.Fatal("beta lists vm1 after the failed move")
	}
	noLeftovers(t, c, "vm1")

	// The source fails once its disk mirror runs (the daemon restarted
	// with the fault: vm1's QEMU runs on, adopted): the mirror is
	// cancelled, the VM runs on, beta removes its half.
	alpha := c.Host("alpha")
	alpha.RestartWith("--fault", "migrate.vm.source.disk-mirror=fail")
	r = c.Vessel("move", "alpha:vm1", "beta:", "--live")
	alpha.RestartWith()
	if r.Code == 0 {
		t.Fatal("move succeeded although the source failed")
	}
	msg = strings.TrimPrefix(strings.TrimSpace(r.Stderr), "Error: ")
	t.Logf("move error:\n%s", msg)
	if first, _, _ := strings.Cut(msg, "\n"); first != "the move of vm1 to beta failed during the disk pre-copy; vm1 keeps running on alpha" {
		t.Errorf("first line of the error: %q", first)
	}
	check("alpha:vm1")
	if _, ok := listOn(t, c, "beta")["vm1"]; ok {
		t.Fatal("beta lists vm1 after the failed move")
	}
	noLeftovers(t, c, "vm1")
	c.OK("delete", "alpha:vm1", "--force")
}
