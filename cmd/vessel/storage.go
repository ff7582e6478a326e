package main

import (
	"fmt"
	"sort"
	"strings"

	"github.com/spf13/cobra"
)

func newStorageCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "storage", Short: "Show the storage pool"}
	var format string
	info := &cobra.Command{
		Use:   "info [REMOTE:]",
		Short: "Show the storage pool's driver and usage",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := connectRemote(firstArg(args))
			if err != nil {
				return err
			}
			p, err := c.Storage(cmd.Context())
			if err != nil {
				return err
			}
			pct := 0.0
			if p.Total > 0 {
				pct = 100 * float64(p.Used) / float64(p.Total)
			}
			kinds := make([]string, 0, len(p.Volumes))
			for k, n := range p.Volumes {
				kinds = append(kinds, fmt.Sprintf("%d %s", n, k))
			}
			sort.Strings(kinds)
			pairs := [][2]string{
				{"Driver", p.Driver},
				{"Path", p.Path},
				{"Source", p.Source},
				{"Copy-on-write clones", fmt.Sprint(p.InstantClone)},
				{"Total", humanBytes(p.Total)},
				{"Used", fmt.Sprintf("%s (%.1f%%)", humanBytes(p.Used), pct)},
				{"Free", humanBytes(p.Free)},
				{"Volumes", strings.Join(kinds, ", ")},
				{"Block devices", strings.Join(p.Devices, ", ")},
			}
			return printKV(cmd.OutOrStdout(), format, pairs, p)
		},
	}
	addFormatFlag(info, &format)
	cmd.AddCommand(info)
	return cmd
}
