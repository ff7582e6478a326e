package shim

import (
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func TestExitRecord(t *testing.T) {
	now := time.Now()
	// A wait status of 7<<8 is exit(7); 9 is killed by SIGKILL.
	if e := exitRecord(unix.WaitStatus(7<<8), now); e.Status != 7 || e.Signal != "" || e.Version != Version {
		t.Errorf("exit 7 -> %+v", e)
	}
	if e := exitRecord(unix.WaitStatus(9), now); e.Status != 137 || e.Signal != "SIGKILL" {
		t.Errorf("SIGKILL -> %+v", e)
	}
}
