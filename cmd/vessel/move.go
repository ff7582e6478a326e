package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/vesselhost/vessel/internal/api"
	"github.com/vesselhost/vessel/internal/client"
)

func newMoveCmd(g *globals) *cobra.Command {
	var live, timing, instanceOnly bool
	var memory, format string
	cmd := &cobra.Command{
		Use:     "move [REMOTE:]NAME REMOTE:[NEWNAME]",
		Aliases: []string{"migrate"},
		Short:   "Move an instance to another host (--live keeps it running)",
		Long: `Move a container to another host. Without --live a running container is
stopped, moved and started again. With --live it keeps running: its disk is
copied while it runs, then it is frozen for a moment to checkpoint it and
copy the last changes, and resumes on the target; with --memory=lazy memory
follows after the resume (post-copy), with --memory=copy it is copied while
frozen, with --memory=precopy it is copied in passes while the container
runs (each pass the pages written since the last) until the passes stop
shrinking, and only the last pass's writes are copied while frozen.
--memory=auto (the default) copies the memory of a container using less
than 6 MiB (less frozen time than setting up post-copy); anything bigger
starts pre-copy, whose first passes measure the container's dirty rate and
the link: where post-copy would freeze it for less, the passes are dropped
and it moves post-copy. --timing shows the passes and the mode used.

A virtual machine moves the same ways. Without --live a running VM is shut
down (ACPI, then killed after the stop timeout), its disk and snapshots
(a stateful one's memory file too) are sent and it starts on the target.
With --live QEMU mirrors its disk to the target and migrates its RAM in
passes while it runs (--memory=copy or precopy), switches to post-copy at
once (lazy) or when the guest dirties memory faster than the link moves it
(auto).

The source host must have the target as a peer ('vessel peer add').`,
		Example: `  vessel move alpha:web1 beta: --live --timing
  vessel move web1 beta:web2`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if !strings.Contains(args[1], ":") {
				return fmt.Errorf("the target must name a remote: REMOTE:[NEWNAME]")
			}
			op, err := startMigration(cmd.Context(), args[0], args[1], api.InstanceMigratePost{Live: live, Memory: memory, InstanceOnly: instanceOnly})
			if err := wait(cmd.Context(), g, op, err); err != nil {
				return err
			}
			return printTiming(cmd, op, timing, format)
		},
	}
	cmd.Flags().BoolVar(&live, "live", false, "keep the container running through the move")
	cmd.Flags().StringVar(&memory, "memory", api.MemoryAuto, "live memory transfer: lazy (post-copy), copy (all while frozen), precopy (passes while it runs) or auto (copy below 6 MiB of memory, else precopy where it beats lazy)")
	cmd.Flags().BoolVar(&instanceOnly, "instance-only", false, "leave the snapshots behind (they are deleted with the source)")
	cmd.Flags().BoolVar(&timing, "timing", false, "print the per-phase timing table (like vzmigrate -t)")
	cmd.Flags().StringVarP(&format, "format", "f", formatTable, "timing output: table or json")
	return cmd
}

// startMigration asks the source host to migrate src to the host of dst.
func startMigration(ctx context.Context, src, dst string, req api.InstanceMigratePost) (*client.Operation, error) {
	sc, sref, err := connect(src)
	if err != nil {
		return nil, err
	}
	cfg, err := loadRemotes()
	if err != nil {
		return nil, err
	}
	dref, err := cfg.parseRef(dst)
	if err != nil {
		return nil, err
	}
	if dref.remote == sref.remote {
		return nil, fmt.Errorf("%s and %s are on the same host", src, dst)
	}
	dc, err := cfg.client(dref.remote)
	if err != nil {
		return nil, err
	}
	srv, err := dc.Server(ctx)
	if err != nil {
		return nil, fmt.Errorf("target %s: %w", dref.remote, err)
	}
	req.TargetFingerprint, req.Name = srv.Fingerprint, dref.name
	return sc.MigrateInstance(ctx, sref.name, req)
}

// printTiming prints the migration report from the finished operation.
func printTiming(cmd *cobra.Command, op *client.Operation, timing bool, format string) error {
	if !timing && format != formatJSON {
		return nil
	}
	var t api.MigrationTiming
	b, _ := json.Marshal(op.Metadata[api.MetaTiming])
	if err := json.Unmarshal(b, &t); err != nil {
		return fmt.Errorf("no timing report: %w", err)
	}
	if format == formatJSON {
		return printRaw(cmd.OutOrStdout(), formatJSON, t)
	}
	fmt.Fprint(cmd.OutOrStdout(), timingTable(t))
	return nil
}

// timingTable renders a migration's report the way `vzmigrate -t` printed
// it: the phases the container was frozen for, and their total.
func timingTable(t api.MigrationTiming) string {
	var b strings.Builder
	row := func(name string, secs float64, bytes int64) {
		if bytes > 0 {
			fmt.Fprintf(&b, "%-26s %8.3f s  %10s\n", name+":", secs, humanBytes(uint64(bytes)))
		} else {
			fmt.Fprintf(&b, "%-26s %8.3f s\n", name+":", secs)
		}
	}
	fmt.Fprintf(&b, "Timing (%s):\n", t.Mode)
	if v := t.VM; v != nil {
		// A VM's move, as QEMU reports it.
		row("disk mirror (in sync)", v.DiskMirror, v.DiskBytes)
		row(fmt.Sprintf("RAM pre-copy (%d passes)", v.RAMIterations), v.RAMPrecopy, v.RAMBytes)
		if v.PostcopyReason != "" {
			fmt.Fprintf(&b, "post-copy: %s\n", v.PostcopyReason)
		}
		row("downtime (QEMU)", v.DowntimeQEMU, 0)
		row("switch-over", v.Switchover, 0)
		b.WriteString(strings.Repeat("-", 48) + "\n")
		row("total frozen", t.FrozenTotal, 0)
		if t.ResumeReport > 0 {
			row("resumed, until reported", t.ResumeReport, 0)
		}
		if v.Postcopy > 0 || v.PostcopyBytes > 0 {
			row("post-copy (after resume)", v.Postcopy, v.PostcopyBytes)
		}
		row("total", t.Total, 0)
		return b.String()
	}
	row(fmt.Sprintf("precopy (%d iterations)", t.PrecopyIterations), t.Precopy, t.PrecopyBytes)
	for i, p := range t.MemoryPasses {
		row(fmt.Sprintf("  memory pass %d", i), p.Seconds, p.Bytes)
		fmt.Fprintf(&b, "%-26s %8.3f s  %10d pages\n", "    sent to the target:", p.SendSeconds, p.Pages)
	}
	if t.AutoChoice != "" {
		fmt.Fprintf(&b, "auto: %s\n", t.AutoChoice)
	}
	row("suspend+dump", t.SuspendDump, 0)
	row("copy after suspend", t.CopyAfterSuspend, t.AfterSuspendBytes)
	row("copy dump", t.CopyDump, t.DumpBytes)
	row("undump+resume", t.UndumpResume, 0)
	b.WriteString(strings.Repeat("-", 48) + "\n")
	row("total frozen", t.FrozenTotal, 0)
	if t.ResumeReport > 0 {
		row("resumed, until reported", t.ResumeReport, 0)
	}
	if t.Postcopy > 0 || t.PostcopyBytes > 0 {
		row("post-copy (after resume)", t.Postcopy, t.PostcopyBytes)
	}
	row("total", t.Total, 0)
	return b.String()
}
