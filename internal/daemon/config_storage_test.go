package daemon

import (
	"errors"
	"testing"
)

func TestConfigStorageDevice(t *testing.T) {
	for _, c := range []struct {
		name           string
		driver, source string
		device         string
		ok             bool
	}{
		{"device", "btrfs", "", "/dev/vdb", true},
		{"source", "btrfs", "/srv/pool", "", true},
		{"both", "btrfs", "/srv/pool", "/dev/vdb", false},
		{"device on dir", "dir", "", "/dev/vdb", false},
	} {
		cfg := DefaultConfig()
		cfg.StorageDriver, cfg.StorageSource, cfg.StorageDevice = c.driver, c.source, c.device
		err := cfg.fill()
		if c.ok && err != nil {
			t.Errorf("%s: %v", c.name, err)
		}
		if !c.ok && !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", c.name, err)
		}
	}
}
