package main

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/vesselhost/vessel/internal/api"
)

func newInfoCmd(g *globals) *cobra.Command {
	var format string
	cmd := &cobra.Command{
		Use:   "info [[REMOTE:]NAME | REMOTE:]",
		Short: "Show the host's inventory, or a container's details and live usage",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 || strings.HasSuffix(args[0], ":") {
				arg := ""
				if len(args) == 1 {
					arg = args[0]
				}
				c, err := connectRemote(arg)
				if err != nil {
					return err
				}
				srv, err := c.Server(cmd.Context())
				if err != nil {
					return err
				}
				return printKV(cmd.OutOrStdout(), format, hostPairs(srv.Host), srv)
			}
			inst, err := getInstance(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			return printKV(cmd.OutOrStdout(), format, instancePairs(inst), inst)
		},
	}
	addFormatFlag(cmd, &format)
	return cmd
}

func hostPairs(h api.HostInfo) [][2]string {
	return [][2]string{
		{"Host", h.Hostname},
		{"Distribution", nonEmpty(h.OS.PrettyName, distro(h.OS))},
		{"Kernel", h.Kernel},
		{"Architecture", h.Architecture},
		{"CPUs", fmt.Sprint(h.CPUs)},
		{"Memory", humanBytes(h.MemoryTotal)},
		{"Cgroups", h.CgroupVersion},
		{"Storage driver", h.StorageDriver},
		{"runc", h.RuncVersion},
		{"CRIU", h.CRIUVersion},
		{"CRIU check", h.CRIUCheck},
		{"VM accelerator", accelLine(h)},
		{"Containers", fmt.Sprintf("%d (%d running)", h.Instances, h.InstancesUp)},
		{"Control cgroup", controlLine(h.Control)},
		{"Storage devices", devicesLine(h.StorageDevices)},
		{"Default limits", defaultsLine(h.DefaultLimits)},
		{"vessel", h.VesselVersion},
		{"Warnings", warningsLine(h.Warnings)},
	}
}

// accelLine says what VMs run with, and why not KVM.
func accelLine(h api.HostInfo) string {
	switch {
	case h.VMAccel == "":
		return "unknown"
	case h.VMAccelReason != "":
		return fmt.Sprintf("%s (%s)", h.VMAccel, h.VMAccelReason)
	}
	return h.VMAccel
}

// warningsLine lists what the daemon cleaned at its start.
func warningsLine(w []string) string {
	if len(w) == 0 {
		return "none"
	}
	return strings.Join(w, "; ")
}

// controlLine describes the control plane's CPU share.
func controlLine(c api.ControlPlane) string {
	if c.Cgroup == "" {
		return fmt.Sprintf("none (vesseld stays where it was started); containers in %s", c.ContainersCgroup)
	}
	return fmt.Sprintf("%s, CPU weight %d (containers: %s, %d)", c.Cgroup, c.CPUWeight, c.ContainersCgroup, c.ContainersCPUWeight)
}

// defaultsLine lists the host's default limits.
func defaultsLine(limits map[string]string) string {
	var parts []string
	for _, k := range sortedKeys(limits) {
		parts = append(parts, k+"="+limits[k])
	}
	return strings.Join(parts, " ")
}

// sortedKeys returns m's keys in order.
func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// devicesLine lists block devices with their I/O schedulers.
func devicesLine(devs []api.BlockDevice) string {
	var parts []string
	for _, d := range devs {
		parts = append(parts, fmt.Sprintf("%s (%s, scheduler %s)", nonEmpty(d.Name, d.Device), d.Device, nonEmpty(d.Scheduler, "?")))
	}
	return strings.Join(parts, ", ")
}

func instancePairs(i api.Instance) [][2]string {
	p := [][2]string{
		{"Name", i.Name},
		{"Type", nonEmpty(i.Type, api.InstanceContainer)},
		{"Status", i.Status},
		{"Location", i.Location},
		{"Distribution", nonEmpty(i.OS.PrettyName, distro(i.OS))},
		{"Image", i.Image},
		{"IPv4", i.IPv4},
		{"Security", security(i)},
		{"Created", i.Created.Local().Format(time.RFC3339)},
	}
	if !i.LastStart.IsZero() {
		p = append(p, [2]string{"Last start", i.LastStart.Local().Format(time.RFC3339)})
	}
	if i.PID != 0 {
		p = append(p, [2]string{"PID", fmt.Sprint(i.PID)})
	}
	if i.Type == api.InstanceVM && i.Status == api.StatusRunning {
		agent := "not answering yet (booting)"
		if !i.AgentReady.IsZero() {
			agent = "ready since " + i.AgentReady.Local().Format(time.RFC3339)
		}
		p = append(p, [2]string{"Agent", agent})
	}
	if e := i.LastExit; e != nil && i.Status != api.StatusRunning {
		how := fmt.Sprintf("status %d", e.Status)
		if e.Signal != "" {
			how = "signal " + e.Signal
		}
		p = append(p, [2]string{"Last exit", how + " at " + e.Time.Local().Format(time.RFC3339)})
	}
	if s := i.State; s != nil {
		p = append(p,
			[2]string{"CPU time", time.Duration(s.CPUUsageNS).Round(time.Millisecond).String()},
			[2]string{"Memory", humanBytes(s.MemoryUsage)},
			[2]string{"Processes", fmt.Sprint(s.Processes)},
			[2]string{"Cgroup", s.Cgroup},
		)
		if s.MemoryLimit > 0 {
			p = append(p, [2]string{"Memory limit", humanBytes(s.MemoryLimit)})
		}
		p = append(p, [2]string{"OOM kills", fmt.Sprint(s.OOMKills)})
		for _, io := range s.IO {
			p = append(p, [2]string{
				fmt.Sprintf("I/O %s (%s, %s)", nonEmpty(io.Name, io.Device), io.Device, nonEmpty(io.Scheduler, "?")),
				fmt.Sprintf("read %s in %d ops, written %s in %d ops",
					humanBytes(io.ReadBytes), io.ReadOps, humanBytes(io.WriteBytes), io.WriteOps),
			})
		}
	}
	keys := make([]string, 0, len(i.Config))
	for k := range i.Config {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		p = append(p, [2]string{"config " + k, i.Config[k]})
	}
	for _, k := range sortedKeys(i.Defaults) {
		p = append(p, [2]string{"config " + k, i.Defaults[k] + " (host default)"})
	}
	return p
}

func nonEmpty(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// security says how the container is isolated from the host's users.
func security(i api.Instance) string {
	switch {
	case i.Privileged:
		return "privileged (no user namespace: its root is the host's root)"
	case i.IDMap != "":
		return "unprivileged (user namespace, host ids " + i.IDMap + ")"
	default:
		return "unprivileged (user namespace from its first start)"
	}
}
