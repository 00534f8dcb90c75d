"""DNA generation (sinkalign.lm.generate, `sinkalign generate-dna`)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from sinkalign.cli.main import cli
from sinkalign.errors import CheckpointError, MissingFileError
from sinkalign.lm import ATTENTION_NAMES, DNALanguageModel, LMConfig, save_checkpoint
from sinkalign.lm.data import read_genome_records
from sinkalign.lm.generate import (
    SamplingConfig,
    default_model_path,
    generate,
    generate_batch,
    load_model,
    resolve_model_path,
)
from sinkalign.lm.model import CHECKPOINT_WEIGHTS
from sinkalign.pipelines.gc_profile import parse_continuation_description
from tests.cli_errors import assert_one_line_error

PROMPT = "ACGTTGCANNGATTACAGGCT"


def tiny_model(attention: str, *, dtype=torch.float64, seed: int = 0) -> DNALanguageModel:
    """Random tiny model; a large init_std makes its predictions far from uniform (no near-ties)."""
    torch.manual_seed(seed)
    cfg = LMConfig(vocab_size=8, d_model=32, n_layers=2, n_heads=2, attention=attention, max_train_len=16,
                   goat_n_freqs=3, bam_chunk_size=8, sla_chunk_size=8, init_std=0.3)
    return DNALanguageModel(cfg).to(dtype).eval()


@pytest.mark.parametrize("attention", ATTENTION_NAMES)
def test_cached_generation_equals_full_recompute(attention):
    """KV cache (softmax) / recurrent state (SLA) decode == recomputing the whole sequence."""
    model = tiny_model(attention)
    greedy = generate(model, PROMPT, 48, temperature=0)  # prompt 21 + 48 > 4x training length 16
    assert greedy == generate(model, PROMPT, 48, temperature=0, use_cache=False)
    assert len(greedy) == 48 and set(greedy) <= set("ACGT")
    sampled = generate(model, PROMPT, 40, temperature=1.3, top_k=3, seed=11)
    assert sampled == generate(model, PROMPT, 40, temperature=1.3, top_k=3, seed=11, use_cache=False)
    batch = generate_batch(model, [PROMPT, PROMPT[::-1]], 24, temperature=0)
    assert batch == [generate(model, p, 24, temperature=0) for p in (PROMPT, PROMPT[::-1])]


def test_seeded_reproducibility_and_restored_mode():
    model = tiny_model("goat", dtype=torch.float32)
    model.train()
    a = generate(model, "acgtac", 64, seed=5)
    assert model.training  # mode restored
    assert a == generate(model, "ACGTAC", 64, seed=5)  # lowercase prompt is the same prompt
    assert a != generate(model, "ACGTAC", 64, seed=6)
    assert generate(model, "ACGTAC", 64, top_k=1, seed=1) == generate(model, "ACGTAC", 64, temperature=0)
    assert generate(model, "ACGTAC", 64, top_p=1e-6, seed=2) == generate(model, "ACGTAC", 64, temperature=0)
    # a positive temperature towards 0 is greedy: logits / T overflowed to NaN probabilities below ~1e-38
    for t in (1e-40, 1e-300, 5e-324):
        assert generate(model, "ACGTAC", 64, temperature=t, seed=3) == generate(model, "ACGTAC", 64, temperature=0)


def test_sampling_follows_the_model_distribution():
    """First-base frequencies over many draws match softmax(logits / T) restricted to ACGT."""
    model = tiny_model("rope")
    with torch.no_grad():
        logits = model(torch.tensor([[0, 1, 2, 3, 3, 0]]))[0, -1, :4]
    n = 6000
    for temperature, top_k, top_p in [(1.0, None, None), (0.5, None, None), (1.0, 2, None), (1.0, None, 0.7)]:
        z = logits / temperature
        probs = torch.softmax(z, -1)
        if top_k is not None:
            keep = torch.zeros(4, dtype=torch.bool)
            keep[z.topk(top_k).indices] = True
        elif top_p is not None:
            p_sorted, order = probs.sort(descending=True)
            keep = torch.zeros(4, dtype=torch.bool)
            keep[order[(p_sorted.cumsum(0) - p_sorted) < top_p]] = True
        else:
            keep = torch.ones(4, dtype=torch.bool)
        expect = torch.where(keep, probs, torch.zeros(())).numpy()
        expect /= expect.sum()
        out = generate_batch(model, ["ACGTTA"] * n, 1, temperature=temperature, top_k=top_k, top_p=top_p, seed=3)
        freq = np.array([sum(o == b for o in out) for b in "ACGT"]) / n
        assert freq[expect == 0].sum() == 0
        assert np.abs(freq - expect).max() < 4 * np.sqrt(0.25 / n) + 1e-3, (temperature, top_k, top_p)


def test_generation_bad_inputs():
    model = tiny_model("nope", dtype=torch.float32)
    with pytest.raises(ValueError, match=r"prompt is empty"):
        generate(model, "", 10)
    with pytest.raises(ValueError, match=r"prompt: invalid character 'Z' at 0-based position 4: allowed are A, C, "
                                         r"G, T, N and U \(read as T\), either case; IUPAC ambiguity codes and X "
                                         r"are read as N"):
        generate(model, "ACGTZACGT", 10)
    # a non-ASCII letter is refused where it stands ('ß'.upper() is 'SS': it was read as NN)
    with pytest.raises(ValueError, match=r"prompt: invalid character 'ß' at 0-based position 3"):
        generate(model, "ACGß", 5)
    with pytest.raises(ValueError, match=r"prompt: invalid character 'ſ' at 0-based position 1"):
        generate(model, "Aſ", 5)
    # IUPAC ambiguity codes and a masked base are N, as read_genome reads a genome
    assert generate(model, "acgRYxsw", 12, seed=3) == generate(model, "ACGNNNNN", 12, seed=3)
    with pytest.raises(ValueError, match=r"length=0 must be a positive integer"):
        generate(model, "ACGT", 0)
    with pytest.raises(ValueError, match=r"length=-3 must be a positive integer"):
        generate(model, "ACGT", -3)
    with pytest.raises(ValueError, match=r"temperature=-1.0 must be a finite number >= 0"):
        generate(model, "ACGT", 5, temperature=-1.0)
    with pytest.raises(ValueError, match=r"top_k=0 must be a positive integer"):
        generate(model, "ACGT", 5, top_k=0)
    with pytest.raises(ValueError, match=r"top_p=1.5 must be in \(0, 1\]"):
        generate(model, "ACGT", 5, top_p=1.5)
    with pytest.raises(ValueError, match=r"prompts must have equal lengths, got \[3, 4\]"):
        generate_batch(model, ["ACG", "ACGT"], 5)
    with pytest.raises(ValueError, match=r"prompt 1: invalid character '-' at 0-based position 2"):
        generate_batch(model, ["ACGT", "AC-T"], 5)
    with pytest.raises(ValueError, match=r"top_p=0 must be in"):
        SamplingConfig(top_p=0)
    for seed in (-1, 2**64, 1.5, True):  # 2**64 was torch's "Overflow when unpacking long long"
        with pytest.raises(ValueError, match=r"seed=.* must be an integer from 0 to 2\*\*63 - 1"):
            generate(model, "ACGT", 5, seed=seed)


def test_load_model_errors_name_the_path(tmp_path):
    with pytest.raises(MissingFileError, match=r"model path not found: .*nowhere"):
        load_model(tmp_path / "nowhere")
    ck = tmp_path / "ck"
    save_checkpoint(ck, tiny_model("alibi", dtype=torch.float32))
    assert load_model(ck).model.config.attention == "alibi"
    (ck / CHECKPOINT_WEIGHTS).write_bytes(b"\x00garbage")
    with pytest.raises(CheckpointError, match=r"ck/model.safetensors: corrupt safetensors file"):
        load_model(ck)
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    with pytest.raises(MissingFileError, match=r"training run .*run holds no complete checkpoint"):
        resolve_model_path(run)


def test_shipped_default_model():
    path = default_model_path()
    assert resolve_model_path(None) == path == resolve_model_path("default")
    assert path.name == "lm_default"
    size = sum(p.stat().st_size for p in path.iterdir())
    assert size < 5 * 2**20, f"shipped checkpoint is {size} bytes"
    assert sorted(p.name for p in path.iterdir()) == ["config.json", "model.safetensors"]  # no optimizer
    ckpt = load_model()
    meta = json.loads((path / "config.json").read_text())["extra"]
    # the multi-genome model: trained on many genomes, genera held out, both strands
    tc = meta["train_config"]
    assert tc["balance"] == "genome" and tc["reverse_complement"] and tc["genome_split"].endswith(
        "genomes_multi_split.json")
    assert meta["tokens_seen"] == meta["step"] * tc["batch_size"] * tc["seq_len"]
    assert "--genome-split data_manifests/genomes_multi_split.json" in meta["train_command"]
    assert ckpt.model.config.attention == tc["attention"] == "goat"
    # on the held-out C. diphtheriae tenth it still beats the order-6 Markov chain (data README)
    assert meta["heldout_bits_per_base"] < meta["markov_order6_bits_per_base"] < 1.952
    # on genera it never saw, below each genome's own order-5 chain on average
    v = meta["valid_genera"]
    assert v["mean_bits_per_base"] < v["mean_markov5_own"]
    out = generate(ckpt.model, "ATGACCGGTTTAGCC", 30, seed=0)
    assert len(out) == 30 and set(out) <= set("ACGT")


def test_shipped_cdiph_model_by_name():
    """The C. diphtheriae-only model stays available as ``cdiph`` (an existing path wins over a name)."""
    path = resolve_model_path("cdiph")
    assert path == default_model_path("cdiph") and path.name == "lm_cdiph" and path != default_model_path()
    meta = json.loads((path / "config.json").read_text())["extra"]
    assert meta["heldout_bits_per_base"] < 1.952 and "genome_split" not in meta["train_config"]
    assert load_model("cdiph").model.config.input_kmer == 4
    with pytest.raises(ValueError, match=r"no shipped language model is named 'nope' \(shipped: default, cdiph\)"):
        default_model_path("nope")


def test_shipped_model_name_loses_to_an_existing_path(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    save_checkpoint(tmp_path / "cdiph", tiny_model("alibi", dtype=torch.float32))
    assert resolve_model_path("cdiph").resolve() == (tmp_path / "cdiph").resolve()
    assert load_model("cdiph").model.config.attention == "alibi"


def test_model_paths_that_hold_no_model_say_what_they_are(tmp_path, monkeypatch, caplog):
    """A folder named like a shipped model that holds no model (a user's ``default/``) no longer
    hides it; a run stopped before its first checkpoint, and any other folder, say what they
    are (both said "checkpoint file not found: .../config.json"); a run's ``checkpoints/``
    folder is its newest checkpoint."""
    import logging

    monkeypatch.chdir(tmp_path)
    (tmp_path / "default").mkdir()
    (tmp_path / "default" / "notes.txt").write_text("mine\n")
    with caplog.at_level(logging.WARNING, logger="sinkalign.lm.generate"):
        assert resolve_model_path("default") == default_model_path("default")
    assert "holds no genome LM: model 'default' is the shipped model" in caplog.text
    early = tmp_path / "run10"
    early.mkdir()
    (early / "metrics.jsonl").write_text("")
    with pytest.raises(MissingFileError, match=r"training run run10 holds no checkpoint yet: it stopped before its "
                                               r"first \(`sinkalign lm train --out run10 --resume`"):
        resolve_model_path("run10")
    (tmp_path / "other").mkdir()
    with pytest.raises(MissingFileError, match=r"other holds no genome LM: give a checkpoint directory"):
        resolve_model_path("other")
    run = tmp_path / "run"
    save_checkpoint(run / "checkpoints" / "step-00000002", tiny_model("rope", dtype=torch.float32))
    (run / "checkpoints" / "step-00000002" / "trainer_state.json").write_text("{}")  # complete
    (run / "checkpoints" / "latest.json").write_text(json.dumps({"dir": "step-00000002"}))
    assert resolve_model_path(run / "checkpoints") == resolve_model_path(run) == run / "checkpoints" / "step-00000002"


def test_a_folder_named_like_a_shipped_model_by_one_rule_two_tests(tmp_path, monkeypatch, caplog):
    """``names_shipped_model`` is the one rule (it was written twice, in lm.model and
    lm.checkpoints), each reader passing its test of the path: load_model/resolve_model_path
    (any existing path is taken: it follows a run named ``default`` to its newest checkpoint) and
    load_checkpoint (only a checkpoint directory is taken: it reads no runs)."""
    from sinkalign.lm.checkpoints import holds_checkpoint, names_shipped_model
    from sinkalign.lm.model import load_checkpoint_config

    monkeypatch.chdir(tmp_path)
    shipped = default_model_path("default")
    shipped_config = load_checkpoint_config(shipped)
    # no such folder: the shipped model, for both
    assert names_shipped_model("default") and names_shipped_model("default", taken_as_path=holds_checkpoint)
    assert resolve_model_path("default") == shipped and load_checkpoint_config("default") == shipped_config
    assert not names_shipped_model(tmp_path / "default") and not names_shipped_model("elsewhere")
    # ./default holding nothing usable: taken as a path by the first rule (resolve_model_path then
    # passes it over with a warning), not by the second; both give the shipped model
    (tmp_path / "default").mkdir()
    assert not names_shipped_model("default")
    assert names_shipped_model("default", taken_as_path=holds_checkpoint)
    assert resolve_model_path("default") == shipped and load_checkpoint_config("default") == shipped_config
    # ./default holding a run: load_model follows it; load_checkpoint, which reads no runs, does not
    step = tmp_path / "default" / "checkpoints" / "step-00000003"
    save_checkpoint(step, tiny_model("alibi", dtype=torch.float32))
    (step / "trainer_state.json").write_text("{}")  # complete
    (tmp_path / "default" / "checkpoints" / "latest.json").write_text(json.dumps({"dir": step.name}))
    assert not names_shipped_model("default")
    assert names_shipped_model("default", taken_as_path=holds_checkpoint)
    assert resolve_model_path("default").resolve() == step.resolve()
    assert load_model("default").config.attention == "alibi"
    caplog.clear()
    with caplog.at_level("WARNING", logger="sinkalign.lm.model"):
        assert load_checkpoint_config("default") == shipped_config
    assert "holds no checkpoint directory: model 'default' is the shipped model" in caplog.text  # said, not silent
    # ./default holding a checkpoint: taken as given by both
    save_checkpoint(tmp_path / "default", tiny_model("rope", dtype=torch.float32))
    assert not names_shipped_model("default", taken_as_path=holds_checkpoint)
    assert load_checkpoint_config("default").attention == load_model("default").config.attention == "rope"


def test_cli_generate_dna_shipped_models():
    """`generate-dna` without --model uses the multi-genome default; `--model cdiph` the old one."""
    runner = CliRunner()
    args = ["generate-dna", "--prompt", "ATGACCGGTTTAGCC", "--length", "40", "--seed", "3"]
    res = runner.invoke(cli, args)
    assert res.exit_code == 0, res.output
    assert res.output.strip() == generate(load_model().model, "ATGACCGGTTTAGCC", 40, seed=3)
    res_c = runner.invoke(cli, [*args, "--model", "cdiph"])
    assert res_c.exit_code == 0, res_c.output
    assert res_c.output.strip() == generate(load_model("cdiph").model, "ATGACCGGTTTAGCC", 40, seed=3)


def test_cli_threads_option_sets_torch_threads_and_keeps_the_result(tmp_path):
    """--threads N (generate-dna, lm eval): torch's CPU threads for the run; the same bases."""
    ck = tmp_path / "ck"
    save_checkpoint(ck, tiny_model("rope", dtype=torch.float32))
    before = torch.get_num_threads()
    runner = CliRunner()
    base = ["generate-dna", "--model", str(ck), "--prompt", "ACGTACGGTA", "--length", "30", "--seed", "4"]
    try:
        torch.set_num_threads(2)  # so that the option's 1 shows
        one = runner.invoke(cli, [*base, "--threads", "1"])
        assert one.exit_code == 0, one.output
        assert torch.get_num_threads() == 1
        torch.set_num_threads(2)
        assert one.output == runner.invoke(cli, base).output
        fasta = tmp_path / "g.fa"
        fasta.write_text(">g\n" + "ACGTTGCAAGGCTTAC" * 30 + "\n")
        torch.set_num_threads(2)
        res = runner.invoke(cli, ["lm", "eval", "--model", str(ck), "--fasta", str(fasta), "--sections", "heldout",
                                  "--markov-order", "2", "--threads", "1"])
        assert res.exit_code == 0, res.output
        assert torch.get_num_threads() == 1
        res = runner.invoke(cli, [*base, "--threads", "0"])
        assert res.exit_code == 2 and "--threads" in res.output
    finally:
        torch.set_num_threads(before)


def test_cli_generate_dna(tmp_path):
    ck = tmp_path / "ck"
    save_checkpoint(ck, tiny_model("sla", dtype=torch.float32))
    runner = CliRunner()
    base = ["generate-dna", "--model", str(ck), "--prompt", "ACGTACGGTA", "--length", "70", "--seed", "4"]
    plain = runner.invoke(cli, base)
    assert plain.exit_code == 0, plain.output
    assert plain.output.strip() == generate(load_model(ck).model, "ACGTACGGTA", 70, seed=4)
    out = tmp_path / "gen.fa"
    res = runner.invoke(cli, base + ["--format", "fasta", "--id", "g1", "--chrom", "chr1", "--start", "100",
                                     "-o", str(out)])
    assert res.exit_code == 0, res.output
    (rec,) = read_genome_records(out)
    assert rec.id == "g1" and rec.seq == plain.output.strip()
    assert parse_continuation_description(rec.description) == ("chr1", 100)
    assert max(len(line) for line in out.read_text().splitlines()[1:]) == 60
    res = runner.invoke(cli, base + ["--format", "fasta", "--include-prompt", "--chrom", "c", "--start", "10",
                                     "-o", str(out), "--overwrite"])
    assert res.exit_code == 0, res.output
    (rec,) = read_genome_records(out)
    assert rec.seq == "ACGTACGGTA" + plain.output.strip()
    assert parse_continuation_description(rec.description) == ("c", 0)
    # an RNA prompt: the same bases (U read as T), and the file is DNA, which gc-profile reads
    res = runner.invoke(cli, ["generate-dna", "--model", str(ck), "--prompt", "acguacgGUA", "--length", "70", "--seed",
                              "4", "--format", "fasta", "--include-prompt", "-o", str(out), "--overwrite"])
    assert res.exit_code == 0, res.output
    assert read_genome_records(out)[0].seq == "ACGTACGGTA" + plain.output.strip()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--prompt", "ACGZT", "--length", "5"], "invalid character 'Z' at 0-based position 3"),
        (["--prompt", "", "--length", "5"], "prompt is empty"),
        (["--prompt", "ACGT", "--length", "0"], "Invalid value for '--length': must be a positive integer, got 0"),
        (["--prompt", "ACGT", "--length", "5", "--top-p", "2"], "Invalid value for '--top-p': 2.0 is not in the range 0<x<=1."),
        (["--prompt", "ACGT", "--length", "5", "--chrom", "c"], "--chrom and --start go together"),
        (["--prompt", "ACGT", "--length", "5", "--top-k", "0"], "Invalid value for '--top-k': 0 is not in the range x>=1."),
        (["--prompt", "ACGT", "--length", "5", "--temperature", "nan"],
         "Invalid value for '--temperature': nan is not a finite number."),
        (["--prompt", "ACGT", "--length", "5", "--temperature", "-1"],
         "Invalid value for '--temperature': -1.0 is not in the range x>=0."),
        (["--prompt", "ACGT", "--length", "5", "--top-p", "nan"], "Invalid value for '--top-p': nan is not a finite number."),
        (["--prompt", "ACGT", "--length", "5", "--format", "fasta", "--id", "a b"],
         "Invalid value for '--id': 'a b' contains whitespace; it must be one word, as FASTA reads ids (e.g. 'a_b')"),
        (["--prompt", "ACGT", "--length", "5", "--format", "fasta", "--id", ""], "Invalid value for '--id': must not be empty"),
        (["--prompt", "ACGT", "--length", "5", "--format", "fasta", "--id", ">x"],  # was written as '>>x'
         "Invalid value for '--id': '>x' starts with '>', which the FASTA header puts before the id itself; give 'x'"),
        (["--prompt", "ACGT", "--length", "5", "--format", "fasta", "--chrom", "x y", "--start", "4"],
         "Invalid value for '--chrom': 'x y' contains whitespace"),
        (["--prompt", "ACGT", "--length", "5", "--format", "fasta", "--chrom", "", "--start", "4"],
         "Invalid value for '--chrom': must not be empty"),
    ],
)
def test_cli_generate_dna_errors(tmp_path, args, message):
    ck = tmp_path / "ck"
    save_checkpoint(ck, tiny_model("rope", dtype=torch.float32))
    res = CliRunner().invoke(cli, ["generate-dna", "--model", str(ck), *args])
    assert res.exit_code != 0
    assert message in res.output
    assert "Traceback" not in res.output and "_k=" not in res.output and "_p=" not in res.output


