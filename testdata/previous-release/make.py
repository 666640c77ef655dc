#!/usr/bin/env python3
"""Makes the previous-release fixture: a PostgreSQL database filled by a release's real
`mandate-server` through its API and operator commands, dumped as plain SQL, with what a
later build must find in it after converting it in place.

Usage (as root or as a user that may run initdb; PostgreSQL 15's binaries installed):

    python3 testdata/previous-release/make.py PATH/TO/mandate-server [OUT_DIR]

OUT_DIR defaults to this script's directory. It writes there:
  mandate.sql         pg_dump --no-owner --no-privileges of the filled database
  expected.json       counts per table, the JWK Set, every key, the export marks
  exports/*.ndjson    GET /v1/exports/decisions of each organization and environment

Needs Python 3 with `cryptography` (the AP2 mandates are ES256 SD-JWTs signed here). The
server's clock is the machine's, its ids and ES256 signatures random: each run gives another,
equally valid fixture. README.md (beside this script) says what the fixture covers.
"""

import base64
import hashlib
import http.server
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from datetime import date, timedelta
from pathlib import Path

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import (
    decode_dss_signature,
    encode_dss_signature,
)

# The key-encryption key the signing keys and API-key bindings are sealed under: 32 known
# bytes, published on purpose (a test key).
KEK = base64.b64encode(b"mandate-previous-release-kek-32b").decode()
TABLES = [
    "accepted_credentials", "agents", "ap2_issuers", "api_keys", "counters",
    "decision_claims", "decisions", "deliveries", "delivery_attempts", "environments",
    "escrow_history", "escrows", "events", "idempotency", "mandate_expiring_fired",
    "mandates", "orgs", "processes", "reviews", "schema_migrations", "settings",
    "settlement_movements", "signing_keys", "webhooks",
]


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Key:
    """A P-256 key drawn from a fixed scalar (test keys, published on purpose)."""

    def __init__(self, kid: str, scalar: int):
        self.kid = kid
        self.private = ec.derive_private_key(scalar, ec.SECP256R1())
        numbers = self.private.public_key().public_numbers()
        self.jwk = {
            "kty": "EC", "crv": "P-256", "kid": kid,
            "x": b64(numbers.x.to_bytes(32, "big")), "y": b64(numbers.y.to_bytes(32, "big")),
        }

    def jwt(self, header: dict, payload: dict) -> str:
        signing_input = f"{b64(json.dumps(header).encode())}.{b64(json.dumps(payload).encode())}"
        der = self.private.sign(signing_input.encode(), ec.ECDSA(hashes.SHA256()))
        r, s = decode_dss_signature(der)
        return f"{signing_input}.{b64(r.to_bytes(32, 'big') + s.to_bytes(32, 'big'))}"


def sd_hash(text: str) -> str:
    return b64(hashlib.sha256(text.encode()).digest())


def open_mandate(issuer: Key, holder: Key, constraints: list) -> str:
    """An AP2 open payment mandate as AP2's SDK issues one (tests/support/ap2.rs)."""
    now = int(time.time())
    mandate = {
        "vct": "mandate.payment.open.1", "constraints": constraints,
        "cnf": {"jwk": {k: v for k, v in holder.jwk.items() if k != "kid"}},
        "iat": now - 60, "exp": now + 400 * 86400,
    }
    item = b64(json.dumps(["salt-open", mandate]).encode())
    payload = {"delegate_payload": [{"...": sd_hash(item)}], "_sd_alg": "sha-256"}
    return f"{issuer.jwt({'alg': 'ES256', 'kid': issuer.kid}, payload)}~{item}~"


def closed_mandate(holder: Key, open_: str, tx: str, minor: int, currency: str, payee: str) -> str:
    """The agent's closed payment mandate chained to `open_`, as presented."""
    mandate = {
        "vct": "mandate.payment.1", "transaction_id": tx,
        "payee": {"id": payee, "name": payee},
        "payment_amount": {"amount": minor, "currency": currency},
        "payment_instrument": {"id": "pi-1", "type": "credit"},
    }
    item = b64(json.dumps([f"salt-{tx}", mandate]).encode())
    payload = {
        "delegate_payload": [{"...": sd_hash(item)}], "iat": int(time.time()),
        "aud": "merchant", "nonce": f"nonce-{tx}", "sd_hash": sd_hash(open_), "_sd_alg": "sha-256",
    }
    closed = holder.jwt({"alg": "ES256", "typ": "kb+sd-jwt", "kid": holder.kid}, payload)
    return f"{open_.rstrip('~')}~~{closed}~{item}~"


