#!/bin/bash
# TCP effects bench (README.md): a 2-node star built as real/kernel_network.cc builds it (each node
# in its own network namespace, a veth to a bridge in a core namespace, htb up at the node's end
# and down at the core's port) plus rv-delay-line in the core namespace as
# emu/delay_line/README.md's "Placement" says; runs rv-msg-pattern's patterns over a grid of round
# trips, rates, sizes, gaps and buffers, and writes JSON to OUT (default /tmp/tcpfx-results).
#
#   sudo bench/tcp_effects/run.sh [OUT] [GRID]
#     GRID: full (default, ~20 min) | smoke (~1 min) | cubic (~6 min: a cross-check of (1)-(3)
#     with the node namespaces' net.ipv4.tcp_congestion_control = cubic; the host is untouched)
#     | bufretry (~1 min: four buffer cells again) | long (~2 min: a pipeline and an exchange of ~45-60 s each, for BBR's PROBE_RTT every 10 s)
#     | floor (~4 min: small-message pipelines, 1-3 in flight, for the warm floor)
#     | mixed (~1 min: one connection carrying 1 kB and 1 MB messages, for STARTUP's growth)
#
# Root only; prints SKIP and exits 0 otherwise. Builds /tmp/dl-build and /tmp/tcpfx-build when
# missing (ninja -j1). Then: /usr/bin/python3 bench/tcp_effects/analyze.py OUT
set -u
if [ "$(id -u)" != 0 ]; then echo "SKIP: run.sh needs root (namespaces, tc, iptables)"; exit 0; fi
HERE=$(cd "$(dirname "$0")" && pwd)
OUT=${1:-/tmp/tcpfx-results}
GRID=${2:-full}
DLB=${DL_BUILD:-/tmp/dl-build}
TFB=${TCPFX_BUILD:-/tmp/tcpfx-build}
DL=$DLB/rv-delay-line
MP=$TFB/rv-msg-pattern
if [ ! -x "$DL" ]; then
  cmake -S "$HERE/../../emu/delay_line" -B "$DLB" -G Ninja >/dev/null && ninja -C "$DLB" -j1 >/dev/null ||
    { echo "FAIL: cannot build rv-delay-line"; exit 1; }
fi
if [ ! -x "$MP" ]; then
  cmake -S "$HERE" -B "$TFB" -G Ninja >/dev/null && ninja -C "$TFB" -j1 >/dev/null ||
    { echo "FAIL: cannot build rv-msg-pattern"; exit 1; }
fi
IPT=$(command -v iptables || true)
[ -n "$IPT" ] || { echo "SKIP: no iptables"; exit 0; }

mkdir -p "$OUT/cells"
TAG=tfx$$
C=$TAG-core
A=$TAG-0
B=$TAG-1
DL_PIDS=()
cleanup() {
  for p in "${DL_PIDS[@]}"; do kill -TERM "$p" 2>/dev/null; done
  for p in "${DL_PIDS[@]}"; do wait "$p" 2>/dev/null; done
  ip netns delete "$A" 2>/dev/null
  ip netns delete "$B" 2>/dev/null
  ip netns delete "$C" 2>/dev/null
}
trap cleanup EXIT
trap 'exit 130' INT TERM
in_ns() { local ns=$1; shift; nsenter --net=/run/netns/"$ns" -- "$@"; }

# --- the star, as real/kernel_network.cc builds it (interface rv0, 10.213.0.r+1/16)
ip netns add "$C" || exit 1
in_ns "$C" ip link add br0 type bridge
in_ns "$C" ip link set br0 up
for r in 0 1; do
  ns=$TAG-$r
  ip netns add "$ns"
  in_ns "$C" ip link add n$r type veth peer name rv0 netns "$ns"
  in_ns "$C" ip link set n$r master br0 up
  in_ns "$ns" ip addr add 10.213.0.$((r + 1))/16 dev rv0
  in_ns "$ns" ip link set rv0 up
  in_ns "$ns" ip link set lo up
