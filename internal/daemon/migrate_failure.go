package daemon

import (
	"context"
	"errors"
	"fmt"

	"github.com/vesselhost/vessel/internal/migration"
)

// A failed move's error says first what happened, in which phase, and
// where the container is now ("beta went away during the memory copy; f1
// keeps running on alpha"); what failed in detail (a CRIU log, a
// connection's error) follows on the next lines. The source knows its
// phase (migrationSource.phase) and whether the session's peer went away
// (migration.Session.PeerGone); the container's state is read after the
// failure's cleanup, from what that cleanup did.

// Phases of a move from the source, as a failure names them.
const (
	movePhasePrepare       = "preparation"
	movePhaseStop          = "stop"
	movePhaseConnect       = "connection"
	movePhaseSnapshots     = "snapshot transfer"
	movePhaseDisk          = "disk transfer"
	movePhaseStartTarget   = "start on the target"
	movePhasePrecopy       = "disk pre-copy"
	movePhaseDumpPrepare   = "checkpoint preparation"
	movePhaseMemoryPrecopy = "memory pre-copy"
	movePhaseFreeze        = "freeze"
	movePhaseMemory        = "memory copy" // a copy-mode dump: the pages stream to the target
	movePhaseCheckpoint    = "checkpoint"  // a lazy dump: everything but the pages
	movePhaseFinalDisk     = "final disk increment"
	movePhaseImages        = "image transfer"
	movePhaseRestore       = "restore on the target"
	movePhasePostcopy      = "post-copy"
)

// moveCause is who or what ended a move.
type moveCause int

const (
	// causeHere: something failed on this host.
	causeHere moveCause = iota
	// causePeerGone: the target went away (its daemon died, the
	// connection broke or stopped answering).
	causePeerGone
	// causePeerFailed: the target reported a failure (or refused).
	causePeerFailed
	// causeCancelled: the operation was cancelled.
	causeCancelled
)

// moveFailure is the error of a failed move (or copy); errors.Is and As
// see the detail's kinds through it.
type moveFailure struct {
	verb   string // "move" or "copy"
	name   string // the instance
	target string // the target host's name
	phase  string // movePhase...
	cause  moveCause
	// state is the container's state now, after the name: "keeps running
	// on alpha".
	state string
	err   error // the detail
}

func (f *moveFailure) Error() string {
	var head string
	switch {
	case f.cause == causePeerGone:
		head = fmt.Sprintf("%s went away during the %s", f.target, f.phase)
	case f.cause == causePeerFailed && f.phase == movePhaseConnect:
		head = fmt.Sprintf("%s refused the %s", f.target, f.verb)
	case f.cause == causePeerFailed:
		head = fmt.Sprintf("%s failed the %s during the %s", f.target, f.verb, f.phase)
	case f.cause == causeCancelled:
		head = fmt.Sprintf("the %s of %s to %s was cancelled during the %s", f.verb, f.name, f.target, f.phase)
	default:
		head = fmt.Sprintf("the %s of %s to %s failed during the %s", f.verb, f.name, f.target, f.phase)
	}
	return fmt.Sprintf("%s; %s %s\ndetail: %v", head, f.name, f.state, f.err)
}

func (f *moveFailure) Unwrap() error { return f.err }

// moveCauseOf says who ended a move that failed with err: the operation's
// cancellation (ctx ended), an error the target reported, the target
// going away (peerGone), or this host.
func moveCauseOf(ctx context.Context, err error, peerGone bool) moveCause {
	switch {
	case ctx.Err() != nil && errors.Is(err, context.Canceled):
		return causeCancelled
	case errors.Is(err, migration.ErrRemote):
		return causePeerFailed
	case peerGone:
		return causePeerGone
	}
	return causeHere
}

// withPeerReport returns err, led by report if that is an error the
// target reported (read by a step running beside the one that failed with
// err, or left unread when the target closed): err is then only the
// report's consequence here.
func withPeerReport(err, report error) error {
	if errors.Is(err, migration.ErrRemote) || !errors.Is(report, migration.ErrRemote) {
		return err
	}
	return fmt.Errorf("%w\nhere: %w", report, err)
}

// sourceState is what became of the source's container after a move
// failed: the facts the failure's handling left behind.
type sourceState struct {
	source, target string
	committed      bool  // it runs on the target (the source copy is gone)
	postCopy       bool  // committed, but its memory did not all arrive
	unsettled      bool  // nobody can tell yet where it runs: frozen (or stopped) here
	running        bool  // its processes exist here
	thawErr        error // unfreezing it failed
	linkErr        error // bringing its network back failed
	restarted      bool  // a cold move stopped it and started it again
	restartErr     error // ... or failed to
}

// String says where the container is, after its name.
func (s sourceState) String() string {
	switch {
	case s.committed && s.postCopy:
		return fmt.Sprintf("resumed on %s before that and runs there, but may miss memory pages (--memory=copy avoids this trade-off)", s.target)
	case s.committed:
		return "runs on " + s.target
	case s.unsettled && !s.running:
		// A cold move's: stopped before the transfer.
		return fmt.Sprintf("stays stopped on %s until %s answers, then runs in exactly one place", s.source, s.target)
	case s.unsettled:
		return fmt.Sprintf("stays FROZEN on %s until %s answers, then runs in exactly one place", s.source, s.target)
	case s.running && s.thawErr != nil:
		return fmt.Sprintf("is FROZEN on %s: thawing it failed: %v", s.source, s.thawErr)
	case !s.running && s.restartErr != nil:
		return fmt.Sprintf("is STOPPED on %s: starting it again failed: %v", s.source, s.restartErr)
	case !s.running:
		return "is stopped on " + s.source
	case s.linkErr != nil:
		return fmt.Sprintf("runs on %s, but cut off from the network: bringing its link up failed: %v", s.source, s.linkErr)
	case s.restarted:
		return fmt.Sprintf("runs on %s again (stopped for the move, started again)", s.source)
	}
	return "keeps running on " + s.source
}

// failure turns a failed move's error into a moveFailure: cause, phase
// and the container's state, read now (after cleanup). nil stays nil.
func (m *migrationSource) failure(ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	peerGone := false
	if m.sess != nil {
		// The session has ended (closed by the deferred Close, if not
		// before). A target that fails sends its error and closes: its
		// error, if unread, is the cause, not its going away.
		if rerr := m.sess.Reported(); rerr != nil {
			err = withPeerReport(err, rerr)
		} else {
			peerGone = m.sess.PeerGone()
		}
	}
	verb := "move"
	if m.req.Copy {
		verb = "copy"
	}
	return &moveFailure{verb: verb, name: m.name, target: m.target, phase: m.phase,
		cause: moveCauseOf(ctx, err, peerGone), state: m.stateAfter().String(), err: err}
}

// stateAfter reads the container's state after a failed move.
func (m *migrationSource) stateAfter() sourceState {
	return sourceState{source: m.d.cfg.Name, target: m.target, committed: m.committed,
		postCopy: m.committed && m.phase == movePhasePostcopy, unsettled: m.unsettled,
		running: m.inst.live() != nil, thawErr: m.thawErr, linkErr: m.linkErr,
		restarted: m.restarted, restartErr: m.restartErr}
}
