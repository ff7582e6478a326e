package api

import (
	"errors"
	"io/fs"
	"testing"
)

func TestErrorf(t *testing.T) {
	err := Errorf(ErrConflict, "instance %q is busy: %w", "web1", fs.ErrExist)
	if got, want := err.Error(), `instance "web1" is busy: file already exists`; got != want {
		t.Errorf("message %q, want %q (the kind is not part of it)", got, want)
	}
	if !errors.Is(err, ErrConflict) || !errors.Is(err, fs.ErrExist) {
		t.Errorf("errors.Is misses the kind or the wrapped cause: %v", err)
	}
	if errors.Is(err, ErrNotFound) {
		t.Error("errors.Is finds another kind")
	}
}
