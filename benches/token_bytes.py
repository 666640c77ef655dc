# Bytes per decision of three ways to keep a decision's token, on identical data: the real
# server (this build) makes N decisions; the same file is then copied three times: as
# stored (kid + 64-byte signature), without them (the build before), and with the whole
# token in place of the signature. Each is VACUUMed; size / N is compared.
import json, os, shutil, sqlite3, subprocess, sys, time, urllib.request, socket, re
binary, work, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
db = os.path.join(work, "m.db")
def port():
    s = socket.socket(); s.bind(("127.0.0.1", 0)); p = s.getsockname()[1]; s.close(); return p
out = subprocess.run([binary, "onboard", "--db", db, "--org", "acme"], capture_output=True, text=True)
keys = re.findall(r"sk_[A-Za-z0-9_]+", out.stdout + out.stderr)
assert keys, out
org = keys[0]
api, pub = port(), port()
server = subprocess.Popen([binary, "serve", "--db", db, "--api-addr", f"127.0.0.1:{api}", "--public-addr", f"127.0.0.1:{pub}"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
base = f"http://127.0.0.1:{api}"
def call(key, path, body, idem=None):
    for _ in range(100):
        try:
            req = urllib.request.Request(base + path, data=json.dumps(body).encode(), method="POST",
                headers={"authorization": f"Bearer {key}", "content-type": "application/json"})
            with urllib.request.urlopen(req) as r:
                return json.load(r)
        except urllib.error.URLError as e:
            if hasattr(e, "code"): raise
            time.sleep(0.1)
tokens = {}
try:
    agents = []
    for a in range(n // 10):
        k = call(org, "/v1/agents", {"name": f"a{a}"})["agent_key"]
        call(org, "/v1/mandates", {"agent": f"agt_a{a}", "limits": {"per_transaction": 100, "per_month": 100000, "currency": "USD"}, "categories": ["software"], "expires": "2099-12-31"})
        for i in range(10):
            d = call(k, "/v1/authorizations", {"amount": 12.5, "currency": "USD", "recipient": "vendor:acme", "category": "software"})
            tokens[d["id"]] = d["verdict_token"]
finally:
    server.terminate(); server.wait()
def size(path, change):
    c = sqlite3.connect(path)
    change(c); c.commit(); c.execute("PRAGMA wal_checkpoint(TRUNCATE)"); c.execute("VACUUM"); c.close()
    return os.path.getsize(path)
variants = {}
for name, change in [
    ("kid_and_signature", lambda c: None),
    ("nothing (build before)", lambda c: c.execute("UPDATE decisions SET signing_kid = NULL, signature = NULL")),
    ("whole token", lambda c: c.executemany("UPDATE decisions SET signing_kid = NULL, signature = ? WHERE id = ?", [(t.encode(), i) for i, t in tokens.items()])),
]:
    p = os.path.join(work, name.split()[0] + ".db")
    shutil.copy(db, p)
    for ext in ("-wal", "-shm"):
        if os.path.exists(db + ext): shutil.copy(db + ext, p + ext)
    variants[name] = size(p, change)
base_size = variants["nothing (build before)"]
print(json.dumps({"decisions": len(tokens), "token_bytes_avg": sum(map(len, tokens.values())) / len(tokens),
  "bytes": variants, "added_per_decision": {k: (v - base_size) / len(tokens) for k, v in variants.items()}}, indent=1))
