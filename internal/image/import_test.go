package image

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/klauspost/compress/zstd"
)

// minimalRootfs is a small system image: busybox init by symlink.
func minimalRootfs(t *testing.T, prefix string) []byte {
	return makeTar(t,
		tarMember{name: prefix, typ: tar.TypeDir},
		tarMember{name: prefix + "bin/", typ: tar.TypeDir},
		tarMember{name: prefix + "bin/busybox", data: "not really busybox", mode: 0o755},
		tarMember{name: prefix + "sbin/", typ: tar.TypeDir},
		tarMember{name: prefix + "sbin/init", typ: tar.TypeSymlink, link: "../bin/busybox"},
		tarMember{name: prefix + "etc/", typ: tar.TypeDir},
		tarMember{name: prefix + "etc/os-release", typ: tar.TypeSymlink, link: "../usr/lib/os-release"},
		tarMember{name: prefix + "usr/lib/os-release", data: "ID=tiny\nNAME='Tiny Linux'\nVERSION_ID=\"1.0\"\n"},
	)
}

func TestImportRootfsTarball(t *testing.T) {
	plain := minimalRootfs(t, "")
	dotted := minimalRootfs(t, "./")
	for name, input := range map[string][]byte{
		"plain":  plain,
		"dotted": dotted,
		"gzip":   gzipped(t, plain),
		"zstd":   zstded(t, plain),
		"xz":     xzed(t, plain),
	} {
		t.Run(name, func(t *testing.T) {
			s := newTestStore(t)
			md, err := s.Import(context.Background(), bytes.NewReader(input))
			if err != nil {
				t.Fatal(err)
			}
			want := plain
			if name == "dotted" {
				want = dotted
			}
			stored, err := os.ReadFile(s.Path(md.Fingerprint))
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(stored, want) {
				t.Errorf("stored archive is not the uncompressed input")
			}
			if md.Fingerprint != sha256Hex(want) || md.Size != int64(len(want)) {
				t.Errorf("fingerprint %s size %d", md.Fingerprint, md.Size)
			}
			wantOS := OSRelease{ID: "tiny", Name: "Tiny Linux", VersionID: "1.0"}
			if md.Source != SourceTarball || md.OS != wantOS || md.StopSignal != "SIGUSR2" ||
				len(md.Init) != 1 || md.Init[0] != "/sbin/init" || !strings.HasPrefix(md.Env[0], "PATH=") {
				t.Errorf("metadata %+v", md)
			}
			// Importing the same image again keeps it.
			again, err := s.Import(context.Background(), bytes.NewReader(input))
			if err != nil || again.Fingerprint != md.Fingerprint {
				t.Errorf("re-import: %v, %s", err, again.Fingerprint)
			}
			assertNoTempFiles(t, s)
		})
	}
}

func TestImportBuiltinTarball(t *testing.T) {
	requireRoot(t)
	src := newTestStore(t)
	built := buildBusybox(t, src)
	f, err := os.Open(src.Path(built.Fingerprint))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	s := newTestStore(t)
	md, err := s.Import(context.Background(), f)
	if err != nil {
		t.Fatal(err)
	}
	if md.Fingerprint != built.Fingerprint || md.OS != built.OS || md.StopSignal != "SIGUSR2" {
		t.Fatalf("imported %+v, built %+v", md, built)
	}
	rootfs := unpack(t, s, md.Fingerprint)
	if out := runIn(t, rootfs, "/bin/sh", "-c", "echo ok"); out != "ok\n" {
		t.Errorf("chroot sh: %q", out)
	}
}

func TestImportDetectsInit(t *testing.T) {
	for _, tc := range []struct {
		name    string
		members []tarMember
		signal  string
	}{
		{"systemd", []tarMember{
			{name: "lib/systemd/systemd", data: "elf"},
			{name: "sbin/init", typ: tar.TypeSymlink, link: "/lib/systemd/systemd"},
		}, "SIGRTMIN+3"},
		{"systemd merged usr", []tarMember{
			{name: "usr/lib/systemd/systemd", data: "elf"},
			{name: "usr/sbin/init", typ: tar.TypeSymlink, link: "../lib/systemd/systemd"},
			{name: "sbin", typ: tar.TypeSymlink, link: "usr/sbin"},
		}, "SIGRTMIN+3"},
		{"sysvinit", []tarMember{
			{name: "sbin/init", data: "elf"},
			{name: "usr/share/doc/sysvinit-core/", typ: tar.TypeDir},
		}, "SIGPWR"},
		{"sysvinit inittab", []tarMember{
			{name: "sbin/init", data: "elf"},
			{name: "etc/inittab", data: "id:2:initdefault:\n"},
		}, "SIGPWR"},
		{"busybox hard link", []tarMember{
			{name: "bin/busybox", data: "elf"},
			{name: "sbin/init", typ: tar.TypeLink, link: "./bin/busybox"},
		}, "SIGUSR2"},
		{"unknown", []tarMember{
			{name: "sbin/init", data: "#!/bin/sh\n"},
		}, "SIGTERM"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			md, err := newTestStore(t).Import(context.Background(), bytes.NewReader(makeTar(t, tc.members...)))
			if err != nil {
				t.Fatal(err)
			}
			if md.StopSignal != tc.signal {
				t.Errorf("stop signal %s, want %s", md.StopSignal, tc.signal)
			}
		})
	}
}

