package daemon

import (
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

// migrationDir holds a migration's checkpoint images and CRIU work files.
func (d *Daemon) migrationDir(name string) string {
	return filepath.Join(d.cfg.RunDir, "migrate", name)
}

// migrateWorkDir is where CRIU writes a migration's logs (dump.log on the
// source, restore.log and lazy-pages.log on the target), kept until the
// next migration of the instance, like the snapshot logs beside it.
func (c *Config) migrateWorkDir(name string) string {
	return filepath.Join(c.RunDir, "criu", name, "migrate")
}

// dropMigrationDir removes a migration's files, or with KeepMigrationFiles
// moves them to RUN/migrate-kept/NAME-TIME for inspection, with a copy of
// CRIU's logs (the instance's own go with it when it leaves this host).
func (d *Daemon) dropMigrationDir(name string) {
	dir := d.migrationDir(name)
	if d.cfg.KeepMigrationFiles {
		kept := filepath.Join(d.cfg.RunDir, "migrate-kept", name+"-"+time.Now().Format("150405.000"))
		if os.MkdirAll(filepath.Dir(kept), 0o700) == nil && os.Rename(dir, kept) == nil {
			logs, _ := filepath.Glob(filepath.Join(d.cfg.migrateWorkDir(name), "*.log"))
			for _, l := range logs {
				if b, err := os.ReadFile(l); err == nil {
					_ = os.WriteFile(filepath.Join(kept, filepath.Base(l)), b, 0o600)
				}
			}
			return
		}
	}
	_ = os.RemoveAll(dir)
}

func toWire(i state.Instance) migration.Instance {
	return migration.Instance{Name: i.Name, Image: i.Image, Created: i.Created, Config: i.Config,
		Init: i.Init, Env: i.Env, Cwd: i.Cwd, StopSignal: i.StopSignal, OS: migration.OS(i.OS), Address: i.Address,
		IDMap: (*migration.IDMap)(i.IDMap), Type: i.Type}
}

func fromWire(w migration.Instance) state.Instance {
	return state.Instance{Name: w.Name, Image: w.Image, Created: w.Created, Config: w.Config,
		Init: w.Init, Env: w.Env, Cwd: w.Cwd, StopSignal: w.StopSignal, OS: state.OS(w.OS), Address: w.Address,
		IDMap: (*state.IDMap)(w.IDMap), Type: w.Type}
}
