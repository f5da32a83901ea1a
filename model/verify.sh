#!/usr/bin/env bash
# Runs every model configuration through SPIN and checks the verdict each
# one must give: the safe configurations must verify, the unsafe ones must
# still produce their counterexample (so the model cannot go vacuous).
# Prints one line per configuration and a final "N passed, N failed" line;
# exits non-zero on any failure. Generated files live in a temp dir.
#   KEEP=<dir> keeps the counterexample trails there (with spin -t replays).
#   ONLY=<name> runs one configuration; SET=quick|long|all and JOBS=<n> below.
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
command -v spin >/dev/null && command -v gcc >/dev/null || { echo "model: needs spin and gcc (tools/install-deps.sh)" >&2; exit 1; }
work=$(mktemp -d -t redlock-model.XXXXXX)
trap 'rm -rf "$work"' EXIT

MEM=${MEM:-1024}   # MB per run (pan -DMEMLIM)
DEPTH=${DEPTH:-4000}
JOBS=${JOBS:-$(nproc)}  # configurations checked at once
# SET: all (default), quick (all but LONG, for make test) or long (only LONG,
# make model-long; CI runs both). LONG are the rows of over 25 seconds on one
# quiet core (model/README.md's tables), so that make test stays under 25
# minutes.
SET=${SET:-all}
LONG="fsynced-restart mutex-extend mutex-extend-late unsafe-extend-late restart-persist restart-fleet-grace clock-cross failover-durable failover-durable-long failover-not-durable-grace failback evict fair-cleanup fair-extend-skip fair-take fair-take-late unsafe-fair-take-date-grant unsafe-fair-take-late-unpins"

