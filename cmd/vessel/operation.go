package main

import (
	"time"

	"github.com/spf13/cobra"

	"github.com/vesselhost/vessel/internal/client"
)

func newOperationCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "operation", Short: "List, show and cancel the daemon's long-running operations"}
	var format string
	list := &cobra.Command{
		Use:   "list [REMOTE:]",
		Short: "List operations",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := connectRemote(firstArg(args))
			if err != nil {
				return err
			}
			ops, err := c.Operations(cmd.Context())
			if err != nil {
				return err
			}
			rows := make([][]any, 0, len(ops))
			for _, o := range ops {
				rows = append(rows, []any{o.ID, o.Description, o.Status, o.CreatedAt.Local().Format(time.DateTime), o.Err})
			}
			return printTable(cmd.OutOrStdout(), format, []string{"ID", "DESCRIPTION", "STATUS", "CREATED", "ERROR"}, rows, ops)
		},
	}
	addFormatFlag(list, &format)
	show := &cobra.Command{
		Use:   "show [REMOTE:]ID",
		Short: "Show an operation",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			op, err := operationArg(cmd, args[0])
			if err != nil {
				return err
			}
			return printRaw(cmd.OutOrStdout(), formatYAML, op.Operation)
		},
	}
	cancel := &cobra.Command{
		Use:   "cancel [REMOTE:]ID",
		Short: "Cancel an operation",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			op, err := operationArg(cmd, args[0])
			if err != nil {
				return err
			}
			return op.Cancel(cmd.Context())
		},
	}
	cmd.AddCommand(list, show, cancel)
	return cmd
}

// operationArg fetches the operation an [REMOTE:]ID argument names.
func operationArg(cmd *cobra.Command, arg string) (*client.Operation, error) {
	c, r, err := connect(arg)
	if err != nil {
		return nil, err
	}
	return c.GetOperation(cmd.Context(), r.name)
}
