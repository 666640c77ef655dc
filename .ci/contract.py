"""The published contract against the running service, for .ci/run.

1. openapi.yaml validates as OpenAPI 3.1 (openapi-spec-validator) and lists exactly the
   29 operations across 23 paths (the Rust test tests/api/contract.rs compares them with
   the router, both ways).
2. The real server binary starts on a fresh database and free loopback ports, an
   organization is onboarded with the operator command, and a little real data is made
   (agent, mandate, decisions, a review, an escrow, a webhook) so lists answer real objects.
3. schemathesis runs the document against it with the sandbox organization key (the agent
   key on POST /v1/authorizations, the one operation for agents): no server errors, status
   codes, content types and response bodies as documented, invalid input rejected, input
   the document calls valid accepted, and no operation answering without a key. The
   operations on one object get the real ids made in step 2. .ci/contract_hooks.py keeps
   the generated requests inside the rules no schema keyword states (an amount's spelling,
   `expires` not in the past, real cursors, state changes refused once taken). Bounded by
   --max-examples and a hard timeout.

The positive-data check covers every operation but DELETE /v1/mandates/{id}, which the
interface makes 400 whatever is sent (.ci/contract_hooks.py drops exactly that refusal).

Usage: python .ci/contract.py SERVER_BINARY [MAX_EXAMPLES]
"""

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request

import yaml
from openapi_spec_validator import validate

from ci_http import call, free_port

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOC = os.path.join(ROOT, "openapi.yaml")
HOOKS = os.path.join(ROOT, ".ci", "contract_hooks.py")
METHODS = {"get", "post", "put", "patch", "delete", "head", "options", "trace"}


def check_document():
    with open(DOC, encoding="utf-8") as f:
        doc = yaml.safe_load(f)
    validate(doc)
    ops = [(m, p) for p, item in doc["paths"].items() for m in item if m in METHODS]
    print(f"openapi.yaml: valid OpenAPI {doc['openapi']}, {len(ops)} operations across {len(doc['paths'])} paths")
    if (len(ops), len(doc["paths"])) != (29, 23):
        sys.exit("openapi.yaml must describe exactly 29 operations across 23 paths")


def expect(result, status, what):
    if result[0] != status:
        sys.exit(f"seeding: {what} answered {result[0]}: {result[1]}")
    return result[1]


def seed(base, org):
    """A little real data, so that lists and reads answer real objects."""
    agent = expect(call(base, org, "POST", "/v1/agents", {"name": "ci-buyer"}), 201, "agent")
    agent_key = agent["agent_key"]
    # A second agent with a mandate: lists of agents and mandates get a second page, so that
    # real cursors exist for the positive cases that send one (.ci/contract_hooks.py).
    expect(call(base, org, "POST", "/v1/agents", {"name": "ci-other"}), 201, "second agent")
    other = {
        "agent": "agt_ci-other",
        "limits": {"per_transaction": 1, "currency": "EUR"},
        "categories": ["travel"],
        "expires": "2099-12-31",
    }
    expect(call(base, org, "POST", "/v1/mandates", other), 201, "second mandate")
    mandate = {
        "agent": "agt_ci-buyer",
        "principal": "role:cfo",
        "limits": {"per_transaction": 100, "per_month": 1000, "currency": "USD"},
        "categories": ["software"],
        "review_above": 50,
        "expires": "2099-12-31",
        "escrow": {"required_above": 80},
    }
    mandate_id = expect(call(base, org, "POST", "/v1/mandates", mandate), 201, "mandate")["id"]
    ask = {"currency": "USD", "recipient": "vendor:acme", "category": "software"}
    allow = expect(call(base, agent_key, "POST", "/v1/authorizations", {**ask, "amount": 42.5}), 201, "allow")
    review = expect(call(base, agent_key, "POST", "/v1/authorizations", {**ask, "amount": 75}), 201, "review")
    expect(call(base, agent_key, "POST", "/v1/authorizations", {**ask, "amount": 500}), 201, "deny")
    escrow = {
        "amount": 42.5,
        "currency": "USD",
        "buyer": "agt_ci-buyer",
        "seller": "vendor:acme",
        "decision": allow["id"],
        "arbiter": "role:legal",
    }
    escrow = expect(call(base, org, "POST", "/v1/escrows", escrow), 201, "escrow")
    expect(call(base, org, "POST", f"/v1/escrows/{escrow['id']}/deliver"), 200, "deliver")
    hook = {"url": "http://127.0.0.1:9/hook", "events": ["escrow.funded", "ping"]}
    hook = expect(call(base, org, "POST", "/v1/webhooks", hook), 201, "webhook")
    events = expect(call(base, org, "GET", "/v1/events"), 200, "events")
    # Real ids for the operations that read or change one object: schemathesis uses them
    # instead of random ids, so those operations answer real objects (and real refusals).
    return agent_key, {
        "agents/{id}": "agt_ci-buyer",
        "mandates/{id}": mandate_id,
        "mandates/{id}/revoke": mandate_id,
        "reviews/{id}/approve": review["review"]["id"],
        "reviews/{id}/deny": review["review"]["id"],
        "decisions/{id}": allow["id"],
        "webhooks/{id}": hook["webhook"],
        "webhooks/{id}/ping": hook["webhook"],
        "events/{id}": events["data"][0]["id"],
        "escrows/{id}": escrow["id"],
        "escrows/{id}/deliver": escrow["id"],
        "escrows/{id}/release": escrow["id"],
        "escrows/{id}/refund": escrow["id"],
        "escrows/{id}/dispute": escrow["id"],
    }


