package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/vesselhost/vessel/bench/internal/benchutil"
	"github.com/vesselhost/vessel/bench/internal/floor"
	"github.com/vesselhost/vessel/internal/qemu"
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
	// PauseClientGapMs and PauseHeartbeatGapMs are a second floor: the
	// VM stopped for vmPause and let run again (QMP stop, cont) in the
	// same QEMU, before each move: the resume of a guest whose QEMU has
	// run it all along (TCG's translated code warm).
	PauseClientGapMs    benchutil.Stats `json:"pause_client_gap_ms"`
	PauseHeartbeatGapMs benchutil.Stats `json:"pause_heartbeat_gap_ms"`
	// TBsAfterMove is the translated blocks (HMP info jit, TCG) of the
	// target's QEMU 2 s after each move: the code the guest ran since,
	// all translated anew (a QEMU's translation cache starts empty).
	TBsAfterMove benchutil.Stats `json:"tbs_after_move,omitzero"`
	// TBsIdleWindow is the blocks the same guest's QEMU translated
	// during the window without a move (its cache warm).
	TBsIdleWindow benchutil.Stats `json:"tbs_idle_window,omitzero"`
	DiskMirrorMs  benchutil.Stats `json:"disk_mirror_ms"`
	RAMPrecopyMs  benchutil.Stats `json:"ram_precopy_ms"`
	RAMPasses     benchutil.Stats `json:"ram_passes"`
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
func runVM(r *testhost.Runner, c *testhost.Cluster, fl *floors, n int, load vmLoad, modes []string, beat, echo, traceDir, faults string) VMResult {
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
	var tr *vmTrace
	if traceDir != "" {
		if err := os.MkdirAll(traceDir, 0o755); err != nil {
			r.Fatalf("%v", err)
		}
		tr = &vmTrace{dir: traceDir, c: c}
		sj.moved = tr.stopCapture
	}
	fl.runc = floor.NewRunc(r, c.Host("alpha")) // the busybox image is on alpha now
	// -vm-faults: the run's hosts were started with them (an arm of an
	// A/B made of whole runs, alternated: a vesseld restart between
	// moves would tear the target's idle bridge down, and its learnt
	// forwarding entries with it).
	sec := "vm"
	if faults != "" {
		sec += "/" + faults
	}
	arms := []*vmArm{{sj: sj, sec: sec}}
	for _, mode := range modes {
		for _, a := range arms {
			a.sj.reset(Case{SizeMiB: vmMiB, Mode: mode, Security: a.sec})
			a.idleBeat, a.idleClient = nil, nil
		}
		at := sj.at
		for i := 0; i < n*len(arms); i++ {
			a := arms[(i/2)%len(arms)]
			a.sj.at = at
			// The floor: the same measurement over a window without a move.
			ref := at + ":" + name
			c.OK("exec", ref, "--", "touch", "/tmp/beat.reset")
			time.Sleep(300 * time.Millisecond)
			c.OK("exec", ref, "--", "touch", "/tmp/beat.reset")
			sj.client.reset()
			tb0, tbOK := vmTBs(c, at, name)
			time.Sleep(vmIdleWindow)
			if tb1, ok := vmTBs(c, at, name); ok && tbOK {
				a.idleTBs = append(a.idleTBs, tb1-tb0)
			}
			us, _ := strconv.Atoi(strings.TrimSpace(c.OK("exec", ref, "--", "cat", "/tmp/beat.max")))
			gap, _, _ := sj.client.query()
			a.idleBeat, a.idleClient = append(a.idleBeat, float64(us)/1000), append(a.idleClient, benchutil.Ms(gap))
			pb, pc := vmPauseFloor(r, c, sj.client, at, name)
			a.pauseBeat, a.pauseClient = append(a.pauseBeat, pb), append(a.pauseClient, pc)
			t0 := time.Now()
			tr.start(len(res.Cases)*n + i)
			a.sj.move(r, c, mode, beat, echo, 0, 0)
			tr.stop()
			at = a.sj.at
			time.Sleep(2 * time.Second)
			if tbs, ok := vmTBs(c, at, name); ok {
				a.tbs = append(a.tbs, tbs)
			}
			t := a.sj.cs.Timings[len(a.sj.cs.Timings)-1]
			fmt.Fprintf(os.Stderr, "vm %d MiB (%d rewritten) %s %s move %d to %s: frozen %.0f ms (QEMU downtime %.0f, switch-over %.0f), heartbeat gap %v, client gap %v (no move: %.0f, %.0f ms; stop+cont %.0f ms: %.0f, %.0f ms), total %.0f ms (%.1f s with checks)\n",
				vmMiB, load.DirtyMiB, a.sec, mode, i, at, t.FrozenTotal*1000, t.VM.DowntimeQEMU*1000, t.VM.Switchover*1000,
				lastOr(a.sj.gap, mode), lastOr(a.sj.clientGap, mode), a.idleBeat[len(a.idleBeat)-1], a.idleClient[len(a.idleClient)-1], float64(vmPause.Milliseconds()), a.pauseBeat[len(a.pauseBeat)-1], a.pauseClient[len(a.pauseClient)-1], t.Total*1000, time.Since(t0).Seconds())
			fl.sample()
		}
		sj.at = at
		for _, a := range arms {
			res.Cases = append(res.Cases, a.summary(r, mode, n))
		}
	}
	sj.client.close()
	c.OK("delete", "--force", sj.at+":"+name)
	res.Floor = Floor{RuncRunMs: benchutil.Summarise(fl.runcRun),
		CriuDumpMs: benchutil.Summarise(fl.criuDump), CriuRestoreMs: benchutil.Summarise(fl.criuRestore)}
	return res
}

