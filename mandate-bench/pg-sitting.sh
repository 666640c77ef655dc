#!/usr/bin/env bash
# One sitting of mandate-bench on PostgreSQL (docs/scale.md, "Figures and sizing"):
# starts a throwaway PostgreSQL 15 cluster with pg_stat_statements, runs mandate-bench at 1, 2
# and 4 server processes (or the counts given as arguments), and prints for each: decisions/s
# and p99 (the bench's own figures), the CPU of every postgres process a decision (from /proc,
# exited backends included through the postmaster's children times), WAL bytes, records and
# full-page images a decision (pg_stat_wal), commits a decision (pg_stat_database), and the
# decision statements a decision (pg_stat_statements), with STATEMENTS=1 also the rows by
# table and the CPU by kind of process (pg-cluster.sh). The database figures are taken over
# the measured window only, 1 s after its start to 2.5 s before its end; decisions are counted
# in the decisions table over the same window (not by seqs, which may leave gaps).
#
# Run as root from the repository root, after
#   cargo build --release -p mandate-server -p mandate-bench
# e.g. `mandate-bench/pg-sitting.sh` or `AGENTS=100000 mandate-bench/pg-sitting.sh 1 2 4`.
# Settings (environment): AGENTS (20000), ORGS (1: the organizations the agents are spread
# over), DURATION (10), WARMUP (3), CONNECTIONS (64),
# SPREAD (agent), ORDER (creation: the bench's --agent-order, `scattered` calls the agents
# in a fixed permutation of the order they were made), RATE (unset: closed loop), PGBIN (/usr/lib/postgresql/15/bin), PORT (55739),
# SHARED_BUFFERS (1GB), STATEMENTS (1: print the per-statement table), PARAMS (the servers' URL
# parameters, e.g. `decision_writers=1`: docs/scale.md, "Writers"), OUT (a directory to keep
# the bench's output and each setting's pg_stat_statements in; default a temporary one,
# removed at the end), SERVER (the mandate-server binary the bench starts; default the one
# beside BENCH: another build's copy, for a pair against it), SQLITE (1: also one SQLite run
# of the same load after the PostgreSQL ones, its decisions/s and p99, and PostgreSQL's rate
# as a share of it), MIX (the bench's --mix, allow,review,deny weights: 90,0,10 opens no review).
set -euo pipefail

