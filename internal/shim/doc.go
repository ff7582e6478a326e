// Package shim is the per-container monitor process, vessel-shim.
//
// The daemon never is the parent of a container, so containers outlive
// daemon restarts. For each container it starts one shim in a new session
// with /dev/null as stdio and a pipe on fd 3 (ReportFd). The shim:
//
//  1. reads its Config from <state-dir>/shim.json (the only argument);
//  2. becomes a child subreaper, so the container's init, which runc leaves
//     behind when "runc run --detach" returns, is re-parented to it;
//  3. gives the container two pipes as stdout and stderr (stdin is
//     /dev/null) and copies them into the console log, rotated at LogMax;
//  4. runs "runc run --detach" (ActionCreate), or for a restore
//     (ActionRestore) starts "criu swrk", reports {"criu_pid":N} and takes
//     init's pid from the daemon, which drives CRIU (RestoreConfig); then
//     writes a Report, {"init_pid":N} or
//     {"error":"..."}, on fd 3, then closes it; on failure it force-deletes
//     whatever runc left and exits 1;
//  5. reaps children until init exits, writes exit.json (ExitRecord),
//     drains the log pipes (EOF once every process of the container is gone:
//     the kernel kills a pid namespace whose init dies) and exits 0.
//
// Vocabulary: the state directory is <StateDir>/<id>, holding ConfigFile,
// ShimPidFile, InitPidFile, ExitFile, RuncLogFile and, by default, the
// console log DefaultLogFile. The shim ignores SIGINT, SIGTERM, SIGHUP and
// SIGPIPE; only SIGKILL stops it.
package shim
