// Command lifecycle measures vessel's launch-to-running and stop+delete
// latency over N containers (unprivileged, the default, and interleaved
// with them as many privileged ones), and, in the same run and interleaved with it,
// `runc run -d` / kill+delete of an equivalent bundle (same generated spec,
// a btrfs snapshot of the same image on the same pool). It prints JSON.
//
// With -vm N it then boots N busybox VMs (`launch --vm`, 256 MiB, 1 vCPU)
// interleaved with N more containers: a VM's time is launch until its
// guest agent answers (`vessel exec VM true` succeeding, the first exec
// waits for the agent), a container's the same launch + exec. The
// accelerator (kvm or tcg) is in the JSON: under TCG the figures are not
// KVM's.
//
//	go run ./bench/lifecycle -n 20 -vm 8
package main

import (
	"flag"
	"fmt"
	"time"

	"github.com/vesselhost/vessel/bench/internal/benchutil"
	"github.com/vesselhost/vessel/bench/internal/floor"
	"github.com/vesselhost/vessel/internal/testhost"
)

// Result is the benchmark's JSON output.
type Result struct {
	Benchmark string            `json:"benchmark"`
	Machine   benchutil.Machine `json:"machine"`
	N         int               `json:"n"`
	Vessel    struct {
		LaunchMs       benchutil.Stats `json:"launch_ms"`
		StopDeleteMs   benchutil.Stats `json:"stop_force_delete_ms"`
		GracefulStopMs benchutil.Stats `json:"graceful_stop_ms"`
		// The same with security.privileged=true (no user namespace).
		PrivilegedLaunchMs     benchutil.Stats `json:"privileged_launch_ms"`
		PrivilegedStopDeleteMs benchutil.Stats `json:"privileged_stop_force_delete_ms"`
	} `json:"vessel"`
	Runc struct {
		RunMs        benchutil.Stats `json:"run_ms"`
		KillDeleteMs benchutil.Stats `json:"kill_delete_ms"`
	} `json:"runc"`
	// VM: launch --vm until the agent answers, beside containers in the
	// same phase (launch + exec true).
	VM     *VMResult `json:"vm,omitempty"`
	Ratios struct {
		LaunchVsRunc     float64 `json:"launch_vs_runc"`
		StopDeleteVsRunc float64 `json:"stop_delete_vs_runc"`
		// Unprivileged launch over privileged launch (medians).
		UnprivilegedVsPrivileged float64 `json:"unprivileged_vs_privileged_launch"`
	} `json:"ratios"`
	Reference map[string]float64 `json:"reference"`
}

// VMResult is the VM phase's figures.
type VMResult struct {
	N     int    `json:"n"`
	Accel string `json:"accel"`
	// LaunchMs is until the CLI returns (QEMU started and let run).
	LaunchMs benchutil.Stats `json:"launch_ms"`
	// AgentMs is launch until `vessel exec VM true` succeeded.
	AgentMs benchutil.Stats `json:"launch_to_agent_ms"`
	// ContainerMs is a container's launch + `vessel exec C true`,
	// interleaved with the VMs.
	ContainerMs    benchutil.Stats `json:"container_launch_exec_ms"`
	DeleteForceMs  benchutil.Stats `json:"vm_delete_force_ms"`
	AgentVsContain float64         `json:"agent_vs_container"`
}

// vmPhase boots n VMs interleaved with n containers (see VMResult).
func vmPhase(h *testhost.Host, n int) *VMResult {
	res := &VMResult{N: n, Accel: h.ServerInfo().Host.VMAccel}
	// Warm-up: the first VM launch builds the image's VM disk and the
	// initramfs.
	h.OK("launch", "busybox", "vmwarm", "--vm", "-c", "limits.memory=256MiB")
	h.OK("exec", "vmwarm", "--", "true")
	h.OK("delete", "--force", "vmwarm")
	var launch, agent, cont, del []float64
	for i := range n {
		for k := range 2 {
			if (i+k)%2 == 0 {
				name := fmt.Sprintf("bv%d", i)
				t0 := time.Now()
				h.OK("launch", "busybox", name, "--vm", "-c", "limits.memory=256MiB")
				launch = append(launch, benchutil.Ms(time.Since(t0)))
				h.OK("exec", name, "--", "true")
				agent = append(agent, benchutil.Ms(time.Since(t0)))
				t0 = time.Now()
				h.OK("delete", "--force", name)
				del = append(del, benchutil.Ms(time.Since(t0)))
			} else {
				name := fmt.Sprintf("bc%d", i)
				t0 := time.Now()
				h.OK("launch", "busybox", name)
				h.OK("exec", name, "--", "true")
				cont = append(cont, benchutil.Ms(time.Since(t0)))
				h.OK("delete", "--force", name)
			}
		}
	}
	res.LaunchMs, res.AgentMs = benchutil.Summarise(launch), benchutil.Summarise(agent)
	res.ContainerMs, res.DeleteForceMs = benchutil.Summarise(cont), benchutil.Summarise(del)
	res.AgentVsContain = benchutil.Ratio(res.AgentMs.Median, res.ContainerMs.Median)
	return res
}

