#!/usr/bin/env bash
# One sitting of mandate-bench on plain PostgreSQL and on Citus, one after the other on the
# same machine with the same settings (docs/scale.md, "Figures and sizing"): starts a
# throwaway PostgreSQL 15 server and a throwaway Citus cluster (a coordinator and two
# workers, each its own PostgreSQL 15 server with `citus` preloaded, the workers added), runs
# mandate-bench against each (on Citus the bench makes its database on every node and
# Mandate's migrations distribute the tables), and prints for each run: decisions/s and p99
# (the bench's own figures), the CPU of every postgres process a decision summed over the
# nodes and node by node (from /proc, exited backends included through each postmaster's
# children times), each worker's CPU per decision of its own organizations and its share of
# the decisions, commits a decision, the two-phase commits (rows of pg_dist_transaction,
# recovery off so none is deleted) and the statements Citus ran on more than one shard
# (citus_stat_counters: the servers' background work reads every organization) in the
# window, and the servers' and the rest of the machine's CPU. The database figures are taken
# over the measured window only, 1 s after its start to 2.5 s before its end; decisions are
# counted over the same window in the decisions table on PostgreSQL, and on Citus taken as
# the bench's rate times the window (a count through the coordinator waited behind the
# load, and the workers' statistics lag under load); each worker's share of them is the
# rows inserted into its shards of decisions (pg_stat_user_tables, read on the worker). The bench keeps its database
# (--keep), so the end figures never race its drop; the nodes are removed at the end.
#
# Runs, in order: `postgres` (the servers on the one server), `citus-coordinator` (the
# servers connect to the coordinator), `citus-workers` (server k connects to worker k mod 2:
# Citus routes from any node); ROUNDS repeats the three, to show the noise.
#
# Run as root from the repository root, after
#   cargo build --release -p mandate-server -p mandate-bench
# and with Citus installed in PostgreSQL 15 (../shared/vendor/citus/build.sh), e.g.
# `mandate-bench/citus-sitting.sh` or `ORGS=64 SERVERS=2 mandate-bench/citus-sitting.sh`.
# Settings (environment): AGENTS (10000), ORGS (64: agents spread over that many
# organizations, which Citus spreads over its workers), SERVERS (2), DURATION (10),
# WARMUP (3), CONNECTIONS (64), RUNS ("postgres citus-coordinator citus-workers"), ROUNDS (1),
# PGBIN (/usr/lib/postgresql/15/bin), PORT (55749; the Citus nodes take the next three),
# SHARED_BUFFERS (256MB a node), OUT (a directory to keep the bench's output in; default a
# temporary one, removed at the end), RATE (unset: closed loop; a rate sends that many
# requests a second, and RATE=1 measures the servers' background work on a quiet cluster:
# the "ms/s" columns, CPU a second of the window), STATEMENTS (1: pg_stat_statements on
# every node, and each node's statements by their time in the window, a second's and a
# decision's), SHARD_COUNT (unset: Citus's default, 32; the shards a table gets when
# `migrate` distributes it: docs/scale.md, "Setting up a cluster for Mandate"), PARAMS (the servers' URL parameters, e.g. `decision_writers=1`), SERVER (the mandate-server binary the bench starts; default the one beside
# BENCH: another build's copy, for a pair against it), SPREAD (agent: each agent's requests
# to one server; `worker`: in the citus-workers run each organization's requests to the
# server on the worker that holds it, as a load balancer routing by organization, the other
# runs by agent; `request`: the bench's --spread).
set -euo pipefail

AGENTS=${AGENTS:-10000}
ORGS=${ORGS:-64}
SERVERS=${SERVERS:-2}
DURATION=${DURATION:-10}
WARMUP=${WARMUP:-3}
CONNECTIONS=${CONNECTIONS:-64}
RUNS=${RUNS:-postgres citus-coordinator citus-workers}
ROUNDS=${ROUNDS:-1}
PGBIN=${PGBIN:-/usr/lib/postgresql/15/bin}
PORT=${PORT:-55749}
SHARED_BUFFERS=${SHARED_BUFFERS:-256MB}
STATEMENTS=${STATEMENTS:-0}
SPREAD=${SPREAD:-agent}

BENCH=${BENCH:-target/release/mandate-bench}
[ -x "$BENCH" ] || { echo "no $BENCH: cargo build --release -p mandate-server -p mandate-bench" >&2; exit 1; }
[ "$(id -u)" = 0 ] || { echo "run as root (the servers run as user postgres through runuser)" >&2; exit 1; }
[ -f "$("$PGBIN/pg_config" --pkglibdir)/citus.so" ] || {
    echo "Citus is not installed in $PGBIN's PostgreSQL: run ../shared/vendor/citus/build.sh" >&2; exit 1; }
