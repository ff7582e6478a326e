package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vesselhost/vessel/internal/identity"
)

// newRoot is where init mounts the root disk before switching to it.
const newRoot = "/newroot"

// rootWait bounds the wait for the root disk to appear (TCG is slow).
const rootWait = 60 * time.Second

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "vessel-agent: "+format+"\n", args...)
}

// runInit is PID 1 of the initramfs. It never returns: it execs the
// image's init, or rescues.
func runInit() {
	cfg, err := bootInit()
	if err == nil {
		err = switchRoot(cfg)
	}
	rescue(cfg.Rescue, err)
}

// bootInit does everything before the switch; on success the daemon runs
// and the root disk is mounted on newRoot.
func bootInit() (bootConfig, error) {
	cfg := bootConfig{Rescue: "poweroff"}
	if err := mountEarly(); err != nil {
		return cfg, err
	}
	openConsole()
	line, err := os.ReadFile("/proc/cmdline")
	if err != nil {
		return cfg, err
	}
	if cfg, err = parseCmdline(string(line)); err != nil {
		return cfg, err
	}
	if err := loadModules("/lib/modules/vessel.load"); err != nil {
		return cfg, err
	}
	if err := mountRoot(cfg); err != nil {
		return cfg, err
	}
	if cfg.Net != nil {
		if err := setupNetwork(cfg.Net, newRoot); err != nil {
			return cfg, fmt.Errorf("network: %w", err)
		}
	}
	if cfg.Hostname != "" {
		setHostname(cfg)
	}
	if cfg.NewMachineID && !cfg.ReadOnly {
		resetMachineID(newRoot)
	}
	return cfg, nil
}

// resetMachineID empties the root's machine ID on a copy's first boot
// (identity.ResetMachineID; a failure is logged, the boot goes on).
func resetMachineID(rootDir string) {
	root, err := os.OpenRoot(rootDir)
	if err == nil {
		err = identity.ResetMachineID(root)
		root.Close()
	}
	if err != nil {
		logf("machine id: %v", err)
	}
}

// mountEarly mounts what init and the daemon use: /dev, /proc, /sys and
// /dev/pts (the daemon's terminals). They stay in the initramfs after the
// switch, for the daemon.
func mountEarly() error {
	for _, m := range []struct{ fstype, dir, data string }{
		{"devtmpfs", "/dev", "mode=0755"},
		{"proc", "/proc", ""},
		{"sysfs", "/sys", ""},
		{"devpts", "/dev/pts", "gid=5,mode=620,ptmxmode=666"},
	} {
		if err := os.MkdirAll(m.dir, 0o755); err != nil {
			return err
		}
		err := unix.Mount(m.fstype, m.dir, m.fstype, unix.MS_NOSUID|unix.MS_NOEXEC, m.data)
		if err != nil && !errors.Is(err, unix.EBUSY) {
			return fmt.Errorf("mount %s on %s: %w", m.fstype, m.dir, err)
		}
	}
	return nil
}

// openConsole gives init a console on 0, 1 and 2 when the kernel could
// not (an initramfs without /dev/console).
func openConsole() {
	if _, err := unix.FcntlInt(1, unix.F_GETFD, 0); err == nil {
		return
	}
	fd, err := unix.Open("/dev/console", unix.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		return
	}
	for i := range 3 {
		if i != fd {
			_ = unix.Dup3(fd, i, 0)
		}
	}
	if fd > 2 {
		_ = unix.Close(fd)
	}
}

// loadModules loads the modules vessel.load lists, in order. A module the
// kernel has already (built in or loaded) is fine; a missing list means
// there is nothing to load.
func loadModules(list string) error {
	f, err := os.Open(list)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer func() { _ = f.Close() }()
	mods, err := parseLoadList(f)
	if err != nil {
		return fmt.Errorf("%s: %w", list, err)
	}
	for _, m := range mods {
		if err := loadModule(m); err != nil {
			return err
		}
	}
	return nil
}

