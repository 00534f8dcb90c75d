"""Make a genome LM checkpoint a shipped model directory, its figures in its ``config.json``.

Copies the checkpoint's weights and model config into ``--out`` (e.g. ``sinkalign/data/lm_default``)
and records under ``"extra"`` what a reader of the model needs: a description, the step, tokens
and training config of the run (from the checkpoint), the command and wall time (given), the
held-out figures of ``sinkalign lm eval --json`` on the C. diphtheriae tenth (``--heldout-json``)
and of ``benchmarks/lm_multi_genome.py --json`` on the validation genera (``--valid-json``: the
column of this checkpoint). The directory is written whole or not at all (a temporary directory
renamed), and an existing one is replaced only with ``--overwrite``. The weights are checked to
load as the config describes before anything is written.

    python benchmarks/lm_ship.py --checkpoint runs/lm/checkpoints/step-00008000 \\
        --valid-json results/lm_multi_genome_valid.json --heldout-json results/lm_eval_heldout.json \\
        --description "..." --train-command "sinkalign lm train ..." --wall-minutes 70 \\
        --out sinkalign/data/lm_default --overwrite
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path

from sinkalign.lm.model import load_checkpoint
from sinkalign.lm.train import TRAINER_STATE


def _valid_genera(path: Path, checkpoint: Path) -> dict:
    """The validation-genera figures of ``checkpoint`` in a lm_multi_genome.py JSON."""
    data = json.loads(path.read_text())
    if data.get("benchmark") != "lm_multi_genome" or data.get("split") != "valid":
        sys.exit(f"{path}: not a lm_multi_genome.py --split valid result")
    keys = [name for name, where in data["checkpoints"].items() if Path(where).resolve() == checkpoint]
    if len(keys) != 1:
        sys.exit(f"{path}: holds no column for {checkpoint} (its models: {', '.join(data['checkpoints'])})")
    col = f"lm:{keys[0]}"
    args = data["args"]
    return {
        "eval": (f"benchmarks/lm_multi_genome.py --split valid --max-bases {args['max_bases']}: the first "
                 f"{int(args['max_bases']):,} bases of each record's last {float(args['val_fraction']):g} of the "
                 f"'valid' genomes, windows of {args['context']} with stride {int(args['context']) // 2}; against an "
                 f"order-{args['order']} Markov chain fitted to each genome's own first part ({data['date']})"),
        "genomes_below_markov5_own": data["summary"][f"{col} genomes below markov5_own"],
        "mean_bits_per_base": data["summary"][col],
        "mean_markov5_own": data["summary"]["markov5_own"],
        "per_genome": {row["genome"]: {"bits_per_base": row[col], "markov5_own": row["markov5_own"]}
                       for row in data["rows"]},
    }


def _heldout(path: Path, checkpoint: Path) -> dict:
    """The held-out figures of a `sinkalign lm eval --json` run of ``checkpoint``."""
    data = json.loads(path.read_text())
    if Path(data["model"]["path"]).resolve() != checkpoint:
        sys.exit(f"{path}: evaluates {data['model']['path']}, not {checkpoint}")
    held = data["heldout"]
    return {
        "heldout_bits_per_base": held["bits_per_base"],
        "heldout_eval": (f"last {data['data']['val_fraction']:g} of {Path(data['data']['fasta']).name} "
                         f"({held['n_scored']:,} bases), windows of {held['context']} with stride {held['stride']}, "
                         "conditioned on the training split (sinkalign lm eval --sections heldout)"),
        f"markov_order{held['markov']['order']}_bits_per_base": held["markov"]["bits_per_base"],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--checkpoint", required=True, type=Path)
    ap.add_argument("--valid-json", required=True, type=Path)
    ap.add_argument("--heldout-json", type=Path)
    ap.add_argument("--description", required=True)
    ap.add_argument("--train-command", action="append", required=True,
                    help="the command(s) that trained it, in order (repeat)")
    ap.add_argument("--wall-minutes", type=float, required=True, help="training wall time, all commands")
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--overwrite", action="store_true")
    args = ap.parse_args()

    checkpoint = args.checkpoint.resolve()
    if args.out.exists() and not args.overwrite:
        sys.exit(f"{args.out} exists: --overwrite replaces it")
    ckpt = load_checkpoint(checkpoint)  # the weights load as the config describes
    stored = json.loads((checkpoint / "config.json").read_text())
    state = json.loads((checkpoint / TRAINER_STATE).read_text())
    extra = {
        "description": args.description,
        **({} if args.heldout_json is None else _heldout(args.heldout_json, checkpoint)),
        "source_checkpoint": f"{checkpoint.parent.parent.name}/checkpoints/{checkpoint.name} (weights and config; "
                             "optimizer state not shipped)",
        "step": state["step"],
        "tokens_seen": state["tokens_seen"],
        "train_command": " && ".join(args.train_command),  # one string: each command after the one before
        "train_config": stored["extra"]["train_config"],
        "training_wall_minutes": args.wall_minutes,
        "valid_genera": _valid_genera(args.valid_json, checkpoint),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{args.out.name}-", dir=args.out.parent))
    tmp.chmod(0o755)  # mkdtemp's 0700 is for a scratch directory, not a model others read
    try:
        shutil.copyfile(checkpoint / "model.safetensors", tmp / "model.safetensors")
        (tmp / "config.json").write_text(json.dumps({"config": stored["config"], "extra": extra,
                                                     "format": stored["format"]}, indent=2, sort_keys=True) + "\n")
        shipped = load_checkpoint(tmp)
        assert shipped.config == ckpt.config
        if args.out.exists():
            old = args.out.with_name(f".{args.out.name}-old")
            args.out.rename(old)
            tmp.rename(args.out)
            shutil.rmtree(old)
        else:
            tmp.rename(args.out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"wrote {args.out}: step {extra['step']}, {extra['tokens_seen']:,} tokens, validation genera "
          f"{extra['valid_genera']['mean_bits_per_base']:.4f} bits/base")


if __name__ == "__main__":
    main()