if (( $(echo "$DURATION < 6" | bc -l) )); then echo "DURATION must be at least 6 s" >&2; exit 1; fi

dir=$(mktemp -d /tmp/citus-sitting.XXXXXX)
chown postgres "$dir"
KEEP_OUT=${OUT:-}
OUT=${OUT:-$dir/out}
mkdir -p "$OUT"
PG="runuser -u postgres -- $PGBIN"
# Node i: 0 the plain server, 1 the coordinator, 2 and 3 the workers.
NAMES=(postgres coordinator worker1 worker2)
port_of() { echo $((PORT + $1)); }

cleanup() {
    for i in 0 1 2 3; do
        [ -d "$dir/n$i" ] && $PG/pg_ctl -D "$dir/n$i" -m fast stop >/dev/null 2>&1 || true
    done
    rm -rf "$dir"   # OUT, when given, is outside it
}
trap cleanup EXIT

for i in 0 1 2 3; do
    $PG/initdb -D "$dir/n$i" -U postgres --auth=trust --no-sync -E UTF8 --locale=C >/dev/null
    {
        # The same server settings on every node; Citus's only on the Citus nodes.
        preload=()
        [ "$i" -gt 0 ] && preload+=(citus)
        [ "$STATEMENTS" = 1 ] && preload+=(pg_stat_statements)
        echo "shared_preload_libraries = '$(IFS=,; echo "${preload[*]}")'"
        [ "$i" -gt 0 ] && cat <<EOF
citus.recover_2pc_interval = -1
citus.enable_stat_counters = on
EOF
        [ "$i" -gt 0 ] && [ -n "${SHARD_COUNT:-}" ] && echo "citus.shard_count = $SHARD_COUNT"
        [ "$STATEMENTS" = 1 ] && cat <<EOF
pg_stat_statements.track = all
pg_stat_statements.max = 10000
EOF
        cat <<EOF
listen_addresses = '127.0.0.1'
port = $(port_of $i)
unix_socket_directories = '$dir'
max_connections = 1000
shared_buffers = $SHARED_BUFFERS
synchronous_commit = on
fsync = on
log_min_messages = warning
EOF
    } >>"$dir/n$i/postgresql.conf"
    $PG/pg_ctl -D "$dir/n$i" -l "$dir/n$i.log" -w start >/dev/null
done
url_of() { echo "postgres://postgres@127.0.0.1:$(port_of "$1")/${2:-postgres}"; }
q() { psql -X -q -t -A -F ' ' "$1" -c "$2"; }
for i in 1 2 3; do q "$(url_of $i)" "CREATE EXTENSION citus" >/dev/null; done
# In template1, so that the bench's database has the view on every node.
if [ "$STATEMENTS" = 1 ]; then
    for i in 0 1 2 3; do q "$(url_of $i template1)" "CREATE EXTENSION pg_stat_statements" >/dev/null; done
fi
# A node's statements in the bench's database: calls, rows, time (planning and execution,
# ms) and the text.
STATS="SELECT s.calls, s.rows, s.total_exec_time + s.total_plan_time,
    regexp_replace(s.query, '\s+', ' ', 'g')
    FROM pg_stat_statements s WHERE s.dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
    ORDER BY 3 DESC"
q "$(url_of 1)" "SELECT citus_set_coordinator_host('127.0.0.1', $(port_of 1))" >/dev/null
for i in 2 3; do q "$(url_of 1)" "SELECT citus_add_node('127.0.0.1', $(port_of $i))" >/dev/null; done
declare -A postmaster
for i in 0 1 2 3; do postmaster[$i]=$(head -1 "$dir/n$i/postmaster.pid"); done

# utime+stime of node $1's processes (its postmaster and its children), plus the
# postmaster's reaped children (cutime+cstime): a backend that exits within the window
# still counts. Clock ticks.
pg_ticks() {
    local pm=${postmaster[$1]} total=0 pid f
    for pid in $pm $(pgrep -P "$pm"); do
        f=$(sed 's/^.*) //' "/proc/$pid/stat" 2>/dev/null) || continue
        set -- $f
        total=$((total + ${12} + ${13}))
        [ "$pid" = "$pm" ] && total=$((total + ${14} + ${15}))
    done
    echo "$total"
}

