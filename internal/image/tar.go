package image

import (
	"context"
	"io"
)

// The wrapper around GNU tar: one options struct per command, each with an
// args builder. Archives keep numeric owners, permissions and all extended
// attributes (file capabilities such as ping's live in security.capability).

// tarExtractOptions are the options of `tar --extract`.
type tarExtractOptions struct {
	// Archive is the tar file to read.
	Archive string
	// Dir is the directory to extract into.
	Dir string
}

func (o tarExtractOptions) args() []string {
	return []string{
		"--extract",
		"--file=" + o.Archive,
		"--directory=" + o.Dir,
		"--numeric-owner",
		"--same-owner",
		"--same-permissions",
		"--xattrs",
		"--xattrs-include=*",
	}
}

// tarCreateOptions are the options of `tar --create` writing to stdout.
type tarCreateOptions struct {
	// Dir is the directory archived; members are named "./...".
	Dir string
}

func (o tarCreateOptions) args() []string {
	return []string{
		"--create",
		"--file=-",
		"--directory=" + o.Dir,
		"--numeric-owner",
		"--xattrs",
		"--xattrs-include=*",
		"--sort=name",
		".",
	}
}

// tarExtract runs `tar --extract`.
func tarExtract(ctx context.Context, o tarExtractOptions) error {
	return runCommand(ctx, nil, nil, "tar", o.args()...)
}

// tarCreate runs `tar --create`, writing the archive to w.
func tarCreate(ctx context.Context, o tarCreateOptions, w io.Writer) error {
	return runCommand(ctx, nil, w, "tar", o.args()...)
}
