package benchutil

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"

	"github.com/vesselhost/vessel/internal/testhost"
)

// RawDisk measures a file system's raw sequential bandwidth with fio, the
// baseline the snapshot benchmarks compare with: a write of mib MiB, then
// a cold read of it (caches dropped), both O_DIRECT, 1 MiB requests, 8 in
// flight. It returns MB/s and removes its file.
func RawDisk(r *testhost.Runner, dir string, mib int) (write, read float64) {
	file := dir + "/fio.dat"
	defer os.Remove(file)
	write = fio(r, "write", file, mib)
	DropCaches(r)
	return write, fio(r, "read", file, mib)
}

// RawRead is RawDisk's cold read alone, of a file it writes first (not
// timed): a second sample of the raw read taken right after the run it
// brackets.
func RawRead(r *testhost.Runner, dir string, mib int) float64 {
	file := dir + "/fio.dat"
	defer os.Remove(file)
	fio(r, "write", file, mib)
	DropCaches(r)
	return fio(r, "read", file, mib)
}

// fio runs FioArgs(rw, file, mib) and returns its bandwidth in MB/s.
func fio(r *testhost.Runner, rw, file string, mib int) float64 {
	out, err := exec.Command("fio", FioArgs(rw, file, mib)...).Output()
	if err != nil {
		r.Fatalf("fio %s: %v", rw, err)
	}
	var res struct {
		Jobs []struct {
			Read struct {
				BwBytes float64 `json:"bw_bytes"`
			} `json:"read"`
			Write struct {
				BwBytes float64 `json:"bw_bytes"`
			} `json:"write"`
		} `json:"jobs"`
	}
	if err := json.Unmarshal(out, &res); err != nil || len(res.Jobs) == 0 {
		r.Fatalf("fio output: %v", err)
	}
	if rw == "write" {
		return res.Jobs[0].Write.BwBytes / 1e6
	}
	return res.Jobs[0].Read.BwBytes / 1e6
}

// FioArgs is RawDisk's fio command line for one direction (rw: write or
// read), as the benchmarks record it.
func FioArgs(rw, file string, mib int) []string {
	return []string{"--name=raw", "--filename=" + file, "--rw=" + rw, "--bs=1M", "--iodepth=8",
		"--ioengine=libaio", "--direct=1", fmt.Sprintf("--size=%dM", mib), "--end_fsync=1", "--output-format=json"}
}

// DropCaches writes dirty pages out and drops the page cache, so that the
// next read comes from the disk.
func DropCaches(r *testhost.Runner) {
	exec.Command("sync").Run() //nolint:errcheck // best effort
	if err := os.WriteFile("/proc/sys/vm/drop_caches", []byte("3\n"), 0o200); err != nil {
		r.Fatalf("drop caches: %v", err)
	}
}
