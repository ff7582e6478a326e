package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/vesselhost/vessel/internal/api"
	"github.com/vesselhost/vessel/internal/client"
)

func newSnapshotCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "snapshot",
		Short: "Create, list, restore and delete snapshots of containers and VMs (disk, and with --stateful memory)",
	}
	cmd.AddCommand(newSnapshotCreateCmd(g), newSnapshotListCmd(), newSnapshotRestoreCmd(g), newSnapshotDeleteCmd(g))
	return cmd
}

func newSnapshotCreateCmd(g *globals) *cobra.Command {
	var stateful bool
	cmd := &cobra.Command{
		Use:   "create [REMOTE:]NAME [SNAP]",
		Short: "Snapshot a container or VM (frozen only for the instant of the copy)",
		Long: `Snapshot a container's disk: on btrfs a read-only subvolume snapshot, taken
while the container is frozen (constant time); on the dir driver a full copy
(slow: the container stays frozen while its files are copied).

--stateful also saves the running container's memory and processes with CRIU
at the same frozen instant; the container keeps running. Ctrl-C cancels and
leaves nothing behind.

A VM's disk is snapshotted while its vCPUs are stopped (QEMU flushes the disk
first). --stateful saves its memory and device state to a file on the pool
while it runs (QEMU's mapped-ram migration, O_DIRECT, several streams); the
vCPUs stop only for the last pass, when the disk is taken.`,
		Example: `  vessel snapshot create web1
  vessel snapshot create web1 before-upgrade --stateful`,
		Args: cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, r, err := connect(args[0])
			if err != nil {
				return err
			}
			req := api.SnapshotsPost{Stateful: stateful}
			if len(args) == 2 {
				req.Name = args[1]
			}
			ctx := cmd.Context()
			t0 := time.Now()
			op, err := c.CreateSnapshot(ctx, r.name, req)
			if err := waitCancellable(ctx, g, op, err); err != nil {
				return fmt.Errorf("snapshot %s: %w", r, err)
			}
			if !g.quiet {
				md := op.Metadata
				fmt.Fprintf(cmd.OutOrStdout(), "Snapshot %s/%v created in %s (frozen %.1f ms)\n",
					r, md[api.MetaSnapshot], time.Since(t0).Round(time.Millisecond), number(md[api.MetaFrozenMs]))
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&stateful, "stateful", false, "also save memory and process state (CRIU; a VM's memory and devices)")
	return cmd
}

func newSnapshotListCmd() *cobra.Command {
	var format string
	cmd := &cobra.Command{
		Use:     "list [REMOTE:]NAME",
		Aliases: []string{"ls"},
		Short:   "List a container's snapshots",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, r, err := connect(args[0])
			if err != nil {
				return err
			}
			snaps, err := c.Snapshots(cmd.Context(), r.name)
			if err != nil {
				return err
			}
			rows := make([][]any, 0, len(snaps))
			for _, s := range snaps {
				rows = append(rows, []any{s.Name, s.Created.Local().Format(time.DateTime), humanBytes(s.Size),
					yesNo(s.Stateful), fmt.Sprintf("%.1f", s.FrozenMs)})
			}
			return printTable(cmd.OutOrStdout(), format, []string{"NAME", "CREATED", "SIZE", "STATEFUL", "FROZEN_MS"}, rows, snaps)
		},
	}
	addFormatFlag(cmd, &format)
	return cmd
}

func newSnapshotRestoreCmd(g *globals) *cobra.Command {
	var req api.SnapshotRestorePost
	cmd := &cobra.Command{
		Use:   "restore [REMOTE:]NAME SNAP",
		Short: "Roll a container or VM back to a snapshot (--stateful: its processes too)",
		Long: `Roll a container's disk back to a snapshot. A running container needs
--force: it is stopped first and, after a disk-only restore, started again.
--stateful brings back the processes and memory saved by a stateful
snapshot, running, exactly where they were (a VM: a new QEMU loads the saved
state; its vCPUs and memory must be the snapshot's).`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, r, err := connect(args[0])
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			op, err := c.RestoreSnapshot(ctx, r.name, args[1], req)
			if err := wait(ctx, g, op, err); err != nil {
				return fmt.Errorf("restore %s/%s: %w", r, args[1], err)
			}
			if !g.quiet {
				fmt.Fprintf(cmd.OutOrStdout(), "Restored %s from %s\n", r, args[1])
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&req.Stateful, "stateful", false, "restore memory and processes too")
	cmd.Flags().BoolVarP(&req.Force, "force", "f", false, "stop a running instance first")
	return cmd
}

func newSnapshotDeleteCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:     "delete [REMOTE:]NAME SNAP...",
		Aliases: []string{"rm"},
		Short:   "Delete snapshots",
		Args:    cobra.MinimumNArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, r, err := connect(args[0])
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			for _, snap := range args[1:] {
				op, err := c.DeleteSnapshot(ctx, r.name, snap)
				if err := wait(ctx, g, op, err); err != nil {
					return fmt.Errorf("delete snapshot %s/%s: %w", r, snap, err)
				}
			}
			return nil
		},
	}
}

// waitCancellable is wait, but an interrupt (Ctrl-C) cancels the
// operation and waits for it to undo its work.
func waitCancellable(ctx context.Context, g *globals, op *client.Operation, err error) error {
	err = wait(ctx, g, op, err)
	if err == nil || ctx.Err() == nil || op == nil {
		return err
	}
	bg, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if cerr := op.Cancel(bg); cerr != nil && client.StatusCode(cerr) != 0 {
		return errors.Join(err, cerr)
	}
	if werr := op.Wait(bg, nil); werr != nil {
		return werr
	}
	return errors.New("interrupted, but the operation had finished")
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// number reads a JSON number from metadata (0 if absent).
func number(v any) float64 {
	f, _ := v.(float64)
	return f
}

// humanRate formats bytes per second.
func humanRate(v any) string {
	return humanBytes(uint64(number(v))) + "/s"
}
