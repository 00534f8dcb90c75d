"""What a review of the command-line options and outputs found (review 15): each case failed
before its fix (a traceback, a run that failed late, a file lost or written under a wrong name)."""

from __future__ import annotations

import os
import re
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from sinkalign.cli.main import cli
from sinkalign.errors import InputError
from sinkalign.pipelines.runner import check_output
from tests.cli_errors import assert_one_line_error

EXAMPLES = Path(__file__).resolve().parents[1] / "sinkalign" / "data" / "examples"
FAMILY = ("# STOCKHOLM 1.0\n"
          "a  MKVLAAGHWERTYLLKPQDESTRIVNG\n"
          "b  MKILSAGHWERT-LLKPQDESTRIVNG\n"
          "c  MKVLA-GHWERTYLLKPQD-STRIVNG\n"
          "//\n")


def _run(*args):
    return CliRunner().invoke(cli, list(map(str, args)), catch_exceptions=False)


@pytest.fixture()
def refs(tmp_path):
    folder = tmp_path / "refs"
    folder.mkdir()
    (folder / "b.sto").write_text(FAMILY)
    return folder


@pytest.mark.parametrize("args, option", [
    (["evaluate", "--min-tm", "2", "--methods", "nw"], "--min-tm"),
    (["evaluate", "--min-tm", "nan", "--methods", "nw"], "--min-tm"),
    (["calibrate", "--min-tm", "nan", "-o", "{tmp}/m"], "--min-tm"),
    (["fit-evalues", "--min-tm", "-1", "-o", "{tmp}/m"], "--min-tm"),
    (["calibrate", "--min-confidence", "nan", "-o", "{tmp}/m"], "--min-confidence"),
    (["calibrate", "--flank", "nan", "-o", "{tmp}/m"], "--flank"),
    (["calibrate", "--flank-ratio", "inf", "-o", "{tmp}/m"], "--flank-ratio"),
    (["fit-evalues", "--alpha", "nan", "-o", "{tmp}/m"], "--alpha"),
    (["fit-evalues", "--alpha", "inf", "-o", "{tmp}/m"], "--alpha"),
])
def test_reference_commands_refuse_nonsense_numbers_as_usage_errors(refs, tmp_path, args, option):
    res = _run(*[a.format(tmp=tmp_path) for a in args], "--reference", refs / "b.sto")
    assert res.exit_code == 2 and f"Invalid value for '{option}'" in res.output, res.output
    assert not (tmp_path / "m").exists()


@pytest.mark.parametrize("args, option", [
    (["validate", "tail-depth", "--qk-std", "nan"], "--qk-std"),
    (["validate", "orbit", "--qk-std", "inf"], "--qk-std"),
    (["validate", "certificate", "--qk-std", "nan"], "--qk-std"),
    (["validate", "exactness", "--quick", "--tolerance", "nan"], "--tolerance"),
    (["validate", "kernels", "--backend", "pallas", "--interpret", "--quick", "--tolerance", "nan"], "--tolerance"),
    (["align", "--example", "--max-evalue", "nan"], "--max-evalue"),
    (["align", "--example", "--max-evalue", "inf"], "--max-evalue"),
    (["align", "--example", "--max-evalue", "-1e-3"], "--max-evalue"),
    (["align", "--example", "--max-evalue", "1e-3x"], "--max-evalue"),
])
def test_nonsense_numbers_are_refused_before_any_work(args, option):
    res = _run(*args)
    assert res.exit_code == 2 and f"Invalid value for '{option}'" in res.output, res.output


def test_evaluate_never_overwrites_a_reference_file_read_from_a_folder(refs):
    target = refs / "b.sto"
    res = _run("evaluate", "--reference", refs, "--methods", "nw", "--json", target, "--overwrite")
    assert_one_line_error(res, str(target), "also an input")
    assert target.read_text() == FAMILY


