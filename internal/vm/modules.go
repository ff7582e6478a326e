package vm

import (
	"bufio"
	"bytes"
	"context"
	"debug/elf"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// BootModules are the modules a VM needs before its root is mounted and to
// reach the host: PCI virtio, the disk, the network card, the console and
// the agent's channels (virtio-serial and virtio-vsock), ext4, the
// entropy source, the ACPI power button with its input events (a
// guest's init sees the host's ACPI power-off), and the pvpanic device's
// driver (a panicking guest tells QEMU, which then ends rather than
// reboot it). Those built into the kernel are skipped.
var BootModules = []string{
	"virtio_pci", "virtio_blk", "virtio_net", "virtio_console",
	"vmw_vsock_virtio_transport", "ext4", "virtio_rng", "button", "evdev",
	"pvpanic_mmio", "virtio_mmio",
}

// Kernel is an unpacked guest kernel package.
type Kernel struct {
	Dir string
}

// Vmlinuz is the kernel image QEMU boots.
func (k Kernel) Vmlinuz() string { return filepath.Join(k.Dir, "vmlinuz") }

func (k Kernel) modDir() string { return filepath.Join(k.Dir, "modules") }

// Check tells whether the directory holds a kernel and its modules.
func (k Kernel) Check() error {
	for _, p := range []string{k.Vmlinuz(), filepath.Join(k.modDir(), "modules.builtin")} {
		if _, err := os.Stat(p); err != nil {
			return fmt.Errorf("vm kernel in %s: %w (scripts/setup.sh unpacks it)", k.Dir, err)
		}
	}
	return nil
}

// Module is one loadable module, its file read and decompressed.
type Module struct {
	Name string
	// File is the module's file name in the initramfs (NAME.ko).
	File string
	Data []byte
}

// modName normalises a module name as modprobe does.
func modName(s string) string {
	s = filepath.Base(s)
	for _, ext := range []string{".xz", ".zst", ".gz", ".ko"} {
		s = strings.TrimSuffix(s, ext)
	}
	return strings.ReplaceAll(s, "-", "_")
}

// moduleSource finds and reads modules; the real one reads a kernel
// directory, the tests a table.
type moduleSource interface {
	builtin(name string) bool
	// load returns the module's object file (decompressed) and the names
	// of the modules it depends on (its .modinfo depends=).
	load(ctx context.Context, name string) (data []byte, deps []string, err error)
}

// ErrModule is a module that is neither built in nor found.
var ErrModule = errors.New("kernel module not found")

// resolve returns the modules names need, each after its dependencies (the
// order to load them), without builtins or duplicates.
func resolve(ctx context.Context, src moduleSource, names []string) ([]Module, error) {
	var out []Module
	state := map[string]int{} // 1: visiting, 2: done
	var visit func(name string, chain []string) error
	visit = func(name string, chain []string) error {
		name = modName(name)
		switch state[name] {
		case 2:
			return nil
		case 1:
			return fmt.Errorf("module dependency cycle: %s", strings.Join(append(chain, name), " -> "))
		}
		if src.builtin(name) {
			state[name] = 2
			return nil
		}
		state[name] = 1
		data, deps, err := src.load(ctx, name)
		if err != nil {
			return err
		}
		for _, d := range deps {
			if err := visit(d, append(chain, name)); err != nil {
				return err
			}
		}
		state[name] = 2
		out = append(out, Module{Name: name, File: name + ".ko", Data: data})
		return nil
	}
	for _, n := range names {
		if err := visit(n, nil); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// Modules returns the modules names need from k, in load order.
func (k Kernel) Modules(ctx context.Context, names []string) ([]Module, error) {
	src, err := k.source()
	if err != nil {
		return nil, err
	}
	return resolve(ctx, src, names)
}

// dirSource reads modules from a kernel directory.
type dirSource struct {
	builtins map[string]bool
	files    map[string]string // name -> path
}

func (k Kernel) source() (*dirSource, error) {
	s := &dirSource{builtins: map[string]bool{}, files: map[string]string{}}
	b, err := os.ReadFile(filepath.Join(k.modDir(), "modules.builtin"))
	if err != nil {
		return nil, fmt.Errorf("vm kernel: %w", err)
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if l := strings.TrimSpace(sc.Text()); l != "" {
			s.builtins[modName(l)] = true
		}
	}
	err = filepath.WalkDir(filepath.Join(k.modDir(), "kernel"), func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !e.IsDir() && strings.Contains(e.Name(), ".ko") {
			s.files[modName(e.Name())] = p
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("vm kernel: %w", err)
	}
	return s, nil
}

func (s *dirSource) builtin(name string) bool { return s.builtins[name] }

func (s *dirSource) load(ctx context.Context, name string) ([]byte, []string, error) {
	p, ok := s.files[name]
	if !ok {
		return nil, nil, fmt.Errorf("%w: %s", ErrModule, name)
	}
	data, err := decompress(ctx, p)
	if err != nil {
		return nil, nil, fmt.Errorf("module %s: %w", name, err)
	}
	deps, err := moduleDepends(data)
	if err != nil {
		return nil, nil, fmt.Errorf("module %s: %w", name, err)
	}
	return data, deps, nil
}

// decompress reads a module file, through xz or zstd if it is compressed
// (Debian compresses them; the guest then needs no decompressor).
func decompress(ctx context.Context, p string) ([]byte, error) {
	var tool string
	switch filepath.Ext(p) {
	case ".ko":
		return os.ReadFile(p)
	case ".xz":
		tool = "xz"
	case ".zst":
		tool = "zstd"
	case ".gz":
		tool = "gzip"
	default:
		return nil, fmt.Errorf("unknown module file type: %s", p)
	}
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, tool, "-dc", p)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("%s -dc %s: %w: %s", tool, p, err, strings.TrimSpace(stderr.String()))
	}
	return out, nil
}

// moduleDepends reads depends= from a module's .modinfo section.
func moduleDepends(obj []byte) ([]string, error) {
	f, err := elf.NewFile(bytes.NewReader(obj))
	if err != nil {
		return nil, err
	}
	sec := f.Section(".modinfo")
	if sec == nil {
		return nil, errors.New("no .modinfo section")
	}
	info, err := sec.Data()
	if err != nil {
		return nil, err
	}
	for _, kv := range bytes.Split(info, []byte{0}) {
		if v, ok := bytes.CutPrefix(kv, []byte("depends=")); ok {
			var deps []string
			for _, d := range strings.Split(string(v), ",") {
				if d != "" {
					deps = append(deps, d)
				}
			}
			return deps, nil
		}
	}
	return nil, nil
}

// DefaultKernelDir is where scripts/setup.sh unpacks the guest kernel.
const DefaultKernelDir = "/var/cache/vessel-setup/vm-kernel/current"
