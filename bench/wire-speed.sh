#!/usr/bin/env bash
# Issue #17's wire-speed benchmark: one independent C client (bench/wire/zbench.c, on the
# system's libzmq) against zper, against raw libzmq PUSH/PULL with the same count and size, and
# against the original ZPER when one is running. ROUNDS interleaved rounds; prints every line,
# then medians and ratios.
#
#   bench/wire-speed.sh ZPER_BINARY
#
# Steps per round (fresh node and data each round):
#   produce1   1 producer, N messages of SIZE bytes, mode 0, time from the first send until the
#              reader's flushed end covers them; raw: PUSH -> PULL, first to last message.
#   produce4   4 producers of N/4 each on one topic, the slowest one's time; raw: 4 PUSH -> 1 PULL.
#   produce1-mode1  as produce1 with ack mode 1 (§4.5): the client reads the acks as they come;
#              the summary prints mode 1 / mode 0 per broker (issue #17: zper >= 0.9).
#   consume    FETCH max_bytes 1 MiB from 0 to the end of produce1's topic (page cache), with
#              the C client and with `zper perf consume` (zper's own client).
#   cpu        the node's CPU time (user + system, /proc) during produce1 per message; raw: the
#              PULL process's own CPU per message.
#   consume-cpu  the node's CPU time during the C client's consume, per message.
#   produce4-cpu, produce4-client-cpu  the node's and the four producers' CPU time during
#              produce4, per message: on a machine of C cores the rate is at most about
#              C / (their sum), whatever the broker does.
#
# The original ZPER (Java, miniway/zper on JeroMQ 0.3.5) is built only when you provide it:
#   ORIGINAL_SRC  a checkout of miniway/zper (its src/main/java is compiled with javac)
#   ORIGINAL_CP   the classpath it needs: JeroMQ 0.3.5 (built from the v0.3.5 tag of
#                 zeromq/jeromq; 0.3.6 lacks internals the original uses), commons-cli, log4j 1.2,
#                 slf4j-api and slf4j-log4j12 (Debian: libcommons-cli-java liblog4j1.2-java
#                 libslf4j-java)
# It runs with its shipped server.properties except for the data directory, the ports
# (PORT_BASE+80, +81) and the flush settings (the same as zper's), starts once, is warmed up
# with N messages (the JIT) and serves every round with fresh topics. Its OFFSET -1 reports the
# written end, not the flushed one (spec zper.md §5.4), so its produce times end earlier.
# BASELINE, another zper binary (an older build), runs the same zper steps in every round, so a
# change is measured as zper/baseline ratios of one run.
# Before the rounds it writes and deletes WARM_MB of zeros in /dev/shm: on a virtual machine the
# first write into guest memory never touched before is about 10x slower (measured here: the
# first GiB into the page cache at 0.4-0.5 GB/s, the next at 5 GB/s), so whichever target first
# grew the page cache paid for it, in time and in kernel CPU (half the node's CPU in a produce
# profile was that copy).
# Warming does not last where the guest reports freed memory to its host (virtio-balloon free
# page reporting, /sys/module/page_reporting): pages freed when a round's data is deleted go
# back to the host within seconds and the next round's page-cache writes fault them in again.
# Measured here (stop 41): the kernel's copy into the page cache was 27% of a node's samples in
# a slow produce4 round and 6% in a fast one, and the same binary's produce rate and node CPU
# per message varied 2-3x between rounds, for zper and the original alike. The script prints how
# much was reported during the run; compare only medians of many interleaved rounds there.
# Env: N (3000000), SIZE (100), ROUNDS (5), CONF (extra node config lines), PORT_BASE (28000),
# ORIGINAL_HEAP (2G; the JVM's -Xmx, which also caps its direct buffers: at 512M the original
# ran out of direct buffer memory in produce4 on a faster machine and its I/O thread died),
# BASELINE, BASELINE_CONF (the baseline's extra config lines; default CONF: with BASELINE set to
# the same binary, `CONF='reader.engine = zmtp' BASELINE_CONF='reader.engine = libzmq'` compares
# two settings in one run), WARM_MB (4096; 0 skips it).
# Needs: cc and zmq.h (Debian: libzmq3-dev); for the original, a JDK.
set -euo pipefail
# shellcheck source=lib/node-config.sh
. "$(dirname "$0")/lib/node-config.sh"
Z=${1:?usage: bench/wire-speed.sh ZPER_BINARY}
N=${N:-3000000}
SIZE=${SIZE:-100}
ROUNDS=${ROUNDS:-5}
BASELINE_CONF=${BASELINE_CONF-${CONF:-}}
P=${PORT_BASE:-28000}
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
if ! cc -O2 -o "$work/zbench" "$here/wire/zbench.c" -lzmq 2>"$work/cc.log"; then
  cat "$work/cc.log" >&2
  echo "wire-speed: cannot build the C client; install a C compiler and libzmq (apt-get install libzmq3-dev)" >&2
  exit 2
