#!/usr/bin/env python3
"""Where CRIU's time goes in the moves bench/migrate kept.

Run a benchmark with CRIU's logs kept, e.g. a same-run A/B of two builds:

  VESSEL_KEEP_LOGS=DIR VESSEL_KEEP_MIGRATION_FILES=1 \\
      go run ./bench/migrate -n 20 -sizes 0 -modes copy -criu-b /path/to/criu
  scripts/criu-log-profile.py DIR

For the dump and the restore logs of each container (mig0: the default
criu; mig0b: -criu-b's; any other NAME-dump.log and NAME-restore.log as one
group), it prints each step's median ms over the moves
(CRIU's -v4 timestamps, split at the marker lines below) and the logs'
totals, paired in time order when both containers are there.
"""
import glob, os, re, statistics, sys

DUMP = [
 ("start (opts, cg-prop, criu's cgroups)", r"^"),
 ("freeze+seize+collect", r"freezing cgroup|Detected cgroup V"),
 ("mounts parse+tree", r"type \S+ source \S+ mnt_id"),
 ("sockets collect (netns)", r"Switching to .*net for collecting sockets"),
 ("task init: parasite, files, pages", r"Dumping task \(pid: \d+ comm"),
 ("task init: core+cgroups+mm", r"Dumping core \(pid"),
 ("other tasks (whole)", r"Dumping task \(pid: \d+ comm"),
 ("mountpoints dump (tmpfs archives)", r"mnt: Dumping mountpoints"),
 ("namespaces (forked dumpers)", r"Dumping \d+\(\d+\)'s namespaces"),
 ("cgroup sets + image", r"Namespaces dump complete"),
 ("finish: unfreeze/kill, pages", r"Running post-dump scripts"),
]
RESTORE = [
 ("start (opts, images)", r"^"),
 ("pre-restore: usernsd+cgroupd", r"Running pre-restore scripts"),
 ("read mounts/images", r"mnt: Reading mountpoint images"),
 ("fork root (clone3)", r"Forking task with 1 pid"),
 ("root: ns setup, cgroups", r"Wait until namespaces are created"),
 ("root: namespaces (uts/ipc/net)", r"Restoring namespaces 1 flags"),
 ("root: mount namespace", r"mnt: Restoring mount namespace"),
 ("root: files, children", r"mnt: Move the root to .*/\d+-0000000000|Restoring children in our session"),
 ("tasks: restore (vmas, sigreturn)", r"Opening 0x|Restore via sigreturn"),
 ("restorer+finish", r"Switched to the restorer|uns: calling exit_usernsd"),
]
rx = re.compile(r'^\((\d+\.\d+)\)')


def events(path):
    return [(float(m.group(1)) * 1000, l) for l in open(path, errors='replace') for m in [rx.match(l)] if m]


def split(path, marks):
    ev = events(path)
    out, cur, t0 = {}, 0, 0.0
    for t, l in ev:
        for i in range(cur + 1, len(marks)):
            if re.search(marks[i][1], l):
                out[marks[cur][0]] = out.get(marks[cur][0], 0) + t - t0
                cur, t0 = i, t
                break
    out[marks[cur][0]] = out.get(marks[cur][0], 0) + ev[-1][0] - t0
    out["TOTAL"] = ev[-1][0]
    return out


def logs(d, tag, kind):
    pattern = f"*-{kind}.log" if tag == "all" else f"*-{tag}-*-{kind}.log"
    fs = glob.glob(os.path.join(d, pattern))
    return sorted(fs, key=lambda f: f.rsplit('-', 2)[-2])  # by the move's time


def main(d):
    for kind, marks in (("dump", DUMP), ("restore", RESTORE)):
        tags = [t for t in ("mig0", "mig0b") if logs(d, t, kind)] or ["all"]
        res = {t: [split(f, marks) for f in logs(d, t, kind)] for t in tags}
        print(f"== {kind}: step, median ms ({', '.join(f'{t}: n={len(res[t])}' for t in tags)})")
        for name, _ in marks + [("TOTAL", "")]:
            cols = [f"{statistics.median([r.get(name, 0) for r in res[t]]):7.2f}" for t in tags]
            print(f"  {name:40s}" + " ".join(cols))
        if len(tags) == 2:
            a = [r["TOTAL"] for r in res["mig0"]]
            b = [r["TOTAL"] for r in res["mig0b"]]
            diff = [y - x for x, y in zip(a, b)]
            print(f"  paired mig0b - mig0 total: median {statistics.median(diff):+.2f} ms, less in {sum(1 for x in diff if x < 0)}/{len(diff)}")


if __name__ == "__main__":
    for d in sys.argv[1:] or ["."]:
        main(d)
