package security

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/vesselhost/vessel/internal/api"
	"github.com/vesselhost/vessel/internal/migration"
)

// uidMap reads /proc/self/uid_map inside a container: "INSIDE HOST COUNT".
func uidMap(h *host, name string) []string {
	h.t.Helper()
	return strings.Fields(h.OK("exec", name, "--", "cat", "/proc/self/uid_map"))
}

// TestUnprivilegedByDefault: a container gets a user namespace of its own
// whose ids are a block of root's subordinate ids, disjoint from every
// other container's; its files stay unshifted on disk; vessel info says so.
func TestUnprivilegedByDefault(t *testing.T) {
	h := newHost(t)
	h.OK("launch", "busybox", "u1")
	h.OK("launch", "busybox", "u2")
	var blocks []string
	for _, name := range []string{"u1", "u2"} {
		m := uidMap(h, name)
		if len(m) != 3 || m[0] != "0" || m[1] == "0" || m[2] != "65536" {
			t.Fatalf("%s: uid_map %v, want 0 HOST 65536 with HOST not 0", name, m)
		}
		inst := h.Instance(name)
		if inst.Privileged || !strings.HasPrefix(inst.IDMap, m[1]+":") {
			t.Fatalf("%s: info says privileged=%v idmap=%q, the container maps %v", name, inst.Privileged, inst.IDMap, m)
		}
		if out := h.OK("info", name); !strings.Contains(out, "unprivileged") {
			t.Errorf("vessel info %s does not say unprivileged:\n%s", name, out)
		}
		blocks = append(blocks, m[1])
	}
	if blocks[0] == blocks[1] {
		t.Fatalf("two containers share host ids %s", blocks[0])
	}
	// Container root's file is root's on disk: images and clones stay
	// shared and unshifted, whatever block the container has.
	h.OK("exec", "u1", "--", "sh", "-c", "echo x > /root-made")
	var st syscall.Stat_t
	if err := syscall.Stat(filepath.Join(h.ContainerPath("u1"), "root-made"), &st); err != nil {
		t.Fatal(err)
	}
	if st.Uid != 0 || st.Gid != 0 {
		t.Errorf("a file container root made is %d:%d on disk, want 0:0", st.Uid, st.Gid)
	}
}

// TestUnprivilegedRootIsNotHostRoot performs, as container root, what
// host root could do and container root must not.
func TestUnprivilegedRootIsNotHostRoot(t *testing.T) {
	h := newHost(t)
	h.OK("launch", "busybox", "c1")
	addr := h.Instance("c1").IPv4
	for _, attack := range []struct{ what, cmd string }{
		{"make a block device of the host's disk", "mknod /tmp/disk b 7 0"},
		{"write a kernel tunable", "echo 1 > /proc/sys/net/ipv4/ip_forward"},
		{"take another address", "ip addr add 10.254.254.254/32 dev eth0"},
		{"change its MAC address", "ip link set eth0 address 02:00:00:00:00:99"},
		{"take its link down", "ip link set eth0 down"},
		{"load a kernel module", "echo > /sys/module/x 2>/dev/null || exit 1"},
		// busybox date exits 0 when settimeofday fails; it says so. The
		// time set is the current one: harmless if the attack worked.
		{"set the clock", `date -s "$(date '+%Y-%m-%d %H:%M:%S')" 2>&1 | grep -q "can't set" && exit 1; exit 0`},
		{"raise its scheduling class (CAP_SYS_NICE dropped)", "chrt -f 50 true"},
	} {
		r := h.Vessel("exec", "c1", "--", "sh", "-c", attack.cmd)
		if r.Code == 0 {
			t.Errorf("container root could %s (%s)", attack.what, attack.cmd)
		}
	}
	// Nothing changed: the container keeps its one address and its link.
	if out := h.OK("exec", "c1", "--", "ip", "-4", "addr", "show", "eth0"); !strings.Contains(out, addr+"/") || strings.Contains(out, "10.254.254.254") {
		t.Errorf("the container's address changed:\n%s", out)
	}
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_forward"); err != nil || strings.TrimSpace(string(b)) != "1" {
		t.Errorf("the host's ip_forward is %q (%v)", b, err)
	}
}

// TestPrivilegedOptOut: security.privileged=true runs without a user
// namespace, and info says so.
func TestPrivilegedOptOut(t *testing.T) {
	h := newHost(t)
	h.OK("launch", "busybox", "p1", "-c", "security.privileged=true")
	if m := uidMap(h, "p1"); len(m) != 3 || m[0] != "0" || m[1] != "0" {
		t.Fatalf("privileged container maps %v, want the host's ids", m)
	}
	if inst := h.Instance("p1"); !inst.Privileged || inst.IDMap != "" {
		t.Fatalf("info: privileged=%v idmap=%q", inst.Privileged, inst.IDMap)
	}
	h.Fails("must be", "config", "set", "p1", "security.privileged=maybe")
}

// TestPeerIDMapAndPrivilege: a peer cannot make the target run a
// container with host ids (a live move's id map outside the target's
// subordinate ids, or overlapping another container's) nor move a
// privileged container in; nothing is reserved.
func TestPeerIDMapAndPrivilege(t *testing.T) {
	h := newTarget(t)
	p := newFakePeer(t, h)
	ctx, cancel := context.WithTimeout(t.Context(), patience)
	defer cancel()
	// A container of the target's own, to collide with.
	hh := &host{Host: h, t: t}
	h.OK("launch", "busybox", "mine")
	var uid, gid, size uint32
	if _, err := fmt.Sscanf(hh.Instance("mine").IDMap, "%d:%d+%d", &uid, &gid, &size); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, want string
		cfg        map[string]string
		idmap      *migration.IDMap
	}{
		{"hostroot", "subordinate", nil, &migration.IDMap{UID: 0, GID: 0, Size: 65536}},
		{"outside", "subordinate", nil, &migration.IDMap{UID: 4000000000, GID: 4000000000, Size: 65536}},
		{"overlap", "in use", nil, &migration.IDMap{UID: uid, GID: gid, Size: size}},
		{"nomap", "id map", nil, nil},
		{"priv", "privileged", map[string]string{"security.privileged": "true"}, nil},
	} {
		hl := hello("evil-"+tc.name, tc.cfg)
		hl.Live, hl.Memory, hl.Instance.IDMap = true, api.MemoryCopy, tc.idmap
		sess := p.session(ctx, hl)
		_, err := sess.Expect(ctx, migration.MsgAccepted)
		t.Logf("%s: %v", tc.name, err)
		if !errors.Is(err, migration.ErrRemote) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want a refusal about %q", tc.name, err, tc.want)
		}
		checkNothingLeft(t, h, "evil-"+tc.name)
	}
}
