"""What the command-line tests share."""

from __future__ import annotations

from attnclust.cli import main


def fails(capsys, argv, status: int = 2) -> str:
    """``main(argv)`` exits with ``status`` and says why in one line of stderr, with no
    traceback; that line."""
    assert main(argv) == status
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "Traceback" not in err[0], err
    return err[0]
