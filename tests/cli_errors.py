"""Shared helpers of the command-line tests: what a user error looks like on the command line (one
``Error: ...`` line, exit status 1), and signals as from a terminal."""

from __future__ import annotations


def assert_one_line_error(result, *fragments: str) -> None:
    """``result`` (a CliRunner result) ended with exit status 1 and a last line ``Error: ...``
    holding every fragment; no traceback, and no exception left over (a bug would leave its
    own, not the SystemExit of a handled error). Progress bars may come before the line."""
    assert result.exit_code == 1, result.output
    assert isinstance(result.exception, SystemExit), repr(result.exception)
    lines = result.output.rstrip("\n").split("\n")
    last = lines[-1]
    assert last.startswith("Error: ") and sum(line.startswith("Error:") for line in lines) == 1, result.output
    assert "Traceback" not in result.output
    for fragment in fragments:
        assert fragment in last, (fragment, last)


def terminal_signals() -> None:
    """``preexec_fn`` of a subprocess that should take SIGINT / SIGTERM as from a terminal: a
    process started from a background job of a shell without job control (as CI runs it)
    inherits SIGINT ignored, and a program rightly leaves an ignored signal alone."""
    import signal

    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, signal.SIG_DFL)
