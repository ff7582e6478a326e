package main

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/vesselhost/vessel/internal/api"
)

func newCopyCmd(g *globals) *cobra.Command {
	f := &createFlags{}
	var start, instanceOnly bool
	cmd := &cobra.Command{
		Use:   "copy [REMOTE:]SOURCE[/SNAP] [REMOTE:]NEWNAME",
		Short: "Create an instance from a snapshot or an instance, here or on another host",
		Long: `Create an instance (a container or a virtual machine, as the source is) from
a snapshot or from a stopped instance. When the target names another host
(REMOTE:[NEWNAME]), the disk is sent there (a running container is frozen,
a running VM's vCPUs stopped, while it is read, for a consistent copy).
The copy gets an address of its own (and a VM a MAC derived from it) and
its own name as hostname. A copy of an instance gets its snapshots too
(a container's stateful ones with their state; a VM's as disk snapshots:
their saved memory holds the source's MAC and address); --instance-only
leaves them. A copy of a snapshot has none.`,
		Example: `  vessel copy web1/before-upgrade web1-old
  vessel copy web1 web2          # web1 must be stopped; its snapshots too
  vessel copy web1 web2 --instance-only
  vessel copy alpha:web1 beta:web1-clone`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if remoteCopy, err := otherHost(args[0], args[1]); err != nil {
				return err
			} else if remoteCopy {
				if strings.Contains(args[0], "/") {
					return fmt.Errorf("a snapshot cannot be copied to another host directly: copy it to a container here first")
				}
				op, err := startMigration(cmd.Context(), args[0], args[1], api.InstanceMigratePost{Copy: true, InstanceOnly: instanceOnly})
				if err := wait(cmd.Context(), g, op, err); err != nil {
					return err
				}
				if !g.quiet {
					fmt.Fprintf(cmd.OutOrStdout(), "Copied %s to %s\n", args[0], args[1])
				}
				return nil
			}
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
				Source: api.InstanceSource{Type: "copy", Source: r.name, InstanceOnly: instanceOnly},
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
	cmd.Flags().BoolVar(&start, "start", false, "start the new instance")
	cmd.Flags().BoolVar(&instanceOnly, "instance-only", false, "copy the instance without its snapshots")
	return cmd
}

// otherHost reports whether dst names a remote other than src's.
func otherHost(src, dst string) (bool, error) {
	if !strings.Contains(dst, ":") {
		return false, nil
	}
	cfg, err := loadRemotes()
	if err != nil {
		return false, err
	}
	s, err := cfg.parseRef(src)
	if err != nil {
		return false, err
	}
	d, err := cfg.parseRef(dst)
	if err != nil {
		return false, err
	}
	return s.remote != d.remote, nil
}