done
[ -e /proc/sys/net/bridge ] || modprobe br_netfilter 2>/dev/null
[ -e /proc/net/netfilter/nfnetlink_queue ] || modprobe nfnetlink_queue 2>/dev/null
in_ns "$C" sysctl -qw net.bridge.bridge-nf-call-iptables=1 || { echo "FAIL: no br_netfilter"; exit 1; }
# Queues 2r (r's uplink, as it enters the core) and 2r+1 (r's downlink, as it leaves the core).
# --queue-bypass: between cells, when no delay line serves them, packets pass undelayed.
for r in 0 1; do
  in_ns "$C" "$IPT" -t mangle -A PREROUTING -m physdev --physdev-in n$r \
    -j NFQUEUE --queue-num $((2 * r)) --queue-bypass || { echo "FAIL: iptables physdev"; exit 1; }
  in_ns "$C" "$IPT" -t mangle -A POSTROUTING -m physdev --physdev-out n$r \
    -j NFQUEUE --queue-num $((2 * r + 1)) --queue-bypass || exit 1
done

# cubic cross-check: each socket's TCP_CONGESTION (a namespace's default cannot be set to a
# restricted algorithm; the host's settings stay as they are)
CC=$(in_ns "$A" sysctl -n net.ipv4.tcp_congestion_control)
CCARG=()
if [ "$GRID" = cubic ]; then CC=cubic; CCARG=(--cc cubic); fi

SETTINGS=$OUT/settings.json
[ "$GRID" = full ] || SETTINGS=$OUT/settings-$GRID.json
# --- this host's TCP settings (the namespaces' own values: a new namespace takes the kernel's)
{
  echo "{"
  echo "\"kernel\": \"$(uname -r)\", \"nproc\": $(nproc),"
  for ns in host "$A"; do
    pre=(); [ "$ns" = host ] || pre=(nsenter --net=/run/netns/"$ns" --)
    echo "\"$( [ "$ns" = host ] && echo host || echo node)\": {"
    for k in tcp_congestion_control tcp_slow_start_after_idle tcp_rmem tcp_wmem tcp_no_metrics_save \
      tcp_notsent_lowat tcp_autocorking tcp_min_tso_segs tcp_limit_output_bytes tcp_adv_win_scale; do
      echo "  \"$k\": \"$("${pre[@]}" sysctl -n net.ipv4.$k | tr '\t' ' ')\","
    done
    echo "  \"default_qdisc\": \"$("${pre[@]}" sysctl -n net.core.default_qdisc)\"},"
  done
  echo "\"veth_txqueuelen\": $(in_ns "$A" cat /sys/class/net/rv0/tx_queue_len),"
  echo "\"offloads\": \"$(in_ns "$A" ethtool -k rv0 2>/dev/null | grep -E '^(tcp-segmentation|generic-segmentation|generic-receive)' | tr '\n\t' '; ' )\""
  echo "}"
} >"$SETTINGS"

# --- shaping: htb root, one class (rate = ceil), optional leaf qdisc
# leaf: default (htb's own: pfifo, limit = txqueuelen 1000) | pfifo:P | bfifo_ms:MS (MS of the rate)
shape() {  # ns dev mbit leaf
  local ns=$1 dev=$2 mbit=$3 leaf=$4
  in_ns "$ns" tc qdisc del dev "$dev" root 2>/dev/null
  in_ns "$ns" tc qdisc add dev "$dev" root handle 1: htb default 1 || return 1
  in_ns "$ns" tc class add dev "$dev" parent 1: classid 1:1 htb rate "${mbit}mbit" ceil "${mbit}mbit" || return 1
  case $leaf in
    default) ;;
    pfifo:*) in_ns "$ns" tc qdisc add dev "$dev" parent 1:1 handle 10: pfifo limit "${leaf#pfifo:}" ;;
    bfifo_ms:*)
      local ms=${leaf#bfifo_ms:}
      local bytes=$(/usr/bin/python3 -c "print(max(3028, int($mbit * 1e6 / 8 * $ms / 1000)))")
      in_ns "$ns" tc qdisc add dev "$dev" parent 1:1 handle 10: bfifo limit "$bytes" ;;
    *) echo "bad leaf $leaf"; return 1 ;;
  esac
}

qjson() {  # ns dev: tc's JSON statistics
  in_ns "$1" tc -s -j qdisc show dev "$2" 2>/dev/null || echo '[]'
}

