#!/usr/bin/env python3
"""Where the CPU goes during post-copy pulls, per process and thread.

  scripts/pull-cpu.py record OUT -- CMD...   (root; CMD e.g. a bench run)
  scripts/pull-cpu.py report OUT

record runs CMD while sampling, every 0.2 s, each thread's
/proc/PID/task/TID/schedstat (time on a CPU, time runnable and waiting for
one, timeslices) and the syscall counts of every vesseld and criu
(/proc/PID/io), into OUT/sched.txt. report cuts each pull window out of
it: the life of a `criu lazy-pages` from its first 5 ms of CPU to its last
sample, and prints per role (source and target vesseld, lazy-pages, page
server, anything else by name) the CPU-s, the run-queue wait and the
timeslices in that window, with the syscalls and bytes of the pipeline's
processes. For symbols, run `perf record -a -g -k realtime` beside it: the
windows printed are realtime seconds, for `perf report --time T0,T1`.

The sampler costs ~6% of a core on a 2-core machine; say so beside any
figure taken with it.

  flock -o /tmp/vessel-root-tests.lock scripts/pull-cpu.py record /tmp/pc -- \\
      go run ./bench/migrate -n 2 -sizes 2048 -modes lazy
  scripts/pull-cpu.py report /tmp/pc
"""
import collections
import os
import subprocess
import sys
import threading
import time


def record(out, cmd):
    os.makedirs(out, exist_ok=True)
    done = threading.Event()
    f = open(os.path.join(out, "sched.txt"), "w")

    def sample():
        seen = set()
        while not done.is_set():
            t = time.time()
            for p in os.listdir("/proc"):
                if not p.isdigit():
                    continue
                try:
                    if p not in seen:
                        raw = open(f"/proc/{p}/cmdline", "rb").read()
                        cmdline = raw.replace(b"\0", b" ").decode(errors="replace")[:200]
                        st = open(f"/proc/{p}/stat").read()
                        ppid = st[st.rindex(")") + 2:].split()[1]
                        f.write(f"P {p} {ppid} {cmdline}\n")
                        seen.add(p)
                    comm = open(f"/proc/{p}/comm").read().strip()
                    if comm in ("vesseld", "criu"):
                        io = dict(l.split(": ") for l in open(f"/proc/{p}/io").read().splitlines() if l)
                        f.write(f"IO {t:.3f} {p} {io['syscr']} {io['syscw']} {io['rchar']} {io['wchar']}\n")
                    for tid in os.listdir(f"/proc/{p}/task"):
                        s = open(f"/proc/{p}/task/{tid}/schedstat").read().split()
                        c = open(f"/proc/{p}/task/{tid}/comm").read().strip().replace(" ", "_")
                        if s[0] != "0":
                            f.write(f"{t:.3f} {p} {tid} {c} {s[0]} {s[1]} {s[2]}\n")
                except (OSError, IndexError, ValueError):
                    pass  # the process or thread went away
            f.flush()
            time.sleep(max(0.0, 0.2 - (time.time() - t)))

    th = threading.Thread(target=sample)
    th.start()
    try:
        rc = subprocess.call(cmd)
    finally:
        done.set()
        th.join()
        f.close()
    return rc


def at(series, t):
    """The last sample at or before t (None before the first)."""
    best = None
    for x in series:
        if x[0] > t:
            break
        best = x
    return best


def report(out):
    procs, io = {}, collections.defaultdict(list)
    samples = collections.defaultdict(list)
    for line in open(os.path.join(out, "sched.txt")):
        f = line.split()
        if not f:
            continue
        if f[0] == "P":
            parts = line.rstrip("\n").split(" ", 3)
            procs[parts[1]] = (parts[2], parts[3] if len(parts) > 3 else "")
        elif f[0] == "IO":
            io[f[2]].append((float(f[1]), int(f[3]), int(f[4]), int(f[5]), int(f[6])))
        elif len(f) >= 7:
            samples[(f[1], f[2])].append((float(f[0]), f[3], int(f[4]), int(f[5]), int(f[6])))

    def cmd(p):
        return procs.get(p, ("", ""))[1]

    def exe(p):
        return os.path.basename(cmd(p).split(" ")[0]).rstrip(":")

    def role(p, target):
        if exe(p) == "vesseld":
            return "vesseld-target" if p == target else "vesseld-source"
        if exe(p) == "criu":
            # the source's dump serves the pages (its title: "criu: dump")
            return "criu lazy-pages" if " lazy-pages " in cmd(p) else "criu, other (page server)"
        return None

    for lp in sorted((p for p in procs if role(p, None) == "criu lazy-pages"), key=int):
        s = samples.get((lp, lp))
        if not s:
            continue
        t0 = next((x[0] for x in s if x[2] - s[0][2] > 5e6), None)
        t1 = s[-1][0]
        if t0 is None or t1 <= t0:
            continue
        target, p = None, lp
        while p in procs and p != "1":
            p = procs[p][0]
            if exe(p) == "vesseld":
                target = p
                break
        agg = collections.defaultdict(lambda: [0, 0, 0])
        for (pid, _tid), ss in samples.items():
            a, b = at(ss, t0), at(ss, t1)
            if b is None:
                continue
            a = a or (0, "", 0, 0, 0)
            r = role(pid, target) or b[1]
            for i in range(3):
                agg[r][i] += b[2 + i] - a[2 + i]
        busy = sum(v[0] for v in agg.values()) / 1e9
        print(f"pull window of lazy-pages {lp}: {t1 - t0:.2f} s (realtime {t0:.3f},{t1:.3f}); "
              f"CPU used {busy:.2f} of {(t1 - t0) * os.cpu_count():.2f} CPU-s")
        for r, v in sorted(agg.items(), key=lambda kv: -kv[1][0])[:12]:
            if v[0] <= 0:
                continue
            print(f"  {r:26s} cpu {v[0] / 1e9:6.2f} s  run-queue wait {v[1] / 1e9:6.2f} s  timeslices {v[2]}")
        for pid, ss in sorted(io.items()):
            a, b = at(ss, t0), at(ss, t1)
            if a is None or b is None or max(b[3] - a[3], b[4] - a[4]) < 1e8:
                continue
            print(f"  {role(pid, target) or pid:26s} reads {b[1] - a[1]:7d} ({(b[3] - a[3]) / 1e6:6.0f} MB)"
                  f"  writes {b[2] - a[2]:7d} ({(b[4] - a[4]) / 1e6:6.0f} MB)")


def main():
    if len(sys.argv) >= 5 and sys.argv[1] == "record" and sys.argv[3] == "--":
        sys.exit(record(sys.argv[2], sys.argv[4:]))
    if len(sys.argv) == 3 and sys.argv[1] == "report":
        report(sys.argv[2])
        return
    sys.exit(__doc__)


if __name__ == "__main__":
    main()
