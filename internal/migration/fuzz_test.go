package migration

import (
	"archive/tar"
	"bytes"
	"context"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// wireConn is a connection whose peer sent exactly data: reads return it,
// then EOF; writes are kept (recording) or dropped.
type wireConn struct {
	r  *bytes.Reader
	mu sync.Mutex
	w  bytes.Buffer
	// block makes reads wait for Close instead of returning EOF (a
	// recording client's peer that never answers).
	block chan struct{}
	once  sync.Once
}

func (c *wireConn) Read(p []byte) (int, error) {
	if c.block != nil {
		<-c.block
		return 0, io.EOF
	}
	return c.r.Read(p)
}

func (c *wireConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.w.Write(p)
}

func (c *wireConn) Close() error {
	c.once.Do(func() {
		if c.block != nil {
			close(c.block)
		}
	})
	return nil
}
func (c *wireConn) LocalAddr() net.Addr              { return &net.TCPAddr{} }
func (c *wireConn) RemoteAddr() net.Addr             { return &net.TCPAddr{} }
func (c *wireConn) SetDeadline(time.Time) error      { return nil }
func (c *wireConn) SetReadDeadline(time.Time) error  { return nil }
func (c *wireConn) SetWriteDeadline(time.Time) error { return nil }

// recordSource returns the bytes a source writes for a session opening:
// the Hello, control messages and a data stream with its header.
func recordSource(f *testing.F) []byte {
	f.Helper()
	conn := &wireConn{block: make(chan struct{})}
	c, err := Client(conn)
	if err != nil {
		f.Fatal(err)
	}
	hello := Hello{Version: Version, Source: "alpha", Live: true, Memory: "lazy", Snapshots: 1, KeepAddress: true,
		TransferFormat: "btrfs", Instance: Instance{Name: "web1", Image: "busybox", Init: []string{"/sbin/init"},
			Config: map[string]string{"limits.memory": "64MiB"}, StopSignal: "SIGUSR2",
			Address: netip.MustParseAddr("10.87.0.5")}}
	for _, v := range []any{hello,
		Message{Type: MsgSnapshot, Record: &SnapshotRecord{Name: "s1", Stateful: true, Config: map[string]string{"user.x": "y"}}},
		Message{Type: MsgDisk, Iteration: 1, Bytes: 4096, Final: true},
		Message{Type: MsgImages, Pages: []string{"pages-1.img"}},
	} {
		if err := c.Send(v); err != nil {
			f.Fatal(err)
		}
	}
	st, err := c.OpenStream(StreamHeader{Kind: StreamDisk, Name: "web1"})
	if err != nil {
		f.Fatal(err)
	}
	if _, err := st.Write([]byte("disk bytes")); err != nil {
		f.Fatal(err)
	}
	conn.mu.Lock()
	out := bytes.Clone(conn.w.Bytes())
	conn.mu.Unlock()
	c.Close()
	return out
}

// FuzzSessionWire feeds a target's session what a hostile peer could send
// on the upgraded connection: yamux frames, the control stream's JSON
// (a Hello, then messages) and data streams' header lines. Nothing may
// panic or hang; whatever decodes is passed through Expect.
func FuzzSessionWire(f *testing.F) {
	rec := recordSource(f)
	f.Add(rec)
	f.Add(rec[:len(rec)/2])
	f.Add([]byte{})
	f.Add([]byte{0, 1, 0, 1, 0, 0, 0, 1, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		s, err := Server(ctx, &wireConn{r: bytes.NewReader(data)})
		if err != nil {
			return
		}
		defer s.Close()
		var h Hello
		if err := s.Recv(ctx, &h); err != nil {
			return
		}
		for range 4 {
			var m Message
			if err := s.Recv(ctx, &m); err != nil {
				break
			}
			_ = Expect(m, MsgDisk)
		}
		if st, _, err := s.AcceptStream(ctx); err == nil {
			_, _ = io.Copy(io.Discard, st)
			st.Close()
		}
	})
}

// FuzzStreamHeader: a data stream's header line as the peer sends it.
func FuzzStreamHeader(f *testing.F) {
	f.Add([]byte(`{"kind":"page","name":"pages-1.img"}` + "\n" + "payload"))
	f.Add([]byte(`{"kind":"disk"}` + "\n"))
	f.Add([]byte(`{"kind":`))
	f.Add(bytes.Repeat([]byte("a"), maxHeader+2))
	f.Fuzz(func(t *testing.T, data []byte) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		c, s := pairQuiet(t)
		if c == nil {
			return
		}
		go func() {
			st, err := c.mux.OpenStream()
			if err != nil {
				return
			}
			_, _ = st.Write(data)
			st.Close()
		}()
		st, h, err := s.AcceptStream(ctx)
		if err != nil {
			return
		}
		defer st.Close()
		if len(h.Kind) > maxHeader || len(h.Name) > maxHeader {
			t.Errorf("header longer than the bound: %d/%d bytes", len(h.Kind), len(h.Name))
		}
	})
}

// pairQuiet is pair without the Hello check, for fuzzing (nil on failure).
func pairQuiet(t *testing.T) (*Session, *Session) {
	a, b := net.Pipe()
	srv := make(chan *Session, 1)
	go func() {
		s, _ := Server(context.Background(), b)
		srv <- s
	}()
	c, err := Client(a)
	if err != nil {
		return nil, nil
	}
	if err := c.Send(Message{Type: MsgAccepted}); err != nil {
		c.Close()
		return nil, nil
	}
	s := <-srv
	if s == nil {
		c.Close()
		return nil, nil
	}
	t.Cleanup(func() { c.Close(); s.Close() })
	return c, s
}

// FuzzReceiveDir: a checkpoint images stream (a tar) from the peer. It may
// only create plain files directly in the directory it is given.
func FuzzReceiveDir(f *testing.F) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, m := range []struct{ name, data string }{{"inventory.img", "x"}, {"pages-1.img", "pages"}} {
		_ = tw.WriteHeader(&tar.Header{Name: m.name, Mode: 0o600, Size: int64(len(m.data)), Typeflag: tar.TypeReg})
		_, _ = tw.Write([]byte(m.data))
	}
	_ = tw.Close()
	f.Add(buf.Bytes())
	var evil bytes.Buffer
	tw = tar.NewWriter(&evil)
	_ = tw.WriteHeader(&tar.Header{Name: "../escape", Mode: 0o600, Size: 1, Typeflag: tar.TypeReg})
	_, _ = tw.Write([]byte("x"))
	_ = tw.Close()
	f.Add(evil.Bytes())
	f.Fuzz(func(t *testing.T, data []byte) {
		parent := t.TempDir()
		dir := filepath.Join(parent, "in")
		_, _ = ReceiveDir(bytes.NewReader(data), dir)
		entries, err := os.ReadDir(parent)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			if e.Name() != "in" {
				t.Fatalf("the stream created %q outside its directory", e.Name())
			}
		}
		inside, _ := os.ReadDir(dir)
		for _, e := range inside {
			if !e.Type().IsRegular() {
				t.Fatalf("the stream created %q, not a plain file", e.Name())
			}
		}
	})
}