def write_config(path, org, agent_key, ids):
    """A schemathesis.toml: the hooks, the keys, and the path id of each operation pinned to
    a real object."""
    with open(path, "w", encoding="utf-8") as f:
        f.write(f"hooks = {json.dumps(HOOKS)}\n")
        f.write(f'headers = {{ Authorization = "Bearer {org}" }}\n\n')
        f.write('[[operations]]\ninclude-operation-id = "authorize"\n')
        f.write(f'headers = {{ Authorization = "Bearer {agent_key}" }}\n\n')
        for suffix, value in ids.items():
            f.write(f'[[operations]]\ninclude-path = "/v1/{suffix}"\n')
            f.write(f'parameters = {{ "path.id" = "{value}" }}\n\n')


def main():
    binary = os.path.abspath(sys.argv[1])
    max_examples = sys.argv[2] if len(sys.argv) > 2 else "20"
    check_document()
    st = shutil.which("st", path=os.path.dirname(sys.executable))
    if st is None:
        sys.exit("schemathesis (st) is not installed beside this python")
    work = tempfile.mkdtemp(prefix="mandate-contract-")
    db = os.path.join(work, "mandate.db")
    server = None
    try:
        onboarded = subprocess.run(
            [binary, "onboard", "--db", db, "--org", "ci"], check=True, capture_output=True, text=True
        ).stdout
        org = re.search(r"sandbox key: (\S+)", onboarded).group(1)
        # schemathesis is fast: lift the key's request rate so that 429s stay rare.
        subprocess.run([binary, "set-rate", "--db", db, org, "--per-second", "100000"], check=True, capture_output=True)
        api_port, public_port = free_port(), free_port()
        log = open(os.path.join(work, "server.log"), "w", encoding="utf-8")
        server = subprocess.Popen(
            [binary, "serve", "--db", db, "--api-addr", f"127.0.0.1:{api_port}", "--public-addr", f"127.0.0.1:{public_port}"],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        base = f"http://127.0.0.1:{api_port}"
        for _ in range(300):
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{public_port}/openapi.yaml", timeout=1) as r:
                    if r.read().decode() != open(DOC, encoding="utf-8").read():
                        sys.exit("the server serves another openapi.yaml than the repository's")
                    break
            except OSError:
                if server.poll() is not None:
                    break
                time.sleep(0.1)
        else:
            sys.exit("the server did not start")
        if server.poll() is not None:
            log.flush()
            print(open(os.path.join(work, "server.log"), encoding="utf-8").read())
            sys.exit("the server exited")
        config = os.path.join(work, "schemathesis.toml")
        agent_key, ids = seed(base, org)
        write_config(config, org, agent_key, ids)
        command = [
            st, "--config-file", config, "run", DOC,
            "--url", base,
            "--checks", "not_a_server_error,status_code_conformance,content_type_conformance,"
            "response_schema_conformance,negative_data_rejection,positive_data_acceptance,ignored_auth",
            "--max-examples", max_examples,
            "--request-timeout", "10",
            # One worker: schemathesis's workers are threads, and hypothesis's lambda-source
            # cache (an LRUCache shared by all of them) is not thread-safe; with two, a race
            # there failed a CI run as a FlakyFailure inside the test-case generator.
            "--workers", "1",
            "--suppress-health-check", "all",
            "--output-sanitize", "true",
        ]
        # The keys are in the configuration file, not on the command line.
        print("$", " ".join(command), flush=True)
        try:
            # In the temporary directory: schemathesis keeps a cache where it runs.
            # The hooks fetch real cursors from the server with the organization key.
            env = {**os.environ, "MANDATE_CONTRACT_URL": base, "MANDATE_CONTRACT_KEY": org}
            result = subprocess.run(command, timeout=240, cwd=work, env=env)
        except subprocess.TimeoutExpired:
            sys.exit("schemathesis did not finish within 4 minutes")
        if result.returncode != 0:
            log.flush()
            tail = open(os.path.join(work, "server.log"), encoding="utf-8").read()[-4000:]
            print("--- server log (tail) ---\n" + tail)
            sys.exit(f"schemathesis failed ({result.returncode})")
    finally:
        if server is not None and server.poll() is None:
            server.terminate()
            try:
                server.wait(timeout=30)
            except subprocess.TimeoutExpired:
                server.kill()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
