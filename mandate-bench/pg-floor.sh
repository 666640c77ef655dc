#!/usr/bin/env bash
# The floor of PostgreSQL's work a decision (docs/performance.md, "The database's floor a
# decision"): what the database spends on the writes every stored decision makes, with
# nothing else around them. A throwaway cluster set as `pg-sitting.sh` sets it
# (synchronous_commit and fsync on, pg_stat_statements loaded) gets this build's schema
# (`mandate-server migrate`), ORGS organizations and AGENTS agents; then pgbench commits groups of decisions
# from CLIENTS connections, each group one pipelined transaction:
#
# - `row`: the group's decision rows in one multi-row INSERT (the row as the server fills
#   it, with its three index entries), then COMMIT;
# - `row+version`: first the agents' versions moved in one statement, as the writers move
#   them (`record::BUMP_MANY_SQL`: each agent's row found by its key, its mode checked,
#   updated in place), then the rows, then COMMIT.
# - `row+version+seqs`: as `row+version`, and between them each organization's decisions
#   counter moved by its decisions in the group, in one statement (as the writers take a
#   group's seqs, `mandate_record` at once).
#
# With ORGS above 1 the agents are spread over that many organizations, in blocks of
# consecutive seqs (so a group's agents, spread evenly, are in different organizations,
# ascending); each organization's decisions take seqs ascending within it, as its counter
# gives them, so the primary key takes its entries at the right edge of each organization's
# range, and ids ascending across all, as their time makes them, so the key on ids (led by
# the id) takes them at its own right edge; the agents' rows and the counters are each
# organization's.
# At one organization every group moves the one counter row, as the writers do.
#
# For each variant and group size it prints decisions/s and the CPU of every postgres
# process a decision over the run less its first 2 s and last 1 s (the decisions counted
# from pgbench's progress lines over the same seconds).
#
# Run as root from the repository root, after `cargo build --release -p mandate-server`.
# Settings (environment): SIZES (decisions a group: "14 28 56"), CLIENTS (2), DURATION (15),
# AGENTS (20000), ORGS (1), VARIANTS ("row row+version row+version+seqs"), PGBIN (/usr/lib/postgresql/15/bin), PORT (55741), SHARED_BUFFERS (1GB),
# SERVER (the mandate-server whose schema is measured: target/release/mandate-server).
set -euo pipefail

SIZES=${SIZES:-"14 28 56"}
CLIENTS=${CLIENTS:-2}
DURATION=${DURATION:-15}
AGENTS=${AGENTS:-20000}
ORGS=${ORGS:-1}
VARIANTS=${VARIANTS:-"row row+version row+version+seqs"}
PGBIN=${PGBIN:-/usr/lib/postgresql/15/bin}
PORT=${PORT:-55741}
SHARED_BUFFERS=${SHARED_BUFFERS:-1GB}
SERVER=${SERVER:-target/release/mandate-server}
[ -x "$SERVER" ] || { echo "no $SERVER: cargo build --release -p mandate-server" >&2; exit 1; }
[ "$(id -u)" = 0 ] || { echo "run as root (the cluster runs as user postgres through runuser)" >&2; exit 1; }
[ "$DURATION" -ge 6 ] || { echo "DURATION must be at least 6 s" >&2; exit 1; }