// vmArm is a run's moves of the one VM and their samples.
type vmArm struct {
	sj                     *subject
	sec                    string
	idleBeat, idleClient   []float64
	pauseBeat, pauseClient []float64
	tbs, idleTBs           []float64
}

// summary is the arm's case of mode.
func (a *vmArm) summary(r *testhost.Runner, mode string, n int) VMCase {
	vc := VMCase{Case: a.sj.summary(mode, n), IdleHeartbeatGapMs: benchutil.Summarise(a.idleBeat), IdleClientGapMs: benchutil.Summarise(a.idleClient),
		PauseHeartbeatGapMs: benchutil.Summarise(a.pauseBeat), PauseClientGapMs: benchutil.Summarise(a.pauseClient)}
	if len(a.tbs) > 0 {
		vc.TBsAfterMove = benchutil.Summarise(a.tbs)
	}
	if len(a.idleTBs) > 0 {
		vc.TBsIdleWindow = benchutil.Summarise(a.idleTBs)
	}
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
	return vc
}

// vmPause is how long the pause floor stops the VM (about a move's
// frozen time).
const vmPause = 50 * time.Millisecond

// vmPauseFloor stops the VM on host at for vmPause and lets it run again
// through its QMP socket, and returns the largest heartbeat and client
// gaps (ms) around it.
func vmPauseFloor(r *testhost.Runner, c *testhost.Cluster, cl *client, at, name string) (beat, clientGap float64) {
	ref := at + ":" + name
	c.OK("exec", ref, "--", "touch", "/tmp/beat.reset")
	time.Sleep(300 * time.Millisecond)
	cl.reset()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	mon, err := qemu.Connect(ctx, qemu.Config{RunDir: filepath.Join(c.Host(at).RunDir(), "vm", name)}.QMPSocket())
	if err != nil {
		r.Fatalf("pause floor: %v", err)
	}
	err = mon.Stop(ctx)
	time.Sleep(vmPause)
	if err == nil {
		err = mon.Cont(ctx)
	}
	mon.Close()
	if err != nil {
		r.Fatalf("pause floor: %v", err)
	}
	gap, ok := cl.waitAnswers(10 * time.Second)
	if !ok {
		r.Fatalf("pause floor: no answer after the VM's cont")
	}
	time.Sleep(200 * time.Millisecond)
	us, _ := strconv.Atoi(strings.TrimSpace(c.OK("exec", ref, "--", "cat", "/tmp/beat.max")))
	return float64(us) / 1000, benchutil.Ms(gap)
}

// vmTBs reads the translated-block count of the VM's QEMU on host at
// (HMP info jit; false where it has none, as under KVM).
func vmTBs(c *testhost.Cluster, at, name string) (float64, bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	mon, err := qemu.Connect(ctx, qemu.Config{RunDir: filepath.Join(c.Host(at).RunDir(), "vm", name)}.QMPSocket())
	if err != nil {
		return 0, false
	}
	defer mon.Close()
	var out string
	if err := mon.Execute(ctx, "human-monitor-command", map[string]any{"command-line": "info jit"}, &out); err != nil {
		return 0, false
	}
	for _, l := range strings.Split(out, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), "TB count"); ok {
			if n, err := strconv.Atoi(strings.Fields(v)[0]); err == nil {
				return float64(n), true
			}
		}
	}
	return 0, false
}
