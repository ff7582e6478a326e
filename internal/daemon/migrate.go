package daemon

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/vesselhost/vessel/internal/migration"
	"github.com/vesselhost/vessel/internal/state"
)

// Migration tuning.
const (
	// precopyMaxIterations bounds the disk pre-copy passes while running.
	precopyMaxIterations = 6
	// precopyDoneBytes ends pre-copy once a pass moved less than this: the
	// last increment, sent while frozen, is then small.
	precopyDoneBytes = 4 << 20
	// StatusMigrating is an instance's busy status during a migration.
	StatusMigrating = "Migrating"
)

// migrationsDir holds an instance's migrations' checkpoint images, one
// directory per migration (newMigrationDir).
func (d *Daemon) migrationsDir(name string) string {
	return filepath.Join(d.cfg.migrationsRoot(), name)
}

// newMigrationDir makes the directory of one migration of name. Each has
// its own: a move's end can outlive the instance's lock (the target copies
// pre-copy memory in from its images, the source serves post-copy pages),
// and must not remove the files of the next move of the same instance,
// which may already have begun.
func (d *Daemon) newMigrationDir(name string) (string, error) {
	root := d.migrationsDir(name)
	for {
		if err := os.MkdirAll(root, 0o700); err != nil {
			return "", err
		}
		dir, err := os.MkdirTemp(root, "m")
		// The end of an earlier migration removes root once it is
		// empty: make it again.
		if !errors.Is(err, fs.ErrNotExist) {
			return dir, err
		}
	}
}

// migrateWorkDir is where CRIU writes a migration's logs (dump.log on the
// source, restore.log and lazy-pages.log on the target), kept until the
// next migration of the instance, like the snapshot logs beside it.
func (c *Config) migrateWorkDir(name string) string {
	return filepath.Join(c.RunDir, "criu", name, "migrate")
}

// dropMigrationDir removes one migration's files (dir, from
// newMigrationDir), or with KeepMigrationFiles moves them to
// RUN/migrate-kept/NAME-TIME for inspection, with a copy of CRIU's logs
// (the instance's own go with it when it leaves this host).
func (d *Daemon) dropMigrationDir(name, dir string) {
	// The instance's directory goes with its last migration's (it
	// stays while another one runs).
	defer func() { _ = os.Remove(filepath.Dir(dir)) }()
	if d.cfg.KeepMigrationFiles {
		kept := filepath.Join(d.cfg.RunDir, "migrate-kept", name+"-"+time.Now().Format("150405.000"))
		if os.MkdirAll(filepath.Dir(kept), 0o700) == nil && keepMigrationFiles(dir, kept) == nil {
			_ = os.RemoveAll(dir) // copied out of the tmpfs (migrate_tmpfs.go)
			copyCRIULogs(d.cfg.migrateWorkDir(name), kept)
			return
		}
	}
	_ = os.RemoveAll(dir)
}

// keepMigrationLogs copies CRIU's logs of name's migration (its work
// directory) to RUN/migrate-kept/NAME-TIME-logs with KeepMigrationFiles:
// a pre-copy target calls it once its memory is loaded, before a move
// back may reuse the work directory.
func (d *Daemon) keepMigrationLogs(name string) {
	if !d.cfg.KeepMigrationFiles {
		return
	}
	kept := filepath.Join(d.cfg.RunDir, "migrate-kept", name+"-"+time.Now().Format("150405.000")+"-logs")
	if os.MkdirAll(kept, 0o700) == nil {
		copyCRIULogs(d.cfg.migrateWorkDir(name), kept)
	}
}

// copyCRIULogs copies the *.log files of work into kept.
func copyCRIULogs(work, kept string) {
	logs, _ := filepath.Glob(filepath.Join(work, "*.log"))
	for _, l := range logs {
		if b, err := os.ReadFile(l); err == nil {
			_ = os.WriteFile(filepath.Join(kept, filepath.Base(l)), b, 0o600)
		}
	}
}

// dropMigrationDirs removes the files of every migration of name; the
// caller holds its lock and no migration of it runs (a settle after a
// crash, or the source copy of a moved instance going away).
func (d *Daemon) dropMigrationDirs(name string) {
	dirs, _ := os.ReadDir(d.migrationsDir(name))
	for _, e := range dirs {
		d.dropMigrationDir(name, filepath.Join(d.migrationsDir(name), e.Name()))
	}
	_ = os.Remove(d.migrationsDir(name))
}

func toWire(i state.Instance) migration.Instance {
	return migration.Instance{Name: i.Name, Image: i.Image, Created: i.Created, Config: i.Config,
		Init: i.Init, Env: i.Env, Cwd: i.Cwd, StopSignal: i.StopSignal, OS: migration.OS(i.OS), Address: i.Address,
		IDMap: (*migration.IDMap)(i.IDMap), Type: i.Type, NewIdentity: i.NewIdentity}
}

func fromWire(w migration.Instance) state.Instance {
	return state.Instance{Name: w.Name, Image: w.Image, Created: w.Created, Config: w.Config,
		Init: w.Init, Env: w.Env, Cwd: w.Cwd, StopSignal: w.StopSignal, OS: state.OS(w.OS), Address: w.Address,
		IDMap: (*state.IDMap)(w.IDMap), Type: w.Type, NewIdentity: w.NewIdentity}
}
