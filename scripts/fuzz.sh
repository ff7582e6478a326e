#!/bin/sh
# make fuzz: every fuzz target (func FuzzXxx in a _test.go file under
# internal/ or cmd/) for FUZZTIME each (default 6s: 13 targets in under two
# minutes). A crash fails the run; Go writes the input that caused it to
# the package's testdata/fuzz/FuzzXxx/, where `go test` replays it as a
# regression case from then on.
set -eu
cd "$(dirname "$0")/.."
fuzztime=${FUZZTIME:-6s}
go=${GO:-go}
for dir in $(grep -rl --include='*_test.go' '^func Fuzz' internal cmd | xargs -n1 dirname | sort -u); do
	for target in $(grep -h '^func Fuzz' "$dir"/*_test.go | sed 's/^func \(Fuzz[A-Za-z0-9_]*\).*/\1/'); do
		echo "fuzz ./$dir $target ($fuzztime)"
		$go test -run '^$' -fuzz "^$target\$" -fuzztime "$fuzztime" "./$dir"
	done
done
