package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/vesselhost/vessel/bench/internal/benchutil"
	"github.com/vesselhost/vessel/bench/internal/floor"
	"github.com/vesselhost/vessel/internal/testhost"
)

// VMCase is one memory mode's series of VM moves (-kind vm): the
// container case's figures plus what QEMU reports.
type VMCase struct {
	Case
	// DowntimeQEMUMs is QEMU's own "downtime" (the source's stop until
	// its migration completed); SwitchoverMs the rest of the frozen
	// time (the mirror's completion, "start", the target's cont).
	DowntimeQEMUMs benchutil.Stats `json:"downtime_qemu_ms"`
	SwitchoverMs   benchutil.Stats `json:"switchover_ms"`
	// IdleHeartbeatGapMs and IdleClientGapMs are the same-run floor: the
	// largest gaps over a window of vmIdleWindow without a move, taken
	// before each move (TCG on a loaded host has pauses of its own).
	IdleHeartbeatGapMs benchutil.Stats `json:"idle_heartbeat_gap_ms"`
	IdleClientGapMs    benchutil.Stats `json:"idle_client_gap_ms"`
	DiskMirrorMs       benchutil.Stats `json:"disk_mirror_ms"`
	RAMPrecopyMs       benchutil.Stats `json:"ram_precopy_ms"`
	RAMPasses          benchutil.Stats `json:"ram_passes"`
}

// VMResult is -kind vm's JSON output.
type VMResult struct {
	Benchmark string            `json:"benchmark"`
	Machine   benchutil.Machine `json:"machine"`
	// Accel is the VMs' accelerator ("tcg" on a host without vmx/svm).
	Accel string `json:"accel"`
	VMMiB int    `json:"vm_mib"`
	// DirtyMiB is the memory the guest's heartbeat rewrites, at
	// DirtyRateMiB per second (0: an idle VM).
	DirtyMiB     int      `json:"dirty_mib"`
	DirtyRateMiB int      `json:"dirty_rate_mib,omitzero"`
	Cases        []VMCase `json:"cases"`
	Floor        Floor    `json:"floor"`
	Caveats      []string `json:"caveats"`
}

// vmIdleWindow is the floor's window without a move (about a move's
// own: its total plus the checks around it).
const vmIdleWindow = 2 * time.Second

// vmAccel reads the VM accelerator from `vessel info` on alpha.
func vmAccel(c *testhost.Cluster) string {
	for _, l := range strings.Split(c.OK("info", "alpha:"), "\n") {
		if strings.Contains(l, "VM accelerator") {
			_, v, _ := strings.Cut(l, ":")
			return strings.TrimSpace(v)
		}
	}
	return "unknown"
}

// vmLoad is the moved VM's memory and what its heartbeat rewrites.
type vmLoad struct {
	MiB, DirtyMiB, Rate int
}