func main() {
	n := flag.Int("n", 20, "containers to launch")
	vms := flag.Int("vm", 0, "VMs to boot (launch --vm until the agent answers), interleaved with as many containers")
	out := flag.String("o", "", "write JSON here as well as to stdout")
	flag.Parse()

	r, bin := benchutil.Start()
	defer r.Close()
	h := testhost.New(r, bin, testhost.Options{StorageSizeMiB: 4096})

	// Warm-up: the first launch unpacks the image into its volume.
	h.OK("launch", "busybox", "warmup")
	h.OK("delete", "--force", "warmup")
	rb := floor.NewRunc(r, h)

	var res Result
	res.Benchmark, res.Machine, res.N = "lifecycle", benchutil.ThisMachine(), *n
	var launch, stopDel, runcRun, runcKill, graceful, launchP, stopDelP []float64
	for i := 0; i < *n; i++ {
		name := fmt.Sprintf("lc%d", i)
		// Alternate which kind goes first: neither gets a warmer host.
		for k := range 2 {
			if (i+k)%2 == 0 {
				t0 := time.Now()
				h.OK("launch", "busybox", name)
				launch = append(launch, benchutil.Ms(time.Since(t0)))
			} else {
				t0 := time.Now()
				h.OK("launch", "busybox", name+"p", "-c", "security.privileged=true")
				launchP = append(launchP, benchutil.Ms(time.Since(t0)))
			}
		}

		d, err := rb.Run(i)
		if err != nil {
			r.Fatalf("runc run: %v", err)
		}
		runcRun = append(runcRun, benchutil.Ms(d))
	}
	for i := 0; i < *n; i++ {
		name := fmt.Sprintf("lc%d", i)
		if i < 3 {
			// A few graceful stops: busybox init's own shutdown path.
			t0 := time.Now()
			h.OK("stop", name)
			graceful = append(graceful, benchutil.Ms(time.Since(t0)))
			h.OK("start", name)
		}
		t0 := time.Now()
		h.OK("stop", "--force", name)
		h.OK("delete", name)
		stopDel = append(stopDel, benchutil.Ms(time.Since(t0)))
		t0 = time.Now()
		h.OK("stop", "--force", name+"p")
		h.OK("delete", name+"p")
		stopDelP = append(stopDelP, benchutil.Ms(time.Since(t0)))

		d, err := rb.KillDelete(i)
		if err != nil {
			r.Fatalf("runc kill/delete: %v", err)
		}
		runcKill = append(runcKill, benchutil.Ms(d))
	}
	res.Vessel.LaunchMs = benchutil.Summarise(launch)
	res.Vessel.StopDeleteMs = benchutil.Summarise(stopDel)
	res.Vessel.GracefulStopMs = benchutil.Summarise(graceful)
	res.Vessel.PrivilegedLaunchMs = benchutil.Summarise(launchP)
	res.Vessel.PrivilegedStopDeleteMs = benchutil.Summarise(stopDelP)
	res.Runc.RunMs = benchutil.Summarise(runcRun)
	res.Runc.KillDeleteMs = benchutil.Summarise(runcKill)
	res.Ratios.LaunchVsRunc = benchutil.Ratio(res.Vessel.LaunchMs.Median, res.Runc.RunMs.Median)
	res.Ratios.StopDeleteVsRunc = benchutil.Ratio(res.Vessel.StopDeleteMs.Median, res.Runc.KillDeleteMs.Median)
	res.Ratios.UnprivilegedVsPrivileged = benchutil.Ratio(res.Vessel.LaunchMs.Median, res.Vessel.PrivilegedLaunchMs.Median)
	res.Reference = map[string]float64{"incus_6.0.4_launch_ms": 212}
	if *vms > 0 {
		res.VM = vmPhase(h, *vms)
	}

	benchutil.Emit(r, res, *out)
}
