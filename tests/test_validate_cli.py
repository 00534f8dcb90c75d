"""`sinkalign validate` drives the library and writes the documented JSON keys."""

from __future__ import annotations

import json

from click.testing import CliRunner

from sinkalign.cli.main import cli


def test_validate_exactness_quick_json(tmp_path):
    out = tmp_path / "x.json"
    result = CliRunner().invoke(cli, ["validate", "exactness", "--quick", "--dtype", "float64", "--json", str(out)])
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    assert data["max_abs_deviation"] <= 1e-10
    assert {r["case"] for r in data["rows"]} == {"dense 97x97", "dense 97x257 padded", "dense 1x1"}
    assert "max_abs_deviation" in result.output


def test_validate_orbit_json(tmp_path):
    out = tmp_path / "o.json"
    result = CliRunner().invoke(cli, ["validate", "orbit", "--json", str(out)])
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    assert data["max_log_error"] < 1e-5 and len(data["rows"]) == 3


def test_validate_rejects_bad_options():
    runner = CliRunner()
    assert runner.invoke(cli, ["validate", "certificate", "--tau", "0"]).exit_code == 2
    bad = runner.invoke(cli, ["validate", "exactness", "--dtype", "float16"])
    assert bad.exit_code == 2 and "float16" in bad.output
    assert runner.invoke(cli, ["validate", "tail-depth", "--qk-std", "0"]).exit_code == 2