// runVM moves one VM (MiB of RAM, busybox, the beat heartbeat holding
// DirtyMiB rewritten at Rate MiB/s, or idle, and the UDP echo server
// pushed in through the agent) back and forth n times per mode.
func runVM(r *testhost.Runner, c *testhost.Cluster, fl *floors, n int, load vmLoad, modes []string, beat, echo string) VMResult {
	vmMiB := load.MiB
	if load.DirtyMiB == 0 {
		load.Rate = 0
	}
	res := VMResult{Benchmark: "migrate-vm", Machine: benchutil.ThisMachine(), Accel: vmAccel(c), VMMiB: vmMiB,
		DirtyMiB: load.DirtyMiB, DirtyRateMiB: load.Rate,
		Caveats: []string{
			"the guest's clocks stop while QEMU has the VM stopped, so the in-guest heartbeat (heartbeat_gap_ms) misses the stop itself; client_gap_ms (UDP echo from a third network namespace, the host's clock) is the service's real downtime",
		}}
	name := "migvm"
	c.OK("launch", "busybox", "alpha:"+name, "--vm", "-c", fmt.Sprintf("limits.memory=%dMiB", vmMiB))
	ref := "alpha:" + name
	c.OK("exec", ref, "--", "true") // waits for the agent (TCG boots slowly)
	for _, p := range []string{beat, echo} {
		c.OK("file", "push", "--mode", "0755", p, name+"/bin/")
	}
	// The heartbeat holds (and rewrites) DirtyMiB, none in an idle VM.
	c.OK("exec", ref, "--", "sh", "-c", fmt.Sprintf("rm -f /tmp/beat.ready; setsid beat %d %d </dev/null >/dev/null 2>&1 &", load.DirtyMiB, load.Rate))
	c.OK("exec", ref, "--", "sh", "-c", "while [ ! -e /tmp/beat.ready ]; do usleep 50000; done")
	c.OK("exec", ref, "--", "sh", "-c", "rm -f /tmp/udpecho.ready; setsid udpecho serve "+echoPort+" /tmp/udpecho.ready </dev/null >/dev/null 2>&1 &")
	c.OK("exec", ref, "--", "sh", "-c", "while [ ! -e /tmp/udpecho.ready ]; do usleep 50000; done")
	sj := &subject{sec: "vm", name: name, at: "alpha"}
	sj.client = startClient(r, c, echo, name)
	fl.runc = floor.NewRunc(r, c.Host("alpha")) // the busybox image is on alpha now
	for _, mode := range modes {
		sj.reset(Case{SizeMiB: vmMiB, Mode: mode, Security: "vm"})
		var idleBeat, idleClient []float64
		for i := 0; i < n; i++ {
			// The floor: the same measurement over a window without a move.
			ref := sj.at + ":" + name
			c.OK("exec", ref, "--", "touch", "/tmp/beat.reset")
			time.Sleep(300 * time.Millisecond)
			c.OK("exec", ref, "--", "touch", "/tmp/beat.reset")
			sj.client.reset()
			time.Sleep(vmIdleWindow)
			us, _ := strconv.Atoi(strings.TrimSpace(c.OK("exec", ref, "--", "cat", "/tmp/beat.max")))
			gap, _, _ := sj.client.query()
			idleBeat, idleClient = append(idleBeat, float64(us)/1000), append(idleClient, benchutil.Ms(gap))
			t0 := time.Now()
			sj.move(r, c, mode, beat, echo, 0, 0)
			t := sj.cs.Timings[len(sj.cs.Timings)-1]
			fmt.Fprintf(os.Stderr, "vm %d MiB (%d rewritten) %s move %d: frozen %.0f ms (QEMU downtime %.0f, switch-over %.0f), heartbeat gap %v, client gap %v (no move: %.0f, %.0f ms), total %.0f ms (%.1f s with checks)\n",
				vmMiB, load.DirtyMiB, mode, i, t.FrozenTotal*1000, t.VM.DowntimeQEMU*1000, t.VM.Switchover*1000,
				lastOr(sj.gap, mode), lastOr(sj.clientGap, mode), idleBeat[i], idleClient[i], t.Total*1000, time.Since(t0).Seconds())
			fl.sample()
		}
		vc := VMCase{Case: sj.summary(mode, n), IdleHeartbeatGapMs: benchutil.Summarise(idleBeat), IdleClientGapMs: benchutil.Summarise(idleClient)}
		var down, sw, disk, ram, passes []float64
		for _, t := range vc.Timings {
			if t.VM == nil {
				r.Fatalf("a VM move without its VM timing: %+v", t)
			}
			down, sw = append(down, t.VM.DowntimeQEMU*1000), append(sw, t.VM.Switchover*1000)
			disk, ram = append(disk, t.VM.DiskMirror*1000), append(ram, t.VM.RAMPrecopy*1000)
			passes = append(passes, float64(t.VM.RAMIterations))
		}
		vc.DowntimeQEMUMs, vc.SwitchoverMs = benchutil.Summarise(down), benchutil.Summarise(sw)
		vc.DiskMirrorMs, vc.RAMPrecopyMs, vc.RAMPasses = benchutil.Summarise(disk), benchutil.Summarise(ram), benchutil.Summarise(passes)
		res.Cases = append(res.Cases, vc)
	}
	sj.client.close()
	c.OK("delete", "--force", sj.at+":"+name)
	res.Floor = Floor{RuncRunMs: benchutil.Summarise(fl.runcRun),
		CriuDumpMs: benchutil.Summarise(fl.criuDump), CriuRestoreMs: benchutil.Summarise(fl.criuRestore)}
	return res
}
