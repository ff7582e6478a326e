package state

import (
	"errors"
	"time"
)

// MigrationVersion is the format version of Migration records.
const MigrationVersion = 1

// Migration roles and phases (Migration.Role, Migration.Phase).
const (
	MigrationSource = "source"
	MigrationTarget = "target"
	// PhaseTransfer: the target has not been told to start the container.
	PhaseTransfer = "transfer"
	// PhaseRestoring: the target was told to start it; whether it runs
	// there can only be known by asking.
	PhaseRestoring = "restoring"
)

// Migration is the journal of a migration in flight on this host, kept in
// the same store (and changed in the same transactions) as the instance
// it moves. A daemon that crashed in the middle settles the migration from
// it at its next start, so the container ends up running in exactly one
// place:
//
//   - on the source, before the target was told to start the container,
//     the container resumes here; after that, the target is asked whether
//     it runs there: yes, the source copy goes; no, it resumes here; no
//     answer, it stays frozen and the question is asked again;
//   - on the target, an instance that was being received and is not
//     running is deleted (its source still has it); one that runs is kept.
type Migration struct {
	Version int `json:"version"`
	// Instance is the instance's name on this host (the key).
	Instance string `json:"instance"`
	// Role is MigrationSource or MigrationTarget.
	Role string `json:"role"`
	// Peer is the other host: its fingerprint on the source (to ask it),
	// its name on the target (for the logs).
	Peer string `json:"peer"`
	// Name is the instance's name on the target (the source's may differ).
	Name  string `json:"name"`
	Live  bool   `json:"live,omitempty"`
	Copy  bool   `json:"copy,omitempty"`  // a copy: the source copy always stays
	Start bool   `json:"start,omitempty"` // the container is to run on the target
	// Phase is PhaseTransfer until the target is told to start the
	// container, then PhaseRestoring.
	Phase string `json:"phase"`
	// PageServer says a lazy dump's page server was started, which holds
	// the container's processes until its client hangs up:
	// runtime.PageServerSocket (its socket closed with the daemon that
	// held it), or the TCP address an older vessel served it on.
	PageServer string `json:"page_server,omitempty"`
	// WasRunning: a cold move stopped the container; resuming restarts it.
	WasRunning bool      `json:"was_running,omitempty"`
	Started    time.Time `json:"started"`
}

// ListMigrations returns every migration journal, keyed by instance name.
func (s *Store) ListMigrations() (map[string]Migration, error) {
	recs, err := list[Migration](s, bucketMigrations)
	if err != nil {
		return nil, err
	}
	out := make(map[string]Migration, len(recs))
	for _, m := range recs {
		out[m.Instance] = m
	}
	return out, nil
}

// GetMigration returns an instance's migration journal, if it has one.
func (s *Store) GetMigration(name string) (m Migration, ok bool, err error) {
	err = s.View(func(tx *Tx) error {
		m, ok, err = tx.Migration(name)
		return err
	})
	return m, ok, err
}

// PutMigration records a migration journal in a transaction of its own.
func (s *Store) PutMigration(m Migration) error {
	return s.Update(func(tx *Tx) error { return tx.PutMigration(m) })
}

// DeleteMigration removes a migration journal in a transaction of its own.
func (s *Store) DeleteMigration(name string) error {
	return s.Update(func(tx *Tx) error { return tx.DeleteMigration(name) })
}

func isNotFound(err error) bool { return errors.Is(err, ErrNotFound) }