source "$(dirname "$0")/pg-cluster.sh"
start_cluster pg-floor
url="postgres://postgres@127.0.0.1:$PORT/floor"
q "$ADMIN" "CREATE DATABASE floor" >/dev/null
MANDATE_KEY_ENCRYPTION_KEY=$(openssl rand -base64 32)
export MANDATE_KEY_ENCRYPTION_KEY
"$SERVER" migrate --db "$url" >/dev/null
"$SERVER" onboard --db "$url" --org floor >/dev/null
org=$(q "$url" "SELECT id FROM orgs")
mode=$(q "$url" "SELECT mode FROM environments WHERE env = 'sandbox'")
# More organizations: copies of the one onboarded (its row, environments and counters),
# named `<org>_<i>`, i from 0; agent g of AGENTS is in organization (g - 1) * ORGS / AGENTS.
if [ "$ORGS" -gt 1 ]; then
    q "$url" "INSERT INTO orgs (id, name, policy_version, created_ms)
        SELECT id || '_' || i, name || '_' || i, policy_version, created_ms
        FROM orgs CROSS JOIN generate_series(0, $ORGS - 1) i WHERE id = '$org';
      INSERT INTO environments (org_id, env, mode, since_ms)
        SELECT org_id || '_' || i, env, mode, since_ms
        FROM environments CROSS JOIN generate_series(0, $ORGS - 1) i WHERE org_id = '$org';
      INSERT INTO org_counters (org_id, name, value)
        SELECT org_id || '_' || i, name, value
        FROM org_counters CROSS JOIN generate_series(0, $ORGS - 1) i WHERE org_id = '$org'" >/dev/null
fi
org_of() { # the SQL of agent seq $1's organization
    if [ "$ORGS" -gt 1 ]; then echo "'${org}_' || ((($1) - 1) * $ORGS / $AGENTS)::TEXT"; else echo "'$org'"; fi
}
q "$url" "INSERT INTO agents (seq, id, org_id, env, created_ms, version)
    SELECT g, 'agt_floor' || lpad(g::TEXT, 8, '0'), $(org_of g), 'sandbox', 1795723025660, 0
    FROM generate_series(1, $AGENTS) g" >/dev/null
# The decisions' seqs and ids, ascending as the writers' claims and the ids' time order make
# them (each index takes its entries at its right edge, as it does under the server).
q "$url" "CREATE SEQUENCE floor_seq CACHE 1000; CREATE SEQUENCE floor_id CACHE 1000" >/dev/null
q "$url" "VACUUM ANALYZE" >/dev/null

# The pgbench script of a variant ($1) and group size ($2): the group's agents spread evenly
# over all of them from a random first one, ascending (as every group locks them).
script() {
    python3 - "$1" "$2" "$AGENTS" "$org" "$mode" "$ORGS" <<'PY'
import sys
variant, n, agents, org, mode = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5]
orgs = int(sys.argv[6])
step = agents // n
agent = [f"(:first)::BIGINT + {k * step}" for k in range(n)]
# Each agent's organization, as org_of in the shell.
org_of = [f"'{org}_' || ((({a}) - 1) * {orgs} / {agents})::TEXT" if orgs > 1 else f"'{org}'"
          for a in agent]
# A decision row as the server stores an allowed request's: signature 64 bytes, leaf hash
# 32. A colon inside a literal would be read by pgbench as a variable: chr(58) instead.
sig, leaf = "'\\x" + "5a" * 64 + "'::BYTEA", "'\\x" + "3c" * 32 + "'::BYTEA"
def row(k):
    return ("(nextval('floor_seq'), 'dec_06h1' || lpad(nextval('floor_id')::TEXT, 22, '0'), "
            f"{org_of[k]}, 'sandbox', 'agt_floor' || lpad(({agent[k]})::TEXT, 8, '0'), {agent[k]}, "
            "'mnd_bvdbyzr369jhzkp6dqarc0e5ew', 'allow', 'allow', NULL, "
            f"'{mode}', '49.27', 'USD', 'vendor' || chr(58) || 'v22', 'software', "
            "'n_06h1' || lpad(nextval('floor_id')::TEXT, 22, '0'), 'pol_2026-11-26.1', "
            "'https' || chr(58) || '//mandate.example', 1795723025, 1795723325, 1795723025660, "
            f"NULL, NULL, TRUE, 'sandbox-1', {sig}, NULL, {leaf})")