# Figures of the run's database at one instant, one `key value` a line: decisions in all
# and on each worker (rows inserted into its shards of decisions), and for each node its CPU
# ticks, commits, two-phase commits and multi-shard statements.
figures() { # engine db
    local nodes i
    if [ "$1" = postgres ]; then nodes=0; else nodes="1 2 3"; fi
    # The CPU and the decisions first, as close together as can be (the window's figures a
    # decision depend on both); the counts after.
    for i in $nodes; do echo "ticks_$i $(pg_ticks "$i")"; done
    if [ "$1" = postgres ]; then
        q "$(url_of 0 "$2")" "SELECT 'decisions', count(*) FROM decisions"
    else
        # Rows inserted into each worker's shards of decisions, read on the worker (a
        # count(*) through the coordinator waited behind the load until it ended).
        for i in 2 3; do
            psql -X -q -t -A -F ' ' "$(url_of "$i" "$2")" -c "SET citus.show_shards_for_app_name_prefixes = '*'" \
                -c "SELECT 'decisions_on_$(port_of $i)', COALESCE(sum(n_tup_ins), 0) FROM pg_stat_user_tables
                    WHERE relname ~ '^decisions_[0-9]+\$'"
        done | awk '{ print; n += $2 } END { print "decisions", n }'
    fi
    for i in $nodes; do
        q "$(url_of "$i" "$2")" "SELECT 'commits_$i', sum(xact_commit) FROM pg_stat_database"
        [ "$1" = postgres ] && continue
        q "$(url_of "$i" "$2")" "SELECT 'twopc_$i', count(*) FROM pg_dist_transaction"
        q "$(url_of "$i" "$2")" "SELECT 'multishard_$i', query_execution_multi_shard FROM citus_stat_counters WHERE name = current_database()"
    done
}

HZ=$(getconf CLK_TCK)
printf '%-18s %8s %7s %7s | %8s %7s %7s %7s | %9s %9s %6s | %8s %5s %8s | %6s %6s | %7s %7s %7s\n' \
    run "d/s" "p99 ms" "srv µs" "DB µs/d" coord w1 w2 "w1 µs/own" "w2 µs/own" "w1 %" commits/d 2PC "multi/s" "srv c" "other" \
    "DB ms/s" "c ms/s" "w ms/s"
