package daemon

import (
	"bytes"
	"context"
	"maps"
	"os/exec"
	goruntime "runtime"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vesselhost/vessel/internal/api"
	"github.com/vesselhost/vessel/internal/cgroups"
	"github.com/vesselhost/vessel/internal/image"
	"github.com/vesselhost/vessel/internal/runtime"
	"github.com/vesselhost/vessel/internal/storage"
)

// Version is vessel's release version.
const Version = "0.1.0-dev"

// probeHost gathers the host inventory once at start: distribution,
// kernel, cgroup layout, storage driver and the versions of runc and CRIU
// (with the verdict of `criu check`).
func (d *Daemon) probeHost(ctx context.Context) api.HostInfo {
	h := api.HostInfo{
		Hostname:      d.cfg.Name,
		VesselVersion: Version,
		Architecture:  goruntime.GOARCH,
		CPUs:          goruntime.NumCPU(),
		CgroupVersion: cgroups.HostVersion().String(),
		StorageDriver: d.storage.Info().Name,
	}
	if osr, err := image.ReadOSRelease("/"); err == nil {
		h.OS = api.OS(osr)
	}
	var uts unix.Utsname
	if unix.Uname(&uts) == nil {
		h.Kernel = unix.ByteSliceToString(uts.Release[:])
	}
	var si unix.Sysinfo_t
	if unix.Sysinfo(&si) == nil {
		h.MemoryTotal = uint64(si.Totalram) * uint64(si.Unit) //nolint:unconvert // uint32 fields on 32-bit
	}
	h.RuncVersion = firstField(runTool(ctx, d.runc(), "--version"), "runc version ")
	h.CRIUVersion = firstField(runTool(ctx, d.criu(), "--version"), "Version: ")
	h.CRIUCheck = lastLine(runTool(ctx, d.criu(), "check"))
	a := d.vms.Accel()
	h.VMAccel, h.VMAccelReason = string(a.Accel), a.Reason
	return h
}

func (d *Daemon) runc() string {
	if d.cfg.Runc != "" {
		return d.cfg.Runc
	}
	return runtime.DefaultRuncPath()
}

func (d *Daemon) criu() string {
	if d.cfg.Criu != "" {
		return d.cfg.Criu
	}
	return runtime.DefaultCriuPath()
}

// runTool runs a version/check command and returns its combined output, or
// the error text if it could not run.
func runTool(ctx context.Context, bin string, args ...string) string {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil && out.Len() == 0 {
		return "error: " + err.Error()
	}
	return out.String()
}

// firstField returns the text after prefix on the first line holding it.
func firstField(out, prefix string) string {
	for _, l := range strings.Split(out, "\n") {
		if i := strings.Index(l, prefix); i >= 0 {
			return strings.TrimSpace(l[i+len(prefix):])
		}
	}
	return strings.TrimSpace(strings.SplitN(out, "\n", 2)[0])
}

func lastLine(out string) string {
	lines := strings.Split(strings.TrimSpace(out), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}

// ServerInfo returns the daemon's and host's description.
func (d *Daemon) ServerInfo(ctx context.Context) api.Server {
	h := d.host
	h.Instances = len(d.insts.list())
	h.InstancesUp = d.insts.countRunning()
	h.Control = d.controlPlane()
	h.StorageDevices = d.storageDevices(ctx)
	h.DefaultLimits = maps.Clone(d.cfg.DefaultLimits)
	return api.Server{APIVersion: api.Version, Host: h}
}

// StoragePool describes the storage pool and its usage.
func (d *Daemon) StoragePool(ctx context.Context) (api.StoragePool, error) {
	u, err := d.storage.PoolUsage(ctx)
	if err != nil {
		return api.StoragePool{}, err
	}
	info := d.storage.Info()
	out := api.StoragePool{
		Driver:       info.Name,
		Path:         d.cfg.poolRoot(),
		Source:       d.cfg.StorageSource,
		InstantClone: info.InstantClone,
		Total:        u.Total,
		Used:         u.Used,
		Free:         u.Free,
		Volumes:      map[string]int{},
	}
	if out.Source == "" && info.Name == "btrfs" {
		out.Source = d.cfg.poolFile()
	}
	if devs, err := d.storage.BlockDevices(ctx); err == nil {
		out.Devices = devs
	}
	imgs, _ := d.state.ListImages()
	out.Volumes[string(storage.VolumeContainer)] = len(d.insts.list())
	for _, img := range imgs {
		if d.storage.VolumeExists(storage.Volume{Type: storage.VolumeImage, Name: img.Fingerprint}) {
			out.Volumes[string(storage.VolumeImage)]++
		}
	}
	return out, nil
}
