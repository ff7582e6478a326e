package image

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// testLayout is an OCI image layout written by the tests:
//
//   - "app": an application image, the built-in busybox rootfs plus a layer
//     deleting /etc/fstab (whiteout) and adding /etc/motd, with an
//     entrypoint, env, working directory and stop signal.
//   - "system": a multi-platform index: for this host's architecture the
//     bare busybox rootfs without a config command (so /sbin/init), for
//     another architecture the app image.
type testLayout struct {
	dir     string
	busybox Metadata
}

// otherArch is an architecture that is not the host's.
func otherArch() string {
	if runtime.GOARCH == "s390x" {
		return "riscv64"
	}
	return "s390x"
}

func writeTestLayout(t *testing.T) testLayout {
	t.Helper()
	src := newTestStore(t)
	bb := buildBusybox(t, src)
	base := layerFromFile(t, src.Path(bb.Fingerprint))
	top := layerFromBytes(t, makeTar(t,
		tarMember{name: "etc/", typ: tar.TypeDir},
		tarMember{name: "etc/.wh.fstab"},
		tarMember{name: "etc/motd", data: "hello from the top layer\n"},
	))

	app := ociImage(t, runtime.GOARCH, v1.Config{
		Entrypoint: []string{"/bin/sh", "-c"},
		Cmd:        []string{"cat /etc/motd"},
		Env:        []string{"FOO=bar"},
		WorkingDir: "/root",
		StopSignal: "SIGINT",
	}, base, top)
	system := ociImage(t, runtime.GOARCH, v1.Config{}, base)
	foreign := ociImage(t, otherArch(), v1.Config{Entrypoint: []string{"/bin/false"}}, base, top)
	multi := mutate.AppendManifests(mutate.IndexMediaType(empty.Index, types.OCIImageIndex),
		mutate.IndexAddendum{Add: foreign, Descriptor: v1.Descriptor{
			Platform: &v1.Platform{OS: "linux", Architecture: otherArch()}}},
		mutate.IndexAddendum{Add: system, Descriptor: v1.Descriptor{
			Platform: &v1.Platform{OS: "linux", Architecture: runtime.GOARCH}}},
	)

	dir := filepath.Join(t.TempDir(), "layout")
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.AppendImage(app, layout.WithAnnotations(map[string]string{refNameAnnotation: "app"})); err != nil {
		t.Fatal(err)
	}
	if err := p.AppendIndex(multi, layout.WithAnnotations(map[string]string{refNameAnnotation: "system"})); err != nil {
		t.Fatal(err)
	}
	return testLayout{dir: dir, busybox: bb}
}

