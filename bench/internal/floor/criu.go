package floor

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	criu "github.com/checkpoint-restore/go-criu/v7"
	"github.com/checkpoint-restore/go-criu/v7/rpc"
	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/proto"

	"github.com/vesselhost/vessel/internal/runtime"
)

// CRIU dumps and restores a trivial process (sleep, in the machine's own
// namespaces, its stdio /dev/null) through CRIU's RPC service (criu swrk,
// as vessel drives it) with vessel's CRIU, in dir (made and removed here),
// and returns the time of each request.
func CRIU(dir string) (dump, restore time.Duration, err error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return 0, 0, err
	}
	defer os.RemoveAll(dir)
	images, err := os.Open(dir)
	if err != nil {
		return 0, 0, err
	}
	defer images.Close()

	cmd := exec.Command("sleep", "3600")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := startBare(cmd); err != nil {
		return 0, 0, err
	}
	defer func() { // still there only if the dump failed
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}()
	opts := func() *rpc.CriuOpts {
		return &rpc.CriuOpts{
			ImagesDirFd: proto.Int32(int32(images.Fd())),
			LogLevel:    proto.Int32(1),
			LogFile:     proto.String("criu.log"),
		}
	}
	c := criu.MakeCriu()
	c.SetCriuPath(runtime.DefaultCriuPath())
	o := opts()
	o.Pid = proto.Int32(int32(cmd.Process.Pid))
	t0 := time.Now()
	if err := c.Dump(o, criu.NoNotify{}); err != nil {
		return 0, 0, fmt.Errorf("criu dump: %w%s", err, logTail(dir))
	}
	dump = time.Since(t0)
	_ = cmd.Wait() // the dump killed it: its pid is free for the restore

	// The restored process is our child (rst_sibling), so we reap it.
	o = opts()
	o.RstSibling = proto.Bool(true)
	t0 = time.Now()
	if err := c.Restore(o, criu.NoNotify{}); err != nil {
		return 0, 0, fmt.Errorf("criu restore: %w%s", err, logTail(dir))
	}
	restore = time.Since(t0)
	pid := cmd.Process.Pid
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		return 0, 0, fmt.Errorf("kill restored process %d: %w", pid, err)
	}
	var ws syscall.WaitStatus
	if _, err := syscall.Wait4(pid, &ws, 0, nil); err != nil {
		return 0, 0, fmt.Errorf("reap restored process %d: %w", pid, err)
	}
	return dump, restore, nil
}

// startBare starts cmd with nothing but its stdio: descriptors this
// process inherited without close-on-exec (flock(1)'s lock, when a
// benchmark runs under it) are marked close-on-exec while it starts. CRIU
// refuses to dump a process that holds a file lock.
func startBare(cmd *exec.Cmd) error {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return err
	}
	var marked []int
	for _, e := range ents {
		fd, err := strconv.Atoi(e.Name())
		if err != nil || fd < 3 {
			continue
		}
		flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0)
		if err != nil || flags&unix.FD_CLOEXEC != 0 {
			continue
		}
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETFD, flags|unix.FD_CLOEXEC); err == nil {
			marked = append(marked, fd)
		}
	}
	defer func() {
		for _, fd := range marked {
			if flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err == nil {
				_, _ = unix.FcntlInt(uintptr(fd), unix.F_SETFD, flags&^unix.FD_CLOEXEC)
			}
		}
	}()
	return cmd.Start()
}

func logTail(dir string) string {
	b, err := os.ReadFile(filepath.Join(dir, "criu.log"))
	if err != nil {
		return ""
	}
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return ": " + string(b)
}
