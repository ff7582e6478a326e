package agent

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
)

// ProtocolVersion is the version of the agent protocol; a header frame
// carries it and a server refuses a request of another version.
const ProtocolVersion = 1

// VsockPort is the AF_VSOCK port the agent listens on.
const VsockPort = 1024 + 0x7e5 // 3045

// PortName is the name of the virtio-serial port the agent opens.
const PortName = "org.vesselhost.agent"

// A frame is a type byte, a big-endian uint32 payload length and the
// payload. Data frames with an empty payload end their stream (EOF).
const (
	frameHeader byte = 'H' // JSON: a request, a response
	frameStdin  byte = '0' // exec: bytes for the process's stdin
	frameStdout byte = '1' // exec: the process's stdout (or terminal)
	frameStderr byte = '2' // exec: the process's stderr
	frameResize byte = 'R' // exec: 4 bytes, width and height (uint16 each)
	frameSignal byte = 'S' // exec: 1 byte, a signal for the process
	frameExit   byte = 'X' // exec: JSON ExitStatus, the last frame
	frameData   byte = 'D' // push, pull: file bytes
)

// maxFrame bounds a frame's payload; a larger one is a protocol error.
const maxFrame = 1 << 20

// dataChunk is the payload size writers cut data into.
const dataChunk = 64 << 10

var errFrameTooLarge = errors.New("agent: frame too large")

// frameReader reads frames from a stream.
type frameReader struct {
	r   io.Reader
	hdr [5]byte
	buf []byte
}

// next returns the next frame; its payload is valid until the next call.
func (f *frameReader) next() (byte, []byte, error) {
	if _, err := io.ReadFull(f.r, f.hdr[:]); err != nil {
		return 0, nil, err
	}
	n := binary.BigEndian.Uint32(f.hdr[1:])
	if n > maxFrame {
		return 0, nil, errFrameTooLarge
	}
	if cap(f.buf) < int(n) {
		f.buf = make([]byte, n)
	}
	p := f.buf[:n]
	if _, err := io.ReadFull(f.r, p); err != nil {
		return 0, nil, unexpected(err)
	}
	return f.hdr[0], p, nil
}

// header reads a frame that must be a header and decodes it into v.
func (f *frameReader) header(v any) error {
	t, p, err := f.next()
	if err != nil {
		return err
	}
	if t != frameHeader {
		return fmt.Errorf("agent: frame %q where a header was expected", t)
	}
	return json.Unmarshal(p, v)
}

// frameWriter writes frames to a stream; its methods are safe for
// concurrent use.
type frameWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (f *frameWriter) frame(t byte, p []byte) error {
	if len(p) > maxFrame {
		return errFrameTooLarge
	}
	var hdr [5]byte
	hdr[0] = t
	binary.BigEndian.PutUint32(hdr[1:], uint32(len(p)))
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, err := f.w.Write(hdr[:]); err != nil {
		return err
	}
	if len(p) == 0 {
		return nil
	}
	_, err := f.w.Write(p)
	return err
}

func (f *frameWriter) json(t byte, v any) error {
	p, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return f.frame(t, p)
}

// dataWriter is an io.Writer that sends what it is given as frames of one
// type, cut to dataChunk. It never sends an empty frame (that is EOF).
type dataWriter struct {
	fw *frameWriter
	t  byte
}

func (d dataWriter) Write(p []byte) (int, error) {
	n := 0
	for len(p) > 0 {
		c := min(len(p), dataChunk)
		if err := d.fw.frame(d.t, p[:c]); err != nil {
			return n, err
		}
		n += c
		p = p[c:]
	}
	return n, nil
}

// copyData copies r to w as frames of type t and ends them with an empty
// frame.
func copyData(fw *frameWriter, t byte, r io.Reader) (int64, error) {
	buf := make([]byte, dataChunk)
	n, err := io.CopyBuffer(dataWriter{fw: fw, t: t}, r, buf)
	if err != nil {
		return n, err
	}
	return n, fw.frame(t, nil)
}

func unexpected(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}