# name | expect (ok, or the assertion text the counterexample must hit; / separates
# alternatives) | model | mode | spin -D flags
configs=(
"mutex-writes|ok|redlock.pml|full|-DWRITES -DTMAX=4"
"mutex-extend|ok|redlock.pml|full|-DEXTEND -DTMAX=2"
"mutex-extend-late|ok|redlock.pml|full|-DEXTEND -DEXTEND_A -DNOFENCE -DTTL_A=4 -DTMAX=4"
"restart-persist|ok|redlock.pml|full|-DCRASH -DPERSIST -DTMAX=4 -DCRASH_BY=1"
"restart-fleet-grace|ok|redlock.pml|full|-DCRASH -DFLEET_PRE -DTMAX=4 -DCRASH_BY=1"
"clock-cross|ok|redlock.pml|full|-DJUMP -DCLOCK_CROSS -DTMAX=4"
"unsafe-restart-no-grace|held[0]/lastGranted|redlock.pml|full|-DCRASH -DNOGRACE"
"unsafe-grace-own-ttl|held[0]/lastGranted|redlock.pml|full|-DCRASH -DOWN -DTTL_A=5 -DTMAX=4"
"unsafe-grace-in-script|held[0]/lastGranted|redlock.pml|full|-DCRASH -DFLEET_SCRIPT -DTTL_A=5 -DTMAX=4"
"unsafe-clock-off|held[0]/lastGranted|redlock.pml|full|-DJUMP"
"unsafe-clock-own-history|held[0]/lastGranted|redlock.pml|full|-DJUMP -DCLOCK_OWN"
"unsafe-release-unordered|owner|redlock.pml|full|-DUNORDERED"
"unsafe-extend-late|grantedSince|redlock.pml|full|-DEXTEND -DEXTEND_A -DNOFENCE -DLATE_EXTEND -DTTL_A=4 -DTMAX=4"
"failover-durable|ok|redlock.pml|full|-DFAILOVER -DDURABLE -DNOGRACE -DTMAX=2"
"failover-durable-long|ok|redlock.pml|full|-DFAILOVER -DDURABLE -DNOGRACE -DTMAX=3 -DCRASH_BY=2"
"failover-not-durable-grace|ok|redlock.pml|full|-DFAILOVER -DPERSIST -DFLEET_PRE -DTMAX=4 -DCRASH_BY=0"
"unsafe-failover-not-durable-no-grace|held[0]/lastGranted|redlock.pml|full|-DFAILOVER -DNOGRACE"
"fsynced-restart|ok|redlock.pml|full|-DFSYNC -DFLEET_PRE -DTMAX=2"
"fsynced-restart-early|ok|redlock.pml|full|-DFSYNC -DFLEET_PRE -DTMAX=2 -DCRASH_BY=0"
"unsafe-fsync-after-vote|held[0]/lastGranted|redlock.pml|full|-DFSYNC -DFSYNC_LATE -DFLEET_PRE"
"unsafe-failover-persist-old|held[0]/lastGranted|redlock.pml|full|-DFAILOVER -DPERSIST -DOLDRULE -DFLEET_PRE -DTMAX=0"
"failback|ok|redlock.pml|full|-DFAILOVER -DFAILBACK -DFLEET_PRE -DTTL_A=2 -DTMAX=3 -DCRASH_BY=0"
"unsafe-failback-old|held[0]/lastGranted|redlock.pml|full|-DFAILOVER -DFAILBACK -DOLDRULE -DFLEET_PRE -DTMAX=0"
"evict|ok|redlock.pml|full|-DEVICT -DPERSIST -DFLEET_PRE -DTMAX=4 -DCRASH_BY=1"
"unsafe-evict-old|held[0]/lastGranted|redlock.pml|full|-DEVICT -DPERSIST -DOLDRULE -DFLEET_PRE -DTMAX=1"
"fair-handoff|ok|fair.pml|full|-DTMAX=3 -DWR=1"
"fair-cleanup|ok|fair.pml|full|-DTMAX=3 -DWR=1 -DGIVEUP -DNOFENCE -DDIE"
"unsafe-fair-date-grant|held[0]|fair.pml|full|-DTMAX=3 -DWR=1 -DDATE_GRANT"
"unsafe-fair-cleanup-unordered|cleaned|fair.pml|full|-DTMAX=3 -DWR=1 -DGIVEUP -DNOFENCE -DUNORDERED"
"unsafe-fair-no-expiry|dead[h]|fair.pml|full|-DTMAX=3 -DWR=1 -DGIVEUP -DNOFENCE -DDIE -DNOEXPIRY"
"fair-late-wait|ok|fair.pml|full|-DTMAX=1 -DWR=2 -DNOFENCE -DLATE"
"unsafe-fair-late-wait-unpins|relied/held[0]|fair.pml|full|-DTMAX=1 -DWR=2 -DNOFENCE -DLATE -DUNPIN_ANY"
"fair-extend-skip|ok|fair.pml|full|-DTMAX=2 -DWR=1 -DSKIP -DEXTEND"
"unsafe-fair-extend-unpinned|relied|fair.pml|full|-DTMAX=2 -DWR=1 -DSKIP -DEXTEND -DEXT_UNPINNED"
"fair-take|ok|fair.pml|full|-DTMAX=3 -DWR=1 -DCR=2 -DTAKE"
"fair-take-late|ok|fair.pml|full|-DTMAX=2 -DWR=1 -DCR=2 -DNOFENCE -DLATE -DTAKE"
"unsafe-fair-take-date-grant|held[0]|fair.pml|full|-DTMAX=3 -DWR=1 -DCR=2 -DTAKE -DDATE_GRANT"
"unsafe-fair-take-late-unpins|relied/held[0]|fair.pml|full|-DTMAX=2 -DWR=1 -DCR=2 -DNOFENCE -DLATE -DTAKE -DUNPIN_ANY"
"semaphore-qk|ok|semaphore.pml|full|"
"unsafe-semaphore-majority|holders|semaphore.pml|full|-DQS=3"
"rwlock-majority|ok|rwlock.pml|full|-DN=3"
"unsafe-rwlock-naive|wheld|rwlock.pml|full|-DN=3 -DNAIVE"
)

