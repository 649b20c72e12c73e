"""User-given input files (traces, scenarios) read as text, with errors a user can act on:
a directory is named a directory, a non-UTF-8 byte by its line, and a UTF-8 byte order mark
(spreadsheets write one) is skipped."""

from __future__ import annotations

from pathlib import Path


class InputFileError(ValueError):
    """An input file that cannot be read as text; ``line`` (1-based) when one is to blame."""

    def __init__(self, message: str, line: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.line = line


def read_text(path: Path) -> str:
    """The file's text (UTF-8, a byte order mark skipped); InputFileError saying why not."""
    if path.is_dir():
        raise InputFileError("is a directory, not a file")
    if not path.exists():
        raise InputFileError("file not found")
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise InputFileError(f"cannot read: {exc.strerror or exc}") from None
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        column = exc.start - (data.rfind(b"\n", 0, exc.start) + 1) + 1
        raise InputFileError(f"not UTF-8 text: byte 0x{data[exc.start]:02x} at column "
                             f"{column}", line) from None
