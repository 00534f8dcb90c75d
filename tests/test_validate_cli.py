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
    assert "\u2026" not in result.output  # nothing truncated at the runner's 80 columns
    for row in data["rows"]:
        assert f"{row['dq']:.2e}" in result.output
    assert data["passed"] is True and data["tolerance"] == 1e-12 and "passed" in result.output
    # a tolerance the sweep cannot meet: the verdict is an exit status a script can act on
    failed = CliRunner().invoke(cli, ["validate", "exactness", "--quick", "--tolerance", "1e-30", "--json",
                                      str(tmp_path / "y.json")])
    assert failed.exit_code == 1 and "FAILED: max_abs_deviation" in failed.output
    assert json.loads((tmp_path / "y.json").read_text())["passed"] is False


def test_validate_orbit_json(tmp_path):
    out = tmp_path / "o.json"
    result = CliRunner().invoke(cli, ["validate", "orbit", "--json", str(out)])
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    assert data["max_log_error"] < 1e-5 and len(data["rows"]) == 3


def test_validate_rejects_bad_options():
    runner = CliRunner()
    for tau in ("0", "nan", "inf"):  # NaN compared false with every bound and certified nothing
        assert runner.invoke(cli, ["validate", "certificate", "--tau", tau]).exit_code == 2
    bad = runner.invoke(cli, ["validate", "exactness", "--dtype", "float16"])
    assert bad.exit_code == 2 and "float16" in bad.output
    assert runner.invoke(cli, ["validate", "tail-depth", "--qk-std", "0"]).exit_code == 2
    tf32 = runner.invoke(cli, ["validate", "kernels", "--backend", "pallas", "--interpret", "--precision", "tf32x3"])
    assert tf32.exit_code == 2 and "--precision tf32x3 (TF32 tensor-core dots) needs native kernels" in tf32.output


def test_tables_fit_80_columns_without_truncating_numbers():
    import io

    from rich.console import Console

    from sinkalign.cli.validate import _table

    rows = [{"case": "dustbin paper (B=128), band 16, 97x61 padded", "R": r, "mode": mode, "dq": 3.925e-07 * r,
             "dk": 1.25e-16, "dv": 0.0, "d_dustbin": None, "forward": 2.2e-16, "grad_scale": 1.0}
            for r in (1, 2, 4) for mode in ("one_reference", "staircase", "direct")]
    rows += [{**rows[0], "case": "dense 97x97"}]
    cols = ["case", "R", "mode", "dq", "dk", "dv", "d_dustbin", "forward", "grad_scale"]
    console = Console(width=80, file=io.StringIO(), color_system=None)
    for t in _table("backward modes vs autodiff", rows, cols, console=console):
        console.print(t)
    text = console.file.getvalue()
    assert "\u2026" not in text and max(len(line) for line in text.splitlines()) <= 80
    for v in ("3.93e-07", "7.85e-07", "1.57e-06", "1.25e-16", "0.00e+00", "2.20e-16", "1.00e+00"):
        assert v in text
    assert "dustbin paper (B=128), band 16, 97x61 padded" in text and "dense 97x97" in text
    wide = Console(width=200, file=io.StringIO(), color_system=None)
    assert len(_table("t", rows, cols, console=wide)) == 1  # one table when it fits
    # the exactness sweep's ten columns: per case still wider than 80, so its numbers come in slices
    # beside R and mode (grad_scale 0.793 printed as '7.', 'one_reference' folded over three lines)
    rows = [{**r, "d_marginals": None, "grad_scale": 0.793} for r in rows]
    console = Console(width=80, file=io.StringIO(), color_system=None)
    for t in _table("backward modes vs autodiff", rows, [*cols[:-1], "d_marginals", "grad_scale"], console=console):
        console.print(t)
    text = console.file.getvalue()
    assert "\u2026" not in text and max(len(line) for line in text.splitlines()) <= 80
    assert text.count("7.93e-01") == len(rows) and text.count("one_reference") == 8  # (3 + dense 97x97's) x 2 slices
    long = [{"L": 16384, "reference_vs_dense": 1.5e-06, "kernel_vs_dense": 2.5e-06, "dense_seconds": 12.25,
             "reference_seconds": 3.5, "kernel_seconds": 0.125}]
    console = Console(width=80, file=io.StringIO(), color_system=None)
    for t in _table("long", long, list(long[0]), console=console):
        console.print(t)
    text = console.file.getvalue()
    assert "\u2026" not in text and "1.50e-06" in text and "1.22e+01" in text and "16384" in text


def _fake(name: str, result: dict, calls: list):
    """A stand-in for ``sinkalign.sinkhorn.validation.<name>``: records its call, returns ``result``."""

    def run(*args, **kwargs):
        calls.append(name)
        return dict(result)

    return run


_ORBIT = {"rows": [{"seed": 0, "n_plans": 34, "max_log_error": 1.5e-7}], "max_log_error": 1.5e-7}


def test_validate_json_refuses_an_existing_file_before_the_check(tmp_path, monkeypatch):
    from sinkalign.sinkhorn import validation

    calls: list = []
    monkeypatch.setattr(validation, "orbit", _fake("orbit", _ORBIT, calls))
    out = tmp_path / "o.json"
    out.write_text("keep me\n")
    refused = CliRunner().invoke(cli, ["validate", "orbit", "--json", str(out)])
    assert refused.exit_code == 1 and isinstance(refused.exception, SystemExit), refused.output
    assert f"--json {out} already exists" in refused.output and "--overwrite" in refused.output
    assert out.read_text() == "keep me\n" and calls == []  # refused before the (long) check ran
    # --overwrite replaces it
    replaced = CliRunner().invoke(cli, ["validate", "orbit", "--json", str(out), "--overwrite"])
    assert replaced.exit_code == 0, replaced.output
    assert json.loads(out.read_text()) == _ORBIT and calls == ["orbit"]
    assert f"wrote {out}" in " ".join(replaced.output.split())  # rich may wrap the line


def test_validate_json_dash_is_standard_output(tmp_path, monkeypatch):
    """End to end: `--json -` prints the JSON alone on standard output, the table on standard error."""
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(cli, ["validate", "orbit", "--json", "-"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["max_log_error"] < 1e-5 and len(data["rows"]) == 3
    assert not (tmp_path / "-").exists() and list(tmp_path.iterdir()) == []
    assert "Proposition 6 orbit reconstruction" in result.stderr and "wrote" not in result.stderr


def test_validate_verdict_with_json_on_standard_output(tmp_path, monkeypatch):
    from sinkalign.sinkhorn import validation

    monkeypatch.chdir(tmp_path)
    calls: list = []
    rows = [{"case": "dense 1x1", "R": 1, "mode": "direct", "dq": 2e-3}]
    monkeypatch.setattr(validation, "exactness", _fake("exactness", {"rows": rows, "max_abs_deviation": 2e-3}, calls))
    failed = CliRunner().invoke(cli, ["validate", "exactness", "--quick", "--json", "-"])
    assert failed.exit_code == 1 and calls == ["exactness"], failed.output
    data = json.loads(failed.stdout)
    assert data["passed"] is False and data["tolerance"] == 1e-12 and data["max_abs_deviation"] == 2e-3
    assert "FAILED: max_abs_deviation 2.000e-03" in failed.stderr
    passed = CliRunner().invoke(cli, ["validate", "exactness", "--quick", "--tolerance", "1e-2", "--json", "-"])
    assert passed.exit_code == 0, passed.output
    assert json.loads(passed.stdout)["passed"] is True and "passed" in passed.stderr
    assert list(tmp_path.iterdir()) == []
