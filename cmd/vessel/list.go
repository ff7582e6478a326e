package main

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/vesselhost/vessel/internal/api"
)

func newListCmd(g *globals) *cobra.Command {
	var format string
	cmd := &cobra.Command{
		Use:     "list [REMOTE:]",
		Aliases: []string{"ls"},
		Short:   "List containers with their status, address and distribution",
		Args:    cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			arg := ""
			if len(args) == 1 {
				arg = args[0]
			}
			c, err := connectRemote(arg)
			if err != nil {
				return err
			}
			insts, err := c.Instances(cmd.Context())
			if err != nil {
				return err
			}
			rows := make([][]any, 0, len(insts))
			for _, i := range insts {
				pid := ""
				if i.PID != 0 {
					pid = fmt.Sprint(i.PID)
				}
				rows = append(rows, []any{i.Name, instanceType(i), i.Status, i.IPv4, distro(i.OS), shortFP(i.Image), pid})
			}
			return printTable(cmd.OutOrStdout(), format, []string{"NAME", "TYPE", "STATUS", "IPV4", "DISTRO", "IMAGE", "PID"}, rows, insts)
		},
	}
	addFormatFlag(cmd, &format)
	return cmd
}

// distro names an OS the way the OpenVZ statistics did: "debian 12".
func distro(os api.OS) string {
	switch {
	case os.ID != "" && os.VersionID != "":
		return os.ID + " " + os.VersionID
	case os.ID != "":
		return os.ID
	}
	return os.PrettyName
}

func shortFP(fp string) string {
	if len(fp) > 12 {
		return fp[:12]
	}
	return fp
}

// instanceType is list's TYPE column: CONTAINER or VIRTUAL-MACHINE (as
// Incus shows it).
func instanceType(i api.Instance) string {
	return strings.ToUpper(nonEmpty(i.Type, api.InstanceContainer))
}
