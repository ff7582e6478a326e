#!/usr/bin/env bash
# setup.sh — installs everything vessel needs on a Debian 12 host, idempotently.
#
#   * Debian packages: runc, btrfs-progs, busybox-static, iptables, iproute2, fio,
#     debootstrap and CRIU's build dependencies.
#   * CRIU 4.1.1 built from Debian's source tarball into /usr/local (Debian 12's
#     criu 3.17 fails on current kernels: vDSO layout), with vessel's patches
#     from scripts/criu-patches applied (a stamp records which), unless the
#     installed CRIU is already that build.
#   * runc 1.4 built from its Go module as /usr/local/lib/vessel/runc, beside
#     the distribution's (Debian 12 ships
#     1.1.5, trixie 1.1.15: both join a container's user namespace before its
#     other namespaces, so `runc exec` cannot enter an unprivileged container
#     whose network namespace the host made; 1.3+ joins in two stages).
#   * A subordinate id range for root in /etc/subuid and /etc/subgid: vessel
#     gives each unprivileged container 65536 ids from it.
#   * Kernel tunables: pipe-max-size (CRIU lazy pages need ~3.2 MiB pipes) and
#     IPv4 forwarding (container NAT).
#
# Re-running it is cheap: every step checks before it acts.
set -euo pipefail

