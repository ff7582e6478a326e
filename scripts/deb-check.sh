#!/usr/bin/env bash
# deb-check.sh DEB SUITE... installs the .deb into a fresh minimal Debian
# chroot of each SUITE (bookworm, trixie) with the chroot's own apt, so its
# declared dependencies are what resolves them, and runs the installed
# binaries there: vessel --version, vesseld --help, /usr/lib/vessel/criu
# --version, /usr/lib/vessel/runc --version (their libraries resolve).
# Then it purges the package and checks it left nothing of its own behind.
#
# Each suite's debootstrap --variant=minbase result is cached as a tarball
# under /var/cache/vessel-setup/ (DEB_CHECK_CACHE); nothing is installed on
# this host. No systemd runs in the chroot: postinst writes the
# configuration and says how to start vesseld.
set -euo pipefail

CACHE=${DEB_CHECK_CACHE:-/var/cache/vessel-setup}
MIRROR=${DEB_CHECK_MIRROR:-http://deb.debian.org/debian}

log() { printf 'deb-check: %s\n' "$*" >&2; }

[ $# -ge 2 ] || { echo "usage: $0 DEB SUITE..." >&2; exit 2; }
[ "$(id -u)" -eq 0 ] || { echo "deb-check: must run as root" >&2; exit 1; }
deb=$(realpath "$1")
shift

# base SUITE prints the cached minbase tarball of SUITE, making it first.
base() {
	local suite=$1 tarball="$CACHE/debootstrap-$1-minbase.tar"
	if [ ! -s "$tarball" ]; then
		local dir
		dir=$(mktemp -d "$CACHE/debootstrap-$suite.XXXXXX")
		log "debootstrap $suite (cached as $tarball)"
		debootstrap --variant=minbase "$suite" "$dir" "$MIRROR" >"$dir.log" 2>&1 || {
			tail -n 20 "$dir.log" >&2
			rm -rf "$dir" "$dir.log"
			return 1
		}
		tar -C "$dir" -cf "$tarball.part" .
		mv "$tarball.part" "$tarball"
		rm -rf "$dir" "$dir.log"
	fi
	echo "$tarball"
}

# in ROOT CMD... runs CMD in the chroot with /proc and /dev mounted.
in_chroot() {
	local root=$1
	shift
	chroot "$root" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin DEBIAN_FRONTEND=noninteractive "$@"
}

check() {
	local suite=$1 root
	root=$(mktemp -d /tmp/deb-check-"$suite".XXXXXX)
	# shellcheck disable=SC2064 # expand now: root is local
	trap "umount -R '$root/proc' '$root/dev' 2>/dev/null; rm -rf --one-file-system '$root'" RETURN
	chmod 0755 "$root" # apt's _apt user reads below it
	tar -C "$root" -xf "$(base "$suite")"
	mount -t proc proc "$root/proc"
	mount --rbind /dev "$root/dev"
	mount --make-rslave "$root/dev"
	cp /etc/resolv.conf "$root/etc/resolv.conf"
	cp "$deb" "$root/tmp/"
	log "$suite: apt-get install ./$(basename "$deb")"
	in_chroot "$root" apt-get update -qq
	in_chroot "$root" apt-get install -y -qq --no-install-recommends "/tmp/$(basename "$deb")" >"$root.apt.log" 2>&1 || {
		cat "$root.apt.log" >&2
		return 1
	}
	grep -E '^vessel|Setting up vessel' "$root.apt.log" >&2 || true
	rm -f "$root.apt.log"
	in_chroot "$root" vessel --version
	in_chroot "$root" vesseld --help >/dev/null
	in_chroot "$root" /usr/lib/vessel/criu --version
	in_chroot "$root" /usr/lib/vessel/runc --version
	for lib in /usr/lib/vessel/criu /usr/lib/vessel/runc /usr/bin/vesseld /usr/bin/vessel; do
		if in_chroot "$root" ldd "$lib" 2>&1 | grep -q 'not found'; then
			in_chroot "$root" ldd "$lib" >&2
			log "$suite: $lib: a library is missing"
			return 1
		fi
	done
	in_chroot "$root" sh -c 'cat /etc/vessel/vesseld.env; grep ^root: /etc/subuid /etc/subgid'
	# shellcheck disable=SC2016 # dpkg-query expands it
	in_chroot "$root" dpkg-query -W -f '${Package} ${Version}\n' libgnutls30t64 libgnutls30 2>/dev/null || true
	# Enabled as under systemd (deb-systemd-helper links them even where
	# systemd does not run).
	for u in vesseld.service vessel-instances.service; do
		if [ ! -L "$root/etc/systemd/system/multi-user.target.wants/$u" ]; then
			log "$suite: $u is not enabled"
			return 1
		fi
	done
	log "$suite: apt-get purge vessel"
	in_chroot "$root" apt-get purge -y -qq vessel >/dev/null
	local left=""
	for p in /etc/vessel /var/lib/vessel /run/vessel /usr/lib/vessel \
		/etc/systemd/system/multi-user.target.wants/vesseld.service \
		/etc/systemd/system/multi-user.target.wants/vessel-instances.service; do
		[ -e "$root$p" ] && left="$left $p"
	done
	grep -q '^root:1000000:' "$root/etc/subuid" && left="$left /etc/subuid:root"
	if [ -n "$left" ]; then
		log "$suite: purge left:$left"
		return 1
	fi
	log "$suite: ok"
}

for suite in "$@"; do
	check "$suite"
done
