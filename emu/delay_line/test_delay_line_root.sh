#!/usr/bin/env bash
# The delay line on the packet path (root).
#
#   test_delay_line_root.sh RV_DELAY_LINE RV_DL_TCP
#
# Part 1, two network namespaces joined by a veth pair, A's packets to B sent to an NFQUEUE in A
# (its OUTPUT chain): bad arguments and a queue already served exit 2; ping's RTT rises by the
# delay; a too-small packet limit drops packets, as many as ping lost; --limit-bytes learns the
# packets' lengths.
# Part 2, the README's placement, a star like real/kernel_network.cc (A and B on a bridge in a core
# namespace C): each node's uplink delayed as its packets enter the bridge (mangle PREROUTING,
# physdev-in) and its downlink as they leave it (mangle POSTROUTING, physdev-out), one
# rv-delay-line per queue; ping's RTT rises by 2 x (lat_a + lat_b); a TCP connection's RTT
# (`ss -ti`) is at least 0.9 x that, and its rate is not throttled (> 50 Mbit/s).
# Prints "SKIP: why" and exits 0 when not root or when ip, ping, ss, NFQUEUE or a way to add a
# queue rule (nft's queue, iptables-nft, iptables-legacy) is missing; part 2 is left out with a
# "note:" line where the bridge's netfilter hooks (br_netfilter, xt_physdev) are missing. Exit 1 on
# a failed check. Namespaces rvdl<pid>a, rvdl<pid>b, rvdl<pid>c (10.201.0.1, 10.201.0.2); they go on
# any exit, with the processes this script started.
set -u
DL=${1:?usage: test_delay_line_root.sh RV_DELAY_LINE RV_DL_TCP}
TCP=${2:?usage: test_delay_line_root.sh RV_DELAY_LINE RV_DL_TCP}
DELAY_MS=20
Q=7
P=rvdl$$
A=${P}a B=${P}b C=${P}c
ADDR_B=10.201.0.2
TMP=$(mktemp -d /tmp/rvdl-test.XXXXXX)
PIDS=()

skip() { echo "SKIP: $*"; exit 0; }
fail() { echo "FAIL: $*"; exit 1; }
ok() { echo "ok: $*"; }
in_ns() { local ns=$1; shift; nsenter --net=/run/netns/"$ns" -- "$@"; }

cleanup() {
  for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null; done
  for ns in "$A" "$B" "$C"; do ip netns del "$ns" 2>/dev/null; done
  rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

# ---- without root: arguments ----
"$DL" --queue 1 >/dev/null 2>&1
[ $? -eq 2 ] || fail "a missing --delay-ms should exit 2"
"$DL" --queue 70000 --delay-ms 1 >/dev/null 2>&1
[ $? -eq 2 ] || fail "--queue 70000 should exit 2"
"$DL" --queue 1 --delay-ms -1 >/dev/null 2>&1
[ $? -eq 2 ] || fail "--delay-ms -1 should exit 2"
ok "bad arguments exit 2"

[ "$(id -u)" -eq 0 ] || skip "not root (the namespaces and NFQUEUE need CAP_NET_ADMIN)"
for t in ip ping ss nsenter awk; do
  command -v "$t" >/dev/null || skip "$t is not installed"
done
[ -e /proc/net/netfilter/nfnetlink_queue ] || modprobe nfnetlink_queue 2>/dev/null
[ -e /proc/net/netfilter/nfnetlink_queue ] || skip "this kernel has no NFQUEUE (nfnetlink_queue)"

ip netns add "$A" || fail "ip netns add $A"
ip netns add "$B" || fail "ip netns add $B"
ip link add "${P}x" netns "$A" type veth peer name "${P}y" netns "$B" || fail "veth pair"
in_ns "$A" ip addr add 10.201.0.1/24 dev "${P}x" && in_ns "$B" ip addr add "$ADDR_B"/24 dev "${P}y" &&
  in_ns "$A" ip link set "${P}x" up && in_ns "$B" ip link set "${P}y" up &&
  in_ns "$A" ip link set lo up && in_ns "$B" ip link set lo up || fail "addresses and links"

# ---- the queue rule in A: nft's own queue statement, else the xt NFQUEUE target ----
BACKEND=""
# queue_rule: sends A's IPv4 packets leaving by the veth to queue Q.
queue_rule() {
  case $BACKEND in
  nft)
    in_ns "$A" nft add chain inet rvdl output "{ type filter hook output priority 0; }" &&
      in_ns "$A" nft add rule inet rvdl output meta nfproto ipv4 oifname "${P}x" queue num "$Q"
    ;;
  *) in_ns "$A" "$BACKEND" -A OUTPUT -o "${P}x" -j NFQUEUE --queue-num "$Q" ;;
  esac
}
clear_rules() {
  case $BACKEND in
  nft) in_ns "$A" nft flush ruleset ;;
  *) in_ns "$A" "$BACKEND" -F ;;
  esac
}
for b in nft iptables-nft iptables-legacy iptables; do
  command -v "$b" >/dev/null || continue
  BACKEND=$b
  if [ "$b" = nft ]; then in_ns "$A" nft add table inet rvdl 2>/dev/null || continue; fi
  if queue_rule 2>/dev/null; then break; fi
  clear_rules 2>/dev/null
  BACKEND=""
