#!/usr/bin/env bash
# bench-vs-etcd.sh: Canopy and etcd side by side on this machine (issue 7,
# item 8). Starts three etcd members and three `canopy start` nodes on
# loopback, runs put, linearizable get and 2-key transactions on both at
# each client count, alternating (etcd point, Canopy point, ...) with the
# idle cluster paused (SIGSTOP) during the other's runs, measures the
# servers' CPU time per operation from /proc/<pid>/stat, and writes a
# combined table with Canopy/etcd ratios (markdown, CSV, PNG).
# docs/BENCHMARKS.md ("Canopy against etcd") says what is measured.
#
# Usage: scripts/bench-vs-etcd.sh [--quick] [--duration 10s] [--clients 1,16,64,256] [--out DIR]
#
# Environment (flags win):
#   DURATION      measured time of every point (default 10s; QUICK: 2s)
#   QUICK=1       2 s per point, clients 1,16 only: a check that it all works
#   CLIENTS       client counts (default 1,16,64,256; QUICK: 1,16)
#   OUT           output directory (default docs/bench-vs-etcd in the
#                 repository; relative to the working directory): compare.md,
#                 compare.csv, compare.png, run.txt (the runs' tables), raw/
#                 (one CSV per point)
#   WORKLOADS     subset of put,get,txn (default all three)
#   SYSTEMS       subset of etcd,canopy,canopy-etcd (default all three):
#                 canopy-etcd is the Canopy cluster driven through the etcd
#                 v3 API its nodes serve (the same etcd client as for etcd),
#                 compared with both in compare-etcdapi.md / -vs-canopy.md
#   WARMUP        uncounted warm-up of every point (default 1s)
#   KEYS, VALUE_BYTES, OPS_MAX   keyspace, value size, ops bound of a point
#                 (defaults 10000, 256, 1000000)
#   INITIAL_RANGES  Canopy user ranges (default 6, as `canopy bench kv`)
#   LEASES        Canopy's lease placement (canopy admin setting
#                 --lease-placement). Default oracle: every lease with the
#                 timestamp oracle's host, so that each system has one node
#                 doing every leader's work, as etcd's single leader does
#                 (like for like; the script waits until one node holds
#                 every lease). spread: Canopy's cluster default, each
#                 range's lease at its own position (on one machine it pays
#                 for the hops between leaseholders and the oracle without
#                 gaining cores; docs/BENCHMARKS.md, "Lease placement")
#   CANOPY_BIN    use this canopy binary instead of building ./cmd/canopy
#   ETCD_BIN      etcd binary (default: etcd on PATH; else Debian's
#                 etcd-server is installed with apt-get, as root)
#   SCRATCH       parent of the temporary data directories (default /var/tmp)
#   KEEP_SCRATCH=1  keep the data directories and logs after the run
#   ETCD_PORT, CANOPY_PORT  first client port of each cluster (defaults
#                 23791 and 26357; three consecutive ports each, etcd's peer
#                 ports at ETCD_PORT+10...)
#
# Every point is bounded (DURATION + WARMUP, at most OPS_MAX operations,
# and a hard `timeout`); every started process is stopped on exit.
set -euo pipefail

QUICK=${QUICK:-0}
DURATION=${DURATION:-}
CLIENTS=${CLIENTS:-}
OUT=${OUT:-}
while [[ $# -gt 0 ]]; do
	case $1 in
	--quick) QUICK=1 ;;
	--duration) DURATION=$2; shift ;;
	--clients) CLIENTS=$2; shift ;;
	--out) OUT=$2; shift ;;
	-h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
	*) echo "unknown argument $1 (see --help)" >&2; exit 2 ;;
	esac
	shift
done
if [[ $QUICK == 1 ]]; then
	DURATION=${DURATION:-2s}
	CLIENTS=${CLIENTS:-1,16}
fi
DURATION=${DURATION:-10s}
CLIENTS=${CLIENTS:-1,16,64,256}
[[ $DURATION =~ ^[0-9]+$ ]] && DURATION=${DURATION}s
WORKLOADS=${WORKLOADS:-put,get,txn}
SYSTEMS=${SYSTEMS:-etcd,canopy,canopy-etcd}
WARMUP=${WARMUP:-1s}
KEYS=${KEYS:-10000}
VALUE_BYTES=${VALUE_BYTES:-256}
OPS_MAX=${OPS_MAX:-1000000}
INITIAL_RANGES=${INITIAL_RANGES:-6}
SCRATCH=${SCRATCH:-/var/tmp}
ETCD_PORT=${ETCD_PORT:-23791}
CANOPY_PORT=${CANOPY_PORT:-26357}

