// Package testutil holds small helpers shared by the tests of several
// packages.
package testutil

import (
	"bytes"
	"sync"
)

// SyncBuffer is a bytes.Buffer safe for one writer and concurrent readers:
// a test reads what a process writes while it runs.
type SyncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

// Write implements io.Writer.
func (b *SyncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String returns what was written so far.
func (b *SyncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
