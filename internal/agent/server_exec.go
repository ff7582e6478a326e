package agent

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"strings"
	"sync"
	"syscall"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"
)

// defaultPath is the PATH a command runs with when its env sets none.
const defaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// exec runs a command: it answers the request, relays the process's stdio
// and the client's stdin, resizes and signals as frames, and ends with an
// exit frame once the process has exited and its output reached EOF (as
// runc exec does). A client that goes away kills the process.
func (s *Server) exec(fr *frameReader, fw *frameWriter, req *execRequest) error {
	if req == nil || len(req.Args) == 0 {
		return fail(fw, errors.New("exec: no command"))
	}
	if err := fw.json(frameHeader, response{Version: ProtocolVersion}); err != nil {
		return err
	}
	env := execEnv(req)
	cmd, cantRun := s.command(req, env)
	if cantRun != nil {
		return s.execRefused(fw, req, cantRun)
	}
	p, err := startProcess(s.Root, cmd, req, fw)
	if err != nil {
		return s.execRefused(fw, req, err)
	}
	go p.relayInput(fr)
	st := p.wait()
	return fw.json(frameExit, st)
}

// execEnv is the command's environment: the request's, with PATH, HOME and
// (with a terminal) TERM defaulted.
func execEnv(req *execRequest) []string {
	env := append([]string{}, req.Env...)
	has := func(k string) bool {
		for _, e := range env {
			if strings.HasPrefix(e, k+"=") {
				return true
			}
		}
		return false
	}
	if !has("PATH") {
		env = append(env, "PATH="+defaultPath)
	}
	if !has("HOME") {
		env = append(env, "HOME=/root")
	}
	if req.TTY && !has("TERM") {
		env = append(env, "TERM=xterm")
	}
	return env
}

// command builds the process: its executable looked up in the root's PATH,
// chrooted to the root, in cwd, with the request's credentials. A non-nil
// error means the command cannot run (not found, not executable).
func (s *Server) command(req *execRequest, env []string) (*exec.Cmd, error) {
	exe, err := s.lookPath(req.Args[0], env)
	if err != nil {
		return nil, err
	}
	attr := &syscall.SysProcAttr{Setsid: true}
	if s.Root != "" {
		attr.Chroot = s.Root
	}
	if req.UID != nil || req.GID != nil {
		cred := &syscall.Credential{Uid: uint32(os.Getuid()), Gid: uint32(os.Getgid()), Groups: []uint32{}}
		if req.UID != nil {
			cred.Uid = *req.UID
		}
		if req.GID != nil {
			cred.Gid = *req.GID
		}
		attr.Credential = cred
	}
	cwd := req.Cwd
	if cwd == "" {
		cwd = "/"
	}
	return &exec.Cmd{Path: exe, Args: req.Args, Env: env, Dir: cwd, SysProcAttr: attr}, nil
}

