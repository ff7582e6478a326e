package shim

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	gorunc "github.com/containerd/go-runc"
	"golang.org/x/sys/unix"
)

// shim is one running monitor.
type shim struct {
	cfg     *Config
	dir     string
	runc    *gorunc.Runc
	log     *rotatingLog
	copiers sync.WaitGroup
	initPid int
	report  *os.File
}

// Run is the whole life of a shim whose configuration is at cfgPath. It
// returns the process exit code: 0 after the container's init has exited and
// been recorded, non-zero when the container could not be started.
func Run(cfgPath string) int {
	// fd 3 (and a restore's 4, 5 and 6) are inherited without
	// close-on-exec; keep them out of runc (and so out of the container).
	for _, fd := range []int{ReportFd, CriuFd, NetnsFd, InitFd} {
		syscall.CloseOnExec(fd)
	}
	report := os.NewFile(ReportFd, "report")
	ignoreSignals()

	s, err := start(cfgPath, report)
	if err != nil {
		sendReport(report, Report{Error: err.Error()})
		return 1
	}
	sendReport(report, Report{InitPid: s.initPid})
	return s.monitor()
}

// ignoreSignals keeps the shim alive on the signals a terminal or a careless
// "kill" sends. It catches them instead of setting SIG_IGN, because ignored
// dispositions survive execve and would leak into runc and the container.
func ignoreSignals() {
	signal.Notify(make(chan os.Signal, 1), unix.SIGINT, unix.SIGTERM, unix.SIGHUP, unix.SIGPIPE)
}

func sendReport(f *os.File, r Report) {
	json.NewEncoder(f).Encode(r) //nolint:errcheck // nobody to tell if the daemon went away
	f.Close()
}

// start brings the container up and returns once runc has returned.
func start(cfgPath string, report *os.File) (*shim, error) {
	cfg, err := ReadConfig(cfgPath)
	if err != nil {
		return nil, err
	}
	s := &shim{cfg: cfg, dir: filepath.Dir(cfgPath), report: report}
	s.runc = &gorunc.Runc{
		Command:   cfg.Runc,
		Root:      cfg.Root,
		Log:       filepath.Join(s.dir, RuncLogFile),
		LogFormat: gorunc.JSON,
	}
	if cfg.Criu != "" {
		// runc (1.2 and later) runs the "criu" of its PATH: ours first.
		if err := os.Setenv("PATH", filepath.Dir(cfg.Criu)+":"+os.Getenv("PATH")); err != nil {
			return nil, err
		}
	}
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		return nil, fmt.Errorf("become subreaper: %w", err)
	}
	if err := WriteFileAtomic(filepath.Join(s.dir, ShimPidFile), os.Getpid()); err != nil {
		return nil, err
	}
	if s.log, err = openLog(cfg.LogPath, cfg.LogMax); err != nil {
		return nil, err
	}
	if err := s.launch(); err != nil {
		s.log.Close()
		return nil, err
	}
	return s, nil
}

// launch runs runc with fresh stdio pipes and reads init's pid.
func (s *shim) launch() error {
	ctx := context.Background()
	if RuncHasState(s.cfg.Root, s.cfg.ID) {
		if _, err := s.runc.State(ctx, s.cfg.ID); err == nil {
			return fmt.Errorf("runc already has a container %q", s.cfg.ID)
		}
	}
	stdio, err := s.openStdio()
	if err != nil {
		return err
	}
	os.Remove(s.runc.Log)
	runErr := s.runContainer(ctx, stdio)
	// Only the container may hold the write ends now, so the copiers see
	// EOF once it is gone.
	stdio.Close()
	if runErr != nil {
		// runc's log says e.g. "runc run failed: unable to start ...".
		msg := RuncLogErrors(s.runc.Log)
		if msg == "" {
			msg = fmt.Sprintf("runc %s: %v", s.verb(), runErr)
		}
		s.runc.Delete(ctx, s.cfg.ID, &gorunc.DeleteOpts{Force: true}) //nolint:errcheck // best effort, runc may have left nothing
		s.copiers.Wait()
		return errors.New(msg)
	}
	pid, err := gorunc.ReadPidFile(filepath.Join(s.dir, InitPidFile))
	if err != nil {
		s.runc.Delete(ctx, s.cfg.ID, &gorunc.DeleteOpts{Force: true}) //nolint:errcheck // best effort
		s.copiers.Wait()
		return fmt.Errorf("read init pid: %w", err)
	}
	s.initPid = pid
	return nil
}

