package daemon

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestKeyedMutex(t *testing.T) {
	var k keyedMutex
	ctx := context.Background()
	unlockA, err := k.Lock(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	// Another key is independent.
	unlockB, err := k.Lock(ctx, "b")
	if err != nil {
		t.Fatal(err)
	}
	unlockB()
	// The same key waits; a cancelled wait gives up cleanly.
	cctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if _, err := k.Lock(cctx, "a"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("second lock: %v", err)
	}
	unlockA()
	unlock, err := k.Lock(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	unlock()
	if len(k.m) != 0 {
		t.Fatalf("entries leaked: %v", k.m)
	}
}
