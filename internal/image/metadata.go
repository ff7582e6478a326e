package image

import (
	"strings"
	"time"
)

// MetadataVersion is the version of the Metadata format. It is stored in
// Metadata.Version so the daemon can migrate records written by older
// versions.
const MetadataVersion = 1

// Sources of images (Metadata.Source).
const (
	SourceBuiltin     = "builtin"
	SourceTarball     = "tarball"
	SourceOCI         = "oci"
	SourceDebootstrap = "debootstrap"
)

// defaultPath is the PATH given to images that do not set one.
const defaultPath = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// Metadata describes an image. The daemon stores it in its database; this
// package only produces it.
type Metadata struct {
	// Version is the format version, MetadataVersion when produced.
	Version int `json:"version"`
	// Fingerprint identifies the image (see the package documentation).
	Fingerprint string `json:"fingerprint"`
	// Size is the size in bytes of the stored tar archive.
	Size int64 `json:"size"`
	// Created is when the image was stored (not part of the fingerprint).
	Created time.Time `json:"created"`
	// Source says how the image was made: SourceBuiltin, SourceTarball,
	// SourceOCI or SourceDebootstrap.
	Source string `json:"source"`
	// OS is the image's os-release, zero when it has none.
	OS OSRelease `json:"os"`
	// Init is the command run as the container's PID 1.
	Init []string `json:"init"`
	// Env is PID 1's default environment; it always sets PATH.
	Env []string `json:"env"`
	// Cwd is PID 1's working directory, "/" unless the image says otherwise.
	Cwd string `json:"cwd"`
	// StopSignal asks PID 1 for a clean shutdown: "SIGUSR2" (busybox init),
	// "SIGPWR" (sysvinit), "SIGRTMIN+3" (systemd), "SIGTERM" (applications
	// and unknown inits), or what an OCI config names.
	StopSignal string `json:"stop_signal"`
	// Architecture is the Go name of the image's CPU architecture, e.g.
	// "amd64". Images other than OCI ones are assumed to be the host's.
	Architecture string `json:"architecture"`
}

// initKind is the kind of init a root filesystem's /sbin/init is.
type initKind int

const (
	initNone    initKind = iota // no /sbin/init
	initBusybox                 // a link to busybox
	initSysv                    // sysvinit
	initSystemd                 // a link to systemd
	initOther                   // something else
)

// stopSignal returns the signal that makes this kind of init shut down
// cleanly.
func (k initKind) stopSignal() string {
	switch k {
	case initBusybox:
		return "SIGUSR2"
	case initSysv:
		return "SIGPWR"
	case initSystemd:
		return "SIGRTMIN+3"
	}
	return "SIGTERM"
}

// ensurePath returns env with defaultPath prepended unless it sets PATH.
func ensurePath(env []string) []string {
	for _, kv := range env {
		if strings.HasPrefix(kv, "PATH=") {
			return append([]string(nil), env...)
		}
	}
	return append([]string{defaultPath}, env...)
}

// normalizeSignal spells a signal name the way Metadata does: "term" and
// "TERM" become "SIGTERM"; numbers and "SIG..." names are kept.
func normalizeSignal(sig string) string {
	s := strings.ToUpper(strings.TrimSpace(sig))
	if s == "" || strings.HasPrefix(s, "SIG") || (s[0] >= '0' && s[0] <= '9') {
		return s
	}
	return "SIG" + s
}
