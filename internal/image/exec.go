package image

import (
	"context"
	"io"
	"os/exec"
	"sync"
	"time"
)

// stderrLimit is how much of an external command's stderr is kept for its
// error message: the end, where the reason usually is.
const stderrLimit = 8 << 10

// waitDelay bounds how long a finished or cancelled command's I/O may linger.
const waitDelay = 10 * time.Second

// runCommand runs name with args, feeding it stdin and copying its stdout to
// stdout (either may be nil). A failure is wrapped with the command's stderr.
func runCommand(ctx context.Context, stdin io.Reader, stdout io.Writer, name string, args ...string) error {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Stdin = stdin
	cmd.Stdout = stdout
	var stderr tailBuffer
	cmd.Stderr = &stderr
	cmd.WaitDelay = waitDelay
	if err := cmd.Run(); err != nil {
		return toolError(name, err, stderr.String())
	}
	return nil
}

// tailBuffer is an io.Writer keeping the last stderrLimit bytes written. It
// is safe for concurrent use.
type tailBuffer struct {
	mu  sync.Mutex
	buf []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if over := len(t.buf) - stderrLimit; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	return len(p), nil
}

// String returns the kept bytes.
func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.buf)
}
