package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"

	sddaemon "github.com/coreos/go-systemd/v22/daemon"
	"github.com/spf13/cobra"

	"github.com/vesselhost/vessel/internal/cgroups"
)

// holdLeaf is the leaf cgroup `vesseld hold` moves itself into.
const holdLeaf = "_hold"

// newHoldCmd is `vesseld hold`, the only process of the systemd unit
// vessel-instances.service (Delegate=yes): systemd needs a process to keep
// the unit, and so its delegated cgroup, alive; vesseld puts containers in
// that cgroup's children. On cgroup v2 a cgroup whose children have
// controllers may hold no process itself, so hold moves itself into the
// leaf _hold first, then tells systemd it is ready (Type=notify:
// vesseld.service starts after that), and waits for SIGTERM.
func newHoldCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "hold",
		Short: "Hold a delegated cgroup for vessel's containers (systemd's vessel-instances.service)",
		Long: `hold keeps the systemd unit that owns the containers' cgroup subtree alive.

It moves itself into the leaf cgroup _hold below the cgroup it was started in
(on cgroup v2 a cgroup with controlled children may hold no process), signals
readiness to systemd and waits for SIGTERM. It does nothing else.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			sig := make(chan os.Signal, 1)
			signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
			leaf, err := cgroups.EnterLeaf(holdLeaf)
			if err != nil {
				return err
			}
			if leaf != "" {
				fmt.Fprintf(cmd.OutOrStdout(), "holding the containers' cgroup from %s\n", leaf)
			}
			if _, err := sddaemon.SdNotify(false, sddaemon.SdNotifyReady); err != nil {
				return fmt.Errorf("sd_notify: %w", err)
			}
			<-sig
			return nil
		},
	}
}
