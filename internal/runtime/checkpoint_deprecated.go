package runtime

import (
	"errors"
	"fmt"
	"path/filepath"

	"github.com/checkpoint-restore/go-criu/v7/rpc"
)

// PreparedCheckpoint is a CRIU service process with its dump request
// ready: Run sends the request, Close releases what Run did not.
//
// Deprecated: use a Checkpoint session (NewCheckpoint), which also
// captures the page files and runs the lazy dump's page server (removed
// once the daemon uses Checkpoint sessions).
type PreparedCheckpoint struct {
	id       string
	work     string
	svc      *criuService
	req      *rpc.CriuOpts
	fallback func() error // runc checkpoint, when a direct dump is not possible
}

// PrepareCheckpoint gets a checkpoint of a running container ready, so
// that Run only dumps. With LazyPages, Run returns when the page server
// (at PageServer) has ended; StatusFile gets a '\0' when it is ready.
//
// Deprecated: use NewCheckpoint (removed once the daemon uses Checkpoint
// sessions).
func (r *Runtime) PrepareCheckpoint(id string, o CheckpointOptions) (*PreparedCheckpoint, error) {
	if err := r.checkCheckpoint(id, &o); err != nil {
		return nil, err
	}
	var lazy *lazyOpts
	if o.LazyPages {
		lazy = &lazyOpts{pageServer: o.PageServer, status: o.StatusFile}
	}
	pc := &PreparedCheckpoint{id: id, work: o.WorkPath}
	st, err := r.readRuncState(id)
	if err == nil {
		pc.req, err = dumpRequest(st, o, lazy)
	}
	if errors.Is(err, errNoDirectDump) {
		r.cfg.Log.Debug("runc checkpoint instead of a direct dump", "id", id, "err", err)
		pc.fallback = func() error { return r.runcCheckpoint(id, o, lazy) }
		return pc, nil
	}
	if err == nil {
		pc.svc, err = startCriuService(r.cfg.Criu, o.ImagePath, o.WorkPath)
	}
	if err != nil {
		return nil, fmt.Errorf("checkpoint %s: %w", id, err)
	}
	return pc, nil
}

// Run dumps the container. It can run once.
//
// Deprecated: see PrepareCheckpoint.
func (pc *PreparedCheckpoint) Run() error {
	if pc.fallback != nil {
		return pc.fallback()
	}
	if pc.svc == nil {
		return fmt.Errorf("checkpoint %s: already run", pc.id)
	}
	err := pc.svc.dump(pc.req)
	pc.svc = nil
	if err != nil {
		return fmt.Errorf("%w %s: criu dump: %w%s", ErrCheckpoint, pc.id, err, criuLogErrors(filepath.Join(pc.work, "dump.log")))
	}
	return nil
}

// Close stops a CRIU service that never dumped and closes the directories.
//
// Deprecated: see PrepareCheckpoint.
func (pc *PreparedCheckpoint) Close() {
	if pc.svc != nil {
		_ = pc.svc.close()
		pc.svc = nil
	}
}