PORT=7300
# cell NAME RTT_MS UP_A DOWN_A UP_B DOWN_B LEAF PATTERN ARGS...
cell() {
  local name=$1 rtt=$2 ua=$3 da=$4 ub=$5 db=$6 leaf=$7
  shift 7
  local try
  for try in 1 2; do
    local nm=$name
    [ "$try" = 2 ] && nm=${name}_rep
    shape "$A" rv0 "$ua" "$leaf" && shape "$C" n0 "$da" "$leaf" &&
      shape "$B" rv0 "$ub" "$leaf" && shape "$C" n1 "$db" "$leaf" || { echo "FAIL: shaping $nm"; return 1; }
    in_ns "$A" ip tcp_metrics flush all 2>/dev/null
    in_ns "$B" ip tcp_metrics flush all 2>/dev/null
    local L=$(/usr/bin/python3 -c "print($rtt / 4)")
    DL_PIDS=()
    local q
    for q in 0 1 2 3; do
      nsenter --net=/run/netns/"$C" -- "$DL" --queue $q --delay-ms "$L" --rt-priority 10 \
        >"$OUT/cells/$nm.dl$q" 2>"$OUT/cells/$nm.dl$q.err" &
      DL_PIDS+=($!)
    done
    local w
    for q in 0 1 2 3; do
      for w in $(seq 100); do grep -q serving "$OUT/cells/$nm.dl$q.err" && break; sleep 0.02; done
    done
    local load0=$(cut -d' ' -f1-3 /proc/loadavg)
    PORT=$((PORT + 1))
    local t0=$(date +%s.%N)
    timeout 300 "$MP" --ns-a /run/netns/$A --ns-b /run/netns/$B --addr-b 10.213.0.2 --port $PORT \
      --out "$OUT/cells/$nm.json" "${CCARG[@]}" "$@"
    local rc=$?
    local t1=$(date +%s.%N)
    local sa=$(qjson "$A" rv0) sb=$(qjson "$B" rv0) sca=$(qjson "$C" n0) scb=$(qjson "$C" n1)
    for q in "${DL_PIDS[@]}"; do kill -TERM "$q"; done
    for q in "${DL_PIDS[@]}"; do wait "$q"; done
    DL_PIDS=()
    local p99=$(cat "$OUT/cells/$nm".dl[0-3] | sed -n 's/.*p99_lateness_us=\([0-9.]*\).*/\1/p' | sort -g | tail -1)
    {
      echo "{\"name\":\"$nm\",\"base\":\"$name\",\"try\":$try,\"rtt_ms\":$rtt,\"up_a\":$ua,\"down_a\":$da,"
      echo "\"up_b\":$ub,\"down_b\":$db,\"leaf\":\"$leaf\",\"rc\":$rc,\"wall_s\":$(echo "$t1 - $t0" | bc),"
      echo "\"load_before\":\"$load0\",\"load_after\":\"$(cut -d' ' -f1-3 /proc/loadavg)\","
      echo "\"cc\":\"$CC\",\"dl_p99_max_us\":${p99:-null},\"args\":\"$*\","
      echo "\"dl\":["
      for q in 0 1 2 3; do echo "\"$(cat "$OUT/cells/$nm.dl$q")\"$([ $q = 3 ] || echo ,)"; done
      echo "],\"qdisc_a_up\":$sa,\"qdisc_b_up\":$sb,\"qdisc_a_down\":$sca,\"qdisc_b_down\":$scb}"
    } >"$OUT/cells/$nm.meta.json"
    rm -f "$OUT/cells/$nm".dl[0-3] "$OUT/cells/$nm".dl[0-3].err
    printf '%-40s rc=%s %6.1fs dl_p99=%sus load=%s\n' "$nm" "$rc" "$(echo "$t1 - $t0" | bc)" "${p99:-?}" "$load0" |
      tee -a "$OUT/log.txt"
    if [ -n "$p99" ] && [ "$(echo "$p99 > 1000" | bc)" = 1 ] && [ "$try" = 1 ]; then
      echo "  delay line p99 lateness > 1 ms: repeating" | tee -a "$OUT/log.txt"
      continue
    fi
    break
  done
}

MB=1000000
rate_ud() {  # name -> "up down" for both nodes
  case $1 in
    50/200) echo "50 200" ;;
    20/100) echo "20 100" ;;
    *) echo "$1 $1" ;;
  esac
}
sizes_for() {  # oneway sizes (bytes) per rate: S/rate up to ~2 s (0.1, 1, 10, 50 MB)
  case $1 in
    1) echo 100000 ;;
    10) echo 100000 1000000 ;;
    50/200 | 20/100 | 100) echo 100000 1000000 10000000 ;;
    1000) echo 100000 1000000 10000000 50000000 ;;
  esac
}
ex_size_for() {  # exchange size per rate
  case $1 in 1) echo 100000 ;; 10) echo 1000000 ;; 1000) echo 50000000 ;; *) echo 10000000 ;; esac
}
safe() { echo "$1" | tr '/' '-'; }

