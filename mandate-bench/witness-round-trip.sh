#!/bin/bash
# The round trip of a witness's add-checkpoint, as the service measures it
# (mandate_witness_round_trip_seconds): a SQLite demo server and one local `mandate witness`,
# a decision every 100 ms for SECS seconds (default 30), then the server's histogram.
#
# usage: mandate-bench/witness-round-trip.sh   (after cargo build --release -p mandate-server
#        -p mandate-cli; BIN names another directory holding both binaries)
# Needs curl and sqlite3. Ports 7421, 7422 and 7430 on 127.0.0.1 must be free.
set -euo pipefail
BIN=$(realpath "${BIN:-target/release}")
for b in mandate-server mandate; do
    [ -x "$BIN/$b" ] || { echo "no $BIN/$b: cargo build --release -p mandate-server -p mandate-cli" >&2; exit 1; }
done
dir=$(mktemp -d)
cd "$dir"
export HOME=$dir
pub=127.0.0.1:7421
admin=127.0.0.1:7422
pids=()
trap 'kill "${pids[@]}" 2>/dev/null || true; rm -rf "$dir"' EXIT
"$BIN/mandate-server" serve --demo --db "$dir/demo.db" --public-addr $pub --verdicts-url http://$pub \
    --admin-addr $admin >server.log 2>&1 &
server=$!
pids+=($server)
until [ -f mandate-demo.env ]; do sleep 0.1; done
sleep 0.5
. ./mandate-demo.env
decide() {
    curl -sf "$MANDATE_BASE_URL/authorizations" -H "Authorization: Bearer $AGENT_KEY" \
        -H 'Content-Type: application/json' \
        -d '{"amount": 1, "currency": "USD", "recipient": "vendor:acme", "category": "software"}' >/dev/null
}
# A first decision, so that the log has an origin and a log key to give the witness.
decide
until origin=$(sqlite3 demo.db "SELECT checkpoint FROM log_heads WHERE checkpoint IS NOT NULL LIMIT 1" | head -n1) \
    && [ -n "$origin" ]; do sleep 0.2; done
"$BIN/mandate" jwks fetch "http://$pub" >/dev/null
log_key=$("$BIN/mandate" witness log-keys --origin "$origin" | head -n1)
witness_key=$("$BIN/mandate" witness init --name w.local/w1 --key-file w.key)
"$BIN/mandate" witness --key-file w.key --state w.json --log "$log_key" --listen 127.0.0.1:7430 >witness.log 2>&1 &
pids+=($!)
kill $server
wait $server || true
"$BIN/mandate-server" serve --db "$dir/demo.db" --public-addr $pub --verdicts-url http://$pub \
    --admin-addr $admin --witness "http://127.0.0.1:7430=$witness_key" >server2.log 2>&1 &
pids+=($!)
sleep 2
end=$((SECONDS + ${SECS:-30}))
while [ $SECONDS -lt $end ]; do decide; sleep 0.1; done
sleep 2
curl -s "http://$admin/metrics" | grep -E '^mandate_witness_(round_trip_seconds|submissions_total)'
