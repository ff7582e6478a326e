package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/vesselhost/vessel/internal/api"
)

// newActionCmd builds start, stop and restart: the same request with a
// different action.
func newActionCmd(g *globals, action string) *cobra.Command {
	var timeout int
	var force bool
	short := map[string]string{
		api.ActionStart:   "Start containers",
		api.ActionStop:    "Stop containers (init's shutdown signal, then kill after --timeout)",
		api.ActionRestart: "Restart containers",
	}[action]
	cmd := &cobra.Command{
		Use:   action + " [REMOTE:]NAME...",
		Short: short,
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			for _, arg := range args {
				c, r, err := connect(arg)
				if err != nil {
					return err
				}
				op, err := c.UpdateInstanceState(ctx, r.name, api.InstanceStatePut{Action: action, Timeout: timeout, Force: force})
				if err := wait(ctx, g, op, err); err != nil {
					return fmt.Errorf("%s %s: %w", action, r, err)
				}
			}
			return nil
		},
	}
	if action != api.ActionStart {
		cmd.Flags().IntVar(&timeout, "timeout", 0, "seconds to wait for a graceful shutdown before killing (default 30)")
		cmd.Flags().BoolVarP(&force, "force", "f", false, "kill at once instead of asking init to shut down")
	}
	return cmd
}

func newDeleteCmd(g *globals) *cobra.Command {
	var force bool
	cmd := &cobra.Command{
		Use:     "delete [REMOTE:]NAME...",
		Aliases: []string{"rm"},
		Short:   "Delete containers (a running one needs --force)",
		Args:    cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			for _, arg := range args {
				c, r, err := connect(arg)
				if err != nil {
					return err
				}
				op, err := c.DeleteInstance(ctx, r.name, force)
				if err := wait(ctx, g, op, err); err != nil {
					return fmt.Errorf("delete %s: %w", r, err)
				}
			}
			return nil
		},
	}
	cmd.Flags().BoolVarP(&force, "force", "f", false, "kill and delete a running container")
	return cmd
}
