"""What a user error looks like on the command line: one ``Error: ...`` line, exit status 1."""

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
