package image

import "fmt"

// The configuration files of the built-in busybox image.

// busyboxEnv returns the built-in image's default environment.
func busyboxEnv() []string {
	return []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "TERM=xterm"}
}

// busyboxInittab has no getty (a container has no console tty): after
// sysinit busybox init just idles, reaping orphans. On SIGUSR2 it runs the
// shutdown actions, kills everything and calls reboot(RB_POWER_OFF), which
// in a PID namespace makes init exit. There is no "umount -a": the
// container's mounts belong to the runtime and go with its mount namespace.
const busyboxInittab = `# /etc/inittab for busybox init: vessel built-in image.
# No getty: a container has no console tty. init idles after sysinit and
# powers off on SIGUSR2, vessel's stop signal for this image.
::sysinit:/etc/init.d/rcS
::shutdown:/etc/init.d/rcK
`

// busyboxRcS boots the container. Vessel configures eth0 from the host
// before init runs; /etc/vessel/network.env is for images used without that
// (see the comment in the script).
const busyboxRcS = `#!/bin/sh
# /etc/init.d/rcS: boot script of vessel's built-in busybox image, run once
# by init (sysinit).
#
# Vessel configures eth0 from the host before init runs. If eth0 has no IPv4
# address, /etc/vessel/network.env may configure it; its lines are
#   ADDRESS=10.0.3.10/24   address with prefix length
#   GATEWAY=10.0.3.1       default route (optional)
PATH=/usr/sbin:/usr/bin:/sbin:/bin
export PATH

grep -qs ' /run ' /proc/mounts || mount -t tmpfs -o nosuid,nodev,mode=0755 tmpfs /run 2>/dev/null

# The runtime sets the hostname already (and the container may not).
want=$(cat /etc/hostname 2>/dev/null)
[ -n "$want" ] && [ "$want" != "$(hostname)" ] && hostname "$want" 2>/dev/null

case "$(ip -o link show lo 2>/dev/null)" in
*"<UP,"* | *",UP,"* | *",UP>"*) ;;
*) ip link set lo up 2>/dev/null ;;
esac

eth0_addrs() {
	ip -4 -o addr show dev eth0 2>/dev/null | awk '{print $4}' | tr '\n' ' '
}

if [ -r /etc/vessel/network.env ] && [ -z "$(eth0_addrs)" ]; then
	ADDRESS= GATEWAY=
	while IFS='=' read -r key value; do
		case "$key" in
		ADDRESS) ADDRESS=$value ;;
		GATEWAY) GATEWAY=$value ;;
		esac
	done </etc/vessel/network.env
	if [ -n "$ADDRESS" ]; then
		ip link set eth0 up && ip addr add "$ADDRESS" dev eth0
		[ -n "$GATEWAY" ] && ip route add default via "$GATEWAY" dev eth0
	fi
fi

addrs=$(eth0_addrs)
echo "vessel: $(hostname) booted, eth0: ${addrs:-no address}"
`

// busyboxRcK runs at shutdown, before filesystems are remounted read-only.
const busyboxRcK = `#!/bin/sh
# /etc/init.d/rcK: shutdown script of vessel's built-in busybox image.
echo "vessel: $(hostname) shutting down"
`

const busyboxPasswd = `root:x:0:0:root:/root:/bin/sh
nobody:x:65534:65534:nobody:/nonexistent:/bin/false
`

const busyboxGroup = `root:x:0:
nogroup:x:65534:
`

// busyboxShadow locks every password: log in with vessel exec.
const busyboxShadow = `root:*::0:99999:7:::
nobody:*::0:99999:7:::
`

const busyboxHosts = `127.0.0.1	localhost
::1	localhost ip6-localhost ip6-loopback
`

const busyboxProfile = `export PATH=/usr/sbin:/usr/bin:/sbin:/bin
export PS1='\u@\h:\w\$ '
`

// busyboxOSRelease returns the built-in image's /etc/os-release.
func busyboxOSRelease(version string) string {
	return fmt.Sprintf("ID=busybox\nNAME=\"BusyBox\"\nVERSION_ID=%s\nPRETTY_NAME=\"BusyBox %s (vessel built-in)\"\n",
		version, version)
}