log() { echo "[bench-vs-etcd $(date -u +%H:%M:%S)] $*" >&2; }
die() { log "error: $*"; exit 1; }

# seconds converts a Go duration of whole seconds or milliseconds ("10s",
# "500ms", "2m") to whole seconds, rounded up, for timeout.
seconds() {
	local d=$1
	case $d in
	*ms) echo $(((${d%ms} + 999) / 1000)) ;;
	*s) echo "${d%s}" ;;
	*m) echo $((${d%m} * 60)) ;;
	*) die "duration $d: use s, ms or m" ;;
	esac
}
RUN_TIMEOUT=$(($(seconds "$DURATION") + $(seconds "$WARMUP") + 120))

# OUT given is relative to the working directory; the default is in the
# repository.
REPO=$(cd "$(dirname "$0")/.." && pwd)
OUT=${OUT:-$REPO/docs/bench-vs-etcd}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
cd "$REPO"
RAW=$OUT/raw
mkdir -p "$RAW"
rm -f "$RAW"/*.csv "$OUT/run.txt"

TMP=$(mktemp -d "$SCRATCH/bench-vs-etcd.XXXXXX")
ETCD_PIDS=()
CANOPY_PIDS=()

# cleanup stops every process this script started: resumed first (a
# stopped process does not act on SIGTERM), then SIGTERM, then SIGKILL
# for any still alive after 10 s.
cleanup() {
	local rc=$?
	local pids=("${ETCD_PIDS[@]}" "${CANOPY_PIDS[@]}")
	if [[ ${#pids[@]} -gt 0 ]]; then
		kill -CONT "${pids[@]}" 2>/dev/null || true
		kill -TERM "${pids[@]}" 2>/dev/null || true
		for _ in $(seq 1 100); do
			local alive=0
			for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
			[[ $alive == 0 ]] && break
			sleep 0.1
		done
		kill -KILL "${pids[@]}" 2>/dev/null || true
		wait 2>/dev/null || true
	fi
	if [[ ${KEEP_SCRATCH:-0} == 1 || $rc != 0 ]]; then
		log "data directories and logs kept in $TMP"
	else
		rm -rf "$TMP"
	fi
	exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

wait_port() {
	for _ in $(seq 1 300); do
		port_open "$1" && return 0
		sleep 0.1
	done
	die "nothing listens on 127.0.0.1:$1 after 30 s (logs in $TMP)"
}

# --- etcd ---------------------------------------------------------------
ETCD=${ETCD_BIN:-$(command -v etcd || true)}
if [[ -z $ETCD ]]; then
	[[ $(id -u) == 0 ]] || die "etcd is not installed: apt-get install etcd-server (as root), or set ETCD_BIN"
	log "installing etcd-server from the Debian archive:"
	apt-cache policy etcd-server >&2 || true
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -q >&2
	apt-get install -y -q etcd-server >&2
	ETCD=$(command -v etcd || echo /usr/bin/etcd)
fi
[[ -x $ETCD ]] || die "$ETCD is not executable"
# Not `| head -1`: with pipefail, etcd's SIGPIPE on the lines head
# does not read would fail the script.
ETCD_VERSION=$("$ETCD" --version)
ETCD_VERSION=${ETCD_VERSION%%$'\n'*}
log "etcd: $ETCD ($ETCD_VERSION)"
if pgrep -x etcd >/dev/null; then
	log "warning: etcd processes not started by this script are running (pgrep -x etcd: $(pgrep -x etcd | tr '\n' ' ')); they share the machine with the measurements"
fi

# --- canopy -------------------------------------------------------------
if [[ -n ${CANOPY_BIN:-} ]]; then
	CANOPY=$CANOPY_BIN
	CANOPY_DESC="binary $CANOPY_BIN${CANOPY_COMMIT:+ (built from $CANOPY_COMMIT)}"
else
	log "building canopy..."
	go build -o "$TMP/canopy" ./cmd/canopy
	CANOPY=$TMP/canopy
	CANOPY_DESC="built from $(git -C "$REPO" rev-parse --short HEAD 2>/dev/null || echo 'an unknown commit')"
	if [[ -n $(git -C "$REPO" status --porcelain --untracked-files=no 2>/dev/null) ]]; then
		CANOPY_DESC+=" with uncommitted changes"
	fi
fi

EC=("$ETCD_PORT" $((ETCD_PORT + 1)) $((ETCD_PORT + 2)))
EPEER=($((ETCD_PORT + 10)) $((ETCD_PORT + 11)) $((ETCD_PORT + 12)))
CP=("$CANOPY_PORT" $((CANOPY_PORT + 1)) $((CANOPY_PORT + 2)))
for p in "${EC[@]}" "${EPEER[@]}" "${CP[@]}"; do
	port_open "$p" && die "127.0.0.1:$p is in use; choose other ports with ETCD_PORT and CANOPY_PORT"
done
ENDPOINTS=127.0.0.1:${EC[0]},127.0.0.1:${EC[1]},127.0.0.1:${EC[2]}
HOSTS=127.0.0.1:${CP[0]},127.0.0.1:${CP[1]},127.0.0.1:${CP[2]}

INITIAL_CLUSTER=e1=http://127.0.0.1:${EPEER[0]},e2=http://127.0.0.1:${EPEER[1]},e3=http://127.0.0.1:${EPEER[2]}
log "starting 3 etcd members (clients on $ENDPOINTS), data in $TMP"
for i in 0 1 2; do
	n=$((i + 1))
	"$ETCD" --name "e$n" --data-dir "$TMP/etcd$n" \
		--listen-client-urls "http://127.0.0.1:${EC[i]}" --advertise-client-urls "http://127.0.0.1:${EC[i]}" \
		--listen-peer-urls "http://127.0.0.1:${EPEER[i]}" --initial-advertise-peer-urls "http://127.0.0.1:${EPEER[i]}" \
		--initial-cluster "$INITIAL_CLUSTER" --initial-cluster-token "bench-vs-etcd-$$" --initial-cluster-state new \
		--logger zap --log-level warn >"$TMP/etcd$n.log" 2>&1 &
	ETCD_PIDS+=($!)
done
log "starting 3 canopy nodes (on $HOSTS)"
for i in 0 1 2; do
	n=$((i + 1))
	"$CANOPY" start --insecure --store "$TMP/canopy$n" --listen "127.0.0.1:${CP[i]}" --join "$HOSTS" >"$TMP/canopy$n.log" 2>&1 &
	CANOPY_PIDS+=($!)
done
for p in "${EC[@]}" "${CP[@]}"; do wait_port "$p"; done
for t in $(seq 1 30); do
	if "$CANOPY" init --insecure --host "127.0.0.1:${CP[0]}" --initial-ranges "$INITIAL_RANGES" >"$TMP/init.out" 2>&1; then
		cat "$TMP/init.out" >&2
		break
	fi
	[[ $t == 30 ]] && { cat "$TMP/init.out" >&2; die "canopy init failed 30 times"; }
	sleep 1
done
LEASES=${LEASES:-oracle}
if [[ $LEASES != spread ]]; then
	"$CANOPY" admin setting --insecure --host "$HOSTS" --lease-placement "$LEASES" >&2
	if [[ $LEASES == oracle ]]; then
		for t in $(seq 1 60); do
			"$CANOPY" status --insecure --host "$HOSTS" 2>/dev/null |
				awk '/^n[0-9]+[ \t]/ { if ($NF + 0 > 0) c++ } END { exit c == 1 ? 0 : 1 }' && break
			[[ $t == 60 ]] && die "the leases did not gather on one node in 60 s"
			sleep 1
		done
		log "every Canopy lease on one node (--lease-placement oracle)"
	fi
fi
ETCD_PID_LIST=$(IFS=,; echo "${ETCD_PIDS[*]}")
CANOPY_PID_LIST=$(IFS=,; echo "${CANOPY_PIDS[*]}")
log "etcd pids $ETCD_PID_LIST; canopy pids $CANOPY_PID_LIST"

# only runs system $1 (etcd, or canopy and canopy-etcd, which are the
# Canopy cluster): the other's processes are stopped.
only() {
	if [[ $1 == etcd ]]; then
		kill -STOP "${CANOPY_PIDS[@]}"
		kill -CONT "${ETCD_PIDS[@]}"
	else
		kill -STOP "${ETCD_PIDS[@]}"
		kill -CONT "${CANOPY_PIDS[@]}"
	fi
	sleep "${SETTLE:-1}" # let heartbeats catch up after a pause
}

# bench SYSTEM kv|txn ARGS...: canopy bench against one system, its
# servers' CPU measured, bounded by timeout.
bench() {
	local sys=$1 kind=$2
	shift 2
	# etcd runs without TLS here, and so does Canopy (--insecure), so
	# that neither pays for encryption the other skips.
	local target=(--target canopy --insecure --host "$HOSTS" --pids "$CANOPY_PID_LIST")
	[[ $sys == etcd ]] && target=(--target etcd --endpoints "$ENDPOINTS" --pids "$ETCD_PID_LIST")
	[[ $sys == canopy-etcd ]] && target=(--target etcd --endpoints "$HOSTS" --pids "$CANOPY_PID_LIST" --label canopy-etcd)
	timeout --signal=TERM --kill-after=10 "$RUN_TIMEOUT" \
		"$CANOPY" bench "$kind" "${target[@]}" --keys "$KEYS" --value-bytes "$VALUE_BYTES" "$@"
}

STARTED=$(date -u +"%Y-%m-%d %H:%M UTC")
{
	echo "scripts/bench-vs-etcd.sh: DURATION=$DURATION WARMUP=$WARMUP CLIENTS=$CLIENTS WORKLOADS=$WORKLOADS SYSTEMS=$SYSTEMS KEYS=$KEYS VALUE_BYTES=$VALUE_BYTES OPS_MAX=$OPS_MAX"
	echo "canopy: $CANOPY_DESC; etcd: $ETCD_VERSION; started $STARTED"
} | tee -a "$OUT/run.txt"

# cpu_ticks PID...: user + system CPU time of the processes so far, in
# clock ticks (1/100 s): fields 14 and 15 of /proc/<pid>/stat, counted
# after the command name, which may hold spaces.
cpu_ticks() {
	local t=0 p
	for p in "$@"; do
		t=$((t + $(awk '{sub(/^.*\) /, ""); print $12 + $13}' "/proc/$p/stat")))
	done
	echo "$t"
}

# What each cluster costs doing nothing (no client, before loading), in
# percent of one CPU: Raft ticks, heartbeats, background loops. It is part
# of every point's server CPU; at low throughput it weighs on CPU per op.
IDLE_SECONDS=${IDLE_SECONDS:-5}
declare -A IDLE_CPU
for sys in etcd canopy; do
	only "$sys"
	if [[ $sys == etcd ]]; then pids=("${ETCD_PIDS[@]}"); else pids=("${CANOPY_PIDS[@]}"); fi
	before=$(cpu_ticks "${pids[@]}")
	sleep "$IDLE_SECONDS"
	after=$(cpu_ticks "${pids[@]}")
	IDLE_CPU[$sys]=$(((after - before) / IDLE_SECONDS))
	log "$sys idle: ${IDLE_CPU[$sys]}% of one CPU over ${IDLE_SECONDS}s"
done
echo "idle server CPU over ${IDLE_SECONDS}s, no client: etcd ${IDLE_CPU[etcd]}%, canopy ${IDLE_CPU[canopy]}% of one CPU" >>"$OUT/run.txt"

IFS=, read -r -a SYSTEM_LIST <<<"$SYSTEMS"
for sys in "${SYSTEM_LIST[@]}"; do
	only "$sys"
	log "loading $sys: $KEYS keys for put/get, $KEYS for txn"
	bench "$sys" kv --load-only >>"$OUT/run.txt"
	bench "$sys" txn --load-only >>"$OUT/run.txt"
done

IFS=, read -r -a CLIENT_LIST <<<"$CLIENTS"
IFS=, read -r -a WORKLOAD_LIST <<<"$WORKLOADS"
LAST_CLIENTS=${CLIENT_LIST[${#CLIENT_LIST[@]}-1]}
seq=0
for wl in "${WORKLOAD_LIST[@]}"; do
	for c in "${CLIENT_LIST[@]}"; do
		for sys in "${SYSTEM_LIST[@]}"; do
			seq=$((seq + 1))
			only "$sys"
			out=$RAW/$(printf '%02d' $seq)-$wl-c$c-$sys
			common=(--skip-load --concurrency "$c" --duration "$DURATION" --warmup "$WARMUP" --ops-max "$OPS_MAX" --plot=false --out "$out")
			log "point $seq: $wl, $c clients, $sys"
			rc=0
			case $wl in
			put) bench "$sys" kv --read-percent 0 "${common[@]}" ;;
			get) bench "$sys" kv --read-percent 100 "${common[@]}" ;;
			# The total is checked once per system, after its last txn
			# point (transfers keep it whatever happens in between).
			txn)
				check=false
				[[ $c == "$LAST_CLIENTS" ]] && check=true
				bench "$sys" txn --check=$check "${common[@]}"
				;;
			*) die "unknown workload $wl (want put, get or txn)" ;;
			esac >"$TMP/point.out" || rc=$?
			cat "$TMP/point.out" >>"$OUT/run.txt"
			grep -E '^(put|get|txn) |total balance' "$TMP/point.out" >&2 || true
			[[ $rc == 0 ]] || die "point $seq failed with status $rc (see $OUT/run.txt)"
		done
	done
done
# Both clusters run again for the exit (and for nothing else).
kill -CONT "${ETCD_PIDS[@]}" "${CANOPY_PIDS[@]}"

FINISHED=$(date -u +"%Y-%m-%d %H:%M UTC")
FS=$(df -T "$TMP" | awk 'NR==2 {print $2}')
"$CANOPY" bench compare --in "$RAW" --out "$OUT/compare" --title "Canopy against etcd" \
	--note "Command: QUICK=$QUICK DURATION=$DURATION CLIENTS=$CLIENTS WORKLOADS=$WORKLOADS scripts/bench-vs-etcd.sh; run $STARTED to $FINISHED" \
	--note "Canopy: $CANOPY_DESC; 3 \`canopy start\` processes on loopback, \`canopy init --initial-ranges $INITIAL_RANGES\`, lease placement $LEASES, otherwise default settings (every Raft write synced)" \
	--note "etcd: $ETCD_VERSION (Debian etcd-server); 3 members on loopback, default settings (every Raft write synced, no auto-compaction); client go.etcd.io/etcd/client/v3 $(go -C "$REPO" list -m -f '{{.Version}}' go.etcd.io/etcd/client/v3 2>/dev/null || echo '?')" \
	--note "Each point: $WARMUP uncounted warm-up, then $DURATION measured (at most $OPS_MAX ops); $KEYS keys, $VALUE_BYTES-byte values, keys uniform; one client (canopy bench kv/txn) with N goroutines; points alternate etcd, Canopy; the idle cluster is stopped (SIGSTOP) during the other's points" \
	--note "Idle servers (no client, before loading, ${IDLE_SECONDS}s): etcd used ${IDLE_CPU[etcd]}% and Canopy ${IDLE_CPU[canopy]}% of one CPU; this is inside every point's server CPU" \
	--note "Data directories on $FS ($SCRATCH); $(nproc) CPUs; $(uname -sr)" |
	tee -a "$OUT/run.txt"
if [[ ,$SYSTEMS, == *,canopy-etcd,* ]]; then
	note="Command and conditions as in compare.md; canopy-etcd: the Canopy cluster above driven through the etcd v3 API its nodes serve, by the same etcd client as etcd (one Canopy transaction per request)"
	for b in etcd canopy; do
		[[ ,$SYSTEMS, == *,$b,* ]] || continue
		name=compare-etcdapi
		[[ $b == canopy ]] && name=compare-etcdapi-vs-canopy
		"$CANOPY" bench compare --in "$RAW" --a canopy-etcd --b "$b" --out "$OUT/$name" \
			--title "Canopy through the etcd API against $b" --note "$note" | tee -a "$OUT/run.txt"
	done
fi
log "done: $OUT/compare.md, compare.csv, compare.png; the runs' tables in $OUT/run.txt"
