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
    stale = []
    for fresh in sorted(out.rglob("*.py*")):
        rel = fresh.relative_to(out)
        mine = committed / rel
        if not mine.exists() or not filecmp.cmp(fresh, mine, shallow=False):
            stale.append(str(rel))
    assert not stale, f"stubs out of date, run `make proto`: {stale}"
