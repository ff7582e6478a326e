package storage

import (
	"archive/tar"
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestApplyPassStaysInside: a tar-sync pass from a hostile peer writes,
// links, deletes and changes nothing outside the volume root, whatever its
// names say (".." and absolute names, writes through a symlink it made,
// hard links and metadata aimed outside).
func TestApplyPassStaysInside(t *testing.T) {
	uid, gid := os.Getuid(), os.Getgid()
	entry := func(typ byte, name, link string, data string) func(*tar.Writer) {
		return func(tw *tar.Writer) {
			hdr := &tar.Header{Typeflag: typ, Name: name, Linkname: link, Mode: 0o644, Uid: uid, Gid: gid,
				Size: int64(len(data)), ModTime: time.Unix(1, 0)}
			if typ != tar.TypeReg {
				hdr.Size = 0
			}
			if err := tw.WriteHeader(hdr); err != nil {
				t.Fatal(err)
			}
			if typ == tar.TypeReg {
				_, _ = tw.Write([]byte(data))
			}
		}
	}
	meta := func(name string) func(*tar.Writer) {
		return func(tw *tar.Writer) {
			hdr := &tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o4777, Uid: uid, Gid: gid, ModTime: time.Unix(1, 0),
				PAXRecords: map[string]string{metaRecord: "1"}}
			if err := tw.WriteHeader(hdr); err != nil {
				t.Fatal(err)
			}
		}
	}
	deletes := func(list string) func(*tar.Writer) {
		return func(tw *tar.Writer) { must(t, writeRecord(tw, deletedRecord, list)) }
	}
	for name, tc := range map[string]func(canary string) []func(*tar.Writer){
		"write through a symlink": func(c string) []func(*tar.Writer) {
			return []func(*tar.Writer){entry(tar.TypeSymlink, "escape", c, ""), entry(tar.TypeReg, "escape/pwned", "", "x")}
		},
		"dotdot": func(c string) []func(*tar.Writer) {
			return []func(*tar.Writer){entry(tar.TypeReg, "../../../../../../.."+c+"/pwned", "", "x")}
		},
		"absolute": func(c string) []func(*tar.Writer) {
			return []func(*tar.Writer){entry(tar.TypeReg, c+"/pwned", "", "x")}
		},
		"hard link outside": func(c string) []func(*tar.Writer) {
			return []func(*tar.Writer){entry(tar.TypeLink, "h", "../../../../../../.."+c+"/keep", "")}
		},
		"metadata through a symlink": func(c string) []func(*tar.Writer) {
			return []func(*tar.Writer){entry(tar.TypeSymlink, "s", c+"/keep", ""), meta("s")}
		},
		"delete outside": func(c string) []func(*tar.Writer) {
			return []func(*tar.Writer){entry(tar.TypeSymlink, "d", c, ""), deletes("../../../../../../.." + c + "/keep\x00d/keep")}
		},
	} {
		t.Run(name, func(t *testing.T) {
			canary := t.TempDir()
			writeFile(t, filepath.Join(canary, "keep"), []byte("host file"))
			must(t, os.Chmod(filepath.Join(canary, "keep"), 0o600))
			root := t.TempDir()
			var b bytes.Buffer
			tw := tar.NewWriter(&b)
			must(t, writeRecord(tw, formatRecord, transferFormatDir))
			for _, e := range tc(canary) {
				e(tw)
			}
			must(t, writeRecord(tw, endRecord, "1"))
			must(t, tw.Close())
			err := applyPass(context.Background(), root, &b)
			t.Logf("applyPass: %v", err)
			entries, _ := os.ReadDir(canary)
			fi, serr := os.Stat(filepath.Join(canary, "keep"))
			content, _ := os.ReadFile(filepath.Join(canary, "keep"))
			if len(entries) != 1 || serr != nil || fi.Mode().Perm() != 0o600 || fi.Mode()&os.ModeSetuid != 0 || string(content) != "host file" {
				t.Errorf("the pass changed the host directory: %v entries, keep %v %v %q", len(entries), fi, serr, content)
			}
		})
	}
}
