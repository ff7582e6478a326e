package runtime

import (
	"io"
	"os"
	"os/exec"
	"sync"
	"syscall"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"
)

// pipeIO runs runc exec on pipes: runc hands them straight to the process.
type pipeIO struct {
	// child ends, given to runc and closed here once it runs
	in, out, errw *os.File
	// stdin is our write end of the process's stdin, nil for /dev/null
	stdin  *os.File
	copies []*outCopy
}

func newPipeIO(o ExecOptions) (*pipeIO, error) {
	p := &pipeIO{}
	var mu sync.Mutex // Stdout and Stderr may be one writer
	var err error
	if o.Stdin != nil {
		p.in, p.stdin, err = os.Pipe()
	} else {
		p.in, err = os.Open(os.DevNull)
	}
	if err == nil {
		p.out, err = p.output(o.Stdout, &mu)
	}
	if err == nil {
		p.errw, err = p.output(o.Stderr, &mu)
	}
	if err != nil {
		p.Close()
		return nil, err
	}
	if p.stdin != nil {
		go func() {
			io.Copy(p.stdin, o.Stdin) //nolint:errcheck // EOF or the process is gone
			p.stdin.Close()           // the process sees EOF
		}()
	}
	for _, c := range p.copies {
		go c.run()
	}
	return p, nil
}

// output returns the child's end for w: a pipe copied into w, or
// /dev/null for a nil w.
func (p *pipeIO) output(w io.Writer, mu *sync.Mutex) (*os.File, error) {
	if w == nil {
		return os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	}
	r, pw, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	p.copies = append(p.copies, newOutCopy(r, w, mu))
	return pw, nil
}

// Set gives runc the child ends.
func (p *pipeIO) Set(cmd *exec.Cmd) {
	cmd.Stdin, cmd.Stdout, cmd.Stderr = p.in, p.out, p.errw
}

// CloseAfterStart closes our copies of the child ends: the output pipes
// then end when the process (and whatever inherited them) is gone.
func (p *pipeIO) CloseAfterStart() error {
	closeAll(p.in, p.out, p.errw)
	return nil
}

func (p *pipeIO) finish() {
	for _, c := range p.copies {
		c.wait()
	}
}

// Close releases everything.
func (p *pipeIO) Close() error {
	closeAll(p.in, p.out, p.errw, p.stdin)
	for _, c := range p.copies {
		c.r.Close()
	}
	return nil
}

// Stdin is unused: Set wires the files itself.
func (p *pipeIO) Stdin() io.WriteCloser { return nil }

// Stdout is unused: Set wires the files itself.
func (p *pipeIO) Stdout() io.ReadCloser { return nil }

// Stderr is unused: Set wires the files itself.
func (p *pipeIO) Stderr() io.ReadCloser { return nil }

// ttyIO runs runc exec on a pseudo-terminal. In foreground terminal mode
// runc needs a host terminal on its stdio: it allocates the container's pty
// itself, relays between the two, and on SIGWINCH copies the host terminal's
// size to the container's. We give it the slave of our own pty as stdio and
// controlling terminal; resizing our master makes the kernel send runc that
// SIGWINCH.
type ttyIO struct {
	master, slave *os.File
	copy          *outCopy
	quit          chan struct{} // closed by finish
	resized       chan struct{} // closed when resize has returned
}

func newTTYIO(o ExecOptions) (*ttyIO, error) {
	master, slave, err := pty.Open()
	if err != nil {
		return nil, err
	}
	if err := makeRaw(slave); err != nil {
		closeAll(master, slave)
		return nil, err
	}
	t := &ttyIO{master: master, slave: slave, quit: make(chan struct{}), resized: make(chan struct{})}
	w, h := termSize(o)
	if err := t.setSize(WinSize{Width: w, Height: h}); err != nil {
		t.Close()
		return nil, err
	}
	out := o.Stdout
	if out == nil {
		out = io.Discard
	}
	t.copy = newOutCopy(master, out, &sync.Mutex{})
	go t.copy.run()
	if o.Stdin != nil {
		go io.Copy(master, o.Stdin) //nolint:errcheck // ends when the master is closed
	}
	go t.resize(o.Resize)
	return t, nil
}

