package main

import (
	"fmt"
	"os"
	"path"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/vesselhost/vessel/internal/api"
)

func newFileCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "file",
		Short: "Move files into instances",
	}
	cmd.AddCommand(newFilePushCmd(g))
	return cmd
}

func newFilePushCmd(_ *globals) *cobra.Command {
	var uid, gid uint32
	var mode string
	cmd := &cobra.Command{
		Use:   "push SOURCE [REMOTE:]NAME/PATH",
		Short: "Write a local file into an instance (a container, or a VM through its agent)",
		Long: `Write a local file into an instance, atomically: the path holds its old
content or all of the new one. A PATH ending in / takes SOURCE's name.
The file's mode is SOURCE's unless --mode is given; its owner is --uid and
--gid (default root), as the instance sees them.`,
		Example: `  vessel file push ./app.conf web1/etc/app.conf
  vessel file push --mode 0755 ./run.sh vm1/usr/local/bin/`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			target, dst, ok := strings.Cut(args[1], "/")
			if !ok || target == "" {
				return fmt.Errorf("%q: want NAME/PATH", args[1])
			}
			dst = "/" + dst
			if strings.HasSuffix(dst, "/") {
				dst += path.Base(args[0])
			}
			f, err := os.Open(args[0])
			if err != nil {
				return err
			}
			defer func() { _ = f.Close() }()
			fi, err := f.Stat()
			if err != nil {
				return err
			}
			if !fi.Mode().IsRegular() {
				return fmt.Errorf("%s: not a regular file", args[0])
			}
			o := api.FilePush{UID: uid, GID: gid, Mode: uint32(fi.Mode().Perm())}
			if mode != "" {
				m, err := strconv.ParseUint(mode, 8, 32)
				if err != nil || m > 0o7777 {
					return fmt.Errorf("--mode %q: want octal permission bits", mode)
				}
				o.Mode = uint32(m)
			}
			c, r, err := connect(target)
			if err != nil {
				return err
			}
			return c.PushFile(cmd.Context(), r.name, dst, f, o)
		},
	}
	cmd.Flags().Uint32Var(&uid, "uid", 0, "the file's owner in the instance")
	cmd.Flags().Uint32Var(&gid, "gid", 0, "the file's group in the instance")
	cmd.Flags().StringVar(&mode, "mode", "", "the file's mode, octal (default SOURCE's)")
	return cmd
}
