package integration

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/vesselhost/vessel/internal/api"
)

// builtinTar returns the path of the built-in image's stored tarball.
func (h *host) builtinTar() string {
	h.t.Helper()
	var img api.Image
	if err := json.Unmarshal([]byte(h.OK("image", "info", "busybox", "--format", "json")), &img); err != nil {
		h.t.Fatal(err)
	}
	return filepath.Join(h.Root(), "images", img.Fingerprint+".tar")
}

func TestImageImportTarball(t *testing.T) {
	h := newHost(t)
	src, err := os.ReadFile(h.builtinTar())
	if err != nil {
		t.Fatal(err)
	}
	// A gzip-compressed rootfs tarball with an extra file, so its
	// fingerprint differs from the built-in one.
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	tr := tar.NewReader(bytes.NewReader(src))
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if err := tw.WriteHeader(hdr); err != nil {
			t.Fatal(err)
		}
		if _, err := io.Copy(tw, tr); err != nil {
			t.Fatal(err)
		}
	}
	marker := "imported-tarball\n"
	_ = tw.WriteHeader(&tar.Header{Name: "etc/marker", Mode: 0o644, Size: int64(len(marker)), Typeflag: tar.TypeReg})
	_, _ = tw.Write([]byte(marker))
	tw.Close()
	zw.Close()
	file := filepath.Join(t.TempDir(), "rootfs.tar.gz")
	if err := os.WriteFile(file, buf.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}

	out := h.OK("image", "import", file, "--alias", "mine")
	if !strings.Contains(out, "mine") {
		t.Errorf("import output: %s", out)
	}
	if list := h.OK("image", "list"); !strings.Contains(list, "mine") || !strings.Contains(list, "busybox") {
		t.Errorf("image list:\n%s", list)
	}
	h.OK("launch", "mine", "fromtar")
	if got := h.OK("exec", "fromtar", "--", "cat", "/etc/marker"); got != marker {
		t.Errorf("marker = %q", got)
	}
	// Deleting the image leaves the container intact.
	h.OK("image", "delete", "mine")
	if got := h.OK("exec", "fromtar", "--", "cat", "/etc/marker"); got != marker {
		t.Errorf("after image delete: %q", got)
	}
	h.Fails("not found", "launch", "mine", "another")
}

func TestImageImportOCILayout(t *testing.T) {
	h := newHost(t)
	base := h.builtinTar()
	layer, err := tarball.LayerFromFile(base)
	if err != nil {
		t.Fatal(err)
	}
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cfg = cfg.DeepCopy()
	cfg.Config.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "FROM_OCI=yes"}
	cfg.Config.Entrypoint = []string{"/sbin/init"}
	cfg.Architecture, cfg.OS = "amd64", "linux"
	img, err = mutate.ConfigFile(img, cfg)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "layout")
	lp, err := layout.Write(dir, empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	if err := lp.AppendImage(img, layout.WithAnnotations(map[string]string{"org.opencontainers.image.ref.name": "latest"})); err != nil {
		t.Fatal(err)
	}

	h.OK("image", "import", dir, "--alias", "oci-busybox")
	var got api.Image
	if err := json.Unmarshal([]byte(h.OK("image", "info", "oci-busybox", "--format", "json")), &got); err != nil {
		t.Fatal(err)
	}
	if got.Source != "oci" || got.OS.ID != "busybox" {
		t.Errorf("imported image: %+v", got)
	}
	h.OK("launch", "oci-busybox", "fromoci")
	if r := h.Vessel("exec", "fromoci", "--", "sh", "-c", "echo $FROM_OCI"); strings.TrimSpace(r.Stdout) != "yes" {
		t.Errorf("image env not applied: %s", r)
	}
}

func TestDebianImage(t *testing.T) {
	if os.Getenv("VESSEL_TEST_DEBIAN") != "1" {
		t.Skip("set VESSEL_TEST_DEBIAN=1 to build a Debian image with debootstrap (takes minutes, needs deb.debian.org)")
	}
	h := newHost(t)
	h.OK("image", "build", "debian")
	h.OK("launch", "debian", "deb1")
	if got := h.instances()["deb1"]; got.OS.ID != "debian" {
		t.Errorf("distro: %+v", got.OS)
	}
	if out := h.OK("exec", "deb1", "--", "cat", "/etc/debian_version"); out == "" {
		t.Error("no /etc/debian_version")
	}
	h.OK("stop", "deb1")
}
