"""``sinkalign generate-dna``: continue a DNA prompt with a genome language model."""

from __future__ import annotations

import secrets
import sys

import click

from sinkalign.cli.options import FiniteFloatRange, OutputPath, torch_threads_option
from sinkalign.io.formats import GENERATED_SUFFIXES, output_format
from sinkalign.utils import open_output

# torch is an optional extra: nothing here imports it at module level (`sinkalign --help`
# must work without it); the command imports it when it runs.

_LINE = 60  # FASTA line width
#: Without --seed a seed is drawn below this (and written in the header, or to stderr for plain
#: output), so that every sampled run can be reproduced; small enough to read and to type.
_DRAWN_SEED_BOUND = 2**32


def _fasta(header: str, seq: str) -> str:
    body = "\n".join(seq[i : i + _LINE] for i in range(0, len(seq), _LINE))
    return f">{header}\n{body}\n"


def _record_id(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """A FASTA id (or the chrom= tag): one word, as the first word of a header is read back;
    the id without the header's ``>`` (``--id '>x'`` was written ``>>x``, read back as ``>x``)."""
    if value is not None and not value:
        raise click.BadParameter("must not be empty", ctx=ctx, param=param)
    if value is not None and any(c.isspace() for c in value):
        raise click.BadParameter(f"{value!r} contains whitespace; it must be one word, as FASTA reads ids (e.g. "
                                 f"{'_'.join(value.split())!r})", ctx=ctx, param=param)
    if param.name == "record_id" and value is not None and value.startswith(">"):
        bare = value.lstrip(">")
        raise click.BadParameter(f"{value!r} starts with '>', which the FASTA header puts before the id itself"
                                 + (f"; give {bare!r}" if bare else ""), ctx=ctx, param=param)
    return value


_FASTA_NAMES = ", ".join(ext for ext, name in GENERATED_SUFFIXES.items() if name == "fasta")
_PLAIN_NAMES = ", ".join(ext for ext, name in GENERATED_SUFFIXES.items() if name == "plain")


@click.command("generate-dna")
@click.option("--prompt", required=True, help="Bases to continue (A, C, G, T, N; either case; IUPAC "
              "ambiguity codes and X are read as N, as lm eval reads a genome, and U as T).")
@click.option("--length", required=True, type=int,
              help="Number of bases to generate (> 0, at most 1,000,000 per call).")
@click.option("--temperature", default=1.0, show_default=True, type=FiniteFloatRange(min=0),
              help="Sampling temperature; 0 = greedy. With a fixed --seed, runs at different temperatures draw "
                   "the same random numbers, so their sequences agree at many positions (most where the model's "
                   "probabilities are close to uniform) and nearby temperatures (1 and 1.0001) can give the very "
                   "same sequence; use different seeds for independent samples.")
@click.option("--top-k", default=None, type=click.IntRange(min=1), help="Sample among the k most likely bases.")
@click.option("--top-p", default=None, type=FiniteFloatRange(0, 1, min_open=True),
              help="Nucleus sampling mass in (0, 1].")
@click.option("--seed", default=None, type=click.IntRange(min=0, max=2**63 - 1),
              help="Random seed (same seed, same output on the same device). Without it a seed is drawn and "
                   "recorded (FASTA header seed=, or a note on stderr for plain output) so the run can be "
                   "reproduced; greedy decoding (--temperature 0) uses none.")
@click.option("--model", "model_path", default=None, type=click.Path(),
              help="Checkpoint directory, training run directory or a shipped model by name: default (GOAT "
                   "trained on 35 bacterial and archaeal genomes), cdiph (GOAT trained on the C. diphtheriae "
                   "chromosome only) [default: default].")
@click.option("--format", "fmt", type=click.Choice(["plain", "fasta"]), default=None,
              help="plain: the bases alone on one line; fasta: one record, 60 bases a line, with the header "
                   "described above [default: the one the -o file's extension names "
                   f"({_FASTA_NAMES}: fasta; {_PLAIN_NAMES}: plain; through .gz), else plain (standard output "
                   "too); a --format the extension contradicts is an error].")
@click.option("--id", "record_id", default=None, callback=_record_id,
              help="FASTA record id (one word, without the header's '>') [default: gen_<chrom>_<start>_s<seed> "
                   "with --chrom/--start, else gen_s<seed>; 'greedy' in place of s<seed> for --temperature 0]. "
                   "Runs that differ only in other settings (temperature, top-k, model) get the same default id: "
                   "give each its own --id to overlay them together.")
@click.option("--chrom", default=None, callback=_record_id,
              help="FASTA: the record the prompt comes from (header tag chrom=, for gc-profile --overlay).")
@click.option("--start", default=None, type=int,
              help="FASTA: 0-based position where the continuation begins in --chrom (the prompt's end).")
@click.option("--include-prompt", is_flag=True,
              help="Write the prompt followed by the new bases (FASTA: start= is then the prompt's start and the "
                   "header says prompt_included=true prompt_length=P, from which gc-profile --overlay drops the "
                   "prompt).")
@click.option("--device", type=click.Choice(["cpu", "cuda"]), default="cpu", show_default=True)
@torch_threads_option()
@click.option("-o", "--output", default=None, type=OutputPath(dir_okay=False, allow_dash=True),
              help="Output file (written atomically; gzip-compressed when its name ends .gz; its extension "
                   "names the --format; '-' = stdout) [default: stdout].")
@click.option("--overwrite", is_flag=True,
              help="Replace an existing --output file (when the run succeeds). Without it an existing file is an error.")
@click.option("--progress/--no-progress", default=None,
              help="Progress bar of generated bases on stderr [default: on a terminal, for 1000+ bases].")
def generate_dna(prompt: str, length: int, temperature: float, top_k: int | None, top_p: float | None,
                 seed: int | None, model_path: str | None, fmt: str, record_id: str, chrom: str | None,
                 start: int | None, include_prompt: bool, device: str, torch_threads: int | None, output: str | None,
                 overwrite: bool, progress: bool | None) -> None:
    """Continue --prompt by --length bases sampled from a DNA language model.

    Decoding uses the KV cache (softmax attentions) or the recurrent state (SLA). Only the
    new bases are written unless --include-prompt is given. The -o file's extension names the
    format, as for align and msa (gen.fa: FASTA, gen.txt: plain, gen.fa.gz: FASTA,
    gzip-compressed). With FASTA output and --chrom/--start the header follows the gc-profile
    overlay convention ">ID chrom=<id> start=<0-based>", followed by length=, prompt_length=,
    prompt_included=true|false and seed= (given or drawn; none for a greedy run without
    --seed).
    """
    if (chrom is None) != (start is None):
        raise click.UsageError("--chrom and --start go together")
    if start is not None and start < 0:
        raise click.BadParameter(f"must be >= 0, got {start}", param_hint="'--start'")
    if include_prompt and start is not None and start < len(prompt):
        raise click.BadParameter(f"{start} is smaller than the prompt length {len(prompt)}; with "
                                 f"--include-prompt the record would begin before position 0",
                                 param_hint="'--start'")
    if length <= 0:
        raise click.BadParameter(f"must be a positive integer, got {length}", param_hint="'--length'")
    to_stdout = output is None or output == "-"
    # the format as align's and msa's -o tell it: the file name's, refused where --format contradicts it
    fmt = output_format(None if to_stdout else output, fmt, "plain", GENERATED_SUFFIXES)
    fasta_output = f"FASTA output (--format fasta, or an -o file ending {_FASTA_NAMES})"
    if fmt == "plain" and chrom is not None:
        raise click.UsageError(f"--chrom/--start only apply to {fasta_output}")
    if fmt == "plain" and record_id is not None:
        raise click.UsageError(f"--id names the FASTA record: it only applies to {fasta_output}")
    if not to_stdout:  # before any work: an existing file is replaced only with --overwrite
        from sinkalign.pipelines.runner import check_output

        check_output(output, overwrite, [], "output")
    from sinkalign.errors import require

    torch = require("torch", "torch", "sinkalign generate-dna")
    from sinkalign.lm.generate import MAX_GENERATE_LENGTH, generate, load_model

    if length > MAX_GENERATE_LENGTH:  # before loading anything
        raise click.BadParameter(f"{length:,} exceeds the {MAX_GENERATE_LENGTH:,} bases one call generates; "
                                 f"generate in pieces, each prompted with the end of the previous one",
                                 param_hint="'--length'")
    if device == "cuda" and not torch.cuda.is_available():
        raise click.UsageError("--device cuda: CUDA is not available")
    if torch_threads is not None:
        torch.set_num_threads(torch_threads)
    ckpt = load_model(model_path, device=device)  # a missing or corrupt model: MissingFileError / CheckpointError
    if progress is None:
        progress = length >= 1000 and sys.stderr.isatty()
    drawn = seed is None and temperature > 0
    if drawn:  # a sampled run is always reproducible: draw the seed here, use it and record it
        seed = secrets.randbelow(_DRAWN_SEED_BOUND)
    if record_id is None:
        draw = f"s{seed}" if temperature > 0 else "greedy"
        record_id = f"gen_{chrom}_{start}_{draw}" if chrom is not None else f"gen_{draw}"
    new = generate(ckpt.model, prompt, length, temperature=temperature, top_k=top_k, top_p=top_p, seed=seed,
                   progress=progress)
    from sinkalign.io.fasta import rna_as_dna

    seq = rna_as_dna(prompt.upper()) + new if include_prompt else new  # DNA: an RNA prompt's U as T
    if fmt == "fasta":
        if chrom is not None:
            from sinkalign.pipelines.gc_profile import continuation_description

            header = continuation_description(record_id, chrom, start - (len(prompt) if include_prompt else 0))
        else:
            header = record_id
        header += f" length={len(seq)} prompt_length={len(prompt)} prompt_included={str(include_prompt).lower()}"
        if seed is not None:
            header += f" seed={seed}"
        text = _fasta(header, seq)
    else:
        text = seq + "\n"
        if drawn:
            click.echo(f"generate-dna: seed {seed} (--seed {seed} reproduces this run)", err=True)
    with open_output("-" if to_stdout else output) as handle:  # a file atomically, gzip-compressed for .gz
        handle.write(text)
