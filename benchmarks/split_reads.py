"""How the SAM writer places a read whose parts come from different references: primary,
supplementary (flag 2048, ``SA:Z``) and secondary lines, and their MAPQ, against the rule before
2026-11-29 (one primary, every other hit secondary, every hit a rival in the MAPQ).

Random DNA, seeded (``--seed``), aligned by the shipped DNA model with its default settings
(both strands, its confidence floor), hits with E-value above ``--max-evalue`` dropped as
``sinkalign align --max-evalue`` drops them, written by :func:`sinkalign.write_alignments`
(SAM, read back by pysam). Three kinds of reads, each against its own references:

* chimera: halves of 100-200 bp cut from contigs X and Y (400-1200 bp), against X, Y and an
  unrelated contig U. Right: one line on X and one on Y, one primary and one supplementary,
  each with an SA tag naming the other.
* chimera + copy: the same, plus contig Z holding a copy of the X half (``--copy-substitutions``
  per base) in other flanks. Right: as above, with the better of X and Z (by E-value) the part's
  line and the other secondary (no SA tag).
* repeat: a 150-300 bp piece of X, against X, U and Z holding an exact copy of the piece in
  other flanks. Right: one primary, one secondary, both of MAPQ at most 10 (the read cannot be
  placed; the rule before had the same roles, but weighed E-values that grow with each
  contig's length).

Printed per kind: reads whose lines are right (the roles above), and the MAPQ of the parts'
lines (chimeras: the line on Y and the better of X and Z) or of both copies (repeat): median and
the share at 20 or more, now and by the rule before, emulated on the same hits (``o`` weighed
by ``1 / E`` over every hit of the read; that rule wrote no supplementary line, so no chimera
was right).

    python benchmarks/split_reads.py --json benchmarks/results/split_reads.json
"""

from __future__ import annotations

import argparse
import io
import os
import tempfile
import time
from datetime import date

import numpy as np
import pysam
from _common import machine, random_dna, substitute_bases, write_json

from sinkalign.align.aligner import Aligner, default_model_path
from sinkalign.alignment import other_loci
from sinkalign.io.writers import _mapq, write_alignments


def embed(rng, piece: str) -> str:
    """``piece`` between random flanks of 100-400 bp each."""
    return random_dna(rng, int(rng.integers(100, 401))) + piece + random_dna(rng, int(rng.integers(100, 401)))


def make_reads(rng, n: int, copy_rate: float) -> list[dict]:
    reads = []
    for k in range(n):
        x, y, u = (random_dna(rng, int(rng.integers(400, 1201))) for _ in range(3))
        la, lb = int(rng.integers(100, 201)), int(rng.integers(100, 201))
        oa, ob = int(rng.integers(0, len(x) - la + 1)), int(rng.integers(0, len(y) - lb + 1))
        half_x, half_y = x[oa : oa + la], y[ob : ob + lb]
        read = half_x + half_y if k % 2 == 0 else half_y + half_x
        reads.append({"kind": "chimera", "read": read, "refs": {"X": x, "Y": y, "U": u}})
        reads.append({"kind": "chimera + copy", "read": read,
                      "refs": {"X": x, "Y": y, "U": u, "Z": embed(rng, substitute_bases(rng, half_x, copy_rate))}})
        lp = int(rng.integers(150, 301))
        op = int(rng.integers(0, len(x) - lp + 1)) if len(x) > lp else 0
        piece = x[op : op + lp]
        reads.append({"kind": "repeat", "read": piece, "refs": {"X": x, "U": u, "Z": embed(rng, piece)}})
    return reads


def judge(kind: str, lines: dict, evalue: dict) -> bool:
    """Whether a read's lines (reference -> (flag, MAPQ, SA)) have the roles its kind wants."""
    flags = {ref: flag & 0x900 for ref, (flag, _, _) in lines.items()}
    if kind == "repeat":
        return sorted(flags.values()) == [0, 256] and set(flags) == {"X", "Z"} and all(
            mapq <= 10 for _, mapq, _ in lines.values())
    part = "X" if kind == "chimera" or "Z" not in lines or evalue["X"] <= evalue.get("Z", np.inf) else "Z"
    want = {part, "Y"}
    if not want <= set(flags) or sorted(flags[r] for r in want) != [0, 2048]:
        return False
    if any(flags[r] != 256 for r in set(flags) - want) or set(flags) - want - {"X", "Z"}:
        return False
    a, b = sorted(want)
    return bool(lines[a][2]) and lines[a][2].startswith(f"{b},") and lines[b][2].startswith(f"{a},")


