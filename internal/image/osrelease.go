package image

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
)

// OSRelease holds the identifying fields of an os-release(5) file.
type OSRelease struct {
	// ID is a lowercase distribution id, e.g. "debian" or "busybox".
	ID string `json:"id"`
	// Name is the distribution's name, e.g. "Debian GNU/Linux".
	Name string `json:"name"`
	// VersionID is the version, e.g. "12"; empty for rolling releases.
	VersionID string `json:"version_id"`
	// PrettyName is a name for people, e.g. "Debian GNU/Linux 12 (bookworm)".
	PrettyName string `json:"pretty_name"`
}

// maxOSReleaseSize bounds how much of an os-release file is read.
const maxOSReleaseSize = 64 << 10

// ParseOSRelease parses an os-release(5) file: KEY=VALUE lines, values
// optionally quoted with shell-style quotes and backslash escapes. Comments,
// blank and malformed lines and unknown keys are ignored, as the format asks.
func ParseOSRelease(r io.Reader) (OSRelease, error) {
	var rel OSRelease
	sc := bufio.NewScanner(io.LimitReader(r, maxOSReleaseSize))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		key, value, ok := strings.Cut(line, "=")
		if !ok {
			continue
		}
		value = unquoteOSReleaseValue(value)
		switch strings.TrimSpace(key) {
		case "ID":
			rel.ID = value
		case "NAME":
			rel.Name = value
		case "VERSION_ID":
			rel.VersionID = value
		case "PRETTY_NAME":
			rel.PrettyName = value
		}
	}
	if err := sc.Err(); err != nil {
		return OSRelease{}, fmt.Errorf("parse os-release: %w", err)
	}
	return rel, nil
}

// unquoteOSReleaseValue undoes shell quoting of one os-release value: single
// quotes are literal; in double quotes and bare words a backslash escapes
// the next character.
func unquoteOSReleaseValue(v string) string {
	var b strings.Builder
	var quote byte
	for i := 0; i < len(v); i++ {
		c := v[i]
		switch {
		case quote == '\'' && c == '\'':
			quote = 0
		case quote == '\'':
			b.WriteByte(c)
		case c == '\\' && i+1 < len(v):
			i++
			b.WriteByte(v[i])
		case quote == '"' && c == '"':
			quote = 0
		case quote == 0 && (c == '"' || c == '\''):
			quote = c
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

// ReadOSRelease reads the os-release of the root filesystem at rootfs:
// /etc/os-release, else /usr/lib/os-release. Symbolic links are followed
// only while they stay inside rootfs; a link leading outside it (including
// any absolute link) is treated as missing.
func ReadOSRelease(rootfs string) (OSRelease, error) {
	root, err := os.OpenRoot(rootfs)
	if err != nil {
		return OSRelease{}, fmt.Errorf("read os-release: %w", err)
	}
	defer root.Close()
	var errs []error
	for _, name := range []string{"etc/os-release", "usr/lib/os-release"} {
		f, err := root.Open(name)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		rel, err := ParseOSRelease(f)
		f.Close()
		if err != nil {
			return OSRelease{}, fmt.Errorf("read %s in %s: %w", name, rootfs, err)
		}
		return rel, nil
	}
	return OSRelease{}, fmt.Errorf("read os-release in %s: %w", rootfs, errors.Join(errs...))
}