func TestImportRejects(t *testing.T) {
	random := make([]byte, 64<<10)
	rand.Read(random)
	for name, input := range map[string][]byte{
		"empty input":     nil,
		"random bytes":    random,
		"empty archive":   makeTar(t),
		"gzip of garbage": gzipped(t, random),
		"truncated":       minimalRootfs(t, "")[:700],
		"truncated xz":    xzed(t, minimalRootfs(t, ""))[:100],
		"traversal": makeTar(t,
			tarMember{name: "sbin/init", typ: tar.TypeSymlink, link: "/bin/busybox"},
			tarMember{name: "bin/busybox", data: "x"},
			tarMember{name: "../../etc/cron.d/evil", data: "x"}),
		"absolute traversal": makeTar(t,
			tarMember{name: "sbin/init", data: "x"},
			tarMember{name: "/etc/../../root/.ssh/authorized_keys", data: "x"}),
		"hard link traversal": makeTar(t,
			tarMember{name: "sbin/init", data: "x"},
			tarMember{name: "etc/shadow", typ: tar.TypeLink, link: "../../etc/shadow"}),
		"no init": makeTar(t,
			tarMember{name: "bin/sh", data: "x"},
			tarMember{name: "etc/os-release", data: "ID=app\n"}),
		"dangling init": makeTar(t,
			tarMember{name: "sbin/init", typ: tar.TypeSymlink, link: "/bin/busybox"}),
	} {
		t.Run(name, func(t *testing.T) {
			s := newTestStore(t)
			_, err := s.Import(context.Background(), bytes.NewReader(input))
			if !errors.Is(err, ErrInvalidImage) {
				t.Fatalf("err = %v, want ErrInvalidImage", err)
			}
			if name == "no init" && !strings.Contains(err.Error(), "no /sbin/init") {
				t.Errorf("err = %v", err)
			}
			entries, _ := os.ReadDir(s.dir)
			if len(entries) != 0 {
				t.Errorf("store not empty after a rejected import: %d entries", len(entries))
			}
		})
	}
}

func TestImportCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	s := newTestStore(t)
	if _, err := s.Import(ctx, bytes.NewReader(minimalRootfs(t, ""))); !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	assertNoTempFiles(t, s)
}

func TestStoreFiles(t *testing.T) {
	s := newTestStore(t)
	md, err := s.Import(context.Background(), bytes.NewReader(minimalRootfs(t, "")))
	if err != nil {
		t.Fatal(err)
	}
	if got := s.Path(md.Fingerprint); got != filepath.Join(s.dir, md.Fingerprint+".tar") {
		t.Errorf("Path = %s", got)
	}
	if s.Path("../../etc/passwd") != "" || s.Has("../x") || s.Has(strings.ToUpper(md.Fingerprint)) {
		t.Error("invalid fingerprints name files")
	}
	f, err := s.Open(md.Fingerprint)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	for range 2 {
		if err := s.Delete(md.Fingerprint); err != nil {
			t.Fatal(err)
		}
	}
	if s.Has(md.Fingerprint) {
		t.Error("deleted image still there")
	}
	if _, err := s.Open(md.Fingerprint); !errors.Is(err, ErrNotFound) {
		t.Errorf("Open after Delete: %v", err)
	}
	if err := Unpack(context.Background(), s.Path(md.Fingerprint), t.TempDir()); !errors.Is(err, ErrNotFound) {
		t.Errorf("Unpack after Delete: %v", err)
	}
}

func TestUnpackNeedsEmptyDir(t *testing.T) {
	s := newTestStore(t)
	md, err := s.Import(context.Background(), bytes.NewReader(minimalRootfs(t, "")))
	if err != nil {
		t.Fatal(err)
	}
	dst := t.TempDir()
	if err := os.WriteFile(filepath.Join(dst, "x"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := Unpack(context.Background(), s.Path(md.Fingerprint), dst); err == nil {
		t.Fatal("unpacked into a non-empty directory")
	}
}

func gzipped(t testing.TB, data []byte) []byte {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	if _, err := zw.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func zstded(t *testing.T, data []byte) []byte {
	var buf bytes.Buffer
	zw, err := zstd.NewWriter(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := zw.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func xzed(t *testing.T, data []byte) []byte {
	cmd := exec.Command("xz", "--compress", "--stdout")
	cmd.Stdin = bytes.NewReader(data)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("xz: %v", err)
	}
	return out
}

func sha256Hex(data []byte) string {
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}
