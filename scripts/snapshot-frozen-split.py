#!/usr/bin/env python3
"""Where the frozen part of a stateful snapshot's dump goes, per run.

Keep CRIU's dump logs of bench/snapshot (with --background-memory, the
default), then split them:

  VESSEL_KEEP_LOGS=DIR go run ./bench/snapshot -n 5 -sizes 1024 -modes vessel
  scripts/snapshot-frozen-split.py DIR/m1024-*-dump.log

For the task with the most pinned pages (memhog), from CRIU's -v4
timestamps, in ms: frozen_criu, CRIU's log start to its status-ready
report (the daemon thaws then); smaps_walk, the longest gap while CRIU
reads the task's /proc/PID/smaps (the kernel walking the big VMA's page
tables for Rss and Pss); iovs, the pagemap walk into page-pipe iovs;
drain_cure, the parasite's vmsplice of every page into the page pipes
and its cure; wp_arm, registering the task's anonymous memory with its
userfaultfd and write-protecting it (bgmem's "pages pinned" line); rest,
the other tasks and everything else. Then the medians.
"""
import re
import statistics
import sys

rx = re.compile(r'^\((\d+\.\d+)\)')


def split(path):
    ev = [(float(m.group(1)) * 1000, l) for l in open(path, errors='replace') for m in [rx.match(l)] if m]
    pins = [(i, l) for i, (_, l) in enumerate(ev) if 'pages pinned' in l]
    i_pin, big = max(pins, key=lambda e: int(re.search(r': (\d+) pages pinned', e[1]).group(1)))
    pid = re.search(r'bgmem: (\d+):', big).group(1)
    i_task = next(i for i, (_, l) in enumerate(ev) if f'Dumping task (pid: {pid} ' in l)
    i_pages = next(i for i, (_, l) in enumerate(ev) if f'Dumping pages (type: 59 pid: {pid})' in l)
    i_stop = max(i for i in range(i_pages, i_pin) if 'was stopped' in ev[i][1])
    i_pp = max(i for i in range(i_pages, i_stop) if 'page-pipe:' in ev[i][1] or 'pagemap' in ev[i][1].lower())
    i_ready = next(i for i, (_, l) in enumerate(ev) if 'Running status-ready scripts' in l)
    r = {
        'frozen_criu': ev[i_ready][0],
        'smaps_walk': max(ev[i + 1][0] - ev[i][0] for i in range(i_task, i_pages) if 'smaps entry' in ev[i][1]),
        'iovs': ev[i_pp][0] - ev[i_pages][0],
        'drain_cure': ev[i_stop][0] - ev[i_pp][0],
        'wp_arm': ev[i_pin][0] - ev[i_stop][0],
    }
    r['rest'] = r['frozen_criu'] - sum(v for k, v in r.items() if k != 'frozen_criu')
    return r


def main():
    rows = []
    for p in sys.argv[1:]:
        r = split(p)
        rows.append(r)
        print(p, ' '.join('%s %.1f' % kv for kv in r.items()))
    if len(rows) > 1:
        print('median', ' '.join('%s %.1f' % (k, statistics.median(r[k] for r in rows)) for k in rows[0]))


if __name__ == '__main__':
    main()
