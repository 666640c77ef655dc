#!/usr/bin/env bash
# Instructions a decision of a server build, counted by callgrind, which the machine's speed
# does not move (docs/performance.md, "Instructions a decision"). Runs mandate-bench
# twice on SQLite under the same open-loop load with `serve` under valgrind, for 8 s and for
# 20 s, and divides the difference of the measured server's instructions by the difference
# of the decisions, so that start-up and the first pass cancel.
#
# Run from the repository root, after `cargo build --release -p mandate-server -p mandate-bench`
# and with valgrind installed:
#   mandate-bench/instructions.sh [SERVER [VAR=value ...]]
# e.g. `mandate-bench/instructions.sh /tmp/80be59c/mandate-server` for another build's copy,
# or `... target/release/mandate-server MANDATE_LOG_CHECKPOINT_INTERVAL=600000` with the
# log's rounds off. Settings (environment): RATE (300), AGENTS (2000), BENCH
# (target/release/mandate-bench), OUT (a directory to keep callgrind's files in; default a
# temporary one, removed at the end).
set -euo pipefail

SERVER=$(realpath "${1:-target/release/mandate-server}")
shift || true
BENCH=$(realpath "${BENCH:-target/release/mandate-bench}")
RATE=${RATE:-300}
AGENTS=${AGENTS:-2000}
command -v valgrind >/dev/null || { echo "valgrind is not installed (apt install valgrind)" >&2; exit 1; }
[ -x "$SERVER" ] || { echo "no $SERVER: cargo build --release -p mandate-server" >&2; exit 1; }
[ -x "$BENCH" ] || { echo "no $BENCH: cargo build --release -p mandate-bench" >&2; exit 1; }

dir=$(mktemp -d /tmp/instructions.XXXXXX)
OUT=${OUT:-$dir/out}
mkdir -p "$OUT"
trap 'rm -rf "$dir"' EXIT
# The bench starts `--server` with serve's arguments: this wrapper runs it under callgrind,
# one file a process (the bench's setup commands and serve).
cat >"$dir/server" <<WRAP
#!/usr/bin/env bash
exec valgrind --tool=callgrind --callgrind-out-file="\$CALLGRIND_OUT.%p" "$SERVER" "\$@"
WRAP
chmod +x "$dir/server"

declare -A ir decisions
for d in 8 20; do
    (cd "$dir" && env "$@" CALLGRIND_OUT="$OUT/run-$d" "$BENCH" --server "$dir/server" \
        --agents "$AGENTS" --duration "$d" --warmup 2 --rate "$RATE" --no-echo) >"$OUT/bench-$d.txt" 2>&1 ||
        { echo "mandate-bench failed:" >&2; tail -20 "$OUT/bench-$d.txt" >&2; exit 1; }
    decisions[$d]=$(grep -oE "over [0-9,]+ decisions" "$OUT/bench-$d.txt" | tr -dc 0-9)
    # The measured `serve` only: its file is the last written (the bench's setup runs
    # commands and a `serve` of its own before it, whose counts vary from run to run by
    # more than the decisions' difference can cancel).
    measured=$(ls -t "$OUT"/run-"$d".* | sed -n 1p)
    ir[$d]=$(grep -m1 '^totals:' "$measured" | awk '{ print $2 }')
done
echo "instructions ${ir[8]} / ${ir[20]}, decisions ${decisions[8]} / ${decisions[20]}:" \
    "$(( (ir[20] - ir[8]) / (decisions[20] - decisions[8]) )) a decision"
