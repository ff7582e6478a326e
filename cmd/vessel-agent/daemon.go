package main

import (
	"errors"
	"flag"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/mdlayher/vsock"
	"golang.org/x/sys/unix"

	"github.com/vesselhost/vessel/internal/agent"
)

// runDaemon serves the host: on the virtio-serial port named
// agent.PortName and, where the guest has a vsock transport, on vsock port
// agent.VsockPort. It waits for init's ready pipe to reach EOF first, so
// that /proc/1/root is the image's root.
func runDaemon(args []string) int {
	fs := flag.NewFlagSet("daemon", flag.ContinueOnError)
	readyFD := fs.Int("ready-fd", -1, "wait for EOF on this descriptor before serving")
	initPath := fs.String("init", "", "the image's init (reported by ping)")
	root := fs.String("root", "/proc/1/root", "the root commands and files are in")
	stopSignal := fs.Int("stop-signal", 0, "signal for PID 1 when the power button is pressed (0: none)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *readyFD >= 0 {
		ready := os.NewFile(uintptr(*readyFD), "ready")
		_, _ = io.Copy(io.Discard, ready)
		_ = ready.Close()
	}
	if *stopSignal > 0 {
		go watchPowerButton(unix.Signal(*stopSignal))
	}
	if *readyFD >= 0 {
		startConsoleGetty(*root, *initPath) // getty.go
	}
	srv := &agent.Server{
		Root:       *root,
		Version:    version,
		ReadyAfter: agent.Uptime(),
		Init:       *initPath,
		Log:        slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	}
	served := serveVsock(srv)
	port, err := findPort(agent.PortName, 10*time.Second)
	if err != nil {
		if served {
			select {} // vsock alone
		}
		logf("daemon: no channel to the host: %v", err)
		return 1
	}
	logf("daemon: serving on %s (ready %.2fs after boot)", port, srv.ReadyAfter.Seconds())
	serveVirtioSerial(srv, port)
	return 1
}

// findPort finds the device of the virtio-serial port called name,
// waiting up to wait for it to appear.
func findPort(name string, wait time.Duration) (string, error) {
	deadline := time.Now().Add(wait)
	for {
		names, _ := filepath.Glob("/sys/class/virtio-ports/*/name")
		for _, n := range names {
			b, err := os.ReadFile(n)
			if err == nil && strings.TrimSpace(string(b)) == name {
				return "/dev/" + filepath.Base(filepath.Dir(n)), nil
			}
		}
		if time.Now().After(deadline) {
			return "", errors.New("no virtio-serial port named " + name)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// serveVirtioSerial serves sessions on a virtio-serial port forever: it
// opens the port, waits for the host side to connect, serves one session
// until the host side closes (reads reach EOF), and opens it again.
func serveVirtioSerial(srv *agent.Server, dev string) {
	for {
		fd, err := unix.Open(dev, unix.O_RDWR|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
		if err != nil {
			// EBUSY while the previous session's file is still closing.
			time.Sleep(50 * time.Millisecond)
			continue
		}
		waitForHost(fd)
		// Non-blocking: the file goes through the runtime's poller, so a
		// session's Close wakes a read in flight.
		if err := srv.ServeConn(os.NewFile(uintptr(fd), dev)); err != nil {
			logf("daemon: session on %s: %v", dev, err)
		}
	}
}

// waitForHost waits until the host side of a virtio-serial port is
// connected: until then the port polls POLLHUP (and reads return EOF).
func waitForHost(fd int) {
	for {
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		_, err := unix.Poll(fds, 0)
		if err == nil && fds[0].Revents&unix.POLLHUP == 0 {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// serveVsock listens on agent.VsockPort when the guest has a vsock
// transport (a context ID of its own), serving each connection as a
// session. It reports whether it listens.
func serveVsock(srv *agent.Server) bool {
	if _, err := os.Stat("/dev/vsock"); err != nil {
		return false
	}
	cid, err := vsock.ContextID()
	if err != nil || cid == unix.VMADDR_CID_ANY || cid <= unix.VMADDR_CID_HOST {
		return false
	}
	l, err := vsock.Listen(agent.VsockPort, nil)
	if err != nil {
		logf("daemon: vsock: %v", err)
		return false
	}
	logf("daemon: serving on vsock %d:%d", cid, agent.VsockPort)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				logf("daemon: vsock: %v", err)
				time.Sleep(100 * time.Millisecond)
				continue
			}
			go func() { _ = srv.ServeConn(c) }()
		}
	}()
	return true
}