echo "start $(date -Is) grid=$GRID uptime: $(uptime)" | tee -a "$OUT/log.txt"
T0=$(date +%s)
SEED=59
if [ "$GRID" = smoke ]; then
  cell smoke_oneway 50 10 10 10 10 default oneway --size 1000000 --gaps 0,1 --seed $SEED
  cell smoke_exchange 50 10 10 10 10 default exchange --size 1000000 --rounds 2 --seed $SEED
  cell smoke_pipeline 50 50 200 50 200 default pipeline --act 1000000 --grad 1000000 \
    --microbatches 6 --inflight 2 --fa 0.05 --ba 0.05 --fb 0.1 --seed $SEED
elif [ "$GRID" = bufretry ]; then
  # the buffer cells of the full grid whose delay line was late (p99 > 1 ms) twice, once more
  cell "retry_bufow_r100_50-200_bfifo_ms-100_s10000000" 100 50 200 50 200 bfifo_ms:100 oneway --size 10000000 --gaps 0,0,1 --seed $SEED
  cell "retry_bufow_r100_50-200_bfifo_ms-20_s10000000" 100 50 200 50 200 bfifo_ms:20 oneway --size 10000000 --gaps 0,0,1 --seed $SEED
  cell "retry_bufex_r100_10_bfifo_ms-20_s1000000" 100 10 10 10 10 bfifo_ms:20 exchange --size 1000000 --rounds 5 --seed $SEED
  cell "retry_bufex_r100_50-200_bfifo_ms-100_s10000000" 100 50 200 50 200 bfifo_ms:100 exchange --size 10000000 --rounds 5 --seed $SEED
elif [ "$GRID" = long ]; then
  cell "long_pp_r50_50-200_k1" 50 50 200 50 200 default pipeline --act 1000000 --grad 1000000 \
    --microbatches 100 --inflight 1 --fa 0.05 --ba 0.05 --fb 0.1 --seed $SEED
  cell "long_ex_r100_50-200_s1000000" 100 50 200 50 200 default exchange --size 1000000 --rounds 200 --seed $SEED
elif [ "$GRID" = floor ]; then
  # The warm floor with several messages in flight: 2-stage pipelines of small messages (a
  # 64 x 512 float activation, 131 kB, well under a third of the bandwidth-delay product) and
  # short compute, K = 1-3 in flight, at 100 and 250 ms; and 1 MB at 1 Gbit/s, 100 ms.
  for rtt in 100 250; do
    for k in 1 2 3; do
      cell "floor_pp_r${rtt}_50-200_k${k}" $rtt 50 200 50 200 default pipeline --act 131072 \
        --grad 131072 --microbatches 40 --inflight $k --fa 0.003 --ba 0.005 --fb 0.008 --seed $SEED --jitter 0.1
    done
  done
  for k in 1 2; do
    cell "floor_pp_r100_1000_k${k}" 100 1000 1000 1000 1000 default pipeline --act 1000000 \
      --grad 1000000 --microbatches 40 --inflight $k --fa 0.003 --ba 0.005 --fb 0.008 --seed $SEED --jitter 0.1
  done
elif [ "$GRID" = mixed ]; then
  # One connection carrying messages of different sizes (two rings' steps on one pair): 1 MB to
  # warm it, ten 1 kB messages 50 ms apart (their samples set the pace), then 1 MB; at 100 and
  # 250 ms, 50/200 and 100 Mbit/s. Does the 1 MB message leave at the small ones' pace, or does
  # STARTUP raise the pace each round trip (core/network/tcp_pacing.h)? `mixed.py` reads them.
  for rtt in 100 250; do
    for rate in 50/200 100; do
      read -r u d <<<"$(rate_ud $rate)"
      cell "mixed_ow_r${rtt}_$(safe $rate)" $rtt $u $d $u $d default oneway --size 1000 \
        --sizes 1000000,1000,1000,1000,1000,1000,1000,1000,1000,1000,1000,1000000 \
        --gaps 0.05,0.05,0.05,0.05,0.05,0.05,0.05,0.05,0.05,0.05,0.05 --seed $SEED
    done
  done
