package storage

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

func TestNames(t *testing.T) {
	if got := Names(); !slices.Equal(got, []string{"btrfs", "dir"}) {
		t.Errorf("Names() = %v", got)
	}
}

func TestNewUnknownDriver(t *testing.T) {
	_, err := New(Config{Driver: "zfs", Root: "/var/lib/vessel/pool"})
	if !errors.Is(err, ErrUnknownDriver) || !strings.Contains(err.Error(), `"zfs"`) {
		t.Errorf("New(zfs): got %v, want ErrUnknownDriver naming the driver", err)
	}
}

func TestNewInvalidConfig(t *testing.T) {
	for _, cfg := range []Config{
		{Driver: "dir"},
		{Driver: "dir", Root: "relative/pool"},
		{Driver: "btrfs", Root: "/pool"},
		{Driver: "btrfs", Root: "/pool", LoopFile: "pool.img"},
		{Driver: "btrfs", Root: "/pool", LoopFile: "/pool.img", Size: -1},
		{Driver: "btrfs", Source: "relative"},
	} {
		if _, err := New(cfg); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("New(%+v): got %v, want ErrInvalidConfig", cfg, err)
		}
	}
}

func TestValidateVolume(t *testing.T) {
	good := []Volume{
		{Type: VolumeImage, Name: "debian-12"},
		{Type: VolumeContainer, Name: ".hidden"},
		{Type: VolumeContainer, Name: "a..b"},
		{Type: VolumeSnapshot, Name: "c1/s1"},
		{Type: VolumeContainer, Name: strings.Repeat("x", 255)},
	}
	for _, vol := range good {
		if err := validateVolume(vol); err != nil {
			t.Errorf("validateVolume(%v): %v", vol, err)
		}
	}
	bad := []Volume{
		{Type: VolumeContainer, Name: strings.Repeat("x", 256)},
		{Type: VolumeContainer, Name: "nul\x00"},
		{Type: VolumeContainer, Name: "c1/s1"},
		{Type: VolumeSnapshot, Name: "c1//s1"},
		{Type: VolumeSnapshot, Name: "/"},
	}
	for _, vol := range bad {
		if err := validateVolume(vol); !errors.Is(err, ErrInvalidVolume) {
			t.Errorf("validateVolume(%v): got %v, want ErrInvalidVolume", vol, err)
		}
	}
}

func TestVolumePath(t *testing.T) {
	for vol, want := range map[Volume]string{
		{Type: VolumeImage, Name: "i"}:        "/p/images/i",
		{Type: VolumeContainer, Name: "c"}:    "/p/containers/c",
		{Type: VolumeSnapshot, Name: "c/s"}:   "/p/snapshots/c/s",
		{Type: VolumeContainer, Name: "../x"}: "",
	} {
		if got := volumePath("/p", vol); got != want {
			t.Errorf("volumePath(%v) = %q, want %q", vol, got, want)
		}
	}
}

// usageOutput is "btrfs filesystem usage -b" of btrfs-progs 6.2.
const usageOutput = `Overall:
    Device size:		        1073741824
    Device allocated:		         132513792
    Device unallocated:		         941228032
    Device missing:		                 0
    Device slack:		                 0
    Used:			            425984
    Free (estimated):		         949616640	(min: 479002624)
    Free (statfs, df):		         948568064
    Data ratio:			              1.00
    Metadata ratio:		              2.00
    Global reserve:		           5767168	(used: 16384)
    Multiple profiles:		                no

Data,single: Size:8388608, Used:0 (0.00%)
   /dev/loop0	   8388608

Metadata,DUP: Size:53673984, Used:196608 (0.37%)
   /dev/loop0	 107347968

Unallocated:
   /dev/loop0	 941228032
`

func TestParseFilesystemUsage(t *testing.T) {
	got, err := parseFilesystemUsage([]byte(usageOutput))
	if err != nil {
		t.Fatal(err)
	}
	want := fsUsage{DeviceSize: 1073741824, Used: 425984, FreeEstimated: 949616640}
	if got != want {
		t.Errorf("parseFilesystemUsage = %+v, want %+v", got, want)
	}
	for _, bad := range []string{
		"",
		"Overall:\n    Device size:\t\t1.00GiB\n    Used:\t1\n    Free (estimated):\t1\n",
		"Overall:\n    Used:\t1\n    Free (estimated):\t1\n",
	} {
		if _, err := parseFilesystemUsage([]byte(bad)); err == nil {
			t.Errorf("parseFilesystemUsage(%q) succeeded", bad)
		}
	}
}