func ociImage(t *testing.T, arch string, cfg v1.Config, layers ...v1.Layer) v1.Image {
	t.Helper()
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	img, err := mutate.AppendLayers(img, layers...)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture, cf.Config = "linux", arch, cfg
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

func layerFromFile(t *testing.T, path string) v1.Layer {
	t.Helper()
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return os.Open(path) },
		tarball.WithMediaType(types.OCILayer))
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func layerFromBytes(t *testing.T, data []byte) v1.Layer {
	t.Helper()
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil },
		tarball.WithMediaType(types.OCILayer))
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// packDir archives dir with archive/tar, members named relative to it.
func packDir(t *testing.T, dir string) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		hdr, err := tar.FileInfoHeader(fi, "")
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		hdr.Name = "./" + filepath.ToSlash(rel)
		if d.IsDir() {
			hdr.Name += "/"
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if d.Type().IsRegular() {
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			_, err = tw.Write(data)
			return err
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func checkAppMetadata(t *testing.T, md Metadata) {
	t.Helper()
	if !slices.Equal(md.Init, []string{"/bin/sh", "-c", "cat /etc/motd"}) {
		t.Errorf("init %q", md.Init)
	}
	if !slices.Contains(md.Env, "FOO=bar") || !slices.ContainsFunc(md.Env, func(kv string) bool { return strings.HasPrefix(kv, "PATH=") }) {
		t.Errorf("env %q", md.Env)
	}
	if md.Source != SourceOCI || md.Cwd != "/root" || md.StopSignal != "SIGINT" ||
		md.Architecture != runtime.GOARCH || md.OS.ID != "busybox" || md.Version != MetadataVersion {
		t.Errorf("metadata %+v", md)
	}
}

func TestImportOCILayout(t *testing.T) {
	requireRoot(t)
	l := writeTestLayout(t)
	s := newTestStore(t)
	ctx := context.Background()

	md, err := s.ImportOCILayout(ctx, l.dir, "app")
	if err != nil {
		t.Fatal(err)
	}
	checkAppMetadata(t, md)
	rootfs := unpack(t, s, md.Fingerprint)
	if _, err := os.Lstat(filepath.Join(rootfs, "etc/fstab")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("whited-out /etc/fstab: %v", err)
	}
	if _, err := os.Lstat(filepath.Join(rootfs, "etc/.wh.fstab")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("whiteout marker unpacked: %v", err)
	}
	if out := runIn(t, rootfs, md.Init...); out != "hello from the top layer\n" {
		t.Errorf("running the entrypoint: %q", out)
	}

	first, err := s.ImportOCILayout(ctx, l.dir, "")
	if err != nil || first.Fingerprint != md.Fingerprint {
		t.Errorf("ref \"\" should pick the first manifest, app: %v, %s", err, first.Fingerprint)
	}
	assertNoTempFiles(t, s)
}

func TestImportOCILayoutMultiPlatform(t *testing.T) {
	l := writeTestLayout(t)
	md, err := newTestStore(t).ImportOCILayout(context.Background(), l.dir, "system")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(md.Init, []string{"/sbin/init"}) || md.StopSignal != "SIGUSR2" ||
		md.Architecture != runtime.GOARCH || md.Cwd != "/" || md.OS != l.busybox.OS {
		t.Errorf("metadata %+v", md)
	}
}

func TestImportOCILayoutRejects(t *testing.T) {
	l := writeTestLayout(t)
	s := newTestStore(t)
	ctx := context.Background()
	if _, err := s.ImportOCILayout(ctx, l.dir, "nope"); !errors.Is(err, ErrInvalidImage) {
		t.Errorf("unknown ref: %v", err)
	}
	if _, err := s.ImportOCILayout(ctx, t.TempDir(), ""); !errors.Is(err, ErrInvalidImage) {
		t.Errorf("empty directory: %v", err)
	}

	// An image with neither entrypoint nor /sbin/init cannot run.
	dir := filepath.Join(t.TempDir(), "layout")
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	data := ociImage(t, runtime.GOARCH, v1.Config{}, layerFromBytes(t, makeTar(t, tarMember{name: "data.txt", data: "x"})))
	if err := p.AppendImage(data); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ImportOCILayout(ctx, dir, ""); !errors.Is(err, ErrInvalidImage) || !strings.Contains(err.Error(), "entrypoint") {
		t.Errorf("no entrypoint: %v", err)
	}
	assertNoTempFiles(t, s)
}

func TestImportPackedOCILayout(t *testing.T) {
	l := writeTestLayout(t)
	fromDir, err := newTestStore(t).ImportOCILayout(context.Background(), l.dir, "app")
	if err != nil {
		t.Fatal(err)
	}
	s := newTestStore(t)
	md, err := s.Import(context.Background(), bytes.NewReader(gzipped(t, packDir(t, l.dir))))
	if err != nil {
		t.Fatal(err)
	}
	if md.Fingerprint != fromDir.Fingerprint {
		t.Errorf("packed layout gives %s, directory %s", md.Fingerprint, fromDir.Fingerprint)
	}
	checkAppMetadata(t, md)
	assertNoTempFiles(t, s)
	entries, _ := os.ReadDir(s.dir)
	if len(entries) != 1 {
		t.Errorf("store holds %d entries, want the image only", len(entries))
	}
}

func TestImportPackedOCILayoutRejectsLinks(t *testing.T) {
	layout := makeTar(t,
		tarMember{name: "oci-layout", data: `{"imageLayoutVersion":"1.0.0"}`},
		tarMember{name: "index.json", data: `{"schemaVersion":2,"manifests":[]}`},
		tarMember{name: "blobs", typ: tar.TypeSymlink, link: "/etc"},
	)
	s := newTestStore(t)
	if _, err := s.Import(context.Background(), bytes.NewReader(layout)); !errors.Is(err, ErrInvalidImage) {
		t.Fatalf("err = %v, want ErrInvalidImage", err)
	}
	assertNoTempFiles(t, s)
}