fi
zb=$work/zbench
if [ "${WARM_MB:-4096}" -gt 0 ]; then
  warm=$(mktemp -p /dev/shm 2>/dev/null || mktemp)
  dd if=/dev/zero of="$warm" bs=1M count="${WARM_MB:-4096}" status=none || true
  rm -f "$warm"
fi

reported=/sys/module/page_reporting/parameters/reported_kib
reported_at_start=$(cat "$reported" 2>/dev/null || echo)

ORIGINAL_PID=
original() { # builds and starts the original ZPER, sets ORIGINAL_WRITER, ORIGINAL_READER, ORIGINAL_PID
  local o=$work/original
  mkdir -p "$o/classes"
  if ! javac -nowarn -d "$o/classes" -cp "${ORIGINAL_CP:?set ORIGINAL_CP with ORIGINAL_SRC}" \
      $(find "$ORIGINAL_SRC/src/main/java" -name '*.java') 2>"$o/javac.log"; then
    cat "$o/javac.log" >&2
    echo "wire-speed: cannot build the original ZPER from $ORIGINAL_SRC (is JeroMQ 0.3.5 on ORIGINAL_CP?)" >&2
    exit 2
  fi
  ORIGINAL_WRITER=tcp://127.0.0.1:$((P + 80)) ORIGINAL_READER=tcp://127.0.0.1:$((P + 81))
  grep -vE '^(base_dir|flush_messages|flush_interval|writer.bind|reader.bind) ' \
    "$ORIGINAL_SRC/conf/server.properties" > "$o/server.properties"
  printf '%s\n' "base_dir = $o/data" "flush_messages = 10000" "flush_interval = 50" \
    "writer.bind = $ORIGINAL_WRITER" "reader.bind = $ORIGINAL_READER" >> "$o/server.properties"
  printf '%s\n' 'log4j.rootLogger=WARN,console' 'log4j.appender.console=org.apache.log4j.ConsoleAppender' \
    'log4j.appender.console.layout=org.apache.log4j.SimpleLayout' > "$o/log4j.properties"
  java -server "-Xmx${ORIGINAL_HEAP:-2G}" -Dlog4j.configuration="file:$o/log4j.properties" \
    -cp "$o/classes:$ORIGINAL_CP" org.zper.ZPer "$o/server.properties" &
  ORIGINAL_PID=$!
  sleep 2
  kill -0 "$ORIGINAL_PID" 2>/dev/null || { echo "wire-speed: the original ZPER exited" >&2; exit 1; }
  timeout 300 "$zb" produce "$ORIGINAL_WRITER" "$ORIGINAL_READER" warmup "$N" "$SIZE" >/dev/null
}
if [ -n "${ORIGINAL_SRC:-}" ]; then
  original
  trap 'kill "$ORIGINAL_PID" 2>/dev/null; rm -rf "$work"' EXIT
fi
out=$work/results
: > "$out"
ticks=$(getconf CLK_TCK)
cpu_of() { # pid -> CPU seconds (user + system) so far
  awk -v t="$ticks" '{ print ($14 + $15) / t }' "/proc/$1/stat"
}

node() { # dir binary extra-config -> starts a node, sets NODE_PID
  local dir=$1 bin=$2
  mkdir -p "$dir"
  node_config "$dir" "$P" "flush_messages = 10000
flush_interval = 50
$3" > "$dir/node.properties"
  RUST_LOG=warn "$bin" --config "$dir/node.properties" &
  NODE_PID=$!
  for _ in $(seq 100); do
    curl -sf "http://127.0.0.1:$((P + 44))/v1/status/ready" >/dev/null && return
    if ! kill -0 "$NODE_PID" 2>/dev/null; then
      echo "wire-speed: the node exited (see its message above; ports $((P + 44))-$((P + 70)) must be free, set PORT_BASE)" >&2
      exit 1
    fi
    sleep 0.2
  done
  echo "wire-speed: the node did not get ready" >&2
  exit 1
}