// makeRaw puts a terminal in raw mode (cfmakeraw). runc does it too once it
// runs, but input written before that would be echoed back.
func makeRaw(f *os.File) error {
	fd := int(f.Fd())
	t, err := unix.IoctlGetTermios(fd, unix.TCGETS)
	if err != nil {
		return err
	}
	t.Iflag &^= unix.IGNBRK | unix.BRKINT | unix.PARMRK | unix.ISTRIP | unix.INLCR | unix.IGNCR | unix.ICRNL | unix.IXON
	t.Oflag &^= unix.OPOST
	t.Lflag &^= unix.ECHO | unix.ECHONL | unix.ICANON | unix.ISIG | unix.IEXTEN
	t.Cflag &^= unix.CSIZE | unix.PARENB
	t.Cflag |= unix.CS8
	t.Cc[unix.VMIN], t.Cc[unix.VTIME] = 1, 0
	return unix.IoctlSetTermios(fd, unix.TCSETS, t)
}

// setSize sets the host terminal's size; the kernel signals SIGWINCH to
// the terminal's foreground process group, runc.
func (t *ttyIO) setSize(s WinSize) error {
	return pty.Setsize(t.master, &pty.Winsize{Rows: s.Height, Cols: s.Width})
}

// resize applies sizes until finish. A nil channel just waits.
func (t *ttyIO) resize(sizes <-chan WinSize) {
	defer close(t.resized)
	for {
		select {
		case s, ok := <-sizes:
			if !ok {
				return
			}
			t.setSize(s) //nolint:errcheck // the terminal may be gone already
		case <-t.quit:
			return
		}
	}
}

// Set makes the slave runc's stdio and controlling terminal.
func (t *ttyIO) Set(cmd *exec.Cmd) {
	cmd.Stdin, cmd.Stdout, cmd.Stderr = t.slave, t.slave, t.slave
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid = false
	cmd.SysProcAttr.Setsid = true
	cmd.SysProcAttr.Setctty = true
	cmd.SysProcAttr.Ctty = 0 // the child's fd 0
}

// CloseAfterStart closes our slave: reading the master fails with EIO (our
// EOF) once runc has closed its copies too.
func (t *ttyIO) CloseAfterStart() error {
	t.slave.Close()
	return nil
}

func (t *ttyIO) finish() {
	close(t.quit)
	<-t.resized // it must not use the master once Close runs
	t.copy.wait()
}

// Close releases everything; it also ends the stdin copier.
func (t *ttyIO) Close() error {
	closeAll(t.master, t.slave)
	return nil
}

// Stdin is unused: Set wires the files itself.
func (t *ttyIO) Stdin() io.WriteCloser { return nil }

// Stdout is unused: Set wires the files itself.
func (t *ttyIO) Stdout() io.ReadCloser { return nil }

// Stderr is unused: Set wires the files itself.
func (t *ttyIO) Stderr() io.ReadCloser { return nil }

// outCopy copies the read end of a pipe or a pty master into a writer.
// Only runc holds the other end (it relays the process's output through
// pipes or a pty of its own), so the copy ends when runc exits: at EOF, or
// EIO on a pty master whose slave is closed.
type outCopy struct {
	r    *os.File
	w    io.Writer
	mu   *sync.Mutex // serialises writes to a w shared with another copier
	done chan struct{}
}

func newOutCopy(r *os.File, w io.Writer, mu *sync.Mutex) *outCopy {
	return &outCopy{r: r, w: w, mu: mu, done: make(chan struct{})}
}

func (c *outCopy) run() {
	defer close(c.done)
	buf := make([]byte, 32*1024)
	for {
		n, err := c.r.Read(buf)
		if n > 0 {
			c.mu.Lock()
			c.w.Write(buf[:n]) //nolint:errcheck // keep reading so runc never blocks
			c.mu.Unlock()
		}
		if err != nil {
			return
		}
	}
}

// wait waits for the copy to end, once runc has exited.
func (c *outCopy) wait() {
	<-c.done
}

func closeAll(files ...*os.File) {
	for _, f := range files {
		if f != nil {
			f.Close()
		}
	}
}
