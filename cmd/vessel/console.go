package main

import (
	"os"

	"github.com/spf13/cobra"
)

func newConsoleCmd(g *globals) *cobra.Command {
	var follow bool
	cmd := &cobra.Command{
		Use:     "console [REMOTE:]NAME",
		Aliases: []string{"logs"},
		Short:   "Show a container's console log (its init's output)",
		Long: `Show a container's console log: everything its init and the services it
starts write to their standard output. -f keeps following it.

For an interactive shell use 'vessel exec NAME -t -- sh'.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, r, err := connect(args[0])
			if err != nil {
				return err
			}
			return c.Logs(cmd.Context(), r.name, follow, os.Stdout)
		},
	}
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "keep printing new output")
	return cmd
}