broker() { # label writer reader pid
  local label=$1 w=$2 r=$3 pid=$4 c0 c1 t
  c0=$(cpu_of "$pid")
  t=$("$zb" produce "$w" "$r" one$RANDOM "$N" "$SIZE" | awk '{print $3}')
  c1=$(cpu_of "$pid")
  echo "$label produce1 $(awk -v n="$N" -v t="$t" 'BEGIN{printf "%.0f", n/t}') msg/s"
  echo "$label cpu $(awk -v n="$N" -v a="$c0" -v b="$c1" 'BEGIN{printf "%.3f", (b-a)*1e6/n}') us/msg"
  t=$(MODE=1 "$zb" produce "$w" "$r" acked$RANDOM "$N" "$SIZE" | awk '{print $3}')
  echo "$label produce1-mode1 $(awk -v n="$N" -v t="$t" 'BEGIN{printf "%.0f", n/t}') msg/s"
  local topic=four$RANDOM pids=() i
  # One reader asks first, so the topic exists before four writers and readers race to create
  # it (the original ZPER's reader worker dies on that race: "Cannot make directory").
  "$zb" consume "$r" "$topic" 1 >/dev/null
  for i in 1 2 3 4; do
    "$zb" produce "$w" "$r" "$topic" "$((N / 4))" "$SIZE" "$i" "$N" > "$work/p$i" &
    pids+=($!)
  done
  c0=$(cpu_of "$pid")
  wait "${pids[@]}"
  c1=$(cpu_of "$pid")
  t=$(cat "$work"/p[1-4] | awk '$3 > m {m = $3} END {print m}')
  echo "$label produce4 $(awk -v n="$N" -v t="$t" 'BEGIN{printf "%.0f", n/t}') msg/s"
  # Where the two cores went: the node's CPU and the four clients' CPU, per message. Their sum
  # bounds the rate on a machine of C cores at about C / sum.
  echo "$label produce4-cpu $(awk -v n="$N" -v a="$c0" -v b="$c1" 'BEGIN{printf "%.3f", (b-a)*1e6/n}') us/msg"
  echo "$label produce4-client-cpu $(cat "$work"/p[1-4] | awk -v n="$N" '{c += $4} END {printf "%.3f", c*1e6/n}') us/msg"
}

raw() {
  local t c pids i
  "$zb" sink "tcp://127.0.0.1:$((P + 70))" "$N" > "$work/sink" &
  local s=$!
  sleep 0.2
  "$zb" push "tcp://127.0.0.1:$((P + 70))" "$N" "$SIZE"
  wait $s
  read -r _ _ t c < "$work/sink"
  echo "raw produce1 $(awk -v n="$N" -v t="$t" 'BEGIN{printf "%.0f", n/t}') msg/s"
  echo "raw cpu $(awk -v n="$N" -v c="$c" 'BEGIN{printf "%.3f", c*1e6/n}') us/msg"
  "$zb" sink "tcp://127.0.0.1:$((P + 70))" "$N" > "$work/sink" &
  s=$!
  sleep 0.2
  pids=()
  for i in 1 2 3 4; do
    "$zb" push "tcp://127.0.0.1:$((P + 70))" "$((N / 4))" "$SIZE" &
    pids+=($!)
  done
  wait "${pids[@]}" $s
  read -r _ _ t c < "$work/sink"
  echo "raw produce4 $(awk -v n="$N" -v t="$t" 'BEGIN{printf "%.0f", n/t}') msg/s"
}

consume() { # label reader topic pid
  local label=$1 r=$2 topic=$3 pid=$4 line c0 c1
  c0=$(cpu_of "$pid")
  line=$("$zb" consume "$r" "$topic" 1048576)
  c1=$(cpu_of "$pid")
  echo "$label consume $(echo "$line" | awk '{printf "%.0f", $2/$4}') msg/s"
  echo "$label consume-cpu $(echo "$line" | awk -v a="$c0" -v b="$c1" '{printf "%.4f", (b-a)*1e6/$2}') us/msg"
}

zper_steps() { # label binary extra-config: a fresh node, produce, consume with the C client and its own
  local label=$1 bin=$2 dir=$work/node$round-$1 perf
  node "$dir" "$bin" "$3"
  local w=tcp://127.0.0.1:$((P + 55)) r=tcp://127.0.0.1:$((P + 56))
  broker "$label" "$w" "$r" "$NODE_PID"
  "$zb" produce "$w" "$r" cons "$N" "$SIZE" >/dev/null
  consume "$label" "$r" cons "$NODE_PID"
  perf=$("$bin" perf consume -t cons -r "127.0.0.1:$((P + 56))" -n "$N" | sed -n 's/.*msg_per_s=\([0-9.]*\).*/\1/p')
  echo "$label-perf consume ${perf%.*} msg/s"
  kill "$NODE_PID"; wait "$NODE_PID" 2>/dev/null || true
  rm -rf "$dir"
}

