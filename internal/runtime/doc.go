// Package runtime runs system containers with runc, each under its own
// monitor process (vessel-shim, see internal/shim), so that containers keep
// running while the daemon restarts, and checkpoints and restores them
// with CRIU.
//
// Vocabulary:
//
//   - Bundle: a directory holding an OCI config.json (see GenerateSpec and
//     WriteBundle). Its rootfs is referenced by absolute path.
//   - Shim: the per-container monitor. It is the container init's parent
//     (a child subreaper), keeps its console log and records its exit.
//   - State directory: StateDir/<id>, the shim's files (config, pids,
//     exit record, runc's log and by default the console log).
//   - Init: the container's first process, pid 1 in its pid namespace.
//   - Exit: how init ended, recorded by the shim and delivered by Watch.
//   - Checkpoint session: one CRIU dump of a running container (type
//     Checkpoint), used alike by stateful snapshots and live migrations.
//     NewCheckpoint prepares it while the container runs; Run is all that
//     happens in the frozen window; Abort ends it in any state.
//   - Direct dump: a dump vessel sends to CRIU's RPC service itself, with
//     the request runc would build from its state file; `runc checkpoint`
//     is the fallback for a state it does not understand.
//   - Page capture: the memory page files taken from CRIU while it writes
//     them, into an imgstream.Sink (CheckpointOptions.Pages).
//   - Lazy dump: a dump that leaves the memory pages to CRIU's page server
//     (post-copy); the restore's lazy-pages daemon (StartLazyPages) fetches
//     them. The page server holds the container's tasks until it ends.
//
// Besides starting and restoring (through the shim), the runtime drives
// runc directly (through go-runc): state, signals, exec, delete, and
// `runc checkpoint` where a direct dump is not possible.
package runtime
