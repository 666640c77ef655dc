# Writes an audit state of version 1 (the accepted checkpoint and its tree's right edge, what
# an offline `mandate audit --export` run leaves) for the log of a Mandate SQLite database,
# from the log's own tables, without exporting every decision: how docs/audit.md times a
# cron run at a million decisions. The next online run builds its mirror from the tiles.
# Usage: python3 mandate-bench/audit_state.py BENCH.db STATE.json
import base64, hashlib, json, sqlite3, sys
db, out = sys.argv[1], sys.argv[2]
c = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
org, env, size, note = c.execute("select org_id, env, size, shown_checkpoint from log_heads").fetchone()
leaves = []
for (hashes,) in c.execute("select hashes from log_strips where org_id=? and env=? order by start", (org, env)):
    leaves += [hashes[i:i + 32] for i in range(0, len(hashes), 32)]
lines = note.splitlines()
size = int(lines[1])
leaves = leaves[:size]
node = lambda l, r: hashlib.sha256(b"\x01" + l + r).digest()
# The complete subtrees, largest first (one per set bit of size).
nodes, start = [], 0
for level in range(63, -1, -1):
    if size & (1 << level):
        row = leaves[start:start + (1 << level)]
        while len(row) > 1:
            row = [node(row[i], row[i + 1]) for i in range(0, len(row), 2)]
        nodes.append(row[0])
        start += 1 << level
root = nodes[-1]
for n in reversed(nodes[:-1]):
    root = node(n, root)
assert base64.b64encode(root).decode() == lines[2], "the tables do not make the checkpoint"
state = {"version": 1, "audit": {"origin": lines[0], "edge": {"size": size, "nodes": [base64.b64encode(n).decode() for n in nodes]}, "checkpoint": note}, "after": None}
json.dump(state, open(out, "w"), indent=2)
print(lines[0], size)