def test_cli_generate_dna_does_not_replace_an_existing_file_unasked(tmp_path):
    ck = tmp_path / "ck"
    save_checkpoint(ck, tiny_model("rope", dtype=torch.float32))
    out = tmp_path / "exist.fa"
    out.write_text(">mine\nACGT\n")
    base = ["generate-dna", "--model", str(ck), "--prompt", "ACGTACGGTA", "--length", "20", "--seed", "4",
            "--format", "fasta", "-o", str(out)]
    runner = CliRunner()
    res = runner.invoke(cli, base)
    assert_one_line_error(res, f"output {out} already exists; remove it, or pass --overwrite to replace it")
    assert out.read_text() == ">mine\nACGT\n"
    res = runner.invoke(cli, [*base, "--overwrite"])
    assert res.exit_code == 0, res.output
    (rec,) = read_genome_records(out)
    assert rec.id == "gen_s4" and len(rec.seq) == 20  # the default id names the seed
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ck", "exist.fa"]  # written atomically: no leftovers
    new = tmp_path / "new.fa"
    res = runner.invoke(cli, [*base[:-1], str(new), "--overwrite"])  # --overwrite with no file there: fine
    assert res.exit_code == 0 and read_genome_records(new)[0].seq == rec.seq


def test_cli_generate_dna_output_format_follows_the_file_name(tmp_path):
    """As `align` and `msa` -o: the extension names the format (.fa/.fasta/.fna/.fas FASTA,
    .txt plain), a --format it contradicts is refused before any work, and a name ending .gz is
    gzip-compressed. Before, -o b.fa wrote bare bases, -o g.fa.gz plain text and -o x.fasta
    --format plain was taken."""
    import gzip

    from Bio import SeqIO

    ck = tmp_path / "ck"
    save_checkpoint(ck, tiny_model("sla", dtype=torch.float32))
    runner = CliRunner()
    base = ["generate-dna", "--model", str(ck), "--prompt", "ACGTACGGTA", "--length", "30", "--seed", "4"]
    bases = runner.invoke(cli, base).output.strip()  # standard output: plain, as before
    assert len(bases) == 30 and set(bases) <= set("ACGT")
    res = runner.invoke(cli, [*base, "-o", str(tmp_path / "b.fa")])
    assert res.exit_code == 0, res.output
    (rec,) = SeqIO.parse(tmp_path / "b.fa", "fasta")
    assert rec.id == "gen_s4" and str(rec.seq) == bases
    res = runner.invoke(cli, [*base, "--chrom", "c", "--start", "10", "-o", str(tmp_path / "c.fna")])
    assert res.exit_code == 0, res.output  # --chrom/--start go with FASTA, which the name asks for
    assert parse_continuation_description(read_genome_records(tmp_path / "c.fna")[0].description) == ("c", 10)
    res = runner.invoke(cli, [*base, "--format", "fasta", "-o", str(tmp_path / "g.fa.gz")])
    assert res.exit_code == 0, res.output
    with gzip.open(tmp_path / "g.fa.gz", "rt") as handle:
        (rec,) = SeqIO.parse(handle, "fasta")
    assert str(rec.seq) == bases
    res = runner.invoke(cli, [*base, "-o", str(tmp_path / "p.txt.gz")])
    assert res.exit_code == 0, res.output
    assert gzip.open(tmp_path / "p.txt.gz", "rt").read() == bases + "\n"
    res = runner.invoke(cli, [*base, "-o", str(tmp_path / "p.txt")])
    assert res.exit_code == 0 and (tmp_path / "p.txt").read_text() == bases + "\n"
    for name, fmt, named in (("x.fasta", "plain", "fasta"), ("y.txt", "fasta", "plain"), ("z.FAS.gz", "plain", "fasta")):
        res = runner.invoke(cli, [*base, "--format", fmt, "-o", str(tmp_path / name)])
        assert_one_line_error(res, f"the output {tmp_path / name} is named as a {named} file, and the format asked for "
                                   f"is {fmt}: leave the format out or give {named} (--format {named}")
        assert not (tmp_path / name).exists()
    res = runner.invoke(cli, [*base, "--id", "g", "-o", str(tmp_path / "q.txt")])
    assert res.exit_code == 2 and "--id names the FASTA record" in res.output and not (tmp_path / "q.txt").exists()
    # an existing file is still kept unless --overwrite, whatever its name says
    res = runner.invoke(cli, [*base, "-o", str(tmp_path / "b.fa")])
    assert res.exit_code == 1 and "already exists" in res.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b.fa", "c.fna", "ck", "g.fa.gz", "p.txt", "p.txt.gz"]


