package storage

import (
	"fmt"
	"maps"
	"path/filepath"
	"slices"
)

// drivers maps Config.Driver to its constructor. It is the one registry of
// storage drivers; nothing adds to it at run time.
var drivers = map[string]func(Config) (Driver, error){
	"btrfs": newBtrfs,
	"dir":   newDir,
}

// New returns the driver cfg.Driver names, configured with cfg. It does not
// touch the host: call Mount before using the pool. An unknown driver name
// gives an error wrapping ErrUnknownDriver; a malformed cfg one wrapping
// ErrInvalidConfig.
func New(cfg Config) (Driver, error) {
	newDriver, ok := drivers[cfg.Driver]
	if !ok {
		return nil, fmt.Errorf("storage driver %q (known: %v): %w", cfg.Driver, Names(), ErrUnknownDriver)
	}
	return newDriver(cfg)
}

// Names returns the names of all drivers, sorted.
func Names() []string {
	return slices.Sorted(maps.Keys(drivers))
}

// cleanAbs returns path cleaned, or an error wrapping ErrInvalidConfig if it
// is empty or relative. what names the Config field in the error.
func cleanAbs(what, path string) (string, error) {
	if path == "" || !filepath.IsAbs(path) {
		return "", fmt.Errorf("%s %q must be an absolute path: %w", what, path, ErrInvalidConfig)
	}
	return filepath.Clean(path), nil
}
