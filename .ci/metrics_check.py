"""Metrics against the running service, for .ci/run.

The real server binary starts on a fresh database with the admin listener on; known
traffic is sent (allows, denials, a review, a 401, 404s on one route template); /metrics is
scraped before and after and parsed with prometheus_client's text parser; every counter
must have moved by exactly the requests sent.

Usage: python .ci/metrics_check.py SERVER_BINARY
"""

import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

from ci_http import call, free_port


def scrape(url):
    """Every sample, by name and sorted labels."""
    with urllib.request.urlopen(url, timeout=10) as r:
        if not r.headers["content-type"].startswith("text/plain; version=0.0.4"):
            sys.exit(f"/metrics content type: {r.headers['content-type']}")
        text = r.read().decode()
    samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def main():
    binary = os.path.abspath(sys.argv[1])
    work = tempfile.mkdtemp(prefix="mandate-metrics-")
    db = os.path.join(work, "mandate.db")
    server = None
    try:
        onboarded = subprocess.run(
            [binary, "onboard", "--db", db, "--org", "ci"], check=True, capture_output=True, text=True
        ).stdout
        org = re.search(r"sandbox key: (\S+)", onboarded).group(1)
        api_port, public_port, admin_port = free_port(), free_port(), free_port()
        log = open(os.path.join(work, "server.log"), "w", encoding="utf-8")
        server = subprocess.Popen(
            [binary, "serve", "--db", db, "--api-addr", f"127.0.0.1:{api_port}",
             "--public-addr", f"127.0.0.1:{public_port}", "--admin-addr", f"127.0.0.1:{admin_port}"],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        base = f"http://127.0.0.1:{api_port}"
        metrics = f"http://127.0.0.1:{admin_port}/metrics"
        for _ in range(300):
            try:
                scrape(metrics)
                break
            except OSError:
                if server.poll() is not None:
                    sys.exit("the server exited")
                time.sleep(0.1)
        else:
            sys.exit("the admin listener did not start")

        status, agent = call(base, org, "POST", "/v1/agents", {"name": "buyer"})
        assert status == 201, (status, agent)
        mandate = {
            "agent": "agt_buyer", "principal": "role:cfo",
            "limits": {"per_transaction": 100, "per_month": 450, "currency": "USD"},
            "categories": ["software", "travel"], "review_above": 50, "expires": "2099-12-31",
        }
        status, body = call(base, org, "POST", "/v1/mandates", mandate)
        assert status == 201, (status, body)

        before = scrape(metrics)
        sent = [(10, "software"), (11, "travel"), (12, "software"), (60, "software"), (10, "food"), (200, "software")]
        verdicts, statuses = {}, {}
        for amount, category in sent:
            status, decision = call(base, agent["agent_key"], "POST", "/v1/authorizations",
                                    {"amount": amount, "currency": "USD", "recipient": "vendor:acme", "category": category})
            statuses[status] = statuses.get(status, 0) + 1
            key = (decision["verdict"], decision["policy_verdict"])
            verdicts[key] = verdicts.get(key, 0) + 1
        status, _ = call(base, "sk_sandbox_nope", "GET", "/v1/agents")
        assert status == 401, status
        for agent_id in ("agt_nobody", "agt_noone", "agt_nothing"):
            status, _ = call(base, org, "GET", f"/v1/agents/{agent_id}")
            assert status == 404, status
        after = scrape(metrics)

        def delta(name, **labels):
            key = (name, tuple(sorted(labels.items())))
            return after.get(key, 0.0) - before.get(key, 0.0)

        failures = []

        def check(got, want, what):
            if got != want:
                failures.append(f"{what}: moved by {got}, expected {want}")

        for (verdict, policy), n in verdicts.items():
            check(delta("mandate_decisions_total", env="sandbox", verdict=verdict, policy_verdict=policy), n,
                  f"decisions {verdict}/{policy}")
        for status, n in statuses.items():
            check(delta("mandate_http_requests_total", route="/v1/authorizations", status=str(status)), n,
                  f"POST /v1/authorizations {status}")
        check(delta("mandate_http_request_duration_seconds_count", route="/v1/authorizations"), len(sent),
              "latency observations of /v1/authorizations")
        check(delta("mandate_http_requests_total", route="unmatched", status="401"), 1, "401s")
        check(delta("mandate_http_requests_total", route="/v1/agents/{id}", status="404"), 3, "404s on /v1/agents/{id}")
        check(delta("mandate_rate_limited_total"), 0, "429s")
        check(delta("mandate_overload_shed_total"), 0, "503s")
        if any("agt_nobody" in dict(labels).values() for _, labels in after):
            failures.append("a raw path is a label value")
        if failures:
            sys.exit("metrics: " + "; ".join(failures))
        print(f"metrics: {len(sent)} decisions, 1 401 and 3 404s counted exactly ({len(after)} samples parsed)")
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
