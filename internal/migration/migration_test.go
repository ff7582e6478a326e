package migration

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// pair returns both ends of a session over an in-memory connection.
func pair(t *testing.T) (*Session, *Session) {
	t.Helper()
	a, b := net.Pipe()
	srv := make(chan *Session, 1)
	go func() {
		s, err := Server(context.Background(), b)
		if err != nil {
			t.Error(err)
		}
		srv <- s
	}()
	c, err := Client(a)
	if err != nil {
		t.Fatal(err)
	}
	// The server accepts the control stream once something is sent on it.
	if err := c.Send(Hello{Version: Version, Source: "alpha"}); err != nil {
		t.Fatal(err)
	}
	s := <-srv
	t.Cleanup(func() { c.Close(); s.Close() })
	var h Hello
	if err := s.Recv(context.Background(), &h); err != nil || h.Source != "alpha" || h.Version != Version {
		t.Fatalf("hello: %+v %v", h, err)
	}
	return c, s
}

func TestSessionMessagesAndStreams(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, s := pair(t)

	// A typed data stream carries its header, then its bytes.
	go func() {
		st, err := c.OpenStream(StreamHeader{Kind: StreamPage, Name: "pages-1.img"})
		if err != nil {
			t.Error(err)
			return
		}
		_, _ = st.Write([]byte("page data"))
		st.Close()
	}()
	st, h, err := s.AcceptStream(ctx)
	if err != nil || h.Kind != StreamPage || h.Name != "pages-1.img" {
		t.Fatalf("accept: %+v %v", h, err)
	}
	b, _ := io.ReadAll(st)
	if string(b) != "page data" {
		t.Fatalf("stream data %q", b)
	}

	// Control messages both ways; a peer's error arrives as ErrRemote.
	if err := s.Send(Message{Type: MsgDiskSynced, Bytes: 42}); err != nil {
		t.Fatal(err)
	}
	if m, err := c.Expect(ctx, MsgDiskSynced); err != nil || m.Bytes != 42 {
		t.Fatalf("expect: %+v %v", m, err)
	}
	s.SendError(errors.New("disk full"))
	if _, err := c.Expect(ctx, MsgResumed); !errors.Is(err, ErrRemote) {
		t.Fatalf("peer error: %v", err)
	}
	if err := s.Send(Message{Type: MsgCommit}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Expect(ctx, MsgResumed); !errors.Is(err, ErrProtocol) {
		t.Fatalf("out of order message: %v", err)
	}

	// A vanished peer ends Recv and closes the session.
	s.Close()
	var m Message
	if err := c.Recv(ctx, &m); err == nil {
		t.Fatal("Recv after the peer closed succeeded")
	}
	select {
	case <-c.Closed():
	case <-ctx.Done():
		t.Fatal("session not closed after the peer went away")
	}
	if !c.PeerGone() || s.PeerGone() {
		t.Fatalf("peer gone: %v at the end left alone, %v at the end that closed", c.PeerGone(), s.PeerGone())
	}
	c.Close() // after the fact: the peer stays the cause
	if !c.PeerGone() {
		t.Fatal("closing a session the peer ended hides that it went away")
	}
}

// TestPeerGoneNotOnOwnClose: a session this end closes, itself or by
// Recv's ended context, is not one whose peer went away.
func TestPeerGoneNotOnOwnClose(t *testing.T) {
	c, _ := pair(t)
	if c.PeerGone() {
		t.Fatal("peer gone on a live session")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var m Message
	if err := c.Recv(ctx, &m); !errors.Is(err, context.Canceled) {
		t.Fatalf("Recv with an ended context: %v", err)
	}
	<-c.Closed()
	if c.PeerGone() {
		t.Fatal("peer gone after this end closed the session")
	}
}

func TestDirRoundTrip(t *testing.T) {
	src, dst := t.TempDir(), filepath.Join(t.TempDir(), "out")
	// A file larger than SendDir's read buffer, read in pieces, and an
	// empty one.
	big := make([]byte, 3*copyFileBuffer+123)
	for i := range big {
		big[i] = byte(i*7 + i/4096)
	}
	files := map[string]string{"core-1.img": "core", "pstree.img": "tree", "pages-1.img": string(big), "empty.img": ""}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(src, name), []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(src, "subdir"), 0o700); err != nil {
		t.Fatal(err)
	}
	r, w := io.Pipe()
	go func() {
		_, err := SendDir(w, src)
		w.CloseWithError(err)
	}()
	n, err := ReceiveDir(r, dst)
	if err != nil || n != int64(8+len(big)) {
		t.Fatalf("ReceiveDir = %d, %v", n, err)
	}
	for name, data := range files {
		if b, err := os.ReadFile(filepath.Join(dst, name)); err != nil || string(b) != data {
			t.Fatalf("%s: %d bytes, %v; want %d", name, len(b), err, len(data))
		}
	}
	if _, err := os.Stat(filepath.Join(dst, "subdir")); err == nil {
		t.Fatal("a directory travelled in an image stream")
	}
}

// TestCopyFileShorter: a file shorter than its header said fails the
// stream instead of leaving the tar short.
func TestCopyFileShorter(t *testing.T) {
	path := filepath.Join(t.TempDir(), "core-1.img")
	if err := os.WriteFile(path, []byte("core"), 0o600); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	n, err := copyFile(&out, path, 10, make([]byte, 3))
	if !errors.Is(err, io.ErrUnexpectedEOF) || n != 4 || out.String() != "core" {
		t.Fatalf("copyFile = %d, %v (%q)", n, err, out.String())
	}
}

// TestMessageTooLong: a control message past MaxMessage is refused rather
// than buffered.
func TestMessageTooLong(t *testing.T) {
	c, s := pair(t)
	go func() {
		_ = c.Send(Message{Type: MsgError, Error: string(make([]byte, MaxMessage+1024))})
	}()
	var m Message
	err := s.Recv(context.Background(), &m)
	if !errors.Is(err, ErrProtocol) {
		t.Fatalf("got %v, want ErrProtocol", err)
	}
}

// TestReported: the error a peer sent just before it closed is found in
// what was left unread; nothing is read from a live session.
func TestReported(t *testing.T) {
	c, s := pair(t)
	if err := c.Reported(); err != nil {
		t.Fatalf("live session: %v", err)
	}
	if err := s.Send(Message{Type: MsgDiskSynced}); err != nil {
		t.Fatal(err)
	}
	s.SendError(errors.New("image budget exceeded"))
	s.Close()
	<-c.Closed()
	err := c.Reported()
	if !errors.Is(err, ErrRemote) || !strings.Contains(err.Error(), "image budget exceeded") {
		t.Fatalf("reported: %v", err)
	}
	if err := c.Reported(); err != nil {
		t.Fatalf("reported twice: %v", err)
	}
}
