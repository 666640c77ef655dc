"""The Python section of docs/embedding.md and the package's README run as they are
written: each example in a fresh folder with the files it reads (the key set, an `allow`
token of the shared cases), with the installed package and the clock of that case (the
tokens are short-lived)."""

import json
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[3]
FILE = json.loads((ROOT / "testdata/verify/cases.json").read_text())


def block(page, heading, language):
    """The first fenced block of `language` after `heading` in `page`."""
    text = (ROOT / page).read_text()
    start = text.index(f"\n{heading}\n") if heading else 0
    opening = text.index(f"\n```{language}\n", start) + len(language) + 5
    return text[opening : text.index("\n```\n", opening) + 1]


@pytest.mark.parametrize(
    "page, heading",
    [("docs/embedding.md", "## Verifying in Python"), ("bindings/python/README.md", None)],
)
def test_the_example_runs_as_written(page, heading, tmp_path):
    allow = next(c for c in FILE["cases"] if c["name"] == "allow")["checks"][0]
    (tmp_path / "jwks.json").write_text(json.dumps(FILE["key_sets"]["published"]))
    (tmp_path / "verdict.txt").write_text(FILE["tokens"]["allow"] + "\n")
    (tmp_path / "example.py").write_text(block(page, heading, "python"))
    clock = f"import time; time.time = lambda: {allow['options']['now']}; "
    run = clock + "exec(compile(open('example.py').read(), 'example.py', 'exec'))"
    out = subprocess.run(
        [sys.executable, "-c", run], cwd=tmp_path, capture_output=True, text=True, check=True
    ).stdout
    assert out == f"settle 42.50 USD ({allow['outcome']['ok']['jti']})\n"
