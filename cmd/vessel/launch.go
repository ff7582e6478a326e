package main

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/vesselhost/vessel/internal/api"
)

// createFlags are shared by launch and create.
type createFlags struct {
	config []string
	vm     bool
}

func (f *createFlags) add(cmd *cobra.Command) {
	cmd.Flags().StringArrayVarP(&f.config, "config", "c", nil, "configuration key=value (repeatable)")
	cmd.Flags().BoolVar(&f.vm, "vm", false, "a virtual machine (QEMU) instead of a container; limits.cpu and limits.memory size it")
}

func parseKV(pairs []string) (map[string]string, error) {
	out := map[string]string{}
	for _, p := range pairs {
		k, v, ok := strings.Cut(p, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("bad key=value %q", p)
		}
		out[k] = v
	}
	return out, nil
}

func newLaunchCmd(g *globals) *cobra.Command {
	return newCreateLike(g, "launch IMAGE [REMOTE:]NAME", "Create and start a container from an image", true)
}

func newCreateCmd(g *globals) *cobra.Command {
	return newCreateLike(g, "create IMAGE [REMOTE:]NAME", "Create a container from an image without starting it", false)
}

func newCreateLike(g *globals, use, short string, start bool) *cobra.Command {
	f := &createFlags{}
	cmd := &cobra.Command{
		Use:   use,
		Short: short,
		Example: `  vessel launch busybox web1
  vessel launch debian db1 -c user.role=database
  vessel launch debian vm1 --vm -c limits.cpu=2 -c limits.memory=2GiB`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, r, err := connect(args[1])
			if err != nil {
				return err
			}
			cfg, err := parseKV(f.config)
			if err != nil {
				return err
			}
			req := api.InstancesPost{
				Name:   r.name,
				Source: api.InstanceSource{Type: "image", Image: args[0]},
				Config: cfg,
				Start:  start,
			}
			if f.vm {
				req.Type = api.InstanceVM
			}
			ctx := cmd.Context()
			op, err := c.CreateInstance(ctx, req)
			if err := wait(ctx, g, op, err); err != nil {
				return err
			}
			if !g.quiet {
				verb := "Created"
				if start {
					verb = "Launched"
				}
				fmt.Fprintf(cmd.OutOrStdout(), "%s %s\n", verb, r)
			}
			return nil
		},
	}
	f.add(cmd)
	return cmd
}
