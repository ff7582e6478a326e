#!/usr/bin/env python3
"""Where vessel's own time goes in the frozen window of the moves
bench/migrate kept (the daemons' debug logs, not CRIU's).

  VESSEL_KEEP_LOGS=DIR go run ./bench/migrate -n 10 -sizes 0 -modes copy,lazy
  scripts/move-log-profile.py DIR [DIR...]

Each move is read from both daemons' logs in time order (the source's
"migration source: checkpoint" line starts one, the target's "migration
target: restore" line ends it); the first half of a directory's moves are
counted as -modes' first mode, the second half as its second. It prints
each step's median and p90 in ms. The log's times have millisecond
resolution: the steps measured by a "took" or "after" are exact, the gaps
between two lines (images_to_request) are not.
"""
import sys, re, glob, statistics as st
from datetime import datetime
def dur(s):
    m = re.match(r'([\d.]+)(ns|µs|us|ms|s)$', s)
    return float(m.group(1)) * {'ns':1e-6,'µs':1e-3,'us':1e-3,'ms':1,'s':1000}[m.group(2)]
def parse(path):
    ev = []
    for line in open(path, errors='replace'):
        m = re.match(r'time=(\S+) level=\w+ msg=("[^"]*"|\S+)(.*)', line)
        if not m: continue
        t = datetime.strptime(m.group(1), '%Y-%m-%dT%H:%M:%S.%fZ').timestamp()*1000
        kv = dict((k.strip('"'), v) for k, v in re.findall(r'("[^"]+"|\w+)=(\S+)', m.group(3)))
        ev.append((t, m.group(2).strip('"'), kv))
    return ev
def moves(d):
    logs = [f for f in glob.glob(d + '/*.log') if re.search(r'-(alpha|beta)\.log$', f)]
    evs = sorted([e for f in logs for e in parse(f)], key=lambda e: e[0])
    rows, cur, pend, dpend = [], None, {}, {}
    for t, msg, kv in evs:
        g = lambda k: dur(kv[k])
        if msg in ('migration source: disk pass sent', 'migration target: disk pass received') and kv.get('final') == 'true':
            k = 'disk_sent' if 'source' in msg else 'disk_recv'
            (cur if cur is not None and 'disk' not in cur else dpend)[k] = g('took')
            continue
        if msg == 'checkpoint criu returned': pend = {'criu_dump': g('after')}; continue
        if msg == 'checkpoint pages stored': pend['pages'] = g('after'); continue
        if msg == 'migration source: checkpoint':
            cur = dict(pend); pend = {}
            cur.update(dpend); dpend = {}
            cur.update({'ckpt': g('took'), 'freeze2ck': g('since freeze')}); cur['freeze'] = t - cur['freeze2ck']
        if cur is None: continue
        if msg == 'migration source: final disk': cur['disk'] = g('took')
        elif msg == 'migration source: images written to the stream': cur['senddir'] = g('took')
        elif msg == 'migration source: images sent': cur['images'] = g('took'); cur['t_images'] = t
        elif msg == 'migration target: images received': cur['img_recv'] = g('took')
        elif msg == 'migration target: start, early work taken': cur['early_wait'] = g('took')
        elif msg == 'restore request ready': cur['t_req'] = t
        elif msg == 'restore criu returned': cur['criu_rst'] = g('after')
        elif msg == 'restore runc state written': cur['runc_state'] = g('after')
        elif msg == 'restore shim reported': cur['shim'] = g('after')
        elif msg.startswith('launch ') and 'after' in kv: cur['launch_' + msg[7:].replace(' ', '_')] = g('after')
        elif msg == 'migration target: resumed sent': cur['t_resumed'] = t
        elif msg == 'migration target: restore':
            cur['restore'] = g('took'); cur['t_restore_end'] = t
            rows.append(cur); cur = None
    for r in rows:
        if 'pages' in r and 'criu_dump' in r:
            r['pages_store'] = r['pages'] - r['criu_dump']
        r['crit_disk'] = max(0, r.get('disk', 0) - r['ckpt'])
        r['images_to_req'] = r['t_req'] - r['t_images']
        r['runc_shim'] = max(r['runc_state'], r['shim']) - r['criu_rst']
        r['after_shim'] = r['restore'] - max(r['runc_state'], r['shim'])
        for a, b in [('launch_limits','launch_launched'),('launch_tracked','launch_limits'),('launch_os_read','launch_tracked'),('launch_recorded','launch_os_read')]:
            if a in r and b in r: r['d_'+a] = r[a] - r[b]
        r['post_criu'] = r['restore'] - r['criu_rst']
        r['freeze_to_restored'] = r['t_restore_end'] - r['freeze']
    return rows
def p90(v): v = sorted(v); return v[int(0.9 * (len(v) - 1) + 0.5)]
KEYS = [
 ('freeze2ck', 'freeze until the dump is over (CRIU answered, pages stored)'),
 ('criu_dump', "CRIU's dump request (copy mode)"),
 ('pages_store', 'pages stored after CRIU answered (copy mode)'),
 ('disk', 'the final disk increment, beside the dump'),
 ('disk_sent', "of which the source's snapshot and btrfs send"),
 ('disk_recv', "the target's receive (from its start, the stream's wait included)"),
 ('crit_disk', 'the final increment past the dump'),
 ('senddir', 'the images written to their stream (source)'),
 ('images', 'the images sent until "images-done"'),
 ('images_to_req', '"images-done" until the restore request (log ms)'),
 ('early_wait', 'start waiting for the early work'),
 ('criu_rst', "CRIU's restore request"),
 ('runc_shim', "runc's state and the shim's report after CRIU"),
 ('after_shim', 'the shim reported until the restore is recorded'),
 ('d_launch_limits', 'of which the limits'),
 ('d_launch_tracked', 'the watch'),
 ('d_launch_os_read', 'os-release'),
 ('d_launch_recorded', 'the running state and the journal (bbolt)'),
 ('post_criu', 'the target after CRIU, in all'),
 ('freeze_to_restored', 'freeze until the target recorded the restore'),
]
bymode = {'copy': [], 'lazy': []}
for d in sys.argv[1:]:
    rows = moves(d); h = len(rows) // 2
    bymode['copy'] += rows[:h]; bymode['lazy'] += rows[h:]
for mode, rows in bymode.items():
    print(f'-- {mode} (n={len(rows)})')
    for k, what in KEYS:
        v = [r[k] for r in rows if k in r]
        if v: print(f'  {what:62s} {st.median(v):6.2f} (p90 {p90(v):6.2f}) n={len(v)}')
