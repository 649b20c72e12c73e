"""User-given input files (traces, scenarios) read as text, with errors a user can act on:
a directory is named a directory, a non-UTF-8 byte by its line, and a UTF-8 byte order mark
(spreadsheets write one) is skipped."""

from __future__ import annotations

from pathlib import Path


class InputFileError(ValueError):
    """An input file that cannot be used; the message names the file, and the line (1-based)
    and column when one is to blame."""

    def __init__(self, path: Path | str, message: str, line: int | None = None,
                 column: str | None = None) -> None:
        where = str(path)
        if line is not None:
            where += f", line {line}"
        if column is not None:
            where += f", column {column!r}"
        super().__init__(f"{where}: {message}")


def read_text(path: Path, error: type[InputFileError] = InputFileError) -> str:
    """The file's text (UTF-8, a byte order mark skipped); ``error`` saying why not."""
    if path.is_dir():
        raise error(path, "is a directory, not a file")
    if not path.exists():
        raise error(path, "file not found")
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise error(path, f"cannot read: {exc.strerror or exc}") from None
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        column = exc.start - (data.rfind(b"\n", 0, exc.start) + 1) + 1
        raise error(path, f"not UTF-8 text: byte 0x{data[exc.start]:02x} at column "
                    f"{column}", line) from None
