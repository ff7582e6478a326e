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

need_qemu() {
	if [ "$(qemu_major)" -ge 8 ] && command -v qemu-img >/dev/null; then
		return 0
	fi
	local codename
	codename=$(. /etc/os-release && echo "${VERSION_CODENAME:-}")
	if [ "$codename" = bookworm ]; then
		local src=/etc/apt/sources.list.d/bookworm-backports.sources
		if ! grep -rqs 'bookworm-backports' /etc/apt/sources.list /etc/apt/sources.list.d/; then
			printf 'adding bookworm-backports to apt (%s)\n' "$src" >&2
			cat >"$src" <<'SRC'
Types: deb
URIs: http://deb.debian.org/debian
Suites: bookworm-backports
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
		fi
		apt-get -o DPkg::Lock::Timeout=600 update -qq >&2
		apt_install -t bookworm-backports qemu-system-x86 qemu-utils
	else
		apt-get -o DPkg::Lock::Timeout=600 update -qq >&2
		apt_install qemu-system-x86 qemu-utils
	fi
}