class Receiver(http.server.BaseHTTPRequestHandler):
    """A webhook endpoint: /ok acknowledges, anything else answers 500 (retried)."""

    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        self.send_response(200 if self.path == "/ok" else 500)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


class Postgres:
    """A throwaway PostgreSQL 15 cluster, run as the postgres user when this is root."""

    def __init__(self, pg_bin: Path):
        self.bin = pg_bin
        self.dir = Path(tempfile.mkdtemp(prefix="mandate-fixture-"))
        self.root = os.geteuid() == 0
        if self.root:
            shutil.chown(self.dir, "postgres", "postgres")
        self.port = free_port()
        self.run("initdb", "-D", str(self.dir / "data"), "-A", "trust", "-U", "postgres",
                 "-E", "UTF8", "--locale=C", "--no-sync")
        self.run("pg_ctl", "-D", str(self.dir / "data"), "-l", str(self.dir / "log"), "-w", "-o",
                 f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1", "start")
        self.admin = f"postgres://postgres@127.0.0.1:{self.port}/postgres"
        self.run("psql", self.admin, "-qc", "CREATE DATABASE mandate")
        self.url = f"postgres://postgres@127.0.0.1:{self.port}/mandate"

    def run(self, tool: str, *args: str, capture: bool = False) -> str:
        command = [str(self.bin / tool), *args]
        if self.root:
            command = ["runuser", "-u", "postgres", "--", *command]
        done = subprocess.run(command, check=True, capture_output=True, text=True, cwd="/")
        return done.stdout

    def stop(self):
        self.run("pg_ctl", "-D", str(self.dir / "data"), "-m", "fast", "-w", "stop")
        shutil.rmtree(self.dir, ignore_errors=True)


class Api:
    """The server's API host, called as a client would."""

    def __init__(self, base: str):
        self.base = base

    def call(self, method: str, path: str, key: str, body=None, idem: str = None,
             expect=(200, 201, 202)):
        headers = {"Authorization": f"Bearer {key}"}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        if idem:
            headers["Idempotency-Key"] = idem
        request = urllib.request.Request(self.base + path, data=data, headers=headers,
                                         method=method)
        try:
            with urllib.request.urlopen(request, timeout=30) as answer:
                status, text = answer.status, answer.read().decode()
        except urllib.error.HTTPError as error:
            status, text = error.code, error.read().decode()
        if status not in expect:
            raise SystemExit(f"{method} {path}: {status} {text}")
        if "ndjson" in path or path.startswith("/v1/exports"):
            return text
        return json.loads(text) if text else None


def operator(server: str, db: str, *args: str) -> str:
    env = dict(os.environ, MANDATE_KEY_ENCRYPTION_KEY=KEK)
    done = subprocess.run([server, *args, "--db", db], check=True, capture_output=True,
                          text=True, env=env)
    return done.stdout


def onboard(server: str, db: str, name: str) -> dict:
    out = operator(server, db, "onboard", "--org", name)
    org = {"name": name}
    for line in out.splitlines():
        if line.startswith("organization "):
            org["id"] = line.split("(")[1].split(")")[0]
        elif line.startswith("sandbox key:"):
            org["sandbox"] = line.split()[-1]
        elif line.startswith("live key:"):
            org["live"] = line.split()[-1]
    return org


def wait_for(what: str, check, seconds: float = 60):
    deadline = time.time() + seconds
    while time.time() < deadline:
        if check():
            return
        time.sleep(0.25)
    raise SystemExit(f"timed out waiting for {what}")


def kid_of(token: str) -> str:
    header = token.split(".")[0]
    return json.loads(base64.urlsafe_b64decode(header + "=" * (-len(header) % 4)))["kid"]


def main():
    if len(sys.argv) < 2:
        raise SystemExit(__doc__)
    server = str(Path(sys.argv[1]).resolve())
    out = Path(sys.argv[2] if len(sys.argv) > 2 else Path(__file__).parent).resolve()
    pg_bin = Path(os.environ.get("PG_BIN", "/usr/lib/postgresql/15/bin"))
    pg = Postgres(pg_bin)
    receiver = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    threading.Thread(target=receiver.serve_forever, daemon=True).start()
    hook = f"http://127.0.0.1:{receiver.server_address[1]}"
    serving = None
    try:
        serving, facts = fill(server, pg, hook)
        finish(server, pg, serving, facts, out)
    finally:
        if serving and serving.poll() is None:
            serving.send_signal(signal.SIGTERM)
            serving.wait(30)
        receiver.shutdown()
        pg.stop()


def fill(server: str, pg: Postgres, hook: str):
    """Onboards, starts the server and fills every table; returns the server and facts."""
    db = pg.url
    acme, globex = onboard(server, db, "Acme Corp"), onboard(server, db, "Globex")
    # Organization keys: one issued and revoked, one issued with its own rate.
    revoked = operator(server, db, "issue-key", "--org", "Acme Corp", "--env", "sandbox")
    operator(server, db, "revoke-key", revoked.split()[0])
    rated = operator(server, db, "issue-key", "--org", "Acme Corp", "--env", "live")
    operator(server, db, "set-rate", rated.split()[0], "--per-second", "50")
    acme["live_rated"] = rated.split()[0]
    issuer, holder = Key("issuer-1", 0x1111), Key("agent-1", 0x2222)
    with tempfile.NamedTemporaryFile("w", suffix=".jwk", delete=False) as jwk:
        json.dump(issuer.jwk, jwk)
    operator(server, db, "ap2-issuer", "add", "--org", "Acme Corp", "--key", jwk.name,
             "--kid", "issuer-1")
    os.unlink(jwk.name)
    api_port, public_port = free_port(), free_port()
    env = dict(os.environ, MANDATE_KEY_ENCRYPTION_KEY=KEK, RUST_LOG="warn")
    serving = subprocess.Popen(
        [server, "serve", "--db", db, "--api-addr", f"127.0.0.1:{api_port}",
         "--public-addr", f"127.0.0.1:{public_port}"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    public = f"http://127.0.0.1:{public_port}"

    def ready():
        try:
            with urllib.request.urlopen(public + "/readyz", timeout=2) as r:
                return r.status == 200
        except (OSError, urllib.error.URLError):
            return False

    wait_for("the server's /readyz", ready)
    api = Api(f"http://127.0.0.1:{api_port}")
    facts = {"orgs": [acme, globex], "agent_keys": {}, "public": public, "api": api}
    phase_one(api, acme, holder, issuer, hook, facts)
    globex_first(api, globex, facts)
    # The export mark: where an incremental exporter stood before the rest was made.
    facts["marks"] = {}
    for org in (acme, globex):
        for env_name in ("sandbox", "live"):
            text = api.call("GET", "/v1/exports/decisions", org[env_name])
            lines = [json.loads(line) for line in text.splitlines() if line]
            facts["marks"][f"{org['name']}/{env_name}"] = lines[-1]["id"] if lines else None
    # A new sandbox signing key: later sandbox decisions are signed by sandbox-2, earlier
    # ones stay signed by sandbox-1 (retired, still published).
    operator(server, db, "rotate-signing-key", "--env", "sandbox")
    wait_for("sandbox-2 in the JWK Set", lambda: "sandbox-2" in urllib.request.urlopen(
        public + "/.well-known/jwks.json").read().decode())
    phase_two(api, acme, globex, facts)
    return serving, facts


def phase_one(api: Api, acme: dict, holder: Key, issuer: Key, hook: str, facts: dict):
    """Acme's sandbox and live: every verdict, reviews, webhooks, AP2, x402, observe."""
    org = acme["sandbox"]
    ok = api.call("POST", "/v1/webhooks", org, {"url": f"{hook}/ok", "events": [
        "decision.review_pending", "decision.resolved", "mandate.revoked", "mandate.expiring",
        "escrow.funded", "escrow.delivered", "escrow.released", "escrow.refunded",
        "escrow.disputed"]})
    api.call("POST", "/v1/webhooks", org, {"url": f"{hook}/fail", "events": [
        "decision.review_pending", "mandate.revoked"]})
    doomed = api.call("POST", "/v1/webhooks", org, {"url": f"{hook}/fail", "events": [
        "decision.resolved"]})
    api.call("POST", f"/v1/webhooks/{ok['webhook']}/ping", org)
    facts["doomed_webhook"] = doomed["webhook"]
    keys = facts["agent_keys"]
    for name in ("buyer", "payer", "spender", "retired", "idle", "shopper"):
        agent = api.call("POST", "/v1/agents", org, {"name": name}, idem=f"agent-{name}")
        keys[f"Acme Corp/sandbox/{agent['id']}"] = agent["agent_key"]
    expires = "2099-12-31"
    api.call("POST", "/v1/mandates", org, {
        "agent": "agt_buyer", "principal": "role:cfo",
        "limits": {"per_transaction": 100, "per_month": 500, "currency": "USD"},
        "categories": ["software", "travel"], "review_above": 50, "expires": expires,
        "recipients": {"allow": ["vendor:acme", "vendor:globex*"], "deny": ["vendor:globex-evil"]},
        "escrow": {"required_above": 80}}, idem="mandate-buyer-1")
    buyer = keys["Acme Corp/sandbox/agt_buyer"]

    def ask(key, amount, recipient="vendor:acme", category="software", idem=None, **extra):
        body = {"amount": amount, "currency": "USD", "recipient": recipient,
                "category": category, **extra}
        return api.call("POST", "/v1/authorizations", key, body, idem=idem)

    ask(buyer, 10, idem="pay-1")
    ask(buyer, 10, idem="pay-1")  # a replay: the same decision, from the idempotency row
    reviews = [ask(buyer, amount)["review"]["id"] for amount in (60, 70, 80)]
    ask(buyer, 150)
    ask(buyer, 5, category="food")
    ask(buyer, 5, recipient="vendor:globex-evil")
    api.call("POST", f"/v1/reviews/{reviews[0]}/approve", org, idem="approve-1")
    api.call("POST", f"/v1/reviews/{reviews[1]}/deny", org, {"reason": "not this quarter"})
    # reviews[2] stays pending.
    api.call("POST", "/v1/mandates", org, {
        "agent": "agt_buyer", "limits": {"per_transaction": 100, "currency": "USD"},
        "categories": ["software"], "expires": expires})
    # Velocity: the eleventh request within a minute.
    api.call("POST", "/v1/mandates", org, {
        "agent": "agt_spender", "limits": {"per_transaction": 5, "currency": "USD"},
        "categories": ["software"],
        "expires": (date.today() + timedelta(days=3)).isoformat()})
    for _ in range(11):
        ask(keys["Acme Corp/sandbox/agt_spender"], 1)
    retired = api.call("POST", "/v1/mandates", org, {
        "agent": "agt_retired", "limits": {"per_transaction": 5, "currency": "USD"},
        "categories": ["software"], "expires": expires})
    api.call("POST", f"/v1/mandates/{retired['id']}/revoke", org)
    ask(keys["Acme Corp/sandbox/agt_retired"], 1)
    ask(keys["Acme Corp/sandbox/agt_idle"], 1)
    # AP2: an open mandate imported, a closed one accepted, then presented again.
    open_ = open_mandate(issuer, holder, [
        {"type": "payment.amount_range", "currency": "USD", "max": 20000},
        {"type": "payment.budget", "currency": "USD", "max": 50000}])
    api.call("POST", "/v1/mandates", org, {
        "agent": "agt_shopper", "categories": ["shopping"], "ap2": {"open_mandate": open_}})
    shopper = keys["Acme Corp/sandbox/agt_shopper"]
    closed = closed_mandate(holder, open_, "tx-1", 1234, "USD", "s-1")
    for _ in range(2):
        ask(shopper, 12.34, recipient="vendor:s-1", category="shopping",
            ap2={"closed_mandate": closed})
    # x402: a verdict bound to a payment.
    pay_to = "0x209693Bc6afc0C5328bA36FaF03C514EF312287C"
    ask(buyer, 0.01, recipient=f"vendor:{pay_to}",
        x402={"scheme": "exact", "network": "eip155:84532", "amount": "10000",
              "asset": "0x036CbD53842c5426634e7929541eC2318f3dCF7e", "payTo": pay_to,
              "maxTimeoutSeconds": 60})
    api.call("POST", "/v1/mandates", org, {
        "agent": "agt_payer", "limits": {"per_transaction": 100, "currency": "USD"},
        "categories": ["software"], "expires": expires})
    # Live: observe first (the verdict allow, the policy's deny kept), then enforce.
    live = acme["live"]
    agent = api.call("POST", "/v1/agents", live, {"name": "live-bot"})
    keys[f"Acme Corp/live/{agent['id']}"] = agent["agent_key"]
    api.call("POST", "/v1/mandates", live, {
        "agent": agent["id"], "limits": {"per_transaction": 50, "currency": "EUR"},
        "categories": ["travel"], "expires": expires})
    bot = agent["agent_key"]
    api.call("POST", "/v1/authorizations", bot, {
        "amount": 20, "currency": "EUR", "recipient": "vendor:rail", "category": "travel"})
    api.call("POST", "/v1/authorizations", bot, {
        "amount": 90, "currency": "EUR", "recipient": "vendor:rail", "category": "travel"})
    api.call("POST", "/v1/enforcement", live, {"mode": "enforce"})
    api.call("POST", "/v1/authorizations", bot, {
        "amount": 90, "currency": "EUR", "recipient": "vendor:rail", "category": "travel"})


def phase_two(api: Api, acme: dict, globex: dict, facts: dict):
    """After the mark and the rotation: escrows, Globex, more decisions to export."""
    org = acme["sandbox"]
    buyer = facts["agent_keys"]["Acme Corp/sandbox/agt_buyer"]
    payer = facts["agent_keys"]["Acme Corp/sandbox/agt_payer"]
    escrows = []
    for amount in (20, 30, 40):
        decision = api.call("POST", "/v1/authorizations", payer, {
            "amount": amount, "currency": "USD", "recipient": "vendor:acme",
            "category": "software"}, idem=f"escrow-pay-{amount}")
        assert kid_of(decision["verdict_token"]) == "sandbox-2", decision["verdict_token"]
        escrows.append(api.call("POST", "/v1/escrows", org, {
            "amount": amount, "currency": "USD", "buyer": "agt_payer", "seller": "vendor:acme",
            "decision": decision["id"], "arbiter": "role:legal"}, idem=f"escrow-{amount}")["id"])
    api.call("POST", f"/v1/escrows/{escrows[0]}/deliver", org)
    api.call("POST", f"/v1/escrows/{escrows[0]}/release", org)
    api.call("POST", f"/v1/escrows/{escrows[1]}/dispute", org)
    api.call("POST", f"/v1/escrows/{escrows[1]}/refund", org)
    # escrows[2] stays funded.
    for env_name in ("sandbox", "live"):
        fleet = facts["agent_keys"][f"Globex/{env_name}/agt_fleet"]
        api.call("POST", "/v1/authorizations", fleet, {
            "amount": 40, "currency": "GBP", "recipient": "vendor:pump", "category": "fuel"})
    api.call("POST", "/v1/authorizations", buyer, {
        "amount": 7, "currency": "USD", "recipient": "vendor:acme", "category": "travel"})
    api.call("POST", "/v1/authorizations", facts["agent_keys"]["Acme Corp/live/agt_live-bot"], {
        "amount": 30, "currency": "EUR", "recipient": "vendor:rail", "category": "travel"})


def globex_first(api: Api, globex: dict, facts: dict):
    """Globex's agent and first decision in each environment, before the export mark."""
    for env_name in ("sandbox", "live"):
        key = globex[env_name]
        agent = api.call("POST", "/v1/agents", key, {"name": "fleet"})
        facts["agent_keys"][f"Globex/{env_name}/{agent['id']}"] = agent["agent_key"]
        api.call("POST", "/v1/mandates", key, {
            "agent": agent["id"], "limits": {"per_transaction": 10, "currency": "GBP"},
            "categories": ["fuel"], "expires": "2099-12-31"})
        api.call("POST", "/v1/authorizations", agent["agent_key"], {
            "amount": 4, "currency": "GBP", "recipient": "vendor:pump", "category": "fuel"})


def check_tokens(out: Path, marks: dict, jwks: dict) -> int:
    """Checks that every exported decision carries its token and that the token's ES256
    signature verifies against the JWK Set recorded; returns how many it checked."""
    keys = {}
    for jwk in jwks["keys"]:
        x, y = (int.from_bytes(base64.urlsafe_b64decode(jwk[c] + "=="), "big") for c in "xy")
        keys[jwk["kid"]] = ec.EllipticCurvePublicNumbers(x, y, ec.SECP256R1()).public_key()
    checked = 0
    for mark in marks.values():
        for line in (out / mark["file"]).read_text().splitlines():
            token = json.loads(line)["verdict_token"]
            signing_input, signature = token.rsplit(".", 1)
            raw = base64.urlsafe_b64decode(signature + "==")
            der = encode_dss_signature(int.from_bytes(raw[:32], "big"),
                                       int.from_bytes(raw[32:], "big"))
            keys[kid_of(token)].verify(der, signing_input.encode(), ec.ECDSA(hashes.SHA256()))
            checked += 1
    return checked


def finish(server: str, pg: Postgres, serving, facts: dict, out: Path):
    """Waits for the background work, deletes a webhook, exports, stops the server, then
    counts and dumps."""
    api, public, org = facts["api"], facts["public"], facts["orgs"][0]["sandbox"]

    def event_types():
        page = api.call("GET", "/v1/events?limit=100", org)
        return {event["type"] for event in page["data"]}

    wait_for("mandate.expiring", lambda: "mandate.expiring" in event_types())
    count = lambda sql: int(pg.run("psql", pg.url, "-Atc", sql).strip())
    wait_for("deliveries delivered and attempted", lambda: count(
        "SELECT COUNT(*) FROM deliveries WHERE state = 'delivered'") > 0 and count(
        "SELECT COUNT(*) FROM delivery_attempts WHERE status = 500") > 0)
    api.call("DELETE", f"/v1/webhooks/{facts['doomed_webhook']}", org, expect=(200, 204))
    wait_for("a delivery failed by its webhook's deletion", lambda: count(
        "SELECT COUNT(*) FROM deliveries WHERE state = 'failed'") > 0)
    time.sleep(1)
    jwks = json.loads(urllib.request.urlopen(public + "/.well-known/jwks.json").read())
    exports = out / "exports"
    exports.mkdir(parents=True, exist_ok=True)
    marks = {}
    for o in facts["orgs"]:
        for env_name in ("sandbox", "live"):
            text = api.call("GET", "/v1/exports/decisions", o[env_name])
            slug = f"{o['name'].split()[0].lower()}-{env_name}"
            (exports / f"{slug}.ndjson").write_text(text)
            ids = [json.loads(line)["id"] for line in text.splitlines() if line]
            after = facts["marks"][f"{o['name']}/{env_name}"]
            rest = ids[ids.index(after) + 1:] if after in ids else ids
            marks[f"{o['name']}/{env_name}"] = {
                "file": f"exports/{slug}.ndjson", "after": after, "then": rest}
    checked = check_tokens(out, marks, jwks)
    # Stopped as a crash stops it (its heartbeat row stays, as a process's would), so that
    # no retried delivery adds a row between the counts and the dump.
    serving.kill()
    serving.wait(30)
    counts = {t: count(f"SELECT COUNT(*) FROM {t}") for t in TABLES}
    assert checked == counts["decisions"], (checked, counts["decisions"])
    verdicts = pg.run("psql", pg.url, "-Atc",
                      "SELECT verdict || ' ' || policy_verdict || ' ' || COUNT(*) FROM decisions "
                      "GROUP BY verdict, policy_verdict ORDER BY 1").split("\n")
    dump = pg.run("pg_dump", "--no-owner", "--no-privileges", "--format=plain", pg.url)
    (out / "mandate.sql").write_text(dump)
    expected = {
        "key_encryption_key": KEK,
        "orgs": [{k: v for k, v in o.items()} for o in facts["orgs"]],
        "agent_keys": facts["agent_keys"],
        "jwks": jwks,
        "counts": counts,
        "verdicts": [v for v in verdicts if v],
        "exports": marks,
    }
    (out / "expected.json").write_text(json.dumps(expected, indent=2, sort_keys=True) + "\n")
    print(f"written to {out}: mandate.sql ({len(dump)} bytes), expected.json, exports/")


if __name__ == "__main__":
    main()
