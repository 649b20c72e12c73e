"""The committed Python stubs must be exactly what ``make proto`` generates from ``proto/``."""

from __future__ import annotations

import filecmp
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]


def test_generated_stubs_match_proto(tmp_path: Path) -> None:
    protos = sorted(ROOT.glob("proto/**/*.proto"))
    if not protos:
        pytest.fail("no .proto contracts under proto/")
    out = tmp_path / "gen"
    subprocess.run(
        ["bash", str(ROOT / "hack" / "gen-proto.sh"), str(out)],
        check=True,
        cwd=ROOT,
        env={"PY": sys.executable, "PATH": "/usr/bin:/bin"},
    )
    committed = ROOT / "dsan" / "api" / "gen"

    def stubs(root: Path) -> set[Path]:
        return {p.relative_to(root) for p in root.rglob("*.py*")
                if p.suffix in (".py", ".pyi") and "__pycache__" not in p.parts}

    generated = stubs(out)
    assert any(p.name.endswith("_pb2.py") for p in generated), "gen-proto.sh generated nothing"
    stale = sorted(str(rel) for rel in generated
                   if not (committed / rel).exists()
                   or not filecmp.cmp(out / rel, committed / rel, shallow=False))
    assert not stale, f"stubs out of date, run `make proto`: {stale}"
    # a stub whose .proto is gone would still import and serve an outdated contract
    orphans = sorted(str(rel) for rel in stubs(committed) - generated)
    assert not orphans, f"stubs without a .proto under proto/, remove them: {orphans}"