def test_cli_generate_dna_missing_or_corrupt_model(tmp_path):
    runner = CliRunner()
    res = runner.invoke(cli, ["generate-dna", "--model", str(tmp_path / "absent"), "--prompt", "ACGT",
                              "--length", "5"])
    assert_one_line_error(res, f"Error: model path not found: {tmp_path / 'absent'}")
    ck = tmp_path / "ck"
    save_checkpoint(ck, tiny_model("rope", dtype=torch.float32))
    (ck / "model.safetensors").unlink()
    res = runner.invoke(cli, ["generate-dna", "--model", str(ck), "--prompt", "ACGT", "--length", "5"])
    assert_one_line_error(res, f"checkpoint file not found: {ck / 'model.safetensors'}")
    save_checkpoint(ck, tiny_model("rope", dtype=torch.float32), overwrite=True)
    (ck / "config.json").write_text("{not json")
    res = runner.invoke(cli, ["generate-dna", "--model", str(ck), "--prompt", "ACGT", "--length", "5"])
    assert_one_line_error(res, f"{ck / 'config.json'}: corrupt checkpoint config")


def test_cli_generate_dna_bug_keeps_its_traceback(tmp_path, monkeypatch):
    import sinkalign.lm.generate as G

    def bug(*args, **kwargs):
        raise ValueError("an internal invariant broke")

    monkeypatch.setattr(G, "load_model", bug)
    res = CliRunner().invoke(cli, ["generate-dna", "--model", str(tmp_path), "--prompt", "ACGT", "--length", "5"])
    assert isinstance(res.exception, ValueError) and "Error:" not in res.output


