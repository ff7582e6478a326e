#!/usr/bin/env bash
# version.sh prints the .deb's version, Debian-valid, from `git describe`:
#   tag v1.2.3                 -> 1.2.3
#   3 commits after v1.2.3     -> 1.2.3+git3.gabc1234
#   no release tag             -> 0.0~git20261120.abc1234 (commit date, UTC)
# A tree with uncommitted changes gets +dirty.
set -euo pipefail
cd "$(dirname "$0")/../.."
dirty=""
if ! git diff --quiet HEAD -- 2>/dev/null; then
	dirty="+dirty"
fi
if desc=$(git describe --tags --match 'v[0-9]*' 2>/dev/null); then
	desc=${desc#v}
	if [[ $desc =~ ^(.*)-([0-9]+)-(g[0-9a-f]+)$ ]]; then
		desc="${BASH_REMATCH[1]}+git${BASH_REMATCH[2]}.${BASH_REMATCH[3]}"
	fi
	# A Debian upstream version has no '-' (that starts the revision).
	echo "${desc//-/\~}${dirty}"
	exit 0
fi
sha=$(git describe --tags --always --abbrev=7)
date=$(TZ=UTC git log -1 --format=%cd --date=format-local:%Y%m%d)
echo "0.0~git${date}.${sha}${dirty}"