AGENTS=${AGENTS:-20000}
ORGS=${ORGS:-1}
DURATION=${DURATION:-10}
WARMUP=${WARMUP:-3}
CONNECTIONS=${CONNECTIONS:-64}
SPREAD=${SPREAD:-agent}
PGBIN=${PGBIN:-/usr/lib/postgresql/15/bin}
PORT=${PORT:-55739}
SHARED_BUFFERS=${SHARED_BUFFERS:-1GB}
STATEMENTS=${STATEMENTS:-1}
SETTINGS=("$@")
[ ${#SETTINGS[@]} -gt 0 ] || SETTINGS=(1 2 4)

BENCH=${BENCH:-target/release/mandate-bench}
[ -x "$BENCH" ] || { echo "no $BENCH: cargo build --release -p mandate-server -p mandate-bench" >&2; exit 1; }
[ "$(id -u)" = 0 ] || { echo "run as root (the cluster runs as user postgres through runuser)" >&2; exit 1; }
if (( $(echo "$DURATION < 6" | bc -l) )); then echo "DURATION must be at least 6 s" >&2; exit 1; fi

KEEP_OUT=${OUT:-}
source "$(dirname "$0")/pg-cluster.sh"
start_cluster pg-sitting
OUT=${OUT:-$dir/out}   # when given, outside the cluster's directory, so kept
mkdir -p "$OUT"

# decisions (rows of the log), WAL records, full-page images, WAL bytes, commits: one
# psql call on the bench's database (the figures are read as close together as can be).
FIGURES="SELECT (SELECT count(*) FROM decisions), w.wal_records, w.wal_fpi,
    w.wal_bytes, (SELECT sum(xact_commit) FROM pg_stat_database) FROM pg_stat_wal w"
TABLES="SELECT relname, n_tup_ins, n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables"
STATS="SELECT s.calls, s.rows, s.total_exec_time, s.shared_blks_hit, s.shared_blks_read,
    s.shared_blks_dirtied, s.shared_blks_written, s.wal_records, s.wal_fpi, s.wal_bytes,
    regexp_replace(s.query, '\s+', ' ', 'g')
    FROM pg_stat_statements s WHERE s.dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
    ORDER BY s.total_exec_time DESC"

HZ=$(getconf CLK_TCK)
printf '%-8s %10s %8s %12s %10s %9s %7s %9s %8s\n' servers "decisions/s" "p99 ms" "pg CPU µs/d" "WAL B/d" "WAL rec/d" "FPI/d" "commits/d" "window d"
for n in "${SETTINGS[@]}"; do
    log="$OUT/bench-$n.log"
    json="$OUT/bench-$n.json"
    args=(--db "$ADMIN${PARAMS:+?$PARAMS}" --servers "$n" --agents "$AGENTS" --orgs "$ORGS" --duration "$DURATION" --warmup "$WARMUP"
          --connections "$CONNECTIONS" --no-echo --json)
    [ "$n" -gt 1 ] && args+=(--spread "$SPREAD")
    [ -n "${ORDER:-}" ] && args+=(--agent-order "$ORDER")
    [ -n "${RATE:-}" ] && args+=(--rate "$RATE")
    [ -n "${MIX:-}" ] && args+=(--mix "$MIX")
    [ -n "${SERVER:-}" ] && args+=(--server "$SERVER")
    "$BENCH" "${args[@]}" >"$json" 2>"$log" &
    bench=$!
    until grep -qs "^mandate-bench: load:" "$log"; do
        kill -0 $bench 2>/dev/null || { cat "$log" >&2; exit 1; }
        sleep 0.2
    done
    t0=$(date +%s.%N)
    db=$(grep -o 'PostgreSQL database mandate_bench_[0-9_]*' "$log" | awk '{print $3}')
    # Sleeps until `$1` seconds after the load began.
    until_after() { sleep "$(echo "s = $t0 + $1 - $(date +%s.%N); if (s < 0) 0 else s" | bc -l)"; }
    until_after "$WARMUP + 1"
    url="postgres://postgres@127.0.0.1:$PORT/$db"
    a=($(psql -X -q -t -A -F ' ' "$url" -c "SELECT pg_stat_statements_reset()" -c "$FIGURES" \
        -c "COPY ($TABLES) TO '$dir/tables.before'" | tail -1) $(pg_ticks))
    pg_ticks_by_kind > "$dir/kinds.before"
    # The end figures must be read before the bench drops its database.
    until_after "$WARMUP + $DURATION - 2"
    b=($(psql -X -q -t -A -F ' ' "$url" -c "$FIGURES" -c "COPY ($TABLES) TO '$dir/tables.after'" \
        -c "COPY ($STATS) TO '$dir/statements.tsv'") $(pg_ticks))
    pg_ticks_by_kind > "$dir/kinds.after"
    cp "$dir/tables.before" "$OUT/tables-$n.before"
    cp "$dir/tables.after" "$OUT/tables-$n.after"
    cp "$dir/statements.tsv" "$OUT/statements-$n.tsv"
    cp "$dir/kinds.before" "$OUT/kinds-$n.before"
    cp "$dir/kinds.after" "$OUT/kinds-$n.after"
    wait $bench || { echo "mandate-bench failed (servers $n):" >&2; tail -20 "$log" >&2; exit 1; }
    d=$(( b[0] - a[0] ))
    [ "$d" -gt 0 ] || { echo "no decisions in the window (servers $n)" >&2; exit 1; }
    read -r rate p99 < <(tail -1 "$json" | python3 -c '
import json, sys
r = json.load(sys.stdin)
m = r["authorizations"]
print(round(m["throughput_per_s"]), round(m["latency_us"]["p99"] / 1000, 1))' 2>/dev/null || echo "? ?")
    awk -v n="$n" -v rate="$rate" -v p99="$p99" -v d="$d" -v hz="$HZ" \
        -v rec=$((b[1]-a[1])) -v fpi=$((b[2]-a[2])) -v bytes=$((b[3]-a[3])) \
        -v commits=$((b[4]-a[4])) -v ticks=$((b[5]-a[5])) 'BEGIN {
        printf "%-8s %10.0f %8s %12.1f %10.0f %9.2f %7.3f %9.3f %8d\n", n, rate, p99,
            ticks / hz * 1e6 / d, bytes / d, rec / d, fpi / d, commits / d, d }'
    if [ "$STATEMENTS" = 1 ]; then
        awk -F '\t' -v d="$d" 'BEGIN {
            printf "    %8s %8s %8s %8s %8s %8s %8s %9s  %s\n", "calls/d", "rows/d", "rows/call", "µs/call", "hit/d", "dirty/d", "walrec/d", "walB/d", "statement" }
            $1 > 0 { printf "    %8.3f %8.3f %8.1f %8.1f %8.2f %8.3f %8.2f %9.1f  %s\n", $1/d, $2/d, $2/$1, $3*1000/$1,
                ($4+$5)/d, $6/d, $8/d, $10/d, substr($11, 1, 80) }' "$OUT/statements-$n.tsv" | sed -n 1,16p  # sed reads it all: head could end awk by SIGPIPE, and pipefail the sitting
        # Rows inserted, updated and updated in place (HOT) a decision, by table.
        awk -F '\t' -v d="$d" 'NR == FNR { ins[$1] = $2; upd[$1] = $3; hot[$1] = $4; next }
            { i = ($2 - ins[$1]) / d; u = ($3 - upd[$1]) / d; h = ($4 - hot[$1]) / d
              if (i + u > 0.001) printf "    table %-22s inserted/d %6.3f  updated/d %6.3f  of which HOT %6.3f\n", $1, i, u, h }' \
            "$OUT/tables-$n.before" "$OUT/tables-$n.after"
        # The CPU a decision by kind of process, user and system apart.
        awk -v d="$d" -v hz="$HZ" 'NR == FNR { u[$1] += $2; s[$1] += $3; next }
            { U[$1] += $2; S[$1] += $3; seen[$1] = 1 }
            END { for (k in seen) { du = (U[k] - u[k]) / hz * 1e6 / d; ds = (S[k] - s[k]) / hz * 1e6 / d
                  if (du + ds > 0.05) printf "    cpu %-24s user µs/d %6.1f  system µs/d %6.1f\n", k, du, ds } }' \
            "$OUT/kinds-$n.before" "$OUT/kinds-$n.after" | sort -k2
    fi
done
if [ "${SQLITE:-0}" = 1 ]; then
    args=(--servers 1 --agents "$AGENTS" --orgs "$ORGS" --duration "$DURATION" --warmup "$WARMUP"
          --connections "$CONNECTIONS" --no-echo --json)
    [ -n "${RATE:-}" ] && args+=(--rate "$RATE")
    [ -n "${MIX:-}" ] && args+=(--mix "$MIX")
    [ -n "${SERVER:-}" ] && args+=(--server "$SERVER")
    "$BENCH" "${args[@]}" >"$OUT/bench-sqlite.json" 2>"$OUT/bench-sqlite.log" ||
        { echo "mandate-bench failed (SQLite):" >&2; tail -20 "$OUT/bench-sqlite.log" >&2; exit 1; }
    read -r rate p99 < <(tail -1 "$OUT/bench-sqlite.json" | python3 -c '
import json, sys
r = json.load(sys.stdin)
m = r["authorizations"]
print(round(m["throughput_per_s"]), round(m["latency_us"]["p99"] / 1000, 1))' 2>/dev/null || echo "? ?")
    printf '%-8s %10s %8s\n' sqlite "$rate" "$p99"
fi
if [ -n "$KEEP_OUT" ]; then echo "bench output and statements kept in $OUT"; fi