CRIU_VERSION=4.1.1
CRIU_SHA256=f80a66cb3726bb2116266d4759ce3bcbfab7abdb6b6d430bf20dd41911717afe
CRIU_URL=${CRIU_URL:-http://deb.debian.org/debian/pool/main/c/criu/criu_${CRIU_VERSION}.orig.tar.xz}
CACHE=${VESSEL_SETUP_CACHE:-/var/cache/vessel-setup}
PATCHES=$(cd "$(dirname "$0")" && pwd)/criu-patches
STAMP=/usr/local/share/vessel/criu.stamp
RUNC_VERSION=1.4.3
RUNC=/usr/local/lib/vessel/runc
# root's subordinate ids when /etc/subuid has none (Incus's default range).
SUBID_START=1000000
SUBID_COUNT=1000000000

PACKAGES=(
	runc btrfs-progs busybox-static iptables iproute2 fio debootstrap
	ca-certificates curl xz-utils make gcc pkgconf patch
	libprotobuf-c-dev libprotobuf-dev protobuf-c-compiler libnl-3-dev libnet1-dev libcap-dev
	libbsd-dev libgnutls28-dev libnftables-dev uuid-dev python3-protobuf
	libseccomp-dev
)

log() { printf 'setup: %s\n' "$*" >&2; }

need_root() {
	if [ "$(id -u)" -ne 0 ]; then
		echo "setup: must run as root" >&2
		exit 1
	fi
}

install_packages() {
	local missing=()
	for p in "${PACKAGES[@]}"; do
		if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
			missing+=("$p")
		fi
	done
	if [ ${#missing[@]} -eq 0 ]; then
		log "debian packages present"
		return
	fi
	log "installing: ${missing[*]}"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq
	apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

criu_is_4x() {
	command -v criu >/dev/null 2>&1 && criu --version 2>/dev/null | grep -qE 'Version: 4\.'
}

# CRIU caches its kernel feature probes (~20 ms per run) in RUNDIR, but
# only on a tmpfs (the cache must not survive a reboot). Where /run is not
# one (this VM), /dev/shm is.
criu_rundir() {
	if [ "$(stat -f -c %T /run 2>/dev/null)" = tmpfs ]; then
		echo /run
	else
		echo /dev/shm
	fi
}

# criu_stamp identifies a vessel build: the tarball's checksum, the
# patches applied to it and the build settings.
criu_stamp() {
	{
		echo "$CRIU_SHA256 RUNDIR=$(criu_rundir)"
		cat "$PATCHES"/*.patch 2>/dev/null
	} | sha256sum | awk '{print $1}'
}

# criu_current: the installed CRIU is exactly the build this script would
# make. (A newer upstream CRIU has the 6.16 fix but not the frozen-time
# patches, and every host of a migration must agree on the empty-tmpfs
# image format: vessel's hosts all run this build.)
criu_current() {
	criu_is_4x || return 1
	[ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$(criu_stamp)" ]
}

build_criu() {
	if criu_current; then
		log "criu $(criu --version | awk '/Version/{print $2}') present"
		return
	fi
	mkdir -p "$CACHE"
	local tarball="$CACHE/criu_${CRIU_VERSION}.orig.tar.xz"
	if ! echo "$CRIU_SHA256  $tarball" | sha256sum -c --status 2>/dev/null; then
		log "downloading $CRIU_URL"
		curl -fsSL --retry 3 -o "$tarball.part" "$CRIU_URL"
		mv "$tarball.part" "$tarball"
	fi
	echo "$CRIU_SHA256  $tarball" | sha256sum -c --status || {
		echo "setup: criu tarball checksum mismatch" >&2
		rm -f "$tarball"
		exit 1
	}
	local src="$CACHE/criu-${CRIU_VERSION}"
	rm -rf "$src"
	tar -C "$CACHE" -xJf "$tarball"
	for p in "$PATCHES"/*.patch; do
		[ -e "$p" ] || continue
		log "applying $(basename "$p")"
		patch -d "$src" -p1 -s <"$p"
	done
	log "building criu ${CRIU_VERSION}"
	make -C "$src" -j"$(nproc)" RUNDIR="$(criu_rundir)" criu >"$CACHE/criu-build.log" 2>&1 || {
		tail -n 40 "$CACHE/criu-build.log" >&2
		exit 1
	}
	install -D -m 0755 "$src/criu/criu" /usr/local/sbin/criu
	mkdir -p "$(dirname "$STAMP")"
	criu_stamp >"$STAMP"
	hash -r
	criu_is_4x || { echo "setup: installed criu does not report 4.x" >&2; exit 1; }
	log "criu $(criu --version | awk '/Version/{print $2}') installed in /usr/local/sbin"
}

# build_runc installs runc $RUNC_VERSION from its Go module (the module proxy
# serves the source), with seccomp, unless that version is installed.
build_runc() {
	if [ -x "$RUNC" ] && "$RUNC" --version 2>/dev/null | grep -q "^runc version $RUNC_VERSION\$"; then
		log "runc $RUNC_VERSION present"
		return
	fi
	command -v go >/dev/null 2>&1 || { echo "setup: go is needed to build runc" >&2; exit 1; }
	log "building runc $RUNC_VERSION"
	local bin="$CACHE/runc-bin"
	mkdir -p "$bin"
	GOBIN="$bin" GOFLAGS=-mod=mod CGO_ENABLED=1 go install -tags seccomp \
		-ldflags "-X main.version=$RUNC_VERSION" "github.com/opencontainers/runc@v$RUNC_VERSION"
	install -D -m 0755 "$bin/runc" "$RUNC"
	log "$("$RUNC" --version | head -n 1) installed as $RUNC"
}

# subids gives root a subordinate id range unless it has one.
subids() {
	local f
	for f in /etc/subuid /etc/subgid; do
		if ! grep -q '^root:' "$f" 2>/dev/null; then
			echo "root:$SUBID_START:$SUBID_COUNT" >>"$f"
			log "$f: root:$SUBID_START:$SUBID_COUNT"
		fi
	done
}

set_sysctl() {
	local key=$1 want=$2 file=/proc/sys/${1//.//}
	if [ "$(cat "$file")" -lt "$want" ]; then
		echo "$want" >"$file"
		log "$key = $want"
	fi
}

tune_kernel() {
	# CRIU's lazy-pages transfer tees pages through ~3.2 MiB pipes; without this
	# the transfer fails with "page-pipe: tee" (root here lacks CAP_SYS_RESOURCE).
	set_sysctl fs.pipe-max-size 16777216
	set_sysctl net.ipv4.ip_forward 1
	mkdir -p /etc/sysctl.d
	cat >/etc/sysctl.d/90-vessel.conf <<CONF
# written by vessel's setup.sh
fs.pipe-max-size = 16777216
net.ipv4.ip_forward = 1
CONF
}

check_criu() {
	if ! out=$(criu check 2>&1); then
		echo "setup: 'criu check' failed:" >&2
		echo "$out" >&2
		exit 1
	fi
	log "criu check: $(echo "$out" | tail -n 1)"
}

need_root
install_packages
build_criu
build_runc
subids
tune_kernel
check_criu