done
[ -n "$BACKEND" ] || skip "no way to add an NFQUEUE rule (nft queue, iptables-nft, iptables-legacy)"
echo "queue rules by: $BACKEND"

# ---- helpers ----
declare -A DLPID
# start_dl NAME NS QUEUE ARGS...: rv-delay-line on QUEUE in NS, its output in $TMP/NAME.*; waits
# until it serves.
start_dl() {
  local name=$1 ns=$2 q=$3
  shift 3
  # nsenter execs the program: $! is rv-delay-line's pid (a function in the background's is not)
  nsenter --net=/run/netns/"$ns" -- "$DL" --queue "$q" "$@" >"$TMP/$name.out" 2>"$TMP/$name.err" &
  DLPID[$name]=$!
  PIDS+=("$!")
  for _ in $(seq 100); do
    grep -q "serving queue" "$TMP/$name.err" && return 0
    kill -0 "${DLPID[$name]}" 2>/dev/null || break
    sleep 0.05
  done
  fail "rv-delay-line did not start: $(cat "$TMP/$name.err")"
}
# stop_dl NAME: SIGTERM; its counts line stays in $TMP/NAME.out.
stop_dl() {
  kill -TERM "${DLPID[$1]}"
  wait "${DLPID[$1]}" || fail "rv-delay-line exited $? ($(cat "$TMP/$1.err"))"
  echo "  $(cat "$TMP/$1.out")"
}
# count NAME KEY: KEY's value in NAME's counts line.
count() { grep -o " $2=[0-9.]*" "$TMP/$1.out" | cut -d= -f2; }
# ping_rtt ARGS...: ping from A to B; prints min and avg RTT in ms.
ping_rtt() {
  in_ns "$A" ping -q "$@" "$ADDR_B" | awk -F'[/ =]+' '/^rtt/ {print $6, $7}'
}
# check_between NAME VALUE LO HI
check_between() {
  awk -v v="$2" -v lo="$3" -v hi="$4" 'BEGIN {exit !(v >= lo && v <= hi)}' ||
    fail "$1 = $2, not in [$3, $4]"
  ok "$1 = $2 in [$3, $4]"
}
minus() { awk -v a="$1" -v b="$2" 'BEGIN {print a - b}'; }

clear_rules
read -r _ BASE < <(ping_rtt -c 10 -i 0.05)
[ -n "${BASE:-}" ] || fail "no ping between the namespaces"
echo "baseline RTT: $BASE ms"

# ---- part 1: A's output, DELAY_MS ----
[ "$BACKEND" = nft ] && in_ns "$A" nft add table inet rvdl
queue_rule || fail "queue rule"
start_dl one "$A" "$Q" --delay-ms "$DELAY_MS"
in_ns "$A" "$DL" --queue "$Q" --delay-ms 1 >/dev/null 2>"$TMP/busy.err"
[ $? -eq 2 ] || fail "a second rv-delay-line on a served queue should exit 2"
ok "a queue already served exits 2: $(head -1 "$TMP/busy.err")"
# The fastest of 20 pings: no packet passes early (the lower bound), and the delay is counted once
# (well under twice). Bounds on the mean or the tail would be bounds on this host's load: the
# lateness figures are the bench's.
read -r MIN _ < <(ping_rtt -c 20 -i 0.05)
check_between "ping min RTT - baseline (ms), delay $DELAY_MS ms one way" "$(minus "$MIN" "$BASE")" \
  "$((DELAY_MS - 1))" "$((DELAY_MS * 3 / 2))"
stop_dl one
[ "$(count one passed)" -ge 20 ] && [ "$(count one dropped)" -eq 0 ] &&
  [ "$(count one kernel_dropped)" -eq 0 ] || fail "passed >= 20, none dropped"

# A too-small limit drops (drop-tail), each counted: 50 pings, the first 10 sent at once (ping's
# preload; ping paces the rest by its replies, so only the preload is sure to overflow), at most 2
# held.
start_dl limit "$A" "$Q" --delay-ms "$DELAY_MS" --limit-packets 2
read -r SENT RECV < <(in_ns "$A" ping -q -c 50 -i 0.002 -l 10 -W 1 "$ADDR_B" |
  awk '/transmitted/ {print $1, $4}')
stop_dl limit
LOST=$((SENT - RECV))
[ "$LOST" -gt 0 ] || fail "a limit of 2 packets with 10 pings at once should lose some"
[ "$(count limit dropped)" -eq "$LOST" ] ||
  fail "dropped=$(count limit dropped) but ping lost $LOST of $SENT"
ok "limit 2: ping lost $LOST of $SENT, rv-delay-line dropped $(count limit dropped)"

# --limit-bytes learns lengths: 5 pings of 84 bytes.
start_dl bytes "$A" "$Q" --delay-ms 2 --limit-bytes 1000000
in_ns "$A" ping -q -c 5 -i 0.05 "$ADDR_B" >/dev/null || fail "ping with --limit-bytes"
stop_dl bytes
[ "$(count bytes passed_bytes)" -eq 420 ] || fail "passed_bytes=$(count bytes passed_bytes), not 5 x 84"
ok "--limit-bytes: passed_bytes = 420 (5 x 84)"
clear_rules

