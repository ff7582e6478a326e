package client_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/vesselhost/vessel/internal/api"
	"github.com/vesselhost/vessel/internal/operations"
)

// pushCore records a file push.
type pushCore struct {
	fakeCore
	name, path string
	data       []byte
	o          api.FilePush
}

func (p *pushCore) PushFile(_ context.Context, name, path string, r io.Reader, o api.FilePush) error {
	if path == "/refused" {
		return api.Errorf(api.ErrInvalid, "no")
	}
	b, err := io.ReadAll(r)
	p.name, p.path, p.data, p.o = name, path, b, o
	return err
}

func TestPushFileCarriesPathOwnerAndMode(t *testing.T) {
	core := &pushCore{fakeCore: fakeCore{ops: operations.NewRegistry()}}
	c := newClient(t, core)
	data := bytes.Repeat([]byte("x"), 3<<20)
	err := c.PushFile(context.Background(), "web1", "/etc/a b&c", bytes.NewReader(data), api.FilePush{UID: 1000, GID: 100, Mode: 0o4755})
	if err != nil {
		t.Fatal(err)
	}
	if core.name != "web1" || core.path != "/etc/a b&c" || !bytes.Equal(core.data, data) || core.o != (api.FilePush{UID: 1000, GID: 100, Mode: 0o4755}) {
		t.Fatalf("pushed %s %q %d bytes %+v", core.name, core.path, len(core.data), core.o)
	}
	if err := c.PushFile(context.Background(), "web1", "/refused", strings.NewReader(""), api.FilePush{}); !errors.Is(err, api.ErrInvalid) {
		t.Fatalf("refused push: %v", err)
	}
}
