package daemon

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/vesselhost/vessel/internal/api"
	"github.com/vesselhost/vessel/internal/migration"
)

// TestMoveFailureMessage: a failed move's first line names who ended it,
// in which phase, and where the container is now; the detail follows and
// its kinds stay visible to errors.Is.
func TestMoveFailureMessage(t *testing.T) {
	here := sourceState{source: "alpha", target: "beta", running: true}
	criu := errors.New("checkpoint container f1: criu dump: operation failed: page-xfer: Unable to spice data: Broken pipe (criu/page-xfer.c:263)\ncriu log /run/criu/f1/migrate/dump.log (errors, then its end):\n...")
	for _, tc := range []struct {
		name  string
		f     moveFailure
		first string
	}{
		{"target gone", moveFailure{verb: "move", name: "f1", target: "beta", phase: movePhaseMemory, cause: causePeerGone, state: here.String(), err: criu},
			"beta went away during the memory copy; f1 keeps running on alpha"},
		{"target failed", moveFailure{verb: "move", name: "f1", target: "beta", phase: movePhaseRestore, cause: causePeerFailed, state: here.String(),
			err: fmt.Errorf("%w: restore failed", migration.ErrRemote)},
			"beta failed the move during the restore on the target; f1 keeps running on alpha"},
		{"refused", moveFailure{verb: "copy", name: "f1", target: "beta", phase: movePhaseConnect, cause: causePeerFailed, state: here.String(),
			err: fmt.Errorf("%w: f1 exists", migration.ErrRemote)},
			"beta refused the copy; f1 keeps running on alpha"},
		{"cancelled", moveFailure{verb: "move", name: "f1", target: "beta", phase: movePhasePrecopy, cause: causeCancelled, state: here.String(), err: context.Canceled},
			"the move of f1 to beta was cancelled during the disk pre-copy; f1 keeps running on alpha"},
		{"here", moveFailure{verb: "move", name: "f1", target: "beta", phase: movePhaseCheckpoint, cause: causeHere, state: here.String(), err: criu},
			"the move of f1 to beta failed during the checkpoint; f1 keeps running on alpha"},
	} {
		msg := tc.f.Error()
		first, rest, _ := strings.Cut(msg, "\n")
		if first != tc.first {
			t.Errorf("%s: first line %q, want %q", tc.name, first, tc.first)
		}
		if !strings.HasPrefix(rest, "detail: "+strings.SplitN(tc.f.err.Error(), "\n", 2)[0]) {
			t.Errorf("%s: detail not after the first line:\n%s", tc.name, msg)
		}
	}
	wrapped := error(&moveFailure{verb: "move", cause: causeHere, err: fmt.Errorf("x: %w", api.ErrConflict)})
	if !errors.Is(wrapped, api.ErrConflict) {
		t.Error("the detail's kind is hidden")
	}
}

// TestSourceState: the state a failure reports is what the failure's
// handling left, the worst fact first.
func TestSourceState(t *testing.T) {
	boom := errors.New("boom")
	for _, tc := range []struct {
		s    sourceState
		want string
	}{
		{sourceState{running: true}, "keeps running on alpha"},
		{sourceState{running: true, restarted: true}, "runs on alpha again (stopped for the move, started again)"},
		{sourceState{}, "is stopped on alpha"},
		{sourceState{restartErr: boom}, "is STOPPED on alpha: starting it again failed: boom"},
		{sourceState{running: true, thawErr: boom, linkErr: boom}, "is FROZEN on alpha: thawing it failed: boom"},
		{sourceState{running: true, linkErr: boom}, "runs on alpha, but cut off from the network: bringing its link up failed: boom"},
		{sourceState{running: true, unsettled: true}, "stays FROZEN on alpha until beta answers, then runs in exactly one place"},
		{sourceState{unsettled: true}, "stays stopped on alpha until beta answers, then runs in exactly one place"},
		{sourceState{committed: true}, "runs on beta"},
		{sourceState{committed: true, postCopy: true}, "resumed on beta before that and runs there, but may miss memory pages (--memory=copy avoids this trade-off)"},
	} {
		tc.s.source, tc.s.target = "alpha", "beta"
		if got := tc.s.String(); got != tc.want {
			t.Errorf("%+v: %q, want %q", tc.s, got, tc.want)
		}
	}
}

// TestMoveCauseOf: cancellation first, then the target's own report, then
// its going away; otherwise the failure is this host's.
func TestMoveCauseOf(t *testing.T) {
	live := context.Background()
	ended, cancel := context.WithCancel(live)
	cancel()
	remote := fmt.Errorf("%w: disk full", migration.ErrRemote)
	for _, tc := range []struct {
		ctx      context.Context
		err      error
		peerGone bool
		want     moveCause
	}{
		{ended, fmt.Errorf("send disk: %w", context.Canceled), true, causeCancelled},
		{live, context.Canceled, false, causeHere}, // not the operation's
		{live, remote, true, causePeerFailed},
		{live, errors.New("stream closed"), true, causePeerGone},
		{live, errors.New("criu dump failed"), false, causeHere},
	} {
		if got := moveCauseOf(tc.ctx, tc.err, tc.peerGone); got != tc.want {
			t.Errorf("%v (ctx err %v, peer gone %v): %d, want %d", tc.err, tc.ctx.Err(), tc.peerGone, got, tc.want)
		}
	}
}

// TestWithPeerReport: the target's report leads the error it caused here;
// anything else leaves the error alone.
func TestWithPeerReport(t *testing.T) {
	here := errors.New("store the memory pages: stream closed")
	report := fmt.Errorf("target could not store the disk: %w: image budget exceeded", migration.ErrRemote)
	got := withPeerReport(here, report)
	if !errors.Is(got, migration.ErrRemote) || !errors.Is(got, here) ||
		got.Error() != report.Error()+"\nhere: "+here.Error() {
		t.Errorf("report first: %v", got)
	}
	if got := withPeerReport(here, errors.New("stream closed")); got.Error() != here.Error() {
		t.Errorf("not a report: %v", got)
	}
	if got := withPeerReport(here, nil); got.Error() != here.Error() {
		t.Errorf("no report: %v", got)
	}
	if got := withPeerReport(report, report); got.Error() != report.Error() {
		t.Errorf("a report already: %v", got)
	}
}