# ---- part 2: the star placement, in the core namespace ----
IPT=""
for b in iptables-nft iptables-legacy iptables; do
  command -v "$b" >/dev/null && IPT=$b && break
done
star_note() { echo "note: part 2 (star placement) left out: $*"; echo "PASS"; exit 0; }
[ -n "$IPT" ] || star_note "no iptables (the bridge rules use xt_physdev)"
in_ns "$A" ip link del "${P}x" || fail "removing the veth pair"
ip netns add "$C" || fail "ip netns add $C"
in_ns "$C" ip link add br0 type bridge && in_ns "$C" ip link set br0 up && in_ns "$C" ip link set lo up ||
  fail "bridge"
for n in a b; do
  ns=${P}$n
  ip link add "p$n" netns "$C" type veth peer name "${P}$n" netns "$ns" &&
    in_ns "$C" ip link set "p$n" master br0 up && in_ns "$ns" ip link set "${P}$n" up || fail "star link $n"
done
in_ns "$A" ip addr add 10.201.0.1/24 dev "${P}a" && in_ns "$B" ip addr add "$ADDR_B"/24 dev "${P}b" ||
  fail "star addresses"
[ -e /proc/sys/net/bridge ] || modprobe br_netfilter 2>/dev/null
in_ns "$C" sh -c 'echo 1 > /proc/sys/net/bridge/bridge-nf-call-iptables' 2>/dev/null ||
  star_note "no br_netfilter (net.bridge.bridge-nf-call-iptables)"
read -r _ BASE < <(ping_rtt -c 10 -i 0.05)
[ -n "${BASE:-}" ] || fail "no ping across the star"
echo "star baseline RTT: $BASE ms"
LAT_A=5 LAT_B=10
# queue 11: A's uplink, 12: A's downlink, 13: B's uplink, 14: B's downlink.
in_ns "$C" "$IPT" -t mangle -A PREROUTING -m physdev --physdev-in pa -j NFQUEUE --queue-num 11 \
  2>/dev/null || star_note "no xt_physdev"
in_ns "$C" "$IPT" -t mangle -A POSTROUTING -m physdev --physdev-out pa -j NFQUEUE --queue-num 12 &&
  in_ns "$C" "$IPT" -t mangle -A PREROUTING -m physdev --physdev-in pb -j NFQUEUE --queue-num 13 &&
  in_ns "$C" "$IPT" -t mangle -A POSTROUTING -m physdev --physdev-out pb -j NFQUEUE --queue-num 14 ||
  fail "star queue rules"
start_dl up_a "$C" 11 --delay-ms "$LAT_A"
start_dl down_a "$C" 12 --delay-ms "$LAT_A"
start_dl up_b "$C" 13 --delay-ms "$LAT_B"
start_dl down_b "$C" 14 --delay-ms "$LAT_B"
RTT=$((2 * (LAT_A + LAT_B)))
read -r MIN _ < <(ping_rtt -c 20 -i 0.05)
check_between "star: ping min RTT - baseline (ms), lat_a $LAT_A, lat_b $LAT_B" \
  "$(minus "$MIN" "$BASE")" "$((RTT - 1))" "$((RTT * 3 / 2))"

nsenter --net=/run/netns/"$B" -- "$TCP" serve 5201 >"$TMP/srv.out" 2>&1 &
SRV=$!
PIDS+=("$SRV")
sleep 0.3
nsenter --net=/run/netns/"$A" -- "$TCP" send "$ADDR_B" 5201 3 >"$TMP/snd.out" 2>&1 &
SND=$!
PIDS+=("$SND")
sleep 2
SS_RTT=$(in_ns "$A" ss -tin dst "$ADDR_B" | grep -o ' rtt:[0-9.]*' | head -1 | cut -d: -f2)
wait "$SND" || fail "rv-dl-tcp send: $(cat "$TMP/snd.out")"
wait "$SRV" || fail "rv-dl-tcp serve: $(cat "$TMP/srv.out")"
echo "  $(cat "$TMP/snd.out")"
echo "  $(cat "$TMP/srv.out")"
[ -n "$SS_RTT" ] || fail "ss -ti showed no connection"
check_between "star: TCP rtt from ss -ti (ms)" "$SS_RTT" "$(awk -v d=$RTT 'BEGIN {print 0.9 * d}')" \
  "$((RTT * 3))"
GBIT=$(grep -o 'gbit_s=[0-9.]*' "$TMP/srv.out" | cut -d= -f2)
check_between "star: TCP rate (Gbit/s), not throttled" "$GBIT" 0.05 1000
for n in up_a down_a up_b down_b; do
  stop_dl "$n"
  [ "$(count "$n" passed)" -gt 0 ] && [ "$(count "$n" dropped)" -eq 0 ] &&
    [ "$(count "$n" kernel_dropped)" -eq 0 ] || fail "$n: passed > 0, none dropped"
done
echo "PASS"