def placed(kind: str, evalue: dict) -> list[str]:
    """The references whose lines place the read: the parts' (chimeras) or both copies (repeat)."""
    if kind == "repeat":
        return ["X", "Z"]
    return ["X" if evalue.get("X", np.inf) <= evalue.get("Z", np.inf) else "Z", "Y"]


def mapq_before(hits: list) -> dict:
    """The MAPQ of each hit by the rule before: ``o`` weighed over every hit of the read."""
    shares = other_loci([h.evalue_rank for h in hits]) or [0.0] * len(hits)
    return {h.target_id.split(".")[1]: _mapq(h.alignment.mean_posterior, o) for h, o in zip(hits, shares)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reads", type=int, default=100, help="reads of each kind")
    ap.add_argument("--copy-substitutions", type=float, default=0.02)
    ap.add_argument("--max-evalue", type=float, default=1e-3)
    ap.add_argument("--seed", type=int, default=11)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    rng = np.random.default_rng(args.seed)
    reads = make_reads(rng, args.reads, args.copy_substitutions)
    aligner = Aligner.load(default_model_path("dna"))
    jobs = [(f"r{k}", r["read"], f"r{k}.{ref}", seq) for k, r in enumerate(reads) for ref, seq in r["refs"].items()]
    t0 = time.perf_counter()
    hits = [h for h in aligner.align_many(jobs) if h.evalue is not None and h.evalue <= args.max_evalue]
    seconds = time.perf_counter() - t0
    text = io.StringIO()
    write_alignments(hits, text, "sam")
    by_read: dict[str, dict] = {}
    with _sam_file(text.getvalue()) as handle:
        for seg in handle:
            if not seg.is_unmapped:
                sa = seg.get_tag("SA") if seg.has_tag("SA") else None
                ref = seg.reference_name.split(".")[1]  # r<k>.X: each read's own references
                sa = sa and ";".join(entry.split(".", 1)[1] for entry in sa.split(";") if entry) + ";"
                by_read.setdefault(seg.query_name, {})[ref] = (seg.flag, seg.mapping_quality, sa)
    hits_of: dict[str, list] = {}
    for h in hits:
        hits_of.setdefault(h.query_id, []).append(h)
    rows = {}
    for kind in ("chimera", "chimera + copy", "repeat"):
        right = right_before = 0
        now, before = [], []
        ids = [f"r{k}" for k, r in enumerate(reads) if r["kind"] == kind]
        for rid in ids:
            lines, mine = by_read.get(rid, {}), hits_of.get(rid, [])
            evalue = {h.target_id.split(".")[1]: h.evalue_rank for h in mine}
            right += judge(kind, lines, evalue)
            old = mapq_before(mine)
            # the rule before wrote no supplementary line (no chimera right); a repeat's roles were the same
            right_before += kind == "repeat" and judge(kind, {r: (lines[r][0], old[r], None) for r in lines}, evalue)
            for ref in placed(kind, evalue):  # a line missing (no hit) counts as MAPQ 0
                now.append(lines[ref][1] if ref in lines else 0)
                before.append(old.get(ref, 0))
        rows[kind] = {"reads": len(ids), "right": right, "right_before": int(right_before),
                      "mapq_median": float(np.median(now)), "mapq_median_before": float(np.median(before)),
                      "mapq_20_share": float(np.mean(np.asarray(now) >= 20)),
                      "mapq_20_share_before": float(np.mean(np.asarray(before) >= 20))}
    payload = {"machine": machine(), "date": str(date.today()), "seed": args.seed, "reads_per_kind": args.reads,
               "copy_substitutions": args.copy_substitutions, "max_evalue": args.max_evalue,
               "align_seconds": seconds, "pairs": len(jobs), "rows": rows}
    print(f"DNA model, default settings; {len(jobs)} pairs in {seconds:.0f} s; hits with E <= {args.max_evalue:g}")
    print("| reads | n | lines right: now / before | MAPQ of the placing lines: median now / before | "
          "MAPQ >= 20, now / before |")
    print("|---|---|---|---|---|")
    for kind, row in rows.items():
        print(f"| {kind} | {row['reads']} | {row['right']} / {row['right_before']} | "
              f"{row['mapq_median']:g} / {row['mapq_median_before']:g} | "
              f"{row['mapq_20_share']:.2f} / {row['mapq_20_share_before']:.2f} |")
    if args.json:
        write_json(args.json, payload)
        print(f"wrote {args.json}")


def _sam_file(text: str):
    """A pysam reader of SAM ``text`` (through a temporary file: pysam reads paths)."""
    handle = tempfile.NamedTemporaryFile("w", suffix=".sam", delete=False)
    with handle:
        handle.write(text)
    reader = pysam.AlignmentFile(handle.name)
    os.unlink(handle.name)  # the open reader keeps it readable
    return reader


if __name__ == "__main__":
    main()