elif [ "$GRID" = cubic ]; then
  for rtt in 50 100 250; do
    for rate in 50/200 100; do
      read -r u d <<<"$(rate_ud $rate)"
      for s in 1000000 10000000; do
        cell "cubic_ow_r${rtt}_$(safe $rate)_s$s" $rtt $u $d $u $d default oneway --size $s --gaps 0,0,0.1,1,1 --seed $SEED
      done
    done
  done
  for rtt in 10 100; do
    for rate in 10 50/200; do
      read -r u d <<<"$(rate_ud $rate)"
      s=$(ex_size_for $rate)
      cell "cubic_ex_r${rtt}_$(safe $rate)_s$s" $rtt $u $d $u $d default exchange --size $s --rounds 5 --seed $SEED
    done
  done
  cell "cubic_pp_r100_50-200_k1_long" 100 50 200 50 200 default pipeline --act 2000000 --grad 2000000 \
    --microbatches 12 --inflight 1 --fa 0.3 --ba 0.3 --fb 0.6 --seed $SEED --jitter 0.1
else
  # (1)+(2): one direction, fresh connection then gaps 0, 0, 0.1, 1, 1 s; default buffer
  for rtt in 10 50 100 250; do
    for rate in 1 10 50/200 100 1000; do
      [ "$rate" = 1 ] && [ "$rtt" != 10 ] && [ "$rtt" != 250 ] && continue
      read -r u d <<<"$(rate_ud $rate)"
      for s in $(sizes_for $rate); do
        cell "ow_r${rtt}_$(safe $rate)_s$s" $rtt $u $d $u $d default oneway --size $s --gaps 0,0,0.1,1,1 --seed $SEED
      done
    done
  done
  # (3): both ends send at once, 4 rounds back to back, then 2 rounds 1 s apart; default buffer
  for rtt in 10 50 100 250; do
    for rate in 10 50/200 100 1000; do
      read -r u d <<<"$(rate_ud $rate)"
      s=$(ex_size_for $rate)
      cell "ex_r${rtt}_$(safe $rate)_s$s" $rtt $u $d $u $d default exchange --size $s --rounds 5 --seed $SEED
    done
  done
  # (3) one way heavy, other way light at once (activations vs a smaller reply)
  for rtt in 10 100; do
    cell "ex_r${rtt}_50-200_asz" $rtt 50 200 50 200 default exchange --size 10000000 --size-ba 1000000 --rounds 5 --seed $SEED
  done
  # (4): buffers, oneway and exchange, 10 and 50/200 Mbit/s, RTT 10 and 100 ms
  for rtt in 10 100; do
    for rate in 10 50/200; do
      read -r u d <<<"$(rate_ud $rate)"
      s=$(ex_size_for $rate)
      for leaf in bfifo_ms:20 bfifo_ms:100 bfifo_ms:500 pfifo:50; do
        lf=$(echo $leaf | tr ':' '-')
        cell "bufow_r${rtt}_$(safe $rate)_${lf}_s$s" $rtt $u $d $u $d $leaf oneway --size $s --gaps 0,0,1 --seed $SEED
        cell "bufex_r${rtt}_$(safe $rate)_${lf}_s$s" $rtt $u $d $u $d $leaf exchange --size $s --rounds 5 --seed $SEED
      done
    done
  done
  # pipeline: 2 stages, activations a->b, gradients b->a, compute gaps; default buffer
  for rtt in 10 50 100; do
    for rate in 10 50/200; do
      read -r u d <<<"$(rate_ud $rate)"
      s=1000000; [ "$rate" = 10 ] && s=250000
      for k in 1 3; do
        cell "pp_r${rtt}_$(safe $rate)_k${k}" $rtt $u $d $u $d default pipeline --act $s --grad $s \
          --microbatches 24 --inflight $k --fa 0.05 --ba 0.05 --fb 0.1 --seed $SEED --jitter 0.1
      done
    done
  done
  # pipeline with long compute (idle > RTO between messages: slow start after idle)
  for rtt in 50 100; do
    cell "pp_r${rtt}_50-200_k1_long" $rtt 50 200 50 200 default pipeline --act 2000000 --grad 2000000 \
      --microbatches 12 --inflight 1 --fa 0.3 --ba 0.3 --fb 0.6 --seed $SEED --jitter 0.1
  done
  # same with the pipeline's queue at 100 ms (a home router's smaller buffer)
  cell "pp_r50_50-200_k3_bfifo100" 50 50 200 50 200 bfifo_ms:100 pipeline --act 1000000 --grad 1000000 \
    --microbatches 24 --inflight 3 --fa 0.05 --ba 0.05 --fb 0.1 --seed $SEED --jitter 0.1
fi
echo "end $(date -Is) elapsed $(($(date +%s) - T0)) s uptime: $(uptime)" | tee -a "$OUT/log.txt"
