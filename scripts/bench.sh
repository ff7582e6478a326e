#!/usr/bin/env bash
# bench.sh — runs vessel's benchmarks (bench/*), each against a baseline
# measured in the same run, and writes their JSON to bench/results/.
#   scripts/bench.sh              all benchmarks
#   scripts/bench.sh lifecycle    one of them
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=/usr/local/sbin:$PATH
mkdir -p bench/results
benches=("$@")
if [ ${#benches[@]} -eq 0 ]; then
	for d in bench/*/main.go; do
		benches+=("$(basename "$(dirname "$d")")")
	done
fi
for b in "${benches[@]}"; do
	echo "== bench/$b" >&2
	go run "./bench/$b" -o "bench/results/$b.json" >/dev/null
	echo "   -> bench/results/$b.json" >&2
done
