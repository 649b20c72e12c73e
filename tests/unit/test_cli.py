from __future__ import annotations

from pathlib import Path

import pytest

from dsan.cli import SUBCOMMANDS, main


def test_help_lists_every_subcommand(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    for name, *_ in SUBCOMMANDS:
        assert name in out


def test_no_command_prints_help_and_fails(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2
    assert "usage: dsan" in capsys.readouterr().out


def test_unknown_command_is_a_usage_error() -> None:
    with pytest.raises(SystemExit) as exc:
        main(["no-such-command"])
    assert exc.value.code == 2


def test_a_subcommand_whose_library_is_missing_is_listed_not_offered(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """The serving images have no torch: `dsan --help` still works and says why `train` is
    not there; a module of ours that is missing is a bug and still raises."""
    (tmp_path / "needs_torchy.py").write_text("import torchy_not_installed\n")
    (tmp_path / "needs_ours.py").write_text("import dsan.no_such_module\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr("dsan.cli.SUBCOMMANDS", (("train", "needs_torchy", "train it", "train"),))
    with pytest.raises(SystemExit):
        main(["--help"])
    assert "[not installed: pip install 'dsan-scheduler[train]']" in capsys.readouterr().out
    assert main(["train"]) == 2
    assert "needs torchy_not_installed" in capsys.readouterr().err
    monkeypatch.setattr("dsan.cli.SUBCOMMANDS", (("x", "needs_ours", "x", ""),))
    with pytest.raises(ModuleNotFoundError, match=r"dsan\.no_such_module"):
        main(["--help"])
