package storage

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
)

// btrfsTool wraps the btrfs(8) and mkfs.btrfs(8) command-line tools: one
// method per command, and an options struct (with an args builder) for each
// command that takes options. It holds no state beyond the binaries' names.
type btrfsTool struct {
	btrfsBin string // btrfs(8), looked up in PATH unless a path
	mkfsBin  string // mkfs.btrfs(8)
}

// newBtrfsTool returns a wrapper running the tools found in PATH.
func newBtrfsTool() btrfsTool {
	return btrfsTool{btrfsBin: "btrfs", mkfsBin: "mkfs.btrfs"}
}

// checkBtrfs returns an error wrapping ErrNotSupported if btrfs(8) is not
// installed.
func (b btrfsTool) checkBtrfs() error {
	if _, err := exec.LookPath(b.btrfsBin); err != nil {
		return fmt.Errorf("btrfs-progs: %w: %w", err, ErrNotSupported)
	}
	return nil
}

// checkMkfs returns an error wrapping ErrNotSupported if mkfs.btrfs(8) is
// not installed.
func (b btrfsTool) checkMkfs() error {
	if _, err := exec.LookPath(b.mkfsBin); err != nil {
		return fmt.Errorf("btrfs-progs: %w: %w", err, ErrNotSupported)
	}
	return nil
}

// mkfsOpts are the options of mkfs.btrfs.
type mkfsOpts struct {
	// Label is the filesystem label (-L), empty for none.
	Label string
	// Force overwrites an existing filesystem (-f).
	Force bool
}

// args returns the command-line options for o.
func (o mkfsOpts) args() []string {
	args := []string{"-q"}
	if o.Label != "" {
		args = append(args, "-L", o.Label)
	}
	if o.Force {
		args = append(args, "-f")
	}
	return args
}

// mkfs creates a btrfs filesystem on device (a block device or image file).
func (b btrfsTool) mkfs(ctx context.Context, device string, opts mkfsOpts) error {
	_, err := runTool(ctx, b.mkfsBin, append(opts.args(), device)...)
	return err
}

// subvolumeCreate creates an empty subvolume at path, whose parent exists.
func (b btrfsTool) subvolumeCreate(ctx context.Context, path string) error {
	_, err := runTool(ctx, b.btrfsBin, "subvolume", "create", path)
	return err
}

// subvolumeDelete deletes the subvolume at path without waiting for the
// transaction commit (its space is freed in the background). It fails if the
// subvolume holds nested subvolumes, or if its parent is read-only.
func (b btrfsTool) subvolumeDelete(ctx context.Context, path string) error {
	_, err := runTool(ctx, b.btrfsBin, "subvolume", "delete", path)
	return err
}

// propertySetOpts are the options of "btrfs property set".
type propertySetOpts struct {
	// Force allows making a received subvolume writable (-f), which clears
	// its received UUID and so breaks incremental receives into it.
	Force bool
}

// args returns the command-line options for o.
func (o propertySetOpts) args() []string {
	if o.Force {
		return []string{"-f"}
	}
	return nil
}

// setReadOnly sets the ro property of the subvolume at path.
func (b btrfsTool) setReadOnly(ctx context.Context, path string, readOnly bool, opts propertySetOpts) error {
	args := append([]string{"property", "set"}, opts.args()...)
	args = append(args, "-ts", path, "ro", strconv.FormatBool(readOnly))
	_, err := runTool(ctx, b.btrfsBin, args...)
	return err
}

// fsUsage is the "Overall" part of "btrfs filesystem usage", in bytes.
type fsUsage struct {
	// DeviceSize is the sum of the member devices' sizes.
	DeviceSize uint64
	// Used is the space used by data and metadata, counting every copy.
	Used uint64
	// FreeEstimated is the space new data can still use.
	FreeEstimated uint64
}

// filesystemUsage runs "btrfs filesystem usage -b" on the filesystem holding
// path. It needs CAP_SYS_ADMIN for exact numbers.
func (b btrfsTool) filesystemUsage(ctx context.Context, path string) (fsUsage, error) {
	out, err := runTool(ctx, b.btrfsBin, "filesystem", "usage", "-b", path)
	if err != nil {
		return fsUsage{}, err
	}
	u, err := parseFilesystemUsage(out)
	if err != nil {
		return fsUsage{}, fmt.Errorf("btrfs filesystem usage -b %s: %w", path, err)
	}
	return u, nil
}

// parseFilesystemUsage parses the "Overall:" section of "btrfs filesystem
// usage -b", whose lines look like
//
//	Device size:		        1073741824
//	Free (estimated):		         949616640	(min: 479002624)
//
// Only the first number after the colon is read.
func parseFilesystemUsage(out []byte) (fsUsage, error) {
	var u fsUsage
	fields := map[string]*uint64{
		"Device size":      &u.DeviceSize,
		"Used":             &u.Used,
		"Free (estimated)": &u.FreeEstimated,
	}

	found := 0
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		line := sc.Text()
		if line != "" && line[0] != ' ' && line[0] != '\t' && line != "Overall:" {
			break // the per-profile sections follow "Overall:"
		}
		key, value, ok := strings.Cut(line, ":")
		dst := fields[strings.TrimSpace(key)]
		if !ok || dst == nil {
			continue
		}
		num := strings.Fields(value)
		if len(num) == 0 {
			return fsUsage{}, fmt.Errorf("no value for %q", strings.TrimSpace(key))
		}
		n, err := strconv.ParseUint(num[0], 10, 64)
		if err != nil {
			return fsUsage{}, fmt.Errorf("value of %q: %w", strings.TrimSpace(key), err)
		}
		*dst = n
		found++
	}
	if found != len(fields) {
		return fsUsage{}, fmt.Errorf("found %d of the %d expected fields in %q", found, len(fields), out)
	}
	return u, nil
}