@pytest.fixture()
def run_dir(tmp_path):
    """A training run as `sinkalign train` leaves it: metrics, checkpoints, best/."""
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    (run / "metrics.jsonl").write_text('{"step": 10}\n')
    (run / "best").mkdir()
    (run / "best" / "params.safetensors").write_bytes(b"weights")
    (run / "best" / "state.json").write_text('{"step": 10, "val_f1": 0.5}')
    return run


@pytest.mark.parametrize("command", ["calibrate", "fit-evalues"])
@pytest.mark.parametrize("out", ["best", "best/", "checkpoints/../best"])
def test_model_writers_refuse_a_training_runs_best_folder(refs, run_dir, command, out):
    before = {p.name: p.read_bytes() for p in (run_dir / "best").iterdir()}
    res = _run(command, "--reference", refs / "b.sto", "--model", "blosum", "-o", f"{run_dir}/{out}", "--overwrite")
    assert_one_line_error(res, "training run", "write the model elsewhere")
    assert {p.name: p.read_bytes() for p in (run_dir / "best").iterdir()} == before


def test_model_writers_refuse_a_runs_best_folder_not_yet_written(refs, tmp_path):
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)  # a run before its first validation
    res = _run("calibrate", "--reference", refs / "b.sto", "-o", run / "best")
    assert_one_line_error(res, "training run")
    assert not (run / "best").exists()


def test_a_folder_named_best_outside_a_run_is_a_model_folder_like_any(tmp_path):
    from sinkalign.cli.evaluate import _check_not_run_best

    _check_not_run_best(tmp_path / "models" / "best")  # no run around it: no error


@pytest.mark.parametrize("option", ["-o", "--plan-out"])
def test_align_refuses_an_output_name_ending_in_a_slash(tmp_path, option):
    out = tmp_path / "newdir"
    res = _run("align", "--example", option, f"{out}{os.sep}")
    assert res.exit_code == 2 and "names a folder" in res.output, res.output
    assert not out.exists()


@pytest.mark.parametrize("option", ["-o", "--tree", "--column-scores", "--sequence-scores"])
def test_msa_refuses_an_output_name_ending_in_a_slash(tmp_path, option):
    out = tmp_path / "newdir"
    res = _run("msa", "--example", option, f"{out}/")
    assert res.exit_code == 2 and "names a folder" in res.output, res.output
    assert not out.exists()


def test_check_output_refuses_a_name_ending_in_a_slash(tmp_path):
    with pytest.raises(InputError, match="names a folder"):  # the Python API keeps the string as given
        check_output(f"{tmp_path / 'newdir'}/", False, [], "output")


def test_align_python_api_refuses_an_output_name_ending_in_a_slash(tmp_path):
    from sinkalign.pipelines.align import align_fasta

    out = tmp_path / "newdir"
    with pytest.raises(InputError, match="names a folder"):
        align_fasta(EXAMPLES / "globins_query.fasta", EXAMPLES / "globins_target.fasta", output=f"{out}/")
    assert not out.exists()


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full (Linux)")
@pytest.mark.parametrize("command", ["align", "msa"])
def test_a_full_disk_names_the_output_file(command):
    res = _run(command, "--example", "-o", "/dev/full")
    assert_one_line_error(res, "No space left on device", "/dev/full")


def test_help_names_the_lm_subcommands_as_they_are_called():
    top = _run("--help").output
    assert re.search(r"^\s+lm\s+Genome language models: train, eval \(", top, re.M), top
    group = _run("lm", "--help").output
    assert "train, eval (" in group and {"train", "eval"} <= set(re.findall(r"^  (\w+)\s", group, re.M)), group


def test_validate_orbit_dtype_has_help():
    out = _run("validate", "orbit", "--help").output
    block = re.search(r"^  --dtype .*?(?=^  -)", out, re.M | re.S).group(0)
    assert "precision" in block and "[default: float32]" in block, block


