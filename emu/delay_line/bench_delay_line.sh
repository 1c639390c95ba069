#!/usr/bin/env bash
# Measures rv-delay-line in two network namespaces joined by a veth pair (root):
#  - delay accuracy: ping RTT minus the baseline minus the delay, percentiles (µs), and the
#    delay line's own lateness (verdict time - due time) percentiles;
#  - the rate one TCP stream (rv-dl-tcp) sustains through it, with 0 and 20 ms, and its CPU cost
#    (the daemon's user+sys seconds per GB passed).
#
#   bench_delay_line.sh BUILD_DIR [SECONDS]     (BUILD_DIR holds rv-delay-line and rv-dl-tcp)
#
# The TCP rows queue the data direction on the receiver's side (B's PREROUTING, where the kernel
# has orphaned the packets) with the namespaces' tcp_rmem/tcp_wmem raised to 256 MiB, so that the
# window does not bound the rate; the last row queues it on the sender's OUTPUT instead, where TCP
# Small Queues throttles the sender (README.md, limits). Namespaces rvdlb<pid>a/b, removed on exit.
set -u
BUILD=${1:?usage: bench_delay_line.sh BUILD_DIR [SECONDS]}
SECS=${2:-5}
DL=$BUILD/rv-delay-line
TCP=$BUILD/rv-dl-tcp
P=rvdlb$$
A=${P}a B=${P}b
ADDR_B=10.202.0.2
TMP=$(mktemp -d /tmp/rvdl-bench.XXXXXX)
PIDS=()
IPT=$(command -v iptables-nft || command -v iptables-legacy || command -v iptables)

[ "$(id -u)" -eq 0 ] || { echo "bench_delay_line: needs root" >&2; exit 2; }
[ -x "$DL" ] && [ -x "$TCP" ] || { echo "bench_delay_line: no $DL or $TCP" >&2; exit 2; }
[ -n "$IPT" ] || { echo "bench_delay_line: needs iptables (iptables-nft)" >&2; exit 2; }

cleanup() {
  for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null; done
  ip netns del "$A" 2>/dev/null
  ip netns del "$B" 2>/dev/null
  rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 1' INT TERM
in_ns() { local ns=$1; shift; nsenter --net=/run/netns/"$ns" -- "$@"; }
die() { echo "bench_delay_line: $*" >&2; exit 1; }

ip netns add "$A" && ip netns add "$B" &&
  ip link add "${P}x" netns "$A" type veth peer name "${P}y" netns "$B" &&
  in_ns "$A" ip addr add 10.202.0.1/24 dev "${P}x" && in_ns "$B" ip addr add "$ADDR_B"/24 dev "${P}y" &&
  in_ns "$A" ip link set "${P}x" up && in_ns "$B" ip link set "${P}y" up || die "namespaces"
for ns in "$A" "$B"; do
  in_ns "$ns" sysctl -qw net.ipv4.tcp_rmem="4096 131072 268435456" \
    net.ipv4.tcp_wmem="4096 16384 268435456" || die "tcp_rmem/tcp_wmem"
done

# run_dl NS QUEUE ARGS...: starts rv-delay-line, waits until it serves; DLP its pid.
run_dl() {
  local ns=$1 q=$2
  shift 2
  nsenter --net=/run/netns/"$ns" -- "$DL" --queue "$q" "$@" >"$TMP/dl.out" 2>"$TMP/dl.err" &
  DLP=$!
  PIDS+=("$DLP")
  for _ in $(seq 100); do
    grep -q "serving queue" "$TMP/dl.err" && return 0
    sleep 0.05
  done
  die "rv-delay-line did not start: $(cat "$TMP/dl.err")"
}
stop_dl() { kill -TERM "$DLP" && wait "$DLP"; }
val() { grep -o " $1=[0-9.]*" "$TMP/dl.out" | cut -d= -f2; }
# percentiles FILE: p50 p99 p99.9 max of the numbers in FILE (one a line).
percentiles() {
  sort -g "$1" | awk '{v[NR] = $1} END {
    n = NR; split("0.5 0.99 0.999", q, " ");
    for (i = 1; i <= 3; i++) { k = int(q[i] * n + 0.999999); if (k < 1) k = 1; printf "%.0f ", v[k] }
    printf "%.0f\n", v[n] }'
}