# check runs one configuration and leaves its table line (and, on a
# failure, the end of pan's log) in $work/<name>.out, and pass or FAIL in
# $work/<name>.verdict.
check() {
	local name=$1 expect=$2 model=$3 mode=$4 flags=$5
	local d="$work/$name" out="$work/$name.out"
	mkdir -p "$d"; cp "$here"/*.pml "$d/"
	local start=$EPOCHREALTIME
	local cflags="-O2 -w -DSAFETY -DREVERSE -DMEMLIM=$MEM"
	[ "$mode" = full ] && cflags="$cflags -DCOLLAPSE"
	[ "$mode" = bit ] && cflags="$cflags -DBITSTATE"
	# shellcheck disable=SC2086
	if ! (cd "$d" && spin $flags -a "$model" >spin.log 2>&1 && gcc $cflags -o pan pan.c 2>gcc.log); then
		{ echo "$name: spin/gcc failed"; cat "$d"/spin.log "$d"/gcc.log 2>/dev/null | tail -5; } >"$out"
		echo FAIL >"$work/$name.verdict"; return
	fi
	local run="-m$DEPTH -c1"; [ "$mode" = bit ] && run="$run -w27"
	# shellcheck disable=SC2086
	(cd "$d" && ./pan $run >pan.log 2>&1)
	local secs errors states depth bounded="" got=ok verdict=FAIL short
	secs=$(awk -v a="$start" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }')
	errors=$(sed -n 's/.*errors: \([0-9]*\).*/\1/p' "$d/pan.log" | tail -1)
	states=$(sed -n 's/^ *\([0-9.e+]*\) states, stored.*/\1/p' "$d/pan.log" | tail -1)
	depth=$(sed -n 's/.*depth reached \([0-9]*\).*/\1/p' "$d/pan.log" | tail -1)
	grep -q "reached -DMEMLIM bound\|max search depth too small" "$d/pan.log" && bounded=" (search cut by a bound)"
	if [ "${errors:-x}" != 0 ]; then
		got=$(sed -n 's/^pan:1: \(.*\) (at depth.*/\1/p' "$d/pan.log" | head -1)
		[ -z "$got" ] && got="no-verdict"
	fi
	if [ "$expect" = ok ]; then
		[ "$got" = ok ] && [ -z "$bounded" ] && verdict=pass
	else
		IFS=/ read -ra alts <<<"$expect"
		for alt in "${alts[@]}"; do case "$got" in *"$alt"*) verdict=pass ;; esac; done
	fi
	short=$got; [ "$got" != ok ] && short=violation
	printf '%-30s %-10s %-10s %12s %6s %8.1f %s%s\n' "$name" "$([ "$expect" = ok ] && echo ok || echo violation)" "$short" "${states:-?}" "${depth:-?}" "$secs" "$verdict" "$bounded" >"$out"
	[ "$verdict" = pass ] || tail -5 "$d/pan.log" >>"$out"
	if [ -n "${KEEP:-}" ] && [ -f "$d/$model.trail" ]; then
		mkdir -p "$KEEP"
		# shellcheck disable=SC2086
		(cd "$d" && spin $flags -t -p -g -l "$model" >"$KEEP/$name.replay" 2>&1; cp "$model.trail" "$KEEP/$name.trail")
	fi
	rm -rf "$d"
	echo "$verdict" >"$work/$name.verdict"
}

# The configurations chosen by ONLY and SET, run JOBS at a time (each is one
# single-threaded pan), their lines printed in the table's order.
names=()
for line in "${configs[@]}"; do
	IFS='|' read -r name expect model mode flags <<<"$line"
	[ -n "${ONLY:-}" ] && [ "$ONLY" != "$name" ] && continue
	long=no; case " $LONG " in *" $name "*) long=yes ;; esac
	[ "$SET" = quick ] && [ $long = yes ] && continue
	[ "$SET" = long ] && [ $long = no ] && continue
	while [ "$(jobs -rp | wc -l)" -ge "$JOBS" ]; do wait -n || true; done
	check "$name" "$expect" "$model" "$mode" "$flags" &
	names+=("$name")
done
wait
pass=0 fail=0
printf '%-30s %-10s %-10s %12s %6s %8s\n' config expected got states depth seconds
for name in "${names[@]}"; do
	cat "$work/$name.out"
	if [ "$(cat "$work/$name.verdict" 2>/dev/null)" = pass ]; then pass=$((pass+1)); else fail=$((fail+1)); fi
done
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