// lookPath finds name in the PATH of env inside the root, following the
// root's symbolic links within it.
func (s *Server) lookPath(name string, env []string) (string, error) {
	if strings.Contains(name, "/") {
		return name, nil
	}
	search := defaultPath
	for _, e := range env {
		if v, ok := strings.CutPrefix(e, "PATH="); ok {
			search = v
		}
	}
	root, err := openGuestRoot(s.rootDir())
	if err != nil {
		return "", err
	}
	defer func() { _ = root.Close() }()
	for _, dir := range strings.Split(search, ":") {
		if !path.IsAbs(dir) {
			continue
		}
		p := path.Join(dir, name)
		fi, err := root.stat(p)
		if err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s: %w", name, exec.ErrNotFound)
}

func (s *Server) rootDir() string {
	if s.Root == "" {
		return "/"
	}
	return s.Root
}

// execRefused ends an exec whose command could not run the way a shell
// does: a message on its stderr (its terminal), code 127 when it was not
// found, 126 otherwise.
func (s *Server) execRefused(fw *frameWriter, req *execRequest, err error) error {
	out := frameStderr
	if req.TTY {
		out = frameStdout
	}
	msg := fmt.Sprintf("vessel-agent: exec %s: %v\r\n", req.Args[0], err)
	if werr := fw.frame(out, []byte(msg)); werr != nil {
		return werr
	}
	code := 126
	if errors.Is(err, exec.ErrNotFound) || errors.Is(err, fs.ErrNotExist) {
		code = 127
	}
	return fw.json(frameExit, ExitStatus{Code: code})
}

// process is a started exec.
type process struct {
	cmd   *exec.Cmd
	fw    *frameWriter
	stdin *os.File // the write end of its stdin pipe, or its terminal
	tty   *os.File // its terminal's master, or nil
	// ttyMu orders a resize against the terminal's close (an ioctl on a
	// descriptor being closed, or reused); ttyClosed once closed.
	ttyMu     sync.Mutex
	ttyClosed bool
	// output ends when the terminal's output reached EOF (TTY only).
	output chan struct{}
	once   sync.Once
}

// startProcess starts cmd with its stdio wired to frames.
func startProcess(root string, cmd *exec.Cmd, req *execRequest, fw *frameWriter) (*process, error) {
	p := &process{cmd: cmd, fw: fw, output: make(chan struct{})}
	if req.TTY {
		return p, p.startTTY(root, req)
	}
	close(p.output)
	return p, p.startPipes()
}

func (p *process) startPipes() error {
	r, w, err := os.Pipe()
	if err != nil {
		return err
	}
	p.cmd.Stdin = r
	p.cmd.Stdout = dataWriter{fw: p.fw, t: frameStdout}
	p.cmd.Stderr = dataWriter{fw: p.fw, t: frameStderr}
	p.stdin = w
	err = p.cmd.Start()
	_ = r.Close()
	if err != nil {
		_ = w.Close()
	}
	return err
}

func (p *process) startTTY(root string, req *execRequest) error {
	master, slave, err := openPTY(root)
	if err != nil {
		return err
	}
	defer func() { _ = slave.Close() }()
	w, h := req.Width, req.Height
	if w == 0 || h == 0 {
		w, h = 80, 24
	}
	if err := pty.Setsize(master, &pty.Winsize{Cols: w, Rows: h}); err != nil {
		_ = master.Close()
		return err
	}
	p.cmd.Stdin, p.cmd.Stdout, p.cmd.Stderr = slave, slave, slave
	p.cmd.SysProcAttr.Setctty = true
	p.cmd.SysProcAttr.Ctty = 0
	if err := p.cmd.Start(); err != nil {
		_ = master.Close()
		return err
	}
	p.tty, p.stdin = master, master
	go func() {
		defer close(p.output)
		// The master reads EIO once every holder of the terminal closed it.
		_, _ = io.Copy(dataWriter{fw: p.fw, t: frameStdout}, master)
	}()
	return nil
}

// relayInput applies the client's frames until the stream ends. A stream
// that ends before the exit frame was sent means the client went away:
// the process is killed.
func (p *process) relayInput(fr *frameReader) {
	stdin := make(chan []byte, 16)
	go func() {
		for b := range stdin {
			if b == nil {
				p.closeStdin()
				continue
			}
			_, _ = p.stdin.Write(b)
		}
	}()
	defer close(stdin)
	for {
		t, b, err := fr.next()
		if err != nil {
			_ = p.cmd.Process.Kill()
			return
		}
		switch t {
		case frameStdin:
			if len(b) == 0 {
				if p.tty == nil {
					stdin <- nil
				}
				continue
			}
			stdin <- append([]byte(nil), b...)
		case frameResize:
			if p.tty != nil && len(b) == 4 {
				p.resize(binary.BigEndian.Uint16(b), binary.BigEndian.Uint16(b[2:]))
			}
		case frameSignal:
			if len(b) == 1 {
				_ = p.cmd.Process.Signal(syscall.Signal(b[0]))
			}
		}
	}
}

// resize sets the terminal's size, unless it is closed already.
func (p *process) resize(cols, rows uint16) {
	p.ttyMu.Lock()
	defer p.ttyMu.Unlock()
	if !p.ttyClosed {
		_ = pty.Setsize(p.tty, &pty.Winsize{Cols: cols, Rows: rows})
	}
}

func (p *process) closeStdin() {
	p.once.Do(func() { _ = p.stdin.Close() })
}

// wait waits for the process and its output, and returns its status.
func (p *process) wait() ExitStatus {
	err := p.cmd.Wait()
	<-p.output
	if p.tty != nil {
		p.ttyMu.Lock()
		_ = p.tty.Close()
		p.ttyClosed = true
		p.ttyMu.Unlock()
	} else {
		p.closeStdin()
	}
	var st ExitStatus
	if err != nil {
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			return ExitStatus{Code: 126}
		}
	}
	ws, ok := p.cmd.ProcessState.Sys().(syscall.WaitStatus)
	switch {
	case ok && ws.Signaled():
		st.Signal = int(ws.Signal())
		st.Code = 128 + st.Signal
	default:
		st.Code = p.cmd.ProcessState.ExitCode()
	}
	return st
}

// openPTY allocates a terminal in the root's devpts: through the root's
// /dev/ptmx (the kernel takes the devpts mounted beside it, at the root's
// /dev/pts) or its /dev/pts/ptmx, the peer opened from the master
// (TIOCGPTPEER) so that no path outside the root is involved. The guest
// sees the terminal as its /dev/pts/N.
func openPTY(root string) (master, slave *os.File, err error) {
	for _, p := range []string{"/dev/ptmx", "/dev/pts/ptmx"} {
		master, err = os.OpenFile(root+p, os.O_RDWR|unix.O_NOCTTY, 0)
		if err == nil {
			break
		}
	}
	if err != nil {
		return nil, nil, fmt.Errorf("open a terminal: %w", err)
	}
	fail := func(err error) (*os.File, *os.File, error) {
		_ = master.Close()
		return nil, nil, fmt.Errorf("open a terminal: %w", err)
	}
	if err := unix.IoctlSetPointerInt(int(master.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		return fail(err)
	}
	n, err := unix.IoctlGetInt(int(master.Fd()), unix.TIOCGPTN)
	if err != nil {
		return fail(err)
	}
	fd, _, errno := unix.Syscall(unix.SYS_IOCTL, master.Fd(), unix.TIOCGPTPEER, uintptr(unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC))
	if errno != 0 {
		return fail(errno)
	}
	return master, os.NewFile(fd, fmt.Sprintf("/dev/pts/%d", n)), nil
}