def test_length_is_bounded_before_any_allocation(tmp_path):
    from sinkalign.errors import InputError
    from sinkalign.lm.generate import MAX_GENERATE_LENGTH

    model = tiny_model("rope", dtype=torch.float32)
    with pytest.raises(InputError, match=r"length=10,000,000,000 exceeds the 1,000,000 bases one call generates"):
        generate(model, "ACGT", 10_000_000_000)
    ck = tmp_path / "ck"
    save_checkpoint(ck, model)
    res = CliRunner().invoke(cli, ["generate-dna", "--model", str(ck), "--prompt", "ACGT", "--length",
                                   str(MAX_GENERATE_LENGTH + 1)])
    assert res.exit_code == 2 and "exceeds the 1,000,000 bases one call generates" in res.output
    assert "Traceback" not in res.output


def test_progress_bar_counts_generated_bases(capsys):
    model = tiny_model("goat", dtype=torch.float32)
    quiet = generate(model, "ACGT", 50, seed=3)
    capsys.readouterr()
    assert generate(model, "ACGT", 50, seed=3, progress=True) == quiet  # the bar does not change the draws
    err = capsys.readouterr().err
    assert "generate: 100%" in err and "50.0/50.0" in err


def test_output_dash_is_stdout(tmp_path, monkeypatch):
    ck = tmp_path / "ck"
    save_checkpoint(ck, tiny_model("sla", dtype=torch.float32))
    base = ["generate-dna", "--model", str(ck), "--prompt", "ACGTACGGTA", "--length", "20", "--seed", "4"]
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    res = CliRunner().invoke(cli, [*base, "-o", "-"])
    assert res.exit_code == 0 and len(res.output.strip()) == 20
    assert list(work.iterdir()) == []  # no file named '-


