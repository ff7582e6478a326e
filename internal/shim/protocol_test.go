package shim

import (
	"os"
	"path/filepath"
	"testing"
)

func TestConfigRoundTrip(t *testing.T) {
	dir := t.TempDir()
	c := &Config{Version: Version, Action: ActionRestore, ID: "c", Bundle: "/b", Runc: "/runc", Root: "/r",
		LogPath: "/l", Restore: &RestoreConfig{ImagePath: "/img"}}
	if err := WriteConfig(dir, c); err != nil {
		t.Fatal(err)
	}
	back, err := ReadConfig(filepath.Join(dir, ConfigFile))
	if err != nil || back.Restore.ImagePath != "/img" || back.Action != ActionRestore {
		t.Fatalf("read back %+v %v", back, err)
	}
	c.Restore = nil
	if err := WriteConfig(dir, c); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadConfig(filepath.Join(dir, ConfigFile)); err == nil {
		t.Error("restore without image path accepted")
	}
	c.Version = Version + 1
	if err := WriteConfig(dir, c); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadConfig(filepath.Join(dir, ConfigFile)); err == nil {
		t.Error("newer version accepted")
	}
}

func TestRuncHasState(t *testing.T) {
	root := t.TempDir()
	if RuncHasState(root, "c1") {
		t.Fatal("no state directory, yet RuncHasState says yes")
	}
	if err := os.MkdirAll(filepath.Join(root, "c1"), 0o700); err != nil {
		t.Fatal(err)
	}
	if RuncHasState(root, "c1") {
		t.Fatal("a directory without state.json is no container")
	}
	if err := os.WriteFile(filepath.Join(root, "c1", "state.json"), []byte("{}"), 0o600); err != nil {
		t.Fatal(err)
	}
	if !RuncHasState(root, "c1") {
		t.Fatal("state.json present, yet RuncHasState says no")
	}
}
