#!/usr/bin/env bash
# setup.sh — installs everything vessel needs on a Debian 12 (bookworm) or
# Debian 13 (trixie) host, idempotently.
#
#   * Debian packages: runc, btrfs-progs, busybox-static, iptables, iproute2, fio,
#     debootstrap and CRIU's build dependencies (the same names on both).
#   * Go: vessel's go.mod names the version it needs. A go command of 1.21 or
#     later fetches that toolchain itself (GOTOOLCHAIN=auto, from the Go module
#     proxy). With no go at all, the distribution's golang-go is installed when
#     it is 1.21+ (trixie: 1.24); bookworm's 1.19 is too old, so a Debian 12
#     host needs Go from https://go.dev/dl/ (setup says so and stops).
#   * CRIU 4.1.1 built from Debian's source tarball into /usr/local (Debian 12's
#     criu 3.17 fails on current kernels: vDSO layout), with vessel's patches
#     from scripts/criu-patches applied (a stamp records which), unless the
#     installed CRIU is already that build. gcc 12 (bookworm) and gcc 14
#     (trixie) both build it without warnings.
#   * runc 1.4 built from its Go module as /usr/local/lib/vessel/runc, beside
#     the distribution's (Debian 12 ships
#     1.1.5, trixie 1.1.15: both join a container's user namespace before its
#     other namespaces, so `runc exec` cannot enter an unprivileged container
#     whose network namespace the host made; 1.3+ joins in two stages).
#   * A subordinate id range for root in /etc/subuid and /etc/subgid: vessel
#     gives each unprivileged container 65536 ids from it.
#   * Kernel tunables: pipe-max-size (CRIU lazy pages need ~3.2 MiB pipes) and
#     IPv4 forwarding (container NAT), set now and in /etc/sysctl.d for the
#     next boot (read by systemd-sysctl or procps alike).
#
# Re-running it is cheap: every step checks before it acts.
set -euo pipefail

CRIU_VERSION=4.1.1
CRIU_SHA256=f80a66cb3726bb2116266d4759ce3bcbfab7abdb6b6d430bf20dd41911717afe
CRIU_URL=${CRIU_URL:-http://deb.debian.org/debian/pool/main/c/criu/criu_${CRIU_VERSION}.orig.tar.xz}
CACHE=${VESSEL_SETUP_CACHE:-/var/cache/vessel-setup}
REPO=$(cd "$(dirname "$0")/.." && pwd)
PATCHES=$REPO/scripts/criu-patches
STAMP=/usr/local/share/vessel/criu.stamp
RUNC_VERSION=1.4.3
RUNC=/usr/local/lib/vessel/runc
# root's subordinate ids when /etc/subuid has none (Incus's default range).
SUBID_START=1000000
SUBID_COUNT=1000000000
GO=${GO:-go}
# Go from go.dev's tarball lives here; a root shell (sudo) often lacks it.
export PATH=$PATH:/usr/local/go/bin

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

die() {
	printf 'setup: %s\n' "$@" >&2
	exit 1
}

# detect_os reads the distribution and its suite from /etc/os-release:
# vessel is tested on Debian 12 (bookworm) and 13 (trixie); elsewhere setup
# warns and carries on (the package names are Debian's).
detect_os() {
	local id="" codename="" pretty=""
	if [ -r /etc/os-release ]; then
		# shellcheck disable=SC1091
		IFS='|' read -r id codename pretty < <(. /etc/os-release && echo "${ID:-}|${VERSION_CODENAME:-}|${PRETTY_NAME:-}") || true
	fi
	OS_CODENAME=$codename
	case "$id:$codename" in
	debian:bookworm | debian:trixie) log "$pretty" ;;
	*) log "warning: vessel is tested on Debian 12 (bookworm) and 13 (trixie), not on ${pretty:-this system}; carrying on" ;;
	esac
	command -v apt-get >/dev/null 2>&1 || die "apt-get not found: setup installs Debian packages"
}

# ver_ge A B: version A is B or later (1.24.4 >= 1.21).
ver_ge() {
	[ "$(printf '%s\n%s\n' "$2" "$1" | sort -V | head -n 1)" = "$2" ]
}

