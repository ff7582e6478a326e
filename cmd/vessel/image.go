package main

import (
	"archive/tar"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/vesselhost/vessel/internal/api"
)

func newImageCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "image", Short: "Manage images"}
	cmd.AddCommand(newImageListCmd(), newImageImportCmd(g), newImageBuildCmd(g), newImageDeleteCmd(), newImageInfoCmd())
	return cmd
}

func newImageListCmd() *cobra.Command {
	var format string
	cmd := &cobra.Command{
		Use:     "list [REMOTE:]",
		Aliases: []string{"ls"},
		Short:   "List images",
		Args:    cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := connectRemote(firstArg(args))
			if err != nil {
				return err
			}
			imgs, err := c.Images(cmd.Context())
			if err != nil {
				return err
			}
			rows := make([][]any, 0, len(imgs))
			for _, i := range imgs {
				rows = append(rows, []any{strings.Join(i.Aliases, ","), shortFP(i.Fingerprint), distro(i.OS), i.Source, humanBytes(uint64(i.Size)), i.Created.Local().Format(time.DateTime)})
			}
			return printTable(cmd.OutOrStdout(), format, []string{"ALIAS", "FINGERPRINT", "DISTRO", "SOURCE", "SIZE", "CREATED"}, rows, imgs)
		},
	}
	addFormatFlag(cmd, &format)
	return cmd
}

func newImageInfoCmd() *cobra.Command {
	var format string
	cmd := &cobra.Command{
		Use:   "info [REMOTE:]IMAGE",
		Short: "Show an image's details",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, r, err := connect(args[0])
			if err != nil {
				return err
			}
			img, err := c.Image(cmd.Context(), r.name)
			if err != nil {
				return err
			}
			pairs := [][2]string{
				{"Fingerprint", img.Fingerprint},
				{"Aliases", strings.Join(img.Aliases, ", ")},
				{"Distribution", nonEmpty(img.OS.PrettyName, distro(img.OS))},
				{"Source", img.Source},
				{"Size", humanBytes(uint64(img.Size))},
				{"Init", strings.Join(img.Init, " ")},
				{"Stop signal", img.StopSignal},
				{"Created", img.Created.Local().Format(time.RFC3339)},
			}
			return printKV(cmd.OutOrStdout(), format, pairs, img)
		},
	}
	addFormatFlag(cmd, &format)
	return cmd
}

func newImageImportCmd(g *globals) *cobra.Command {
	var alias string
	cmd := &cobra.Command{
		Use:   "import FILE|OCI-LAYOUT-DIR [REMOTE:]",
		Short: "Import a rootfs tarball or an OCI image layout",
		Long: `Import an image: a root filesystem tarball (plain, gzip or xz; it must hold
/sbin/init) or an OCI image layout (a directory, or a tar of one).`,
		Args: cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			remote := ""
			if len(args) == 2 {
				remote = args[1]
			}
			c, err := connectRemote(remote)
			if err != nil {
				return err
			}
			src, err := openImageSource(args[0])
			if err != nil {
				return err
			}
			defer src.Close()
			img, err := c.ImportImage(cmd.Context(), src, alias)
			if err != nil {
				return err
			}
			if !g.quiet {
				fmt.Fprintf(cmd.OutOrStdout(), "Imported %s (%s) as %s\n", shortFP(img.Fingerprint), nonEmpty(img.OS.PrettyName, img.Source), strings.Join(img.Aliases, ", "))
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&alias, "alias", "", "alias for the image")
	return cmd
}

// openImageSource opens a file as is, or streams a directory (an OCI image
// layout) as a tar.
func openImageSource(path string) (io.ReadCloser, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if !fi.IsDir() {
		return os.Open(path)
	}
	if _, err := os.Stat(filepath.Join(path, "oci-layout")); err != nil {
		return nil, fmt.Errorf("%s is a directory but not an OCI image layout (no oci-layout file)", path)
	}
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(tarDir(path, pw)) }()
	return pr, nil
}

// tarDir writes the regular files and directories under dir as a tar.
func tarDir(dir string, w io.Writer) error {
	tw := tar.NewWriter(w)
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil || rel == "." {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		if !info.Mode().IsRegular() && !info.IsDir() {
			return nil
		}
		hdr, err := tar.FileInfoHeader(info, "")
		if err != nil {
			return err
		}
		hdr.Name = filepath.ToSlash(rel)
		if info.IsDir() {
			hdr.Name += "/"
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if info.IsDir() {
			return nil
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		_, err = io.Copy(tw, f)
		return err
	})
	if err != nil {
		return err
	}
	return tw.Close()
}

func newImageBuildCmd(g *globals) *cobra.Command {
	var req api.ImageBuildPost
	cmd := &cobra.Command{
		Use:   "build debian|busybox [REMOTE:]",
		Short: "Build an image on the host (debian: debootstrap from a Debian mirror, takes minutes)",
		Args:  cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			remote := ""
			if len(args) == 2 {
				remote = args[1]
			}
			c, err := connectRemote(remote)
			if err != nil {
				return err
			}
			req.Distro = args[0]
			ctx := cmd.Context()
			op, err := c.BuildImage(ctx, req)
			if err := wait(ctx, g, op, err); err != nil {
				return err
			}
			if !g.quiet {
				fmt.Fprintf(cmd.OutOrStdout(), "Built %s: %v\n", args[0], op.Metadata["fingerprint"])
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&req.Suite, "suite", "", "Debian suite (default bookworm)")
	cmd.Flags().StringVar(&req.Mirror, "mirror", "", "Debian mirror (default http://deb.debian.org/debian)")
	cmd.Flags().StringVar(&req.Alias, "alias", "", "alias for the image (default: the distro's name)")
	return cmd
}

func newImageDeleteCmd() *cobra.Command {
	return &cobra.Command{
		Use:     "delete [REMOTE:]IMAGE...",
		Aliases: []string{"rm"},
		Short:   "Delete images (containers made from them are not affected)",
		Args:    cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			for _, a := range args {
				c, r, err := connect(a)
				if err != nil {
					return err
				}
				if err := c.DeleteImage(cmd.Context(), r.name); err != nil {
					return fmt.Errorf("delete image %s: %w", r, err)
				}
			}
			return nil
		},
	}
}

func firstArg(args []string) string {
	if len(args) > 0 {
		return args[0]
	}
	return ""
}