@pytest.mark.parametrize("args", [["score-msa", "{ref}", "{ref}", "--json", "{out}/"],
                                  ["score-msa", "{ref}", "{ref}", "--pairs", "{out}/"],
                                  ["generate-dna", "--prompt", "ACGT", "--length", "5", "-o", "{out}/"]])
def test_score_msa_and_generate_dna_refuse_an_output_name_ending_in_a_slash(refs, tmp_path, args):
    out = tmp_path / "newdir"
    res = _run(*(a.format(ref=refs / "b.sto", out=out) for a in args))
    assert res.exit_code == 2 and "names a folder" in res.output, res.output
    assert not out.exists()


def test_align_help_gives_each_shipped_models_own_threshold():
    """The --min-confidence help names the shipped thresholds; a refit that changes one must change it."""
    import json

    from sinkalign.align.aligner import default_model_path

    text = " ".join(CliRunner().invoke(cli, ["align", "--help"], terminal_width=200).output.split())
    for alphabet, name in (("protein", "protein model"), ("dna", "DNA model")):
        state = json.loads((default_model_path(alphabet) / "state.json").read_text())
        assert f"{state['calibration']['min_confidence']:g} for the shipped {name}" in text


def test_an_output_extension_that_names_no_format_is_said(caplog):
    from sinkalign.io.formats import output_format

    suffixes = {".tsv": "tsv", ".sam": "sam"}
    with caplog.at_level("WARNING", logger="sinkalign.io.formats"):
        assert output_format("hits.aln", None, "tsv", suffixes) == "tsv"
        assert output_format("hits.txt.gz", None, "tsv", suffixes) == "tsv"
    assert caplog.text.count("names no format: writing tsv") == 2
    assert "extension .aln of hits.aln" in caplog.text and "extension .txt of hits.txt.gz" in caplog.text
    caplog.clear()
    with caplog.at_level("WARNING", logger="sinkalign.io.formats"):  # named, none, or asked for: nothing said
        for output, fmt in (("hits.sam", None), ("hits.tsv.gz", None), ("hits", None), ("-", None), (".hidden", None),
                            ("hits.aln", "tsv"), (None, None)):
            output_format(output, fmt, "tsv", suffixes)
    assert caplog.text == ""


