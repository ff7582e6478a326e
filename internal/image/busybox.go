package image

import (
	"bytes"
	"context"
	"fmt"
	"regexp"
	"strings"
)

// busyboxVersionRE finds the version in busybox's banner,
// "BusyBox v1.35.0 (Debian 1:1.35.0-4+b3) multi-call binary.".
var busyboxVersionRE = regexp.MustCompile(`BusyBox v([0-9][^\s(]*)`)

// busyboxCmd is the wrapper around a busybox binary.
type busyboxCmd struct {
	path string
}

// version runs the bare binary and parses the version from its banner.
func (b busyboxCmd) version(ctx context.Context) (string, error) {
	var out bytes.Buffer
	if err := runCommand(ctx, nil, &out, b.path); err != nil {
		return "", err
	}
	m := busyboxVersionRE.FindSubmatch(out.Bytes())
	if m == nil {
		return "", fmt.Errorf("%s: no busybox version in its banner", b.path)
	}
	return string(m[1]), nil
}

// applets runs `busybox --list-full`: the install path of every applet,
// relative to the root ("bin/sh", "usr/sbin/chroot").
func (b busyboxCmd) applets(ctx context.Context) ([]string, error) {
	var out bytes.Buffer
	if err := runCommand(ctx, nil, &out, b.path, "--list-full"); err != nil {
		return nil, err
	}
	var applets []string
	for _, line := range strings.Split(out.String(), "\n") {
		if line = strings.Trim(strings.TrimSpace(line), "/"); line != "" {
			applets = append(applets, line)
		}
	}
	if len(applets) == 0 {
		return nil, fmt.Errorf("%s --list-full: no applets", b.path)
	}
	return applets, nil
}

// BusyboxVersion returns the version of the busybox binary at path, e.g.
// "1.35.0", parsed from the banner it prints when run without arguments.
func BusyboxVersion(ctx context.Context, path string) (string, error) {
	v, err := busyboxCmd{path: path}.version(ctx)
	if err != nil {
		return "", fmt.Errorf("busybox version: %w", err)
	}
	return v, nil
}
