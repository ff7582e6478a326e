package main

import (
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/vesselhost/vessel/internal/api"
)

func newExecCmd(g *globals) *cobra.Command {
	var forceTTY, noTTY bool
	var env []string
	var cwd string
	cmd := &cobra.Command{
		Use:     "exec [REMOTE:]NAME [flags] -- COMMAND [ARG...]",
		Aliases: []string{"enter"},
		Short:   "Run a command in a container; its exit code becomes vessel's",
		Example: `  vessel exec web1 -- cat /etc/os-release
  vessel exec web1 -t -- sh`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, r, err := connect(args[0])
			if err != nil {
				return err
			}
			command := args[1:]
			if len(command) == 0 {
				command = []string{"/bin/sh", "-l"} // `vessel enter NAME`
			}
			envMap, err := parseKV(env)
			if err != nil {
				return err
			}
			stdinFd := int(os.Stdin.Fd())
			interactive := term.IsTerminal(stdinFd) && term.IsTerminal(int(os.Stdout.Fd()))
			if forceTTY {
				interactive = true
			}
			if noTTY {
				interactive = false
			}
			req := api.ExecPost{Command: command, Env: envMap, Cwd: cwd, Interactive: interactive}
			stdio := api.ExecIO{Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr}
			if interactive && term.IsTerminal(stdinFd) {
				w, h, err := term.GetSize(stdinFd)
				if err == nil {
					req.Width, req.Height = uint16(w), uint16(h)
				}
				old, err := term.MakeRaw(stdinFd)
				if err != nil {
					return fmt.Errorf("terminal raw mode: %w", err)
				}
				defer func() { _ = term.Restore(stdinFd, old) }()
				stdio.Resize = watchResize(stdinFd)
			}
			if !interactive && term.IsTerminal(stdinFd) {
				// Nothing to forward from a terminal when no tty is asked
				// for; don't hold the command waiting for input.
				stdio.Stdin = eofReader{}
			}
			code, err := c.Exec(cmd.Context(), r.name, req, stdio)
			if err != nil {
				return err
			}
			if code != 0 {
				return exitError{code: code}
			}
			return nil
		},
	}
	cmd.Flags().BoolVarP(&forceTTY, "force-interactive", "t", false, "allocate a terminal")
	cmd.Flags().BoolVarP(&noTTY, "force-noninteractive", "T", false, "do not allocate a terminal")
	cmd.Flags().StringArrayVar(&env, "env", nil, "environment KEY=VALUE (repeatable)")
	cmd.Flags().StringVar(&cwd, "cwd", "", "working directory in the container (default /root)")
	return cmd
}

type eofReader struct{}

func (eofReader) Read([]byte) (int, error) { return 0, io.EOF }

// watchResize forwards terminal size changes (SIGWINCH).
func watchResize(fd int) <-chan api.WindowSize {
	out := make(chan api.WindowSize, 1)
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGWINCH)
	go func() {
		for range sig {
			if w, h, err := term.GetSize(fd); err == nil {
				select {
				case out <- api.WindowSize{Width: uint16(w), Height: uint16(h)}:
				default:
				}
			}
		}
	}()
	return out
}
