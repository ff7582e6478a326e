package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/vesselhost/vessel/internal/api"
)

func newCopyCmd(g *globals) *cobra.Command {
	f := &createFlags{}
	var start bool
	cmd := &cobra.Command{
		Use:   "copy [REMOTE:]SOURCE[/SNAP] NEWNAME",
		Short: "Create a container from a snapshot (or from a stopped container)",
		Example: `  vessel copy web1/before-upgrade web1-old
  vessel copy web1 web2          # web1 must be stopped`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, r, err := connect(args[0])
			if err != nil {
				return err
			}
			cfg, err := parseKV(f.config)
			if err != nil {
				return err
			}
			req := api.InstancesPost{
				Name:   args[1],
				Source: api.InstanceSource{Type: "copy", Source: r.name},
				Config: cfg,
				Start:  start,
			}
			ctx := cmd.Context()
			op, err := c.CreateInstance(ctx, req)
			if err := wait(ctx, g, op, err); err != nil {
				return err
			}
			if !g.quiet {
				fmt.Fprintf(cmd.OutOrStdout(), "Copied %s to %s\n", r, args[1])
			}
			return nil
		},
	}
	f.add(cmd)
	cmd.Flags().BoolVar(&start, "start", false, "start the new container")
	return cmd
}