for round in $(seq "$ROUNDS"); do
  {
    raw
    # With a baseline, the two take turns going first.
    if [ -n "${BASELINE:-}" ] && [ $((round % 2)) -eq 0 ]; then
      zper_steps baseline "$BASELINE" "$BASELINE_CONF"; zper_steps zper "$Z" "${CONF:-}"
    else
      zper_steps zper "$Z" "${CONF:-}"
      [ -z "${BASELINE:-}" ] || zper_steps baseline "$BASELINE" "$BASELINE_CONF"
    fi
    if [ -n "$ORIGINAL_PID" ]; then
      broker original "$ORIGINAL_WRITER" "$ORIGINAL_READER" "$ORIGINAL_PID"
      "$zb" produce "$ORIGINAL_WRITER" "$ORIGINAL_READER" cons$round "$N" "$SIZE" >/dev/null
      consume original "$ORIGINAL_READER" cons$round "$ORIGINAL_PID"
    fi
  } | sed -u "s/^/round $round: /" | tee -a "$out"
done

median() { sort -n | awk '{v[NR]=$1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
pick() { grep " $1 $2 " "$out" | awk '{print $5}' | median; }
echo
echo "medians of $ROUNDS rounds, $N messages of $SIZE bytes:"
if [ -n "$reported_at_start" ]; then
  awk -v a="$reported_at_start" -v b="$(cat "$reported")" 'BEGIN { if (b - a > 1048576) printf "note: this guest reported %.1f GiB of freed memory to its host during the run (free page reporting): page-cache writes fault it back in, so produce rates vary between rounds\n", (b - a) / 1048576 }'
fi
[ -n "$ORIGINAL_PID" ] || echo "the original ZPER was not available (set ORIGINAL_SRC and ORIGINAL_CP): compared against raw libzmq PUSH/PULL"
for step in produce1 produce4 cpu; do
  z=$(pick zper "$step"); b=$(pick raw "$step")
  awk -v s="$step" -v z="$z" -v b="$b" 'BEGIN { printf "%-9s zper %12s  raw libzmq %12s  zper/raw %.2f\n", s, z, b, z / b }'
  if [ -n "$ORIGINAL_PID" ]; then
    o=$(pick original "$step")
    awk -v s="$step" -v z="$z" -v o="$o" 'BEGIN { printf "%-9s zper %12s  original   %12s  zper/original %.2f\n", s, z, o, z / o }'
  fi
done
for who in zper ${ORIGINAL_PID:+original}; do
  a=$(pick "$who" produce1-mode1); b=$(pick "$who" produce1)
  awk -v w="$who" -v a="$a" -v b="$b" 'BEGIN { printf "mode1     %-8s mode 1 %12s  mode 0 %12s  mode1/mode0 %.2f\n", w, a, b, a / b }'
done
for who in zper ${ORIGINAL_PID:+original}; do
  n=$(pick "$who" produce4-cpu); c=$(pick "$who" produce4-client-cpu)
  awk -v w="$who" -v n="$n" -v c="$c" -v k="$(nproc)" 'BEGIN { printf "produce4  %-8s node %s + 4 clients %s us/msg: at most ~%.1fM msg/s on %d cores\n", w, n, c, k / (n + c), k }'
done
z=$(pick zper consume); p=$(pick zper-perf consume)
awk -v z="$z" -v p="$p" 'BEGIN { printf "consume   C client %12s msg/s  zper perf consume %12s msg/s  perf/C %.2f\n", z, p, p / z }'
if [ -n "${BASELINE:-}" ]; then
  for step in produce1 produce4 cpu consume consume-cpu; do
    a=$(pick zper "$step"); b=$(pick baseline "$step")
    awk -v s="$step" -v a="$a" -v b="$b" 'BEGIN { printf "%-9s zper %12s  baseline   %12s  zper/baseline %.2f\n", s, a, b, a / b }'
  done
  a=$(pick zper-perf consume); b=$(pick baseline-perf consume)
  awk -v a="$a" -v b="$b" 'BEGIN { printf "perf consume zper %9s  baseline   %12s  zper/baseline %.2f\n", a, b, a / b }'
fi
if [ -n "$ORIGINAL_PID" ]; then
  o=$(pick original consume)
  awk -v z="$z" -v o="$o" 'BEGIN { printf "consume   zper %12s  original %12s  zper/original %.2f\n", z, o, z / o }'
  z=$(pick zper consume-cpu); o=$(pick original consume-cpu)
  awk -v z="$z" -v o="$o" 'BEGIN { printf "consume-cpu zper %10s  original %12s  zper/original %.2f (server CPU per message)\n", z, o, z / o }'
fi