# ---- delay accuracy: ping, 20 ms on A's output ----
in_ns "$A" ping -c 200 -i 0.005 -q "$ADDR_B" | awk -F'[/ =]+' '/^rtt/ {print $7}' >"$TMP/base"
BASE=$(cat "$TMP/base")
in_ns "$A" "$IPT" -A OUTPUT -o "${P}x" -p icmp -j NFQUEUE --queue-num 1
# accuracy_rows LABEL ARGS...: 1000 pings through rv-delay-line ARGS, two rows of percentiles.
accuracy_rows() {
  local label=$1
  shift
  run_dl "$A" 1 --delay-ms 20 "$@"
  in_ns "$A" ping -c 1000 -i 0.005 "$ADDR_B" | grep -o 'time=[0-9.]*' | cut -d= -f2 |
    awk -v b="$BASE" '{printf "%.0f\n", ($1 - b - 20) * 1000}' >"$TMP/err"
  stop_dl
  printf "  %-48s %6s %6s %6s %6s\n" "$label: ping RTT - baseline - 20 ms" $(percentiles "$TMP/err")
  printf "  %-48s %6s %6s %6s %6.0f\n" "$label: lateness (verdict - due)" "$(val p50_lateness_us)" \
    "$(val p99_lateness_us)" "$(val p999_lateness_us)" "$(val max_lateness_us)"
}
echo "Delay accuracy, 20 ms, 1000 pings 5 ms apart (baseline RTT ${BASE} ms), in µs:"
printf "  %-48s %6s %6s %6s %6s\n" "" p50 p99 p99.9 max
accuracy_rows "default policy"
accuracy_rows "--rt-priority 10" --rt-priority 10
in_ns "$A" "$IPT" -F
echo

# ---- rate and CPU ----
# tcp_row LABEL WHERE DELAY_MS [ARGS...]: WHERE is none, recv (B's PREROUTING) or send (A's
# OUTPUT); ARGS go to rv-delay-line.
tcp_row() {
  local label=$1 where=$2 delay=$3
  shift 3
  case $where in
  recv) in_ns "$B" "$IPT" -t mangle -A PREROUTING -i "${P}y" -p tcp -j NFQUEUE --queue-num 2 ;;
  send) in_ns "$A" "$IPT" -A OUTPUT -o "${P}x" -p tcp -j NFQUEUE --queue-num 2 ;;
  esac
  case $where in
  recv) run_dl "$B" 2 --delay-ms "$delay" --limit-packets 100000 "$@" ;;
  send) run_dl "$A" 2 --delay-ms "$delay" --limit-packets 100000 "$@" ;;
  esac
  nsenter --net=/run/netns/"$B" -- "$TCP" serve 5202 >"$TMP/srv.out" 2>&1 &
  local srv=$!
  PIDS+=("$srv")
  sleep 0.2
  in_ns "$A" "$TCP" send "$ADDR_B" 5202 "$SECS" >"$TMP/snd.out" 2>&1 || die "$(cat "$TMP/snd.out")"
  wait "$srv"
  local gbit bytes rtt
  gbit=$(grep -o 'gbit_s=[0-9.]*' "$TMP/srv.out" | cut -d= -f2)
  bytes=$(grep -o 'bytes=[0-9]*' "$TMP/srv.out" | cut -d= -f2)
  rtt=$(grep -o 'rtt_us=[0-9]*' "$TMP/snd.out" | cut -d= -f2)
  if [ "$where" = none ]; then
    printf "  %-34s %7.2f %7.1f %9s %7s %7s %6s %6s %6s %7s %5s\n" "$label" "$gbit" \
      "$(awk -v r="$rtt" 'BEGIN {print r / 1000}')" - - - - - - - -
    return
  fi
  stop_dl
  in_ns "$A" "$IPT" -F
  in_ns "$B" "$IPT" -t mangle -F
  local pkts cpu
  pkts=$(val passed)
  cpu=$(awk -v u="$(val cpu_user_s)" -v s="$(val cpu_sys_s)" 'BEGIN {print u + s}')
  printf "  %-34s %7.2f %7.1f %9s %7.0f %7.3f %6s %6s %6s %7s %5s\n" "$label" "$gbit" \
    "$(awk -v r="$rtt" 'BEGIN {print r / 1000}')" "$pkts" \
    "$(awk -v b="$bytes" -v p="$pkts" 'BEGIN {print p ? b / p : 0}')" \
    "$(awk -v c="$cpu" -v b="$bytes" 'BEGIN {print b ? c / (b / 1e9) : 0}')" \
    "$(val p50_lateness_us)" "$(val p99_lateness_us)" "$(val p999_lateness_us)" \
    "$(val max_lateness_us)" "$(val kernel_dropped)"
}
echo "One TCP stream, ${SECS} s (lateness in µs; B/pkt: received bytes per queued packet, GSO):"
printf "  %-34s %7s %7s %9s %7s %7s %6s %6s %6s %7s %5s\n" "" Gbit/s rtt_ms packets B/pkt \
  "cpu_s/GB" p50 p99 p99.9 max kdrop
tcp_row "no delay line" none 0
tcp_row "0 ms, receiver PREROUTING" recv 0
tcp_row "20 ms, receiver PREROUTING" recv 20
tcp_row "20 ms, receiver, --rt-priority 10" recv 20 --rt-priority 10
tcp_row "20 ms, sender OUTPUT (TSQ)" send 20
