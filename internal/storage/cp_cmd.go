package storage

import "context"

// cpTool wraps GNU cp(1), which the dir driver copies volumes with: it
// already knows every kind of file, hard links, xattrs, ACLs and reflinks.
type cpTool struct {
	bin string // cp(1), looked up in PATH unless a path
}

// newCpTool returns a wrapper running the cp found in PATH.
func newCpTool() cpTool {
	return cpTool{bin: "cp"}
}

// copyOpts are the options of cpTool.copyTree.
type copyOpts struct {
	// Reflink is cp's --reflink mode: "auto" shares extents where the
	// filesystem can (btrfs, xfs) and copies otherwise; "" keeps cp's
	// default.
	Reflink string
}

// args returns the command-line options for o.
func (o copyOpts) args() []string {
	// --archive: recursive, symlinks as symlinks, devices and fifos as
	// such, preserving mode, ownership, timestamps, hard links within the
	// tree, xattrs and ACLs. --no-target-directory: dst is the copy itself.
	args := []string{"--archive", "--no-target-directory"}
	if o.Reflink != "" {
		args = append(args, "--reflink="+o.Reflink)
	}
	return args
}

// copyTree copies the tree at src to dst, which must not exist.
func (c cpTool) copyTree(ctx context.Context, src, dst string, opts copyOpts) error {
	_, err := runTool(ctx, c.bin, append(opts.args(), src, dst)...)
	return err
}