apt_updated=""
apt_install() {
	export DEBIAN_FRONTEND=noninteractive
	if [ -z "$apt_updated" ]; then
		apt-get update -qq
		apt_updated=1
	fi
	apt-get install -y -qq --no-install-recommends "$@" >/dev/null
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
	apt_install "${missing[@]}"
}

# go_self_version: the version of the go command itself (1.24.4), not of
# the toolchain it would switch to inside vessel's module.
go_self_version() {
	(cd / && GOTOOLCHAIN=local "$GO" version) | awk '{sub(/^go/, "", $3); print $3}'
}

# go_env VAR: a go setting, asked outside the module (no toolchain switch).
go_env() {
	(cd / && "$GO" env "$1")
}

# check_go makes sure a go command builds vessel (and runc): one of the
# version go.mod names, or 1.21+ that fetches that toolchain by itself
# (GOTOOLCHAIN=auto, the default: Debian's golang and go.dev's tarball
# alike). With no go at all it installs the distribution's golang-go when
# that is 1.21+ (trixie's is 1.24); otherwise it says what to install.
check_go() {
	local need have used
	need=$(awk '$1 == "go" {print $2; exit}' "$REPO/go.mod")
	if ! command -v "$GO" >/dev/null 2>&1; then
		local cand
		cand=$(apt-cache policy golang-go 2>/dev/null | awk '/Candidate:/ {print $2}')
		cand=${cand#*:}
		cand=${cand%%[~+-]*}
		if [ -n "$cand" ] && [ "$cand" != "(none)" ] && ver_ge "$cand" 1.21; then
			log "no go command: installing ${OS_CODENAME:-the distribution}'s golang-go ($cand; it fetches Go $need for vessel)"
			apt_install golang-go
			hash -r
		else
			die "no go command found (PATH=$PATH)." \
				"vessel needs Go $need (go.mod); ${OS_CODENAME:-this distribution}'s golang-go is ${cand:-missing}, older than 1.21, which cannot fetch a newer toolchain." \
				"Install Go from https://go.dev/dl/ (tar -C /usr/local -xzf go*.linux-amd64.tar.gz: /usr/local/go/bin is searched) and run this again."
		fi
	fi
	have=$(go_self_version)
	if ! ver_ge "$have" "$need" && ! ver_ge "$have" 1.21; then
		die "$(command -v "$GO") is Go $have: vessel needs Go $need (go.mod), and Go before 1.21 cannot fetch a newer toolchain." \
			"Install Go from https://go.dev/dl/ (tar -C /usr/local -xzf go*.linux-amd64.tar.gz) and put /usr/local/go/bin before $(dirname "$(command -v "$GO")") in PATH, or set GO=/usr/local/go/bin/go."
	fi
	# Inside the module the go command switches to the toolchain go.mod
	# names, downloading it on first use.
	if ! used=$(cd "$REPO" && "$GO" env GOVERSION); then
		die "$(command -v "$GO") (Go $have) could not fetch Go $need, which vessel's go.mod needs (above)." \
			"It downloads golang.org/toolchain from the Go module proxy ($(go_env GOPROXY)): check the network, or install Go $need from https://go.dev/dl/."
	fi
	used=${used#go}
	if ! ver_ge "$used" "$need"; then
		die "$(command -v "$GO") is Go $have and does not switch to Go $need, which vessel's go.mod needs: GOTOOLCHAIN is $(go_env GOTOOLCHAIN)." \
			"Let it fetch Go $need (GOTOOLCHAIN=auto: unset it in the environment, go env -w GOTOOLCHAIN=auto) or install Go $need from https://go.dev/dl/."
	fi
	if [ "$used" = "$have" ]; then
		log "go $have"
	else
		log "go $have, using Go $used for vessel (GOTOOLCHAIN=$(go_env GOTOOLCHAIN))"
	fi
}

# (No `cmd --version | grep -q`: grep's early exit can kill cmd with
# SIGPIPE, which pipefail turns into a false "not installed".)
criu_is_4x() {
	local v
	command -v criu >/dev/null 2>&1 && v=$(criu --version 2>/dev/null) || return 1
	[[ $v == *"Version: 4."* ]]
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
	local v=""
	if [ -x "$RUNC" ]; then v=$("$RUNC" --version 2>/dev/null) || v=""; fi
	if [ "${v%%$'\n'*}" = "runc version $RUNC_VERSION" ]; then
		log "runc $RUNC_VERSION present"
		return
	fi
	log "building runc $RUNC_VERSION"
	local bin="$CACHE/runc-bin" tc
	mkdir -p "$bin"
	# With the toolchain that builds vessel: `go install pkg@version` would
	# pick by runc's go.mod, i.e. a distribution's older go as it is
	# (trixie's 1.24), a second toolchain and a second build cache.
	tc=$(cd "$REPO" && "$GO" env GOVERSION)
	GOTOOLCHAIN=$tc GOBIN="$bin" GOFLAGS=-mod=mod CGO_ENABLED=1 "$GO" install -tags seccomp \
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

# vm_support: what VM instances need. QEMU 10 with qemu-img (bookworm: from
# bookworm-backports, added to apt's sources if missing; trixie's own) and
# e2fsprogs (mkfs.ext4 -d builds a VM's disk from an image's rootfs); and
# the guest kernel: Debian's cloud kernel package (trixie's, or
# bookworm-backports'), unpacked into $CACHE/vm-kernel/<version>/ with
# $CACHE/vm-kernel/current pointing at it. vessel takes vmlinuz and the
# modules a VM needs from there (vesseld --vm-kernel-dir).
vm_support() {
	local suite="" dir=$CACHE/vm-kernel meta dep pkg ver tmp
	# QEMU and the backports source come from the guest lane's installer
	# (scripts/lib/vmlab-deps.sh), in a subshell: it has an apt_install of
	# its own.
	# shellcheck source=scripts/lib/vmlab-deps.sh
	suite=$(. "$REPO/scripts/lib/vmlab-deps.sh" && qemu_suite)
	(
		. "$REPO/scripts/lib/vmlab-deps.sh"
		[ -z "$suite" ] || ensure_suite "$suite"
		need_qemu >/dev/null
	)
	if ! command -v mkfs.ext4 >/dev/null 2>&1; then
		log "installing e2fsprogs"
		apt_install e2fsprogs
	fi
	if [ -f "$dir/current/vmlinuz" ] && [ -d "$dir/current/modules" ]; then
		log "vm kernel: $(readlink "$dir/current")"
		return
	fi
	tmp=$(mktemp -d)
	# shellcheck disable=SC2064
	trap "rm -rf '$tmp'" RETURN
	(cd "$tmp" && apt-get download ${suite:+-t "$suite"} linux-image-cloud-amd64 2>/dev/null) ||
		die "vm kernel: apt-get download linux-image-cloud-amd64 failed${suite:+ (is $suite in the apt sources?)}"
	meta=$(echo "$tmp"/linux-image-cloud-amd64_*.deb)
	# Depends: linux-image-6.12.95+deb12-cloud-amd64 (= 6.12.95-1~bpo12+1)
	dep=$(dpkg-deb -f "$meta" Depends)
	pkg=${dep%% *}
	ver=$(sed -n 's/.*(= \(.*\)).*/\1/p' <<<"$dep")
	(cd "$tmp" && apt-get download "$pkg=$ver" 2>/dev/null) || die "vm kernel: apt-get download $pkg=$ver failed"
	mkdir -p "$tmp/x" "$dir"
	dpkg-deb -x "$tmp/${pkg}_"*.deb "$tmp/x"
	local kver=${pkg#linux-image-}
	rm -rf "$dir/$kver.new"
	mkdir -p "$dir/$kver.new"
	cp "$tmp/x/boot/vmlinuz-$kver" "$dir/$kver.new/vmlinuz"
	cp "$tmp/x/boot/config-$kver" "$dir/$kver.new/config"
	# trixie's kernel packages ship their modules in /usr/lib/modules,
	# bookworm-backports' in /lib/modules.
	local mods=$tmp/x/usr/lib/modules/$kver
	[ -d "$mods" ] || mods=$tmp/x/lib/modules/$kver
	mv "$mods" "$dir/$kver.new/modules"
	rm -rf "${dir:?}/${kver:?}"
	mv "$dir/$kver.new" "$dir/$kver"
	ln -sfn "$kver" "$dir/current"
	log "vm kernel: $kver in $dir"
}

need_root
detect_os
install_packages
check_go
build_criu
build_runc
subids
tune_kernel
vm_support
check_criu