def test_commands_needing_torch_name_the_extra_when_it_is_missing():
    """Without torch, importing the command modules works and running them names the extra."""
    import subprocess
    import sys

    code = """
import sys
sys.modules['torch'] = None  # what an install without the torch extra looks like
from click.testing import CliRunner
from sinkalign.cli.main import cli
import sinkalign.cli.generate, sinkalign.cli.lm, sinkalign.cli.validate
assert 'torch' not in [m for m in sys.modules if sys.modules[m] is not None]
for args in (['generate-dna', '--prompt', 'ACGT', '--length', '5'],
             ['lm', 'train', '--fasta', sys.argv[1], '--attention', 'goat'],
             ['lm', 'eval', '--fasta', sys.argv[1]],
             ['validate', 'kernels', '--backend', 'triton', '--interpret', '--quick']):
    res = CliRunner().invoke(cli, args)
    assert res.exit_code == 1, (res.output, res.exception)
    assert "needs torch, which is not installed" in res.output, res.output
    assert "pip install 'sinkalign[torch]'" in res.output, res.output
print('ok')
"""
    out = subprocess.run([sys.executable, "-c", code, __file__], capture_output=True, text=True, check=False)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-3000:]


@pytest.mark.parametrize("seed", ["-1", str(2**63), "99999999999999999999"])
def test_cli_generate_dna_refuses_a_seed_out_of_range(seed):
    # a seed past int64 was a traceback ("Overflow when unpacking long long"), -1 was taken
    res = CliRunner().invoke(cli, ["generate-dna", "--prompt", "ACGT", "--length", "5", "--seed", seed])
    assert res.exit_code == 2 and "Invalid value for '--seed'" in res.output and "Traceback" not in res.output
    res = CliRunner().invoke(cli, ["generate-dna", "--prompt", "ACGT", "--length", "5", "--seed", str(2**63 - 1)])
    assert res.exit_code == 0, res.output


def test_cli_generate_dna_refuses_an_id_for_plain_output():
    # --chrom/--start with plain output were refused, --id silently ignored
    res = CliRunner().invoke(cli, ["generate-dna", "--prompt", "ACGT", "--length", "5", "--format", "plain",
                                   "--id", "foo"])
    assert res.exit_code == 2 and "--id names the FASTA record" in res.output
    res = CliRunner().invoke(cli, ["generate-dna", "--prompt", "ACGT", "--length", "5", "--format", "fasta",
                                   "--id", "foo", "--seed", "1"])
    assert res.exit_code == 0 and res.output.startswith(">foo"), res.output
