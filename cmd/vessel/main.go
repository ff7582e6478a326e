// Command vessel is the command-line client of vesseld.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/vesselhost/vessel/internal/client"
)

// version is set by the build (make build: -X main.version=...).
var version = "dev"

// exitError carries a command's exit code out of cobra (exec).
type exitError struct{ code int }

func (e exitError) Error() string { return fmt.Sprintf("exit status %d", e.code) }

func main() {
	os.Exit(run())
}

// run runs the command line and returns the exit code: a command's own
// (exec), 130 when interrupted, 1 on an error.
func run() int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := newRootCmd().ExecuteContext(ctx)
	var ee exitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ee):
		return ee.code
	}
	fmt.Fprintln(os.Stderr, "Error:", err)
	if client.StatusCode(err) == 0 && ctx.Err() != nil {
		return 130
	}
	return 1
}

// globals are the flags every command shares.
type globals struct {
	quiet bool
}

func newRootCmd() *cobra.Command {
	g := &globals{}
	root := &cobra.Command{
		Use:   "vessel",
		Short: "Manage system containers on vessel hosts",
		Long: `vessel manages system containers (their own init, network and disk) on the
local host's vesseld and, with remotes, on other hosts.

Every NAME may be written REMOTE:NAME to act on another host.`,
		Version:       version,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.PersistentFlags().BoolVarP(&g.quiet, "quiet", "q", false, "print no progress")
	root.AddCommand(
		newLaunchCmd(g), newCreateCmd(g),
		newActionCmd(g, "start"), newActionCmd(g, "stop"), newActionCmd(g, "restart"),
		newDeleteCmd(g), newListCmd(g), newInfoCmd(g), newExecCmd(g),
		newConsoleCmd(g), newImageCmd(g), newStorageCmd(g), newOperationCmd(g),
		newRemoteCmd(g), newTrustCmd(g), newPeerCmd(g), newMoveCmd(g),
		newSnapshotCmd(g), newCopyCmd(g), newConfigCmd(g), newAdminCmd(g),
		newFileCmd(g),
	)
	return root
}
