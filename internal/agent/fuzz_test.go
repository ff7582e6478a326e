package agent

import (
	"bytes"
	"encoding/binary"
	"io"
	"net"
	"testing"
)

func frameBytes(t byte, p []byte) []byte {
	b := []byte{t, 0, 0, 0, 0}
	binary.BigEndian.PutUint32(b[1:], uint32(len(p)))
	return append(b, p...)
}

// FuzzServeStream feeds a stream's bytes, as a host could send them, to
// the server: it must answer or close, never panic. Execs are excluded
// (the fuzzer would run commands); pushes go to a temporary root.
func FuzzServeStream(f *testing.F) {
	f.Add(frameBytes(frameHeader, []byte(`{"version":1,"op":"ping"}`)))
	f.Add(frameBytes(frameHeader, []byte(`{"version":1,"op":"pull","file":{"path":"/x"}}`)))
	f.Add(append(frameBytes(frameHeader, []byte(`{"version":1,"op":"push","file":{"path":"/x","mode":420}}`)),
		append(frameBytes(frameData, []byte("abc")), frameBytes(frameData, nil)...)...))
	f.Add(frameBytes(frameHeader, []byte(`{"version":2}`)))
	f.Add([]byte{frameHeader, 0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, in []byte) {
		if bytes.Contains(in, []byte(opExec)) {
			return
		}
		srv := &Server{Root: t.TempDir()}
		srv.serveStream(&byteConn{r: bytes.NewReader(in)}, 1)
	})
}

// byteConn is a stream that reads given bytes and discards what is
// written (serveStream uses Read, Write and Close only).
type byteConn struct {
	net.Conn
	r io.Reader
}

func (c *byteConn) Read(p []byte) (int, error)  { return c.r.Read(p) }
func (c *byteConn) Write(p []byte) (int, error) { return len(p), nil }
func (c *byteConn) Close() error                { return nil }

// FuzzFrameReader: any bytes give frames or an error, within maxFrame.
func FuzzFrameReader(f *testing.F) {
	f.Add(frameBytes(frameStdout, []byte("hi")))
	f.Add([]byte{frameData, 0, 0x20, 0, 0})
	f.Fuzz(func(t *testing.T, in []byte) {
		fr := &frameReader{r: bytes.NewReader(in)}
		for {
			_, p, err := fr.next()
			if err != nil {
				return
			}
			if len(p) > maxFrame {
				t.Fatalf("a frame of %d bytes", len(p))
			}
		}
	})
}
