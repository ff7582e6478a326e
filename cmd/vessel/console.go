package main

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/vesselhost/vessel/internal/api"
)

// detachKey, then 'q', detaches from a VM's console (Incus's ctrl+a q).
const detachKey = 0x01 // ctrl+a

func newConsoleCmd(g *globals) *cobra.Command {
	var follow, showLog bool
	cmd := &cobra.Command{
		Use:     "console [REMOTE:]NAME",
		Aliases: []string{"logs"},
		Short:   "Attach to a VM's serial console, or show an instance's console log",
		Long: `For a virtual machine, attach to its serial console (the kernel's console,
ttyS0): what the guest prints appears here and what you type goes to the
guest: a login prompt (the image's init's getty, or one the guest agent
starts there when the init starts none; press Enter to see it again).
Press ctrl+a q to detach (ctrl+a ctrl+a sends one ctrl+a).

--show-log (and 'vessel logs', and a container always) shows the console
log instead: everything the VM's serial console printed, or a
container's init and services wrote; -f keeps following it.

For a shell in the instance use 'vessel exec NAME -t -- sh'.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, r, err := connect(args[0])
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			if !showLog && !follow && cmd.CalledAs() != "logs" {
				inst, err := c.Instance(ctx, r.name)
				if err != nil {
					return err
				}
				if inst.Type == api.InstanceVM {
					return attachConsole(ctx, func(ctx context.Context, stdio api.ExecIO) error {
						return c.Console(ctx, r.name, stdio)
					})
				}
			}
			return c.Logs(ctx, r.name, follow, os.Stdout)
		},
	}
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "show the log and keep printing new output")
	cmd.Flags().BoolVar(&showLog, "show-log", false, "show the console log rather than attach (VMs)")
	return cmd
}

// attachConsole runs attach with this terminal (raw, when it is one) until
// ctrl+a q, an interrupt, or the session's end.
func attachConsole(ctx context.Context, attach func(context.Context, api.ExecIO) error) error {
	ctx, detach := context.WithCancel(ctx)
	defer detach()
	fd := int(os.Stdin.Fd())
	nl := "\n"
	if term.IsTerminal(fd) {
		old, err := term.MakeRaw(fd)
		if err != nil {
			return fmt.Errorf("terminal raw mode: %w", err)
		}
		defer func() { _ = term.Restore(fd, old) }()
		nl = "\r\n"
	}
	fmt.Fprint(os.Stderr, "To detach from the console, press: <ctrl>+a q"+nl)
	err := attach(ctx, api.ExecIO{Stdin: &detachReader{r: os.Stdin, detach: detach}, Stdout: os.Stdout})
	fmt.Fprint(os.Stderr, nl)
	return err
}

// detachReader passes its reader's bytes on until ctrl+a q, which calls
// detach and ends the input; ctrl+a ctrl+a gives one ctrl+a, and ctrl+a
// followed by anything else gives both.
type detachReader struct {
	r       io.Reader
	detach  func()
	pending bool // the last byte read was a lone ctrl+a
	done    bool
}

func (d *detachReader) Read(p []byte) (int, error) {
	if d.done {
		return 0, io.EOF
	}
	if len(p) < 2 {
		return 0, io.ErrShortBuffer
	}
	// At most one byte is held back from the previous read: leave room.
	buf := make([]byte, len(p)-1)
	n, err := d.r.Read(buf)
	out := p[:0]
	for _, b := range buf[:n] {
		switch {
		case d.pending:
			d.pending = false
			switch b {
			case 'q', 'Q':
				d.done = true
				d.detach()
				return len(out), io.EOF
			case detachKey:
				out = append(out, detachKey)
			default:
				out = append(out, detachKey, b)
			}
		case b == detachKey:
			d.pending = true
		default:
			out = append(out, b)
		}
	}
	return len(out), err
}
