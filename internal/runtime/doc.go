// Package runtime runs system containers with runc, each under its own
// monitor process (vessel-shim, see internal/shim), so that containers keep
// running while the daemon restarts.
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
//
// The daemon drives runc directly (through go-runc) for everything but
// starting: state, signals, exec, checkpoint and delete.
package runtime