insert = ("INSERT INTO decisions (seq, id, org_id, env, agent_id, agent_seq, mandate_id, verdict, "
          "policy_verdict, reason, mode, amount, currency, recipient, category, nonce, "
          "policy_version, iss, iat, exp, created_ms, supersedes, review_id, is_request, "
          "signing_kid, signature, bindings, leaf) VALUES " + ", ".join(row(k) for k in range(n)) + ";")
array = lambda items, kind: "ARRAY[" + ", ".join(items) + f"]::{kind}[]"
bump = ("UPDATE agents a SET version = a.version + 1, last_decision = d.decision FROM unnest("
        + ", ".join([array(org_of, "TEXT"), array(agent, "BIGINT"), array(["0"] * n, "BIGINT"),
                     array([f"'dec_v' || (:first)::TEXT || '_{k}'" for k in range(n)], "TEXT"),
                     array(["'sandbox'"] * n, "TEXT"), array([f"'{mode}'"] * n, "TEXT")])
        + ") AS d(org, seq, version, decision, env, mode) WHERE a.org_id = d.org AND a.seq = d.seq "
        "AND a.version >= d.version AND EXISTS (SELECT 1 FROM environments e "
        "WHERE e.org_id = d.org AND e.env = d.env AND e.mode = d.mode) RETURNING a.seq;")
# Each organization of the group once, ascending (the agents' blocks ascend with their
# seqs), with its decisions in the group.
seqs = ("UPDATE org_counters c SET value = c.value + u.stored FROM (SELECT org, count(*) AS stored "
        f"FROM unnest({array(org_of, 'TEXT')}) WITH ORDINALITY AS d(org, k) GROUP BY org) u "
        "WHERE c.org_id = u.org AND c.name = 'decisions' RETURNING c.value;")
body = (["BEGIN;"] + ([bump] if variant != "row" else [])
        + ([seqs] if variant == "row+version+seqs" else []) + [insert, "COMMIT;"])
print("\n".join([f"\\set first random(1, {step})", "\\startpipeline"] + body + ["\\endpipeline"]))
PY
}

HZ=$(getconf CLK_TCK)
echo "organizations: $ORGS"
printf '%-12s %6s %12s %12s\n' variant group "decisions/s" "pg CPU µs/d"
for variant in $VARIANTS; do
    for n in $SIZES; do
        script "$variant" "$n" > "$dir/floor.sql"
        # The group's statements find rows through indexes only, as in the writers' groups.
        PGOPTIONS='-c enable_seqscan=off -c enable_bitmapscan=off -c enable_hashjoin=off -c enable_mergejoin=off -c enable_hashagg=off' "$PGBIN/pgbench" \
            -h 127.0.0.1 -p "$PORT" -U postgres -n -M prepared -c "$CLIENTS" -j 1 \
            -T "$DURATION" -P 1 -f "$dir/floor.sql" floor >"$dir/pgbench.out" 2>&1 &
        bench=$!
        sleep 2
        a=$(pg_ticks)
        sleep $((DURATION - 3))
        b=$(pg_ticks)
        wait $bench || { echo "pgbench failed ($variant, $n):" >&2; grep -i error "$dir/pgbench.out" | head -3 >&2; exit 1; }
        grep -q "aborted" "$dir/pgbench.out" && { echo "pgbench aborted ($variant, $n):" >&2; grep -i error "$dir/pgbench.out" | head -3 >&2; exit 1; }
        # Progress line k covers second (k-1, k]: seconds 3 to DURATION-1 cover the window.
        groups=$(awk -v t="$DURATION" '/^progress:/ { s = $2 + 0; if (s >= 3 && s <= t - 1) sum += $4 }
            END { print sum + 0 }' "$dir/pgbench.out")
        awk -v v="$variant" -v n="$n" -v g="$groups" -v t="$DURATION" -v ticks=$((b - a)) -v hz="$HZ" 'BEGIN {
            d = g * n; printf "%-12s %6d %12.0f %12.1f\n", v, n, d / (t - 3), ticks / hz * 1e6 / d }'
    done
done