func loadModule(m module) error {
	f, err := os.Open(m.Path)
	if err != nil {
		return fmt.Errorf("module: %w", err)
	}
	defer func() { _ = f.Close() }()
	flags := 0
	switch filepath.Ext(m.Path) {
	case ".xz", ".gz", ".zst":
		// The kernel decompresses (CONFIG_MODULE_DECOMPRESS, as Debian's).
		flags |= unix.MODULE_INIT_COMPRESSED_FILE
	}
	err = unix.FinitModule(int(f.Fd()), m.Params, flags)
	if err != nil && !errors.Is(err, unix.EEXIST) {
		return fmt.Errorf("load module %s: %w", m.Path, err)
	}
	return nil
}

// mountRoot waits for the root disk and mounts it on newRoot.
func mountRoot(cfg bootConfig) error {
	deadline := time.Now().Add(rootWait)
	for {
		if _, err := os.Stat(cfg.Root); err == nil {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("root disk %s did not appear in %s", cfg.Root, rootWait)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := os.MkdirAll(newRoot, 0o755); err != nil {
		return err
	}
	var flags uintptr
	if cfg.ReadOnly {
		flags |= unix.MS_RDONLY
	}
	if err := unix.Mount(cfg.Root, newRoot, cfg.RootFSType, flags, ""); err != nil {
		return fmt.Errorf("mount root %s (%s) on %s: %w", cfg.Root, cfg.RootFSType, newRoot, err)
	}
	return nil
}

// setHostname names the guest after its instance, in the kernel and in
// the root's /etc/hostname (as vessel writes a container's), so that the
// image's init keeps the name.
func setHostname(cfg bootConfig) {
	if err := unix.Sethostname([]byte(cfg.Hostname)); err != nil {
		logf("hostname: %v", err)
	}
	if cfg.ReadOnly {
		return
	}
	p := filepath.Join(newRoot, "etc/hostname")
	if fi, err := os.Lstat(filepath.Join(newRoot, "etc")); err != nil || !fi.IsDir() {
		return // no /etc (or a link out of the root): leave it
	}
	_ = os.Remove(p)
	if err := os.WriteFile(p, []byte(cfg.Hostname+"\n"), 0o644); err != nil {
		logf("hostname: %v", err)
	}
}

// switchRoot starts the daemon, gives the new root its /dev, /proc and
// /sys, moves it onto / and execs the image's init, as switch_root does
// (the initramfs is not freed: the daemon lives in it).
func switchRoot(cfg bootConfig) error {
	if err := checkInit(cfg.Init); err != nil {
		return err
	}
	ready, err := startDaemon(cfg)
	if err != nil {
		return err
	}
	for _, m := range []struct{ fstype, dir, data string }{
		{"devtmpfs", "dev", "mode=0755"},
		{"proc", "proc", ""},
		{"sysfs", "sys", ""},
		// The guest's own terminals: the daemon's exec terminals are
		// allocated here (see agent.Server), so that the guest sees them.
		{"devpts", "dev/pts", "gid=5,mode=620,ptmxmode=666"},
	} {
		dir := filepath.Join(newRoot, m.dir)
		if m.fstype == "devpts" {
			_ = os.Mkdir(dir, 0o755)
		}
		if _, err := os.Stat(dir); err != nil {
			continue // the image has no such directory; its init copes
		}
		if err := unix.Mount(m.fstype, dir, m.fstype, unix.MS_NOSUID, m.data); err != nil {
			return fmt.Errorf("mount %s on %s: %w", m.fstype, dir, err)
		}
	}
	if err := unix.Chdir(newRoot); err != nil {
		return err
	}
	if err := unix.Mount(".", "/", "", unix.MS_MOVE, ""); err != nil {
		return fmt.Errorf("move %s onto /: %w", newRoot, err)
	}
	if err := unix.Chroot("."); err != nil {
		return fmt.Errorf("chroot: %w", err)
	}
	if err := unix.Chdir("/"); err != nil {
		return err
	}
	logf("switching to %s after %.2fs", cfg.Init, uptime().Seconds())
	// ready is close-on-exec: the daemon sees EOF once init runs. Until
	// then it must stay open (an unreachable os.File is closed by the GC).
	err = unix.Exec(cfg.Init, []string{cfg.Init}, os.Environ())
	runtime.KeepAlive(ready)
	return fmt.Errorf("exec %s: %w", cfg.Init, err)
}

// checkInit fails unless the image's init is an executable file, its
// symbolic links followed inside the new root.
func checkInit(init string) error {
	root, err := unix.Open(newRoot, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer func() { _ = unix.Close(root) }()
	// An absolute link (/sbin/init -> /bin/busybox) is taken in the root.
	fd, err := unix.Openat2(root, strings.TrimPrefix(init, "/"), &unix.OpenHow{
		Flags: unix.O_PATH | unix.O_CLOEXEC, Resolve: unix.RESOLVE_IN_ROOT})
	if err != nil {
		return fmt.Errorf("the image's init %s: %w", init, err)
	}
	f := os.NewFile(uintptr(fd), init)
	defer func() { _ = f.Close() }()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() || fi.Mode()&0o111 == 0 {
		return fmt.Errorf("the image's init %s is not an executable file", init)
	}
	return nil
}

// startDaemon starts "vessel-agent daemon" in a session of its own. It
// returns the write end of its ready pipe (close-on-exec): the daemon
// serves once it reads EOF, when init has exec'd the image's init.
func startDaemon(cfg bootConfig) (*os.File, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer func() { _ = r.Close() }()
	self, err := os.Executable()
	if err != nil {
		self = "/init"
	}
	attr := &os.ProcAttr{
		Dir:   "/",
		Env:   []string{"PATH=/sbin:/bin:/usr/sbin:/usr/bin"},
		Files: []*os.File{nil, os.Stdout, os.Stderr, r},
		Sys:   &syscall.SysProcAttr{Setsid: true},
	}
	args := []string{"vessel-agent", "daemon", "--ready-fd", "3", "--init", cfg.Init}
	if cfg.StopSignal != 0 {
		args = append(args, "--stop-signal", strconv.Itoa(int(cfg.StopSignal)))
	}
	p, err := os.StartProcess(self, args, attr)
	if err != nil {
		_ = w.Close()
		return nil, fmt.Errorf("start the agent daemon: %w", err)
	}
	_ = p.Release()
	return w, nil
}

// rescue reports a failed boot on the console and does what
// vessel.rescue= says: poweroff (default), sleep, or a shell from the
// root disk if it has one.
func rescue(mode string, err error) {
	logf("BOOT FAILED: %v", err)
	unix.Sync()
	switch mode {
	case "shell":
		for _, sh := range []string{newRoot + "/bin/sh", "/bin/sh"} {
			if _, serr := os.Stat(sh); serr == nil {
				logf("rescue: starting %s", sh)
				_ = unix.Exec(sh, []string{"sh"}, os.Environ())
			}
		}
		logf("rescue: no shell; sleeping")
		fallthrough
	case "sleep":
		logf("rescue: sleeping (vessel.rescue=%s); stop the VM", mode)
		for {
			time.Sleep(time.Hour)
		}
	default:
		logf("rescue: powering off in 5s (vessel.rescue=shell|sleep keeps the VM)")
		time.Sleep(5 * time.Second)
		_ = unix.Reboot(unix.LINUX_REBOOT_CMD_POWER_OFF)
		for {
			time.Sleep(time.Hour)
		}
	}
}

// uptime is the time since the guest booted.
func uptime() time.Duration {
	var ts unix.Timespec
	if unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts) != nil {
		return 0
	}
	return time.Duration(ts.Nano())
}
