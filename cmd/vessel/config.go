package main

import (
	"fmt"
	"sort"
	"strings"

	"github.com/spf13/cobra"

	"github.com/vesselhost/vessel/internal/api"
)

func newConfigCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "config",
		Short: "Show and change a container's configuration (limits apply live)",
		Long: `Configuration keys of a container. Limits apply at once to a running
container and are kept across restarts:

  limits.cpu              CPU time in cores, as a quota (0.01..1024), e.g. 1.5
  limits.cpu.weight       share of contended CPU, 1..10000 (default 100)
  limits.memory           memory, e.g. 512MiB, 1GB (at least 4MiB)
  limits.processes        tasks (processes and threads), 1..4194304
  limits.disk.read        read bandwidth per disk, e.g. 20MB/s
  limits.disk.write       write bandwidth per disk (v1: direct I/O only)
  limits.disk.read_iops   read operations per second, e.g. 100iops
  limits.disk.write_iops  write operations per second
  limits.disk.weight      share of contended disk time, 1..1000 (default 100)
  user.*                  free-form notes`,
	}
	cmd.AddCommand(newConfigSetCmd(g), newConfigUnsetCmd(g), newConfigShowCmd(), newConfigGetCmd())
	return cmd
}

func newConfigSetCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:     "set [REMOTE:]NAME KEY=VALUE...",
		Short:   "Set configuration keys (all or none are applied)",
		Example: "  vessel config set web1 limits.memory=512MiB limits.cpu=1.5",
		Args:    cobra.MinimumNArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			kv, err := parseKV(args[1:])
			if err != nil {
				return err
			}
			for k, v := range kv {
				if v == "" {
					return fmt.Errorf("empty value for %s (use vessel config unset)", k)
				}
			}
			return patchConfig(cmd, g, args[0], kv)
		},
	}
}

func newConfigUnsetCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "unset [REMOTE:]NAME KEY...",
		Short: "Remove configuration keys (their limits are lifted)",
		Args:  cobra.MinimumNArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			kv := map[string]string{}
			for _, k := range args[1:] {
				kv[k] = ""
			}
			return patchConfig(cmd, g, args[0], kv)
		},
	}
}

func patchConfig(cmd *cobra.Command, g *globals, name string, kv map[string]string) error {
	c, r, err := connect(name)
	if err != nil {
		return err
	}
	ctx := cmd.Context()
	op, err := c.UpdateInstance(ctx, r.name, api.InstancePatch{Config: kv})
	if err := wait(ctx, g, op, err); err != nil {
		return fmt.Errorf("config %s: %w", r, err)
	}
	return nil
}

func newConfigShowCmd() *cobra.Command {
	var format string
	cmd := &cobra.Command{
		Use:   "show [REMOTE:]NAME",
		Short: "Show a container's configuration (and the host's default limits it runs with)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			inst, err := getInstance(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			keys := make([]string, 0, len(inst.Config))
			for k := range inst.Config {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			if format == formatTable {
				for _, k := range keys {
					fmt.Fprintf(cmd.OutOrStdout(), "%s: %s\n", k, inst.Config[k])
				}
				for _, k := range sortedKeys(inst.Defaults) {
					fmt.Fprintf(cmd.OutOrStdout(), "%s: %s (host default)\n", k, inst.Defaults[k])
				}
				return nil
			}
			rows := make([][]any, len(keys))
			for i, k := range keys {
				rows[i] = []any{k, inst.Config[k]}
			}
			return printTable(cmd.OutOrStdout(), format, []string{"KEY", "VALUE"}, rows, inst.Config)
		},
	}
	addFormatFlag(cmd, &format)
	return cmd
}

func newConfigGetCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "get [REMOTE:]NAME KEY",
		Short: "Print one configuration value (empty if unset)",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			inst, err := getInstance(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), strings.TrimSpace(inst.Config[args[1]]))
			return nil
		},
	}
}