func (s *shim) verb() string {
	if s.cfg.Action == ActionRestore {
		return "restore"
	}
	return "run"
}

// runContainer runs "runc run --detach", or a restore's CRIU.
func (s *shim) runContainer(ctx context.Context, stdio *stdio) error {
	pidFile := filepath.Join(s.dir, InitPidFile)
	os.Remove(pidFile)
	if s.cfg.Action == ActionCreate {
		_, err := s.runc.Run(ctx, s.cfg.ID, s.cfg.Bundle, &gorunc.CreateOpts{
			IO: stdio, PidFile: pidFile, Detach: true,
		})
		return err
	}
	return s.runCriu(stdio)
}

// runCriu runs a restore's criu swrk with the container's stdio,
// the daemon's RPC socket (fd 3) and the container's netns (fd 4), tells
// the daemon CRIU's pid (it moves CRIU into the container's cgroup before
// it sends the request) and waits for init's pid from the daemon, which
// it records as runc's --pid-file would be.
func (s *shim) runCriu(stdio *stdio) error {
	initPipe := os.NewFile(InitFd, "init")
	defer initPipe.Close()
	cmd := exec.Command(s.cfg.Criu, "swrk", "3")
	stdio.Set(cmd)
	cmd.ExtraFiles = []*os.File{os.NewFile(CriuFd, "criu"), os.NewFile(NetnsFd, "netns")}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start criu: %w", err)
	}
	for _, f := range cmd.ExtraFiles {
		f.Close()
	}
	json.NewEncoder(s.report).Encode(Report{CriuPid: cmd.Process.Pid}) //nolint:errcheck // the daemon's hang-up ends CRIU
	var pid int
	_, perr := fmt.Fscan(initPipe, &pid)
	werr := cmd.Wait()
	if perr != nil || pid <= 0 {
		return fmt.Errorf("CRIU restore did not complete (criu: %w)", werr)
	}
	// As runc writes its --pid-file: the number alone, renamed into place.
	pidFile := filepath.Join(s.dir, InitPidFile)
	if err := os.WriteFile(pidFile+".tmp", []byte(strconv.Itoa(pid)), 0o600); err != nil {
		return err
	}
	return os.Rename(pidFile+".tmp", pidFile)
}

// monitor reaps children until init exits, records the exit and waits for
// the log pipes to drain.
func (s *shim) monitor() int {
	defer s.log.Close()
	ws, err := reapUntil(s.initPid)
	if err != nil {
		fmt.Fprintf(s.log, "vessel-shim: wait for init %d: %v\n", s.initPid, err)
		return 1
	}
	if err := WriteFileAtomic(filepath.Join(s.dir, ExitFile), exitRecord(ws, time.Now())); err != nil {
		fmt.Fprintf(s.log, "vessel-shim: %v\n", err)
	}
	s.copiers.Wait()
	return 0
}

// reapUntil reaps every child that exits (orphans of the container end up
// here, the shim being their subreaper) until pid does, and returns its
// status.
func reapUntil(pid int) (unix.WaitStatus, error) {
	for {
		var ws unix.WaitStatus
		wpid, err := unix.Wait4(-1, &ws, 0, nil)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return 0, err
		}
		if wpid == pid {
			return ws, nil
		}
	}
}

func exitRecord(ws unix.WaitStatus, t time.Time) ExitRecord {
	e := ExitRecord{Version: Version, Status: ws.ExitStatus(), Time: t.UTC()}
	if ws.Signaled() {
		e.Status = 128 + int(ws.Signal())
		e.Signal = unix.SignalName(ws.Signal())
	}
	return e
}
