package daemon

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestWriteIdentityMachineID: a new root filesystem's machine ID is
// emptied (systemd makes a new one at first boot), D-Bus's own copy goes,
// D-Bus's link and a root without an ID are left alone, and a link in
// /etc/machine-id's place is replaced, not written through.
func TestWriteIdentityMachineID(t *testing.T) {
	mk := func(t *testing.T, files map[string]string, links map[string]string) string {
		root := t.TempDir()
		for p, c := range files {
			if err := os.MkdirAll(filepath.Join(root, filepath.Dir(p)), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(root, p), []byte(c), 0o444); err != nil {
				t.Fatal(err)
			}
		}
		for p, target := range links {
			if err := os.MkdirAll(filepath.Join(root, filepath.Dir(p)), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(target, filepath.Join(root, p)); err != nil {
				t.Fatal(err)
			}
		}
		return root
	}
	const id = "0123456789abcdef0123456789abcdef\n"

	t.Run("an ID is emptied, D-Bus's copy removed", func(t *testing.T) {
		root := mk(t, map[string]string{"etc/machine-id": id, "var/lib/dbus/machine-id": id}, nil)
		if err := writeIdentity(root, "web2"); err != nil {
			t.Fatal(err)
		}
		fi, err := os.Lstat(filepath.Join(root, "etc/machine-id"))
		if err != nil || !fi.Mode().IsRegular() || fi.Size() != 0 {
			t.Fatalf("/etc/machine-id: %v, %v; want an empty file", fi, err)
		}
		if _, err := os.Lstat(filepath.Join(root, "var/lib/dbus/machine-id")); !os.IsNotExist(err) {
			t.Fatalf("D-Bus's machine-id kept: %v", err)
		}
		if b, _ := os.ReadFile(filepath.Join(root, "etc/hostname")); string(b) != "web2\n" {
			t.Fatalf("hostname %q", b)
		}
	})
	t.Run("D-Bus's link kept, no ID stays none", func(t *testing.T) {
		root := mk(t, map[string]string{"etc/os-release": "ID=x\n"}, map[string]string{"var/lib/dbus/machine-id": "/etc/machine-id"})
		if err := writeIdentity(root, "web2"); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Lstat(filepath.Join(root, "etc/machine-id")); !os.IsNotExist(err) {
			t.Fatalf("/etc/machine-id made: %v", err)
		}
		if l, err := os.Readlink(filepath.Join(root, "var/lib/dbus/machine-id")); err != nil || l != "/etc/machine-id" {
			t.Fatalf("D-Bus's link: %q, %v", l, err)
		}
	})
	t.Run("a link in its place is replaced, its target untouched", func(t *testing.T) {
		outside := filepath.Join(t.TempDir(), "host-machine-id")
		if err := os.WriteFile(outside, []byte(id), 0o644); err != nil {
			t.Fatal(err)
		}
		root := mk(t, nil, map[string]string{"etc/machine-id": outside})
		if err := writeIdentity(root, "web2"); err != nil {
			t.Fatal(err)
		}
		if b, _ := os.ReadFile(outside); string(b) != id {
			t.Fatalf("the link's target was written: %q", b)
		}
		fi, err := os.Lstat(filepath.Join(root, "etc/machine-id"))
		if err != nil || !fi.Mode().IsRegular() || fi.Size() != 0 {
			t.Fatalf("/etc/machine-id: %v, %v; want an empty file", fi, err)
		}
	})
}

// TestWriteName: a renamed root gets the new name in /etc/hostname and
// /etc/hosts (a link in their place replaced, its target untouched) and
// keeps its machine ID and D-Bus's copy: the same machine.
func TestWriteName(t *testing.T) {
	const id = "0123456789abcdef0123456789abcdef\n"
	root := t.TempDir()
	outside := filepath.Join(t.TempDir(), "host-hosts")
	for p, c := range map[string]string{"etc/machine-id": id, "var/lib/dbus/machine-id": id, "etc/hostname": "web1\n", outside: "host\n"} {
		if !filepath.IsAbs(p) {
			p = filepath.Join(root, p)
		}
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(outside, filepath.Join(root, "etc/hosts")); err != nil {
		t.Fatal(err)
	}
	if err := writeName(root, "web2"); err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string]string{"etc/machine-id": id, "var/lib/dbus/machine-id": id, "etc/hostname": "web2\n", outside: "host\n"} {
		if !filepath.IsAbs(p) {
			p = filepath.Join(root, p)
		}
		if b, err := os.ReadFile(p); err != nil || string(b) != want {
			t.Errorf("%s: %q, %v; want %q", p, b, err, want)
		}
	}
	fi, err := os.Lstat(filepath.Join(root, "etc/hosts"))
	if err != nil || !fi.Mode().IsRegular() {
		t.Fatalf("/etc/hosts: %v, %v; want a file", fi, err)
	}
	if b, _ := os.ReadFile(filepath.Join(root, "etc/hosts")); !strings.Contains(string(b), "127.0.1.1\tweb2\n") {
		t.Errorf("/etc/hosts: %q", b)
	}
}