for round in $(seq "$ROUNDS"); do
for run in $RUNS; do
    log="$OUT/$run-$round.log"
    json="$OUT/$run-$round.json"
    case $run in
        postgres) node=0 connect=coordinator ;;
        citus-coordinator) node=1 connect=coordinator ;;
        citus-workers) node=1 connect=workers ;;
        *) echo "unknown run $run (postgres, citus-coordinator, citus-workers)" >&2; exit 1 ;;
    esac
    engine=citus; [ "$run" = postgres ] && engine=postgres
    args=(--db "$(url_of $node)${PARAMS:+?$PARAMS}" --servers "$SERVERS" --orgs "$ORGS" --agents "$AGENTS"
          --duration "$DURATION" --warmup "$WARMUP" --connections "$CONNECTIONS"
          --citus-connect "$connect" --no-echo --json --keep)
    # Routing by worker has a meaning only where the servers are on the workers.
    spread=$SPREAD; [ "$spread" = worker ] && [ "$run" != citus-workers ] && spread=agent
    args+=(--spread "$spread")
    [ -n "${RATE:-}" ] && args+=(--rate "$RATE")
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
    if [ "$engine" = postgres ]; then nodes=0; else nodes="1 2 3"; fi
    until_after "$WARMUP + 1"
    if [ "$STATEMENTS" = 1 ]; then
        for i in $nodes; do q "$(url_of "$i" "$db")" "SELECT pg_stat_statements_reset()" >/dev/null; done
    fi
    figures "$engine" "$db" >"$OUT/$run-$round.before"
    # The end figures must be read before the bench drops its database.
    until_after "$WARMUP + $DURATION - 2"
    figures "$engine" "$db" >"$OUT/$run-$round.after"
    if [ "$STATEMENTS" = 1 ]; then
        for i in $nodes; do
            psql -X -q "$(url_of "$i" "$db")" -c "COPY ($STATS) TO STDOUT" >"$OUT/$run-$round.statements-${NAMES[$i]}.tsv"
        done
    fi
    wait $bench || { echo "mandate-bench failed ($run):" >&2; tail -20 "$log" >&2; exit 1; }
    # --keep keeps the database (on nodes removed at the end) and the bench's directory: so
    # that the end figures never race the drop.
    kept=$(sed -n 's/^mandate-bench: kept //p' "$log")
    [ -n "$kept" ] && rm -rf "$kept"
    read -r rate p99 srv_us srv_cores other < <(tail -1 "$json" | python3 -c '
import json, sys
r = json.load(sys.stdin)
m = r["authorizations"]
print(round(m["throughput_per_s"]), round(m["latency_us"]["p99"] / 1000, 1),
      round(m["cpu_us_per_request"]["server"]), round(m["cpu_cores"]["server"], 2),
      round(m["cpu_cores"]["other"], 2))' 2>/dev/null || echo "? ? ? ? ?")
    awk -v run="$run" -v rate="$rate" -v p99="$p99" -v srv="$srv_us" -v srvc="$srv_cores" \
        -v other="$other" -v hz="$HZ" -v w1="$(port_of 2)" -v w2="$(port_of 3)" '
        NR == FNR { a[$1] = $2; next } { b[$1] = $2 }
        function delta(k) { return b[k] - a[k] }
        function us(k, n) { return n > 0 ? delta(k) / hz * 1e6 / n : 0 }
        function mss(k) { return delta(k) / hz * 1e3 / window }
        END {
            window = '"$DURATION"' - 3
            d = delta("decisions")
            # On Citus the counts in the database lag under load (the workers flush their
            # statistics now and then): the bench rate times the window.
            if (!("ticks_0" in b) && rate + 0 > 0) d = rate * window
            if (d <= 0) { print run ": no decisions in the window" > "/dev/stderr"; exit 1 }
            if ("ticks_0" in b) {
                printf "%-18s %8s %7s %7s | %8.1f %7s %7s %7s | %9s %9s %6s | %8.3f %5s %8s | %6s %6s | %7.1f %7s %7s\n",
                    run, rate, p99, srv, us("ticks_0", d), "-", "-", "-", "-", "-", "-", delta("commits_0") / d, "-", "-", srvc, other,
                    mss("ticks_0"), "-", "-"
            } else {
                # The share of each worker in the decisions stored so far, applied to the window.
                s1 = b["decisions_on_" w1] / (b["decisions_on_" w1] + b["decisions_on_" w2])
                d1 = d * s1; d2 = d - d1
                all = delta("ticks_1") + delta("ticks_2") + delta("ticks_3")
                printf "%-18s %8s %7s %7s | %8.1f %7.1f %7.1f %7.1f | %9.1f %9.1f %5.0f%% | %8.3f %5d %8.1f | %6s %6s | %7.1f %7.1f %7.1f\n",
                    run, rate, p99, srv, all / hz * 1e6 / d, us("ticks_1", d), us("ticks_2", d), us("ticks_3", d),
                    us("ticks_2", d1), us("ticks_3", d2), 100 * d1 / d,
                    (delta("commits_1") + delta("commits_2") + delta("commits_3")) / d,
                    delta("twopc_1") + delta("twopc_2") + delta("twopc_3"),
                    (delta("multishard_1") + delta("multishard_2") + delta("multishard_3")) / window, srvc, other,
                    mss("ticks_1") + mss("ticks_2") + mss("ticks_3"), mss("ticks_1"), (mss("ticks_2") + mss("ticks_3")) / 2
            }
        }' "$OUT/$run-$round.before" "$OUT/$run-$round.after"
    if [ "$STATEMENTS" = 1 ]; then
        # Each node's statements by their time in the window: a decision's share (µs/d)
        # and a second's (ms/s), calls a decision, µs a call, rows a call.
        for i in $nodes; do
            awk -F '\t' -v node="${NAMES[$i]}" -v rate="$rate" -v window="$((DURATION - 3))" '
                BEGIN { d = rate * window }
                { total += $3; n++; calls[n] = $1; rows[n] = $2; ms[n] = $3; text[n] = $4 }
                END {
                    printf "    %s: statements %.1f ms/s, %.1f µs/d\n", node, total / window, (d > 0 ? total * 1000 / d : 0)
                    printf "    %8s %8s %8s %8s %8s  %s\n", "ms/s", "µs/d", "calls/d", "µs/call", "rows/call", "statement"
                    for (k = 1; k <= n && k <= 12; k++)
                        printf "    %8.2f %8.1f %8.3f %8.1f %8.1f  %s\n", ms[k] / window, (d > 0 ? ms[k] * 1000 / d : 0),
                            (d > 0 ? calls[k] / d : 0), (calls[k] > 0 ? ms[k] * 1000 / calls[k] : 0),
                            (calls[k] > 0 ? rows[k] / calls[k] : 0), substr(text[k], 1, 110)
                }' "$OUT/$run-$round.statements-${NAMES[$i]}.tsv"
        done
    fi
done
done
cat <<EOF
d/s: decisions a second (201s in the bench's measured window); p99 ms: its latency; srv µs: the
servers' CPU a decision. DB µs/d: the CPU of every postgres process a decision, summed over the
nodes, then node by node (a decision's share of each node); w1/w2 µs/own: each worker's CPU a
decision of its own organizations; w1 %: its share of the decisions; commits/d over every node
(on Citus from pg_stat_database, which lags under load: low);
2PC: rows added to pg_dist_transaction in the window (two-phase commits); multi/s: statements
run on more than one shard a second (the servers' background work); srv c and other: cores
used by the servers and by everything else on the machine (other builds) during the window.
DB ms/s, c ms/s, w ms/s: the CPU of every node's postgres processes, the coordinator's and a
worker's (the mean of the two), in ms a second of the window: with RATE=1, the background work
of the servers on a quiet cluster.
EOF
if [ -n "$KEEP_OUT" ]; then echo "bench output kept in $OUT"; fi
