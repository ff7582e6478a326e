package image

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// FuzzParseOSRelease: an image's os-release, written by whoever made the
// image.
func FuzzParseOSRelease(f *testing.F) {
	f.Add([]byte("ID=debian\nNAME=\"Debian GNU/Linux\"\nVERSION_ID=\"12\"\nPRETTY_NAME='Debian 12'\n"))
	f.Add([]byte("# comment\nID=a\\ b\nNAME=\"x\\\"y\"\n=\nnoequals\n"))
	f.Add([]byte("NAME=\"unterminated\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		rel, err := ParseOSRelease(bytes.NewReader(data))
		if err != nil {
			return
		}
		for _, v := range []string{rel.ID, rel.Name, rel.VersionID, rel.PrettyName} {
			if len(v) > maxOSReleaseSize {
				t.Fatalf("a value of %d bytes from at most %d of input", len(v), maxOSReleaseSize)
			}
		}
	})
}

// FuzzScanTar: an image's tar stream as stage scans it (members, links,
// init detection, os-release, OCI layout detection).
func FuzzScanTar(f *testing.F) {
	f.Add(minimalRootfsF(f))
	f.Add([]byte{})
	f.Add(bytes.Repeat([]byte{0}, 1024))
	f.Fuzz(func(t *testing.T, data []byte) {
		tree, err := scanTar(bytes.NewReader(data))
		if err != nil {
			if !errors.Is(err, ErrInvalidImage) {
				t.Fatalf("bad tar not reported as ErrInvalidImage: %v", err)
			}
			return
		}
		_ = tree.detectInit()
		_ = tree.osRelease()
		_ = tree.isOCILayout()
	})
}

// FuzzOCIConfig: an OCI image's config blob (the image maker's JSON) turned
// into vessel's metadata.
func FuzzOCIConfig(f *testing.F) {
	f.Add([]byte(`{"architecture":"amd64","os":"linux","config":{"Entrypoint":["/bin/sh","-c"],"Cmd":["true"],"Env":["FOO=bar"],"WorkingDir":"/root","StopSignal":"SIGINT"},"rootfs":{"type":"layers","diff_ids":[]}}`))
	f.Add([]byte(`{"config":{"StopSignal":"9"}}`))
	f.Add([]byte(`{"config":{"StopSignal":"RTMIN+3","Env":["PATH=/x"]}}`))
	f.Add([]byte(`{}`))
	tree, err := scanTar(bytes.NewReader(minimalRootfsF(f)))
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		cf, err := v1.ParseConfigFile(bytes.NewReader(data))
		if err != nil {
			return
		}
		st := &staged{fingerprint: strings.Repeat("0", 64), tree: tree}
		md, err := st.ociMetadata(cf)
		if err != nil {
			return
		}
		if len(md.Init) == 0 || md.StopSignal == "" {
			t.Fatalf("metadata without init or stop signal: %+v", md)
		}
	})
}

// FuzzImport: a whole upload as POST /1.0/images gives it to the store
// (compressed or not, rootfs tarball or packed OCI layout), into a store
// bounded to 1 MiB. Any failure is a clean error and leaves no file.
func FuzzImport(f *testing.F) {
	root := minimalRootfsF(f)
	f.Add(root)
	f.Add(gzipped(f, root))
	f.Add(gzipped(f, []byte("not a tar")))
	f.Add([]byte{0x28, 0xb5, 0x2f, 0xfd, 0, 0, 0})
	f.Add([]byte("BZh91AY&SY"))
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := NewStore(filepath.Join(t.TempDir(), "images"), 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Import(context.Background(), bytes.NewReader(data)); err != nil {
			assertEmptyStore(t, s)
		}
	})
}

// minimalRootfsF is minimalRootfs for a fuzz target's seeds.
func minimalRootfsF(f *testing.F) []byte {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, m := range []tarMember{
		{name: "sbin/", typ: tar.TypeDir},
		{name: "bin/busybox", data: "x"},
		{name: "sbin/init", typ: tar.TypeSymlink, link: "../bin/busybox"},
		{name: "etc/os-release", data: "ID=tiny\n"},
	} {
		hdr := &tar.Header{Name: m.name, Typeflag: m.typ, Linkname: m.link, Mode: 0o755, Size: int64(len(m.data))}
		if m.typ == 0 {
			hdr.Typeflag = tar.TypeReg
		}
		if err := tw.WriteHeader(hdr); err != nil {
			f.Fatal(err)
		}
		if _, err := tw.Write([]byte(m.data)); err != nil {
			f.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		f.Fatal(err)
	}
	return buf.Bytes()
}
