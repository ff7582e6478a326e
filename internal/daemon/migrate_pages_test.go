package daemon

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/vesselhost/vessel/internal/migration"
)

func TestPageLinksParkThenClaim(t *testing.T) {
	var p pageLinks
	a, b := net.Pipe()
	defer b.Close()
	tok := migration.NewPageToken()
	if err := p.park(tok, "alpha", a, time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := p.park(tok, "alpha", a, time.Minute); err == nil {
		t.Fatal("a second link with the same token was parked")
	}
	got, err := p.claim(context.Background(), tok, "alpha")
	if err != nil || got != a {
		t.Fatalf("claim = %v, %v; want the parked link", got, err)
	}
	if len(p.m) != 0 {
		t.Fatalf("%d links still parked after the claim", len(p.m))
	}
}

func TestPageLinksClaimWaits(t *testing.T) {
	var p pageLinks
	a, b := net.Pipe()
	defer b.Close()
	tok := migration.NewPageToken()
	go func() {
		time.Sleep(10 * time.Millisecond)
		_ = p.park(tok, "alpha", a, time.Minute)
	}()
	got, err := p.claim(context.Background(), tok, "alpha")
	if err != nil || got != a {
		t.Fatalf("claim = %v, %v; want the link parked meanwhile", got, err)
	}
}

func TestPageLinksOtherPeerRefused(t *testing.T) {
	var p pageLinks
	a, b := net.Pipe()
	defer b.Close()
	tok := migration.NewPageToken()
	if err := p.park(tok, "mallory", a, time.Minute); err != nil {
		t.Fatal(err)
	}
	if _, err := p.claim(context.Background(), tok, "alpha"); err == nil {
		t.Fatal("a link from another peer was handed to the move")
	}
	// The refused link is closed.
	_ = b.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := b.Read(make([]byte, 1)); err == nil {
		t.Fatal("the refused link is still open")
	}
}

func TestPageLinksUnclaimedClosed(t *testing.T) {
	var p pageLinks
	a, b := net.Pipe()
	defer b.Close()
	if err := p.park(migration.NewPageToken(), "alpha", a, time.Millisecond); err != nil {
		t.Fatal(err)
	}
	_ = b.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := b.Read(make([]byte, 1)); err == nil {
		t.Fatal("an unclaimed link is still open")
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.m) != 0 {
		t.Fatalf("%d links still parked", len(p.m))
	}
}

func TestPageLinksClaimEnds(t *testing.T) {
	var p pageLinks
	if _, err := p.claim(context.Background(), "", "alpha"); err == nil {
		t.Fatal("a claim without a token succeeded")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := p.claim(ctx, migration.NewPageToken(), "alpha"); err == nil {
		t.Fatal("a cancelled claim succeeded")
	}
	if len(p.m) != 0 {
		t.Fatalf("%d entries left after the failed claims", len(p.m))
	}
}
