#!/usr/bin/env bash
# demo.sh — the tour of vessel on embedded defaults (run by `make demo`).
# Starts vesseld if it is not running, then walks through a container's
# life: launch from the built-in image, list, exec, address and distro,
# console log, snapshots (a change rolled back; memory state), copy, stop,
# delete.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=$PWD/bin
export PATH=$BIN:/usr/local/sbin:$PATH
LOG=${VESSEL_LOG:-/var/log/vessel/vesseld.log}
NAME=${DEMO_NAME:-demo1}

bold() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
run() { printf '\033[36m$ %s\033[0m\n' "$*"; "$@"; }

start_daemon() {
	if vessel info >/dev/null 2>&1; then
		echo "vesseld is already running"
		return
	fi
	mkdir -p "$(dirname "$LOG")"
	echo "starting vesseld (log: $LOG)"
	setsid "$BIN/vesseld" >>"$LOG" 2>&1 </dev/null &
	for _ in $(seq 1 300); do
		vessel info >/dev/null 2>&1 && return
		sleep 0.1
	done
	echo "vesseld did not come up; last log lines:" >&2
	tail -n 20 "$LOG" >&2
	exit 1
}

bold "vesseld"
start_daemon
# A leftover from an interrupted tour is removed first.
vessel delete --force "$NAME" >/dev/null 2>&1 || true
vessel delete --force "$NAME-copy" >/dev/null 2>&1 || true

bold "The host: distribution, kernel, cgroups, storage, runc and CRIU"
run vessel info

bold "Images: the built-in busybox image needs no network"
run vessel image list

bold "Launch a system container (btrfs clone of the image, own netns, cgroup, init)"
start=$(date +%s%N)
run vessel launch busybox "$NAME"
echo "launched in $(( ($(date +%s%N) - start) / 1000000 )) ms"

bold "List: status, address and distribution"
run vessel list

bold "Exec into it: its own init as PID 1, hostname, distro, address"
run vessel exec "$NAME" -- ps -o pid,args
run vessel exec "$NAME" -- hostname
run vessel exec "$NAME" -- cat /etc/os-release
run vessel exec "$NAME" -- ip -4 addr show eth0
ip=$(vessel exec "$NAME" -- ip -4 -o addr show eth0 | awk '{sub("/.*", "", $4); print $4}')
echo "the host reaches it (busybox's ping needs a raw socket, which an unprivileged container's root may not open):"
run busybox ping -c 1 -W 2 "$ip"
echo "its root is not the host's: ids 0-65535 map to a block of root's subordinate ids"
run vessel exec "$NAME" -- cat /proc/self/uid_map
echo "exit codes propagate:"
set +e
vessel exec "$NAME" -- sh -c 'exit 3'
echo "vessel exec ... 'exit 3' returned $?"
set -e

bold "Live usage from its cgroup"
run vessel info "$NAME"

bold "Console log (init's output)"
run vessel console "$NAME"

bold "Snapshot, change, roll back (the container is frozen only for a btrfs ioctl)"
run vessel exec "$NAME" -- sh -c 'echo "release 1" > /root/app.conf'
run vessel snapshot create "$NAME" before-upgrade
run vessel exec "$NAME" -- sh -c 'echo "release 2 (broken)" > /root/app.conf; rm /etc/hostname'
run vessel exec "$NAME" -- cat /root/app.conf
run vessel snapshot list "$NAME"
run vessel snapshot restore "$NAME" before-upgrade --force
run vessel exec "$NAME" -- cat /root/app.conf /etc/hostname

bold "Stateful snapshot: memory too; a counter continues where it was"
run vessel exec "$NAME" -- sh -c "setsid sh -c 'i=0; while :; do i=\$((i+1)); echo \$i > /root/count; sleep 0.1; done' </dev/null >/dev/null 2>&1 &"
sleep 1
run vessel snapshot create "$NAME" live --stateful
echo "count at the snapshot: $(cat "${VESSEL_ROOT:-/var/lib/vessel}/storage-pools/default/snapshots/$NAME/live/root/count" 2>/dev/null || echo '?')"
sleep 2
echo "count now: $(vessel exec "$NAME" -- cat /root/count)"
run vessel snapshot restore "$NAME" live --stateful --force
echo "count after restore: $(vessel exec "$NAME" -- cat /root/count)"
run vessel copy "$NAME/before-upgrade" "$NAME-copy"
run vessel list
run vessel delete "$NAME-copy"

bold "Stop (init's shutdown path) and delete"
run vessel stop "$NAME"
run vessel list
run vessel console "$NAME"
run vessel delete "$NAME"
run vessel list

bold "Storage pool"
run vessel storage info

bold "Two hosts on this machine: alpha and beta"
echo "(each a vesseld in its own network namespace with its own pool, bridge and"
echo " HTTPS API; one shared L2 segment; trusted as each other's peers and"
echo " registered as remotes of this CLI)"
scripts/testhosts down >/dev/null 2>&1 || true
run scripts/testhosts up
trap 'scripts/testhosts down >/dev/null 2>&1 || true' EXIT
run vessel remote list
run vessel launch busybox alpha:mover
run vessel exec alpha:mover -- sh -c "setsid sh -c 'i=0; while :; do i=\$((i+1)); echo \$i > /root/count; usleep 50000; done' </dev/null >/dev/null 2>&1 &"
sleep 1

bold "Live migration alpha -> beta: disk pre-copy, CRIU checkpoint (--memory=auto copies a container this small while frozen)"
echo "count before: $(vessel exec alpha:mover -- cat /root/count)"
run vessel move alpha:mover beta: --live --timing
run vessel list beta:
echo "count after (it kept counting, same address): $(vessel exec beta:mover -- cat /root/count)"

bold "And back with post-copy memory (--memory=lazy: pages follow after the resume)"
run vessel move beta:mover alpha: --live --memory=lazy --timing
echo "count: $(vessel exec alpha:mover -- cat /root/count)"
run vessel delete --force alpha:mover
run scripts/testhosts down
trap - EXIT

bold "Tour done. vesseld keeps running; stop it with: kill \$(cat /var/lib/vessel/vesseld.pid)"
