#!/usr/bin/env bash
# stress-loaded.sh: runs one test over and over on a loaded machine, the
# way rare races show up (the range-feed races of 2026-11-27 failed about
# once in 200-400 runs, and only with other test binaries running beside
# them). Builds the test's package and two load packages
# (internal/testcluster, and test/process's watch and etcd tests), runs the
# load binaries in loops, and LOOPS loops of the test, until RUNS runs
# have finished or DURATION has passed. Prints a line per failure and a
# summary; keeps each failing run's output in OUT.
#
# Usage: scripts/stress-loaded.sh PACKAGE TEST_REGEX
#   e.g. scripts/stress-loaded.sh ./internal/etcdapi TestWatchMatchesHistoryAcrossLeaseholderRestart
# Environment:
#   LOOPS     concurrent loops of the test (default 3)
#   RUNS      stop after this many runs of the test (default 400)
#   DURATION  stop after this long, in seconds (default 1800)
#   OUT       directory for binaries and failing outputs (default a new
#             temporary directory)
#   LOAD=0    run without the load binaries
#
# Tests run side by side can take each other's ports: a node stopped by one
# test frees its port, and another test's node may listen there meanwhile.
# A test that stops nodes must not count answers from another cluster
# (etcd's client checks no cluster ID; see docs/ETCD-API.md).
set -euo pipefail
if [[ $# -ne 2 ]]; then sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 2; fi
PKG=$1 TEST=$2
LOOPS=${LOOPS:-3} RUNS=${RUNS:-400} DURATION=${DURATION:-1800} LOAD=${LOAD:-1}
OUT=${OUT:-$(mktemp -d /tmp/stress-loaded.XXXXXX)}
mkdir -p "$OUT"
cd "$(dirname "$0")/.."
root=$PWD
echo "building into $OUT"
go test -c -o "$OUT/test.bin" "$PKG"
if [[ $LOAD == 1 ]]; then
	go test -c -o "$OUT/tc.bin" ./internal/testcluster
	go test -c -o "$OUT/proc.bin" ./test/process
fi
stop=$OUT/stop results=$OUT/results
rm -f "$stop" "$results"
touch "$results"
end=$((SECONDS + DURATION))
load() { # dir binary args...
	local dir=$1
	shift
	while [[ ! -e $stop ]]; do (cd "$dir" && "$@" >/dev/null 2>&1) || true; done
}
loop() {
	local i=0
	while [[ ! -e $stop ]]; do
		i=$((i + 1))
		local out=$OUT/run.$1.$i
		if (cd "$root/$PKG" && "$OUT/test.bin" -test.run "$TEST" -test.count=1 -test.v >"$out" 2>&1); then
			echo pass >>"$results"
			rm -f "$out"
		else
			echo "FAIL $out" >>"$results"
			echo "FAIL: $out"
		fi
	done
}
pids=()
if [[ $LOAD == 1 ]]; then
	load "$root/internal/testcluster" "$OUT/tc.bin" -test.count=1 &
	pids+=($!)
	load "$root/test/process" "$OUT/proc.bin" -test.count=1 -test.run 'Watch|Etcd' &
	pids+=($!)
fi
for l in $(seq 1 "$LOOPS"); do
	loop "$l" &
	pids+=($!)
done
trap 'touch "$stop"' INT TERM
while [[ ! -e $stop ]]; do
	sleep 10
	n=$(wc -l <"$results")
	f=$(grep -c FAIL "$results" || true)
	echo "$(date +%T) runs $n, failures $f"
	if ((n >= RUNS || SECONDS >= end)); then touch "$stop"; fi
done
# The load binaries may run for minutes more: end them (the test loops
# finish their current run).
pkill -f "$OUT/tc.bin" 2>/dev/null || true
pkill -f "$OUT/proc.bin" 2>/dev/null || true
wait "${pids[@]}" 2>/dev/null || true
n=$(wc -l <"$results")
f=$(grep -c FAIL "$results" || true)
echo "done: $n runs of $TEST, $f failed; outputs of failures in $OUT"
[[ $f == 0 ]]
