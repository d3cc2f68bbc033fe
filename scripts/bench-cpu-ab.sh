#!/usr/bin/env bash
# bench-cpu-ab.sh: server CPU per operation of two or more canopy binaries,
# measured side by side on this machine (docs/BENCHMARKS.md, "CPU per
# operation"). Starts one 3-node cluster per binary (`canopy start
# --insecure` processes on loopback, `canopy init --initial-ranges` RANGES (default 6),
# default settings: every Raft write synced), loads each, then runs ROUNDS
# rounds; in each round every workload runs on every cluster in turn while
# the other clusters are stopped (SIGSTOP), so that the binaries meet the
# machine's drifting load alike. Each run is one `canopy bench kv` or
# `canopy bench txn` with --pids: its "server cpu us/op" column is the user
# + system CPU of the three node processes (/proc/<pid>/stat) over the
# measured time divided by the completed operations. CPU per operation
# survives a shared machine far better than throughput does.
#
# Usage: scripts/bench-cpu-ab.sh OUT ROUNDS WORKLOADS BIN...
#   WORKLOADS  comma-separated: putN (N clients of single-key puts), txnN
#              (N clients of 2-key read-modify-write transactions)
#   BIN...     canopy binaries, one cluster each (the same binary may be
#              given twice, with SWITCHES)
# Environment:
#   DURATION   measured time of every run (default 8s; 1 s warm-up before)
#   SWITCHES   comma-separated, one per binary: off or on (canopy bench txn
#              --switches: pipelining, parallel commits and 1PC all off or
#              all on); empty: the cluster setting
#   RANGES     comma-separated, one per binary: user ranges of its cluster
#              (canopy init --initial-ranges; default 6 for every one)
#   LEASES     comma-separated, one per binary: the lease placement of its
#              cluster (canopy admin setting --lease-placement: spread or
#              oracle; empty: the default, spread); the script waits until
#              one node holds every lease before loading
#   CPUPROF=1  each node writes a CPU profile of its life to
#              OUT/c<K>-node<N>.prof (go tool pprof -top BIN OUT/c<K>-node*.prof)
#   SCRATCH    parent of the stores (default /var/tmp)
# Output: one line per run on stdout and in OUT/summary.txt: round,
# workload, cluster index, the bench's row, and from each cluster's
# /metrics the Raft messages and stream batches its nodes sent during the
# run, and the timestamps its writes waited for with the mean wait (the
# oracle's round trip: docs/BENCHMARKS.md, "What the oracle's round trip
# costs a put") (0 for a binary without those metrics); OUT/r<R>-<workload>-c<K>.txt
# is each run's full output.
set -euo pipefail
if [[ $# -lt 4 ]]; then sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 2; fi
OUT=$1 ROUNDS=$2 WL=$3
shift 3
BINS=("$@")
DURATION=${DURATION:-8s}
SCRATCH=${SCRATCH:-/var/tmp}
mkdir -p "$OUT"
ALLPIDS=()
declare -A PL HOSTS HTTP
cleanup() {
	for p in "${ALLPIDS[@]}"; do
		kill -CONT "$p" 2>/dev/null || true
		kill -TERM "$p" 2>/dev/null || true
	done
	for p in "${ALLPIDS[@]}"; do wait "$p" 2>/dev/null || true; done
	rm -rf "$SCRATCH"/bench-cpu-ab-$$-*
}
trap cleanup EXIT
port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
# ranges K: the user ranges of cluster K (RANGES, else 6).
ranges() {
	local r
	IFS=, read -ra r <<<"${RANGES:-}"
	echo "${r[$1]:-6}"
}
# leases K: the lease placement of cluster K (LEASES; empty: the default).
leases() {
	local l
	IFS=, read -ra l <<<"${LEASES:-}"
	echo "${l[$1]:-}"
}
# wait_one_leaseholder BIN HOSTS: until `canopy status` shows exactly one
# node holding leases (its last column, LEASEHOLDER OF), at most 60 s.
wait_one_leaseholder() {
	for _ in $(seq 1 60); do
		"$1" status --insecure --host "$2" 2>/dev/null | awk '/^n[0-9]+[ \t]/ { if ($NF + 0 > 0) c++ } END { exit c == 1 ? 0 : 1 }' && return 0
		sleep 1
	done
	return 1
}
for k in "${!BINS[@]}"; do
	BIN=${BINS[k]}
	while :; do # gRPC ports PORT..PORT+2, HTTP ports 100 above
		# Below the kernel's ephemeral ports (32768 and up by default), which
		# an outgoing connection may take between this check and the bind.
		PORT=$((20000 + RANDOM % 12500))
		ok=1
		for q in 0 1 2 100 101 102; do port_free $((PORT + q)) || ok=0; done
		[[ $ok == 1 ]] && break
	done
	CP=("$PORT" $((PORT + 1)) $((PORT + 2)))
	H=127.0.0.1:${CP[0]},127.0.0.1:${CP[1]},127.0.0.1:${CP[2]}
	P=()
	for i in 0 1 2; do
		n=$((i + 1))
		"$BIN" start --insecure --store "$SCRATCH/bench-cpu-ab-$$-$k-$n" --listen "127.0.0.1:${CP[i]}" \
			--http-addr "127.0.0.1:$((CP[i] + 100))" --join "$H" ${CPUPROF:+--cpuprofile "$OUT/c$k-node$n.prof"} \
			>"$OUT/c$k-node$n.log" 2>&1 &
		P+=($!)
		ALLPIDS+=($!)
	done
	sleep 2
	for t in $(seq 1 30); do
		"$BIN" init --insecure --host "127.0.0.1:${CP[0]}" --initial-ranges "$(ranges "$k")" >/dev/null 2>&1 && break
		[[ $t == 30 ]] && { echo "cluster $k: canopy init failed 30 times (see $OUT/c$k-node*.log)" >&2; exit 1; }
		sleep 1
	done
	lp=$(leases "$k")
	if [[ -n $lp ]]; then
		"$BIN" admin setting --insecure --host "$H" --lease-placement "$lp" >/dev/null
		[[ $lp != oracle ]] || wait_one_leaseholder "$BIN" "$H" || { echo "cluster $k: the leases did not gather on one node in 60 s" >&2; exit 1; }
	fi
	"$BIN" bench kv --insecure --host "$H" --load-only --out "" >/dev/null
	if [[ $WL == *txn* ]]; then "$BIN" bench txn --insecure --host "$H" --load-only --out "" >/dev/null; fi
	PL[$k]=$(IFS=,; echo "${P[*]}")
	HOSTS[$k]=$H
	HTTP[$k]="127.0.0.1:$((CP[0] + 100)) 127.0.0.1:$((CP[1] + 100)) 127.0.0.1:$((CP[2] + 100))"
done
# scrape K: Raft batches, messages and superseded appends sent by cluster K,
# and its writes' waits for a timestamp (sum in microseconds, count).
scrape() {
	local b=0 m=0 u=0 ws=0 wc=0 x y z p q
	for h in ${HTTP[$1]}; do
		read -r x y z p q < <(curl -s "http://$h/metrics" | awk '/^canopy_raft_transport_batches_sent_total/{b=$2}
			/^canopy_raft_transport_messages_sent_total/{m=$2} /^canopy_raft_appends_superseded_total/{u=$2}
			/^canopy_tso_batcher_wait_seconds_sum/{ws=$2} /^canopy_tso_batcher_wait_seconds_count/{wc=$2}
			END{printf "%d %d %d %d %d\n", b, m, u, ws * 1e6, wc}')
		b=$((b + x)) m=$((m + y)) u=$((u + z)) ws=$((ws + p)) wc=$((wc + q))
	done
	echo "$b $m $u $ws $wc"
}
switches() {
	[[ -n ${SWITCHES:-} ]] || return 0
	local s
	IFS=, read -ra s <<<"$SWITCHES"
	echo "--switches ${s[$1]}"
}
for r in $(seq 1 "$ROUNDS"); do
	for w in ${WL//,/ }; do
		for k in "${!BINS[@]}"; do
			for j in "${!BINS[@]}"; do
				if [[ $j == "$k" ]]; then sig=CONT; else sig=STOP; fi
				kill -$sig ${PL[$j]//,/ }
			done
			BIN=${BINS[k]}
			f="$OUT/r$r-$w-c$k.txt"
			m0=$(scrape "$k")
			case $w in
			put*) "$BIN" bench kv --insecure --host "${HOSTS[$k]}" --pids "${PL[$k]}" --skip-load --read-percent 0 \
				--concurrency "${w#put}" --duration "$DURATION" --out "" >"$f" 2>&1 ;;
			txn*) "$BIN" bench txn --insecure --host "${HOSTS[$k]}" --pids "${PL[$k]}" --skip-load --check=false \
				$(switches "$k") --concurrency "${w#txn}" --duration "$DURATION" --out "" >"$f" 2>&1 ;;
			*) echo "unknown workload $w" >&2; exit 2 ;;
			esac
			m1=$(scrape "$k")
			line=$(tr '\r' '\n' <"$f" | grep -E "^(put|txn) +canopy" | tr -s ' ')
			# ops is the 11th field from the end of the bench's row.
			ops=$(echo "$line" | awk '{print $(NF-10)}')
			echo "r$r $w c$k $line | $(echo "$m0 $m1" | awk -v ops="$ops" '{b=$6-$1; m=$7-$2; u=$8-$3; ws=$9-$4; wc=$10-$5;
				printf "raft batches %d msgs %d msgs/batch %.2f msgs/op %.2f superseded/op %.2f ts waits %d mean ts wait ms %.3f",
					b, m, (b>0?m/b:0), (ops>0?m/ops:0), (ops>0?u/ops:0), wc, (wc>0?ws/wc/1000:0)}')" |
				tee -a "$OUT/summary.txt"
		done
	done
done
