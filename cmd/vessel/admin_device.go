package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// deviceInfo is what init learns about a storage device before it formats
// it.
type deviceInfo struct {
	// Block: the path is a block device.
	Block bool
	// InUse: the kernel refused an exclusive open: the device, or a
	// partition of it, is mounted, swap, or a RAID, LVM or dm member.
	InUse bool
	// Signature is what blkid finds on it: a filesystem type (TYPE) or a
	// partition table (PTTYPE "dos", "gpt"); empty: none.
	Signature string
}

// checkDevice decides whether init may format the device: never one in
// use, and one holding a filesystem or partition table only with --force.
func checkDevice(dev string, info deviceInfo, force bool) error {
	switch {
	case !info.Block:
		return fmt.Errorf("%w: storage device %s is not a block device", errInvalid, dev)
	case info.InUse:
		return fmt.Errorf("%w: storage device %s is in use (mounted, swap, or holding a mounted partition, RAID or LVM volume): vessel does not touch it", errInvalid, dev)
	case info.Signature != "" && !force:
		return fmt.Errorf("%w: storage device %s holds %s: --force erases it and makes a btrfs filesystem for vessel", errInvalid, dev, info.Signature)
	}
	return nil
}

// probeDevice finds out what checkDevice needs.
func probeDevice(ctx context.Context, dev string) (deviceInfo, error) {
	var info deviceInfo
	var st unix.Stat_t
	if err := unix.Stat(dev, &st); err != nil {
		return info, fmt.Errorf("storage device: %w", err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFBLK {
		return info, nil
	}
	info.Block = true
	// The kernel's own test of "in use": an exclusive open of a block
	// device fails with EBUSY while it, or a partition of it, is mounted
	// or claimed by swap, md, LVM or device-mapper.
	fd, err := unix.Open(dev, unix.O_RDONLY|unix.O_EXCL|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.EBUSY) {
		info.InUse = true
		return info, nil
	}
	if err != nil {
		return info, fmt.Errorf("storage device %s: %w", dev, err)
	}
	unix.Close(fd)
	sig, err := blkidSignature(ctx, dev)
	if err != nil {
		return info, err
	}
	info.Signature = sig
	return info, nil
}

// blkidSignature runs blkid's low-level probe on dev and returns what it
// found ("a filesystem (ext4)", "a partition table (gpt)") or "" for nothing.
// Without blkid it returns "" too: mkfs.btrfs then refuses a device with a
// signature itself (init passes it -f only with --force).
func blkidSignature(ctx context.Context, dev string) (string, error) {
	bin, err := exec.LookPath("blkid")
	if err != nil {
		return "", nil //nolint:nilerr // mkfs.btrfs checks too
	}
	var out, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, bin, "-p", "-o", "export", dev)
	cmd.Stdout, cmd.Stderr = &out, &stderr
	err = cmd.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) && ee.ExitCode() == 2 {
		return "", nil // nothing found
	}
	if err != nil {
		return "", fmt.Errorf("blkid %s: %w: %s", dev, err, strings.TrimSpace(stderr.String()))
	}
	return signature(parseEnv(out.String())), nil
}

// signature describes blkid's export output.
func signature(kv map[string]string) string {
	switch {
	case kv["TYPE"] != "":
		return "a filesystem (" + kv["TYPE"] + ")"
	case kv["PTTYPE"] != "":
		return "a partition table (" + kv["PTTYPE"] + ")"
	case kv["USAGE"] != "":
		return "data of use " + kv["USAGE"]
	}
	return ""
}

// formatDevice makes a btrfs filesystem labelled "vessel" on dev and
// returns the path to configure: /dev/disk/by-uuid/UUID when udev made it
// (it survives the disk's renaming), else dev.
func formatDevice(ctx context.Context, dev string, force bool) (string, error) {
	args := []string{"-L", "vessel"}
	if force {
		args = append(args, "-f")
	}
	out, err := exec.CommandContext(ctx, "mkfs.btrfs", append(args, dev)...).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("mkfs.btrfs %s: %w: %s", dev, err, strings.TrimSpace(string(out)))
	}
	if udevadm, err := exec.LookPath("udevadm"); err == nil {
		_ = exec.CommandContext(ctx, udevadm, "settle", "--timeout=10").Run()
	}
	uuid, err := exec.CommandContext(ctx, "blkid", "-p", "-o", "value", "-s", "UUID", dev).Output()
	if err != nil {
		return dev, nil //nolint:nilerr // the plain path works too
	}
	byUUID := filepath.Join("/dev/disk/by-uuid", strings.TrimSpace(string(uuid)))
	if sameDevice(byUUID, dev) {
		return byUUID, nil
	}
	return dev, nil
}

// sameDevice reports whether paths a and b are the same block device.
func sameDevice(a, b string) bool {
	var sa, sb unix.Stat_t
	if unix.Stat(a, &sa) != nil || unix.Stat(b, &sb) != nil {
		return false
	}
	return sa.Mode&unix.S_IFMT == unix.S_IFBLK && sb.Mode&unix.S_IFMT == unix.S_IFBLK && sa.Rdev == sb.Rdev
}

// systemdRunning reports whether systemd is the init system (sd_booted).
func systemdRunning() bool {
	st, err := os.Stat("/run/systemd/system")
	return err == nil && st.IsDir()
}
