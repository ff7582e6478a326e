# shellcheck shell=bash
# vmlab-deps.sh — sourced by scripts/host-image and scripts/vmlab: installs
# what the guest lane needs from Debian's archive when it is missing.
#
#   need_pkgs CMD:PKG...   installs PKG unless CMD is on PATH
#   need_qemu              QEMU 10 (qemu-system-x86, qemu-utils): from
#                          bookworm-backports on Debian 12 (bookworm's 7.2
#                          is too old), from the release itself on 13+

apt_install() {
	DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y --no-install-recommends "$@" >&2
}

need_pkgs() {
	local spec missing=()
	for spec in "$@"; do
		command -v "${spec%%:*}" >/dev/null 2>&1 || missing+=("${spec#*:}")
	done
	[ ${#missing[@]} -eq 0 ] && return 0
	printf 'installing %s\n' "${missing[*]}" >&2
	apt-get -o DPkg::Lock::Timeout=600 update -qq >&2 || true
	apt_install "${missing[@]}"
}

# The installed QEMU's major version, 0 when there is none.
qemu_major() {
	local v
	v=$(qemu-system-x86_64 --version 2>/dev/null | sed -n 's/^QEMU emulator version \([0-9]*\).*/\1/p')
	echo "${v:-0}"
}

# ensure_suite SUITE: apt knows SUITE (bookworm-backports), or it is added in
# /etc/apt/sources.list.d/vessel-SUITE.sources from the mirror apt already
# uses for the release it belongs to (deb.debian.org when none is found),
# and apt's lists are updated: a fresh Debian 12 install has no backports
# source. Backports' packages are installed only when asked for (-t SUITE):
# apt pins the suite below the release, so nothing else is upgraded from it.
ensure_suite() {
	local suite=$1 uri list=/etc/apt/sources.list.d/vessel-$1.sources
	# shellcheck disable=SC2016 # apt's own $(FIELD) syntax
	if apt-get indextargets --format '$(RELEASE)' 2>/dev/null | grep -qx "$suite"; then
		return 0
	fi
	# shellcheck disable=SC2016
	uri=$(apt-get indextargets --format '$(RELEASE) $(REPO_URI)' 2>/dev/null |
		awk -v rel="${suite%%-*}" '$1 == rel {print $2; exit}')
	uri=${uri:-http://deb.debian.org/debian/}
	printf 'adding %s (%s) to apt'"'"'s sources: %s\n' "$suite" "$uri" "$list" >&2
	cat >"$list" <<SOURCES
# Added by vessel (scripts/lib/vmlab-deps.sh): QEMU 10 and the cloud kernel for VMs.
Types: deb
URIs: $uri
Suites: $suite
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SOURCES
	apt-get -o DPkg::Lock::Timeout=600 update -qq >&2
}

# qemu_suite: the suite QEMU 10 comes from, empty for the release itself.
qemu_suite() {
	local codename
	codename=$(. /etc/os-release && echo "${VERSION_CODENAME:-}")
	[ "$codename" = bookworm ] && echo bookworm-backports
	return 0
}

need_qemu() {
	if [ "$(qemu_major)" -ge 8 ] && command -v qemu-img >/dev/null; then
		return 0
	fi
	local suite
	suite=$(qemu_suite)
	printf 'installing qemu-system-x86 qemu-utils%s\n' "${suite:+ from $suite}" >&2
	[ -z "$suite" ] || ensure_suite "$suite"
	apt-get -o DPkg::Lock::Timeout=600 update -qq >&2
	apt_install ${suite:+-t "$suite"} qemu-system-x86 qemu-utils
}
