#!/bin/sh
# make fuzz: every fuzz target (func FuzzXxx in a _test.go file under
# internal/ or cmd/) for FUZZTIME each (default 6s: 13 targets in under two
# minutes). A crash fails the run; Go writes the input that caused it to
# the package's testdata/fuzz/FuzzXxx/, where `go test` replays it as a
# regression case from then on.
#
# The fuzzing itself runs on Go 1.27 (FUZZ_TOOLCHAIN): Go 1.26's fuzz
# coordinator races its own -fuzztime deadline and can fail a target with a
# bare "context deadline exceeded" and no crasher (golang/go#75804, fixed in
# 1.27). CI hit it on FuzzInstanceConfig. The rest of the build stays on the
# toolchain go.mod names; the go command fetches this one from the module
# proxy on first use.
set -eu
cd "$(dirname "$0")/.."
fuzztime=${FUZZTIME:-6s}
go=${GO:-go}
export GOTOOLCHAIN=${FUZZ_TOOLCHAIN:-go1.27.1}
for dir in $(grep -rl --include='*_test.go' '^func Fuzz' internal cmd | xargs -n1 dirname | sort -u); do
	for target in $(grep -h '^func Fuzz' "$dir"/*_test.go | sed 's/^func \(Fuzz[A-Za-z0-9_]*\).*/\1/'); do
		echo "fuzz ./$dir $target ($fuzztime)"
		$go test -run '^$' -fuzz "^$target\$" -fuzztime "$fuzztime" "./$dir"
	done
done
