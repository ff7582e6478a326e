package sparse

import (
	"bytes"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// TestCopy: the file reads back as the stream was, whatever the pattern
// of data and zeros and the reads' sizes; zero blocks take no space.
func TestCopy(t *testing.T) {
	data := func(n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(1 + i%251)
		}
		return b
	}
	big := 64 * Block
	cases := map[string][]byte{
		"empty":                          nil,
		"data only":                      data(3*Block + 17),
		"zeros only":                     make([]byte, 5*bufSize+Block),
		"ends in a hole":                 append(data(Block), make([]byte, 3*Block)...),
		"zero block, data after":         append(make([]byte, 2*Block), data(Block+1)...),
		"zero tail shorter than a block": append(data(2*Block), make([]byte, 100)...),
		"a zero byte run inside a block": append(append(data(100), make([]byte, Block)...), data(100)...),
	}
	mixed := make([]byte, 0, 3*bufSize)
	rng := rand.New(rand.NewPCG(1, 2))
	for len(mixed) < 3*bufSize {
		if rng.IntN(2) == 0 {
			mixed = append(mixed, make([]byte, rng.IntN(big))...)
		} else {
			mixed = append(mixed, data(rng.IntN(big))...)
		}
	}
	cases["mixed, across reads"] = mixed
	dir := t.TempDir()
	for name, want := range cases {
		t.Run(name, func(t *testing.T) {
			p := filepath.Join(dir, filepath.Base(t.Name()))
			f, err := os.OpenFile(p, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
			if err != nil {
				t.Fatal(err)
			}
			// Small reads: a chunk boundary falls anywhere.
			n, err := Copy(f, io.LimitReader(&slowReader{b: want}, int64(len(want))))
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil || n != int64(len(want)) {
				t.Fatalf("copied %d of %d: %v", n, len(want), err)
			}
			got, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("content differs (%d bytes, want %d)", len(got), len(want))
			}
		})
	}
	// Space: a file of zeros holds no blocks (where the filesystem has
	// holes, as tmpfs, ext4 and btrfs do).
	var st unix.Stat_t
	if err := unix.Stat(filepath.Join(dir, "zeros_only"), &st); err != nil {
		t.Fatal(err)
	}
	if st.Size != 5*bufSize+Block || st.Blocks != 0 {
		t.Errorf("zeros only: size %d, %d blocks allocated, want none", st.Size, st.Blocks)
	}
}

// slowReader returns at most 777 bytes a read.
type slowReader struct{ b []byte }

func (r *slowReader) Read(p []byte) (int, error) {
	if len(r.b) == 0 {
		return 0, io.EOF
	}
	n := copy(p[:min(len(p), 777)], r.b)
	r.b = r.b[n:]
	return n, nil
}
