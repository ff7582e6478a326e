package main

import (
	"io"
	"strings"
	"testing"
	"testing/iotest"
)

func TestDetachReader(t *testing.T) {
	for _, tc := range []struct {
		in, want string
		detached bool
	}{
		{"ls\n", "ls\n", false},
		{"echo\x01\x01x", "echo\x01x", false},
		{"a\x01bc", "a\x01bc", false},
		{"uname\n\x01qafter", "uname\n", true},
		{"\x01Q", "", true},
	} {
		for _, oneByte := range []bool{false, true} {
			var r io.Reader = strings.NewReader(tc.in)
			if oneByte {
				r = iotest.OneByteReader(r) // ctrl+a and q in separate reads
			}
			detached := false
			got, err := io.ReadAll(&detachReader{r: r, detach: func() { detached = true }})
			if err != nil || string(got) != tc.want || detached != tc.detached {
				t.Errorf("%q (one byte a read: %v): %q, detached %v, %v; want %q, %v", tc.in, oneByte, got, detached, err, tc.want, tc.detached)
			}
		}
	}
}
