package daemon

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/vesselhost/vessel/internal/api"
	"github.com/vesselhost/vessel/internal/migration"
)

// receiveMemoryPass stores pre-copy memory pass msg.Iteration in pre-N
// beside the images, linked to the pass before (CRIU's parent images; the
// target makes the links, the stream holds plain files only). Like the
// images, the passes are not synced: after a crash they are worthless.
func (m *migrationTarget) receiveMemoryPass(ctx context.Context, msg migration.Message) error {
	i := msg.Iteration
	switch {
	case m.hello.Memory != api.MemoryPrecopy:
		return fmt.Errorf("%w: a memory pass in memory mode %q", migration.ErrProtocol, m.hello.Memory)
	case i != m.memPasses:
		return fmt.Errorf("%w: memory pass %d after %d passes", migration.ErrProtocol, i, m.memPasses)
	case i >= precopyMemMaxPasses:
		return errorf(ErrInvalid, "more than %d memory passes", precopyMemMaxPasses)
	}
	if i == 1 {
		// The source runs its next pass while this one arrives.
		if err := m.injectFault(faultRecvMemoryPass); err != nil {
			return err
		}
	}
	st, err := m.nextStream(ctx, m.imagesCh)
	if err != nil {
		return err
	}
	defer st.Close()
	dir := passDir(filepath.Dir(m.images), i)
	n, err := migration.ReceiveDir(m.budget.reader(st), dir)
	if err != nil {
		return fmt.Errorf("receive memory pass %d: %w", i, err)
	}
	if i > 0 {
		if err := linkParent(dir, i-1); err != nil {
			return err
		}
	}
	m.memPasses++
	m.memPassBytes += n
	return m.sess.Send(migration.Message{Type: migration.MsgMemoryOK, Iteration: i, Bytes: n})
}

// linkParent makes dir's CRIU parent link to memory pass i (beside dir).
func linkParent(dir string, i int) error {
	if err := os.Symlink(filepath.Join("..", filepath.Base(passDir("", i))), filepath.Join(dir, "parent")); err != nil {
		return fmt.Errorf("link the parent images: %w", err)
	}
	return nil
}

// switchMemoryMode follows the source's --memory=auto from pre-copy to
// post-copy (it found its passes would not beat it): the passes go. The
// prepared restore stays: both restore lazily (lazyRestore).
func (m *migrationTarget) switchMemoryMode(ctx context.Context, msg migration.Message) error {
	if m.hello.Memory != api.MemoryPrecopy || msg.Memory != api.MemoryLazy {
		return fmt.Errorf("%w: memory mode %q to %q", migration.ErrProtocol, m.hello.Memory, msg.Memory)
	}
	for i := range m.memPasses {
		if err := os.RemoveAll(passDir(filepath.Dir(m.images), i)); err != nil {
			return err
		}
	}
	m.budget.give(m.memPassBytes)
	m.memPasses, m.memPassBytes = 0, 0
	m.hello.Memory = api.MemoryLazy
	// An early lazy-pages daemon would read the passes: one for the
	// source's page server takes its place.
	m.dropPreLazy()
	m.startPreLazy(ctx)
	return m.sess.Send(migration.Message{Type: migration.MsgMemoryOK, Iteration: -1})
}