def test_a_reader_that_closes_the_pipe_ends_the_command_quietly_as_a_filter(tmp_path):
    """`sinkalign align ... | head`: no traceback, no message, and status 141 (128 + SIGPIPE), what
    the shell reports for a filter that SIGPIPE stopped (it was 1, a failure of the command).
    (msa ends the same way, through the same function.)"""
    import signal
    import subprocess
    import sys

    rng = np.random.default_rng(0)
    seqs = tmp_path / "seqs.fa"
    seqs.write_text("".join(f">s{i}\n{''.join(rng.choice(list('ACDEFGHIKLMNPQRSTVWY'), 60))}\n" for i in range(40)))
    # 1,600 pairs as text: far more than a pipe holds, so the writer is still at it when the reader goes
    proc = subprocess.Popen([sys.executable, "-m", "sinkalign.cli.main", "align", str(seqs), str(seqs), "--format",
                             "text"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.read(10)
    proc.stdout.close()  # the reader goes, as `head -c 10` does
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 128 + signal.SIGPIPE, err.decode()
    assert b"Traceback" not in err and b"Error" not in err, err.decode()


def test_evalues_below_the_double_range_are_filtered_and_written_from_their_logs(tmp_path):
    """A 2 kb DNA copy at 8% substitutions has E ~1e-794, 0.0 as a float: --max-evalue 0 kept it
    (0 <= 0), and PAF wrote ZE:f:0; both now go by the E-value's log."""
    rng = np.random.default_rng(1)
    a = "".join(rng.choice(list("ACGT"), 2000))
    b = "".join(c if rng.random() > 0.08 else rng.choice(list("ACGT")) for c in a)
    (tmp_path / "q.fa").write_text(f">q\n{b}\n>r\n{''.join(rng.choice(list('ACGT'), 300))}\n")
    (tmp_path / "t.fa").write_text(f">t\n{a}\n")

    def rows(*extra):
        res = _run("align", tmp_path / "q.fa", tmp_path / "t.fa", *extra)
        assert res.exit_code == 0, res.output
        return [line.split("\t") for line in res.stdout.splitlines()]

    every = rows()
    evalue = {r[0]: r[-2] for r in every[1:]}
    exponent = int(evalue["q"].split("e-")[1])
    assert exponent > 330 and float(evalue["r"]) > 1e-3  # q's E-value is no double; r's is no homolog
    assert [r[0] for r in rows("--max-evalue", "0")[1:]] == []
    assert [r[0] for r in rows("--max-evalue", "1e-300")[1:]] == ["q"]
    assert sorted(r[0] for r in rows("--max-evalue", "1")[1:]) == ["q", "r"]
    # thresholds below the double range are read exactly (float read 1e-700 as 0: nothing kept)
    assert [r[0] for r in rows("--max-evalue", f"1e-{exponent - 10}")[1:]] == ["q"]
    assert [r[0] for r in rows("--max-evalue", f"1e-{exponent + 10}")[1:]] == []
    paf = {r[0]: r for r in rows("--format", "paf")}
    assert f"ZE:f:{evalue['q']}" in paf["q"], paf["q"]


def test_evaluate_pair_scores_are_what_the_tables_are_made_of(tmp_path):
    """--pair-scores: a row per pair and method, from which the pooled figures are recounted (the
    tables gave no per-pair numbers, so a user could not regroup them, e.g. by source)."""
    import csv
    import json

    sto = tmp_path / "fam.sto"
    sto.write_text(FAMILY)
    res = _run("evaluate", "--reference", sto, "--methods", "nw,sw", "--pair-scores", tmp_path / "p.tsv", "--json",
               tmp_path / "e.json")
    assert res.exit_code == 0, res.output
    rows = list(csv.DictReader((tmp_path / "p.tsv").open(), delimiter="\t"))
    result = json.loads((tmp_path / "e.json").read_text())
    (name, data), = result["sets"].items()
    assert "pairs" not in data and all("pair_scores" not in m for m in data["methods"].values())  # JSON as before
    for method in ("nw", "sw"):
        mine = [r for r in rows if r["method"] == method]
        assert len(mine) == data["n_pairs"] == 3 and {r["set"] for r in mine} == {name}
        tp, pred, refs = (sum(int(r[k]) for r in mine) for k in ("tp", "predicted", "reference"))
        assert data["methods"][method]["micro"]["f1"] == pytest.approx(2 * tp / (pred + refs), rel=1e-12)
    res = _run("evaluate", "--reference", sto, "--methods", "nw", "--pair-scores", tmp_path / "p.tsv")
    assert res.exit_code == 1 and "already exists" in res.output  # never replaced unasked


def test_log_evalue_threshold_reads_strings_exactly_and_refuses_nonsense():
    import math

    from sinkalign.errors import InputError
    from sinkalign.pipelines.align import log_evalue_threshold

    assert log_evalue_threshold("1e-400") == pytest.approx(-400 * math.log(10), rel=1e-15)
    assert log_evalue_threshold(1e-3) == math.log(1e-3)
    for text in ("0.01", "0.1", "1e-3", "1e-300"):  # a string in the double range: as its float (same pairs kept)
        assert log_evalue_threshold(text) == math.log(float(text)), text
    assert log_evalue_threshold("0") == log_evalue_threshold(0) == -math.inf
    for bad in ("nan", "inf", "-1", "abc", -1.0, float("nan"), True):
        with pytest.raises(InputError, match="max_evalue"):
            log_evalue_threshold(bad)
