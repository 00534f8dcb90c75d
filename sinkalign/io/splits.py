"""Leak-free train / validation / test splits of reference alignments across collections.

Items are whole families or sets (a HOMSTRAD family, a SABRE / OXBench set, a PREFAB pair,
a Pfam family). Two items are *linked* when they share a PDB code (:func:`pdb_code` of a
sequence name; SCOP domain ids give the code after their ``d``) or an identical ungapped
sequence. The connected components of that graph are the units of the split: every item of
a component goes to the same side, so no PDB entry and no sequence is on two sides.

Some items come with a fixed side (``fixed``: e.g. the Pfam families, whose split is the
seeded family split of ``sinkalign shards build``, or an outside evaluation set pinned to
``test``); a component containing one takes its side (two different fixed sides in one
component is an error). The other components are shuffled with ``numpy.random.default_rng(seed)``
(after sorting by their smallest item name, so input order does not matter) and each goes to
the side furthest below its target share of *pairs* (``fractions``, default 0.8 / 0.1 / 0.1).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

import numpy as np

from sinkalign.errors import InputError
from sinkalign.io.structural import pdb_code

__all__ = ["SIDES", "SplitItem", "crossing_keys", "data_split_items", "data_split_manifest", "leak_free_split",
           "split_links"]

SIDES = ("train", "valid", "test")


@dataclass(frozen=True)
class SplitItem:
    """One family / set: its name, its source collection, pair count, sequence names and sequences."""

    name: str
    source: str
    n_pairs: int
    names: tuple[str, ...]
    seqs: tuple[str, ...]
    fixed: str | None = None
    keys: frozenset = field(default=frozenset())

    @staticmethod
    def make(name: str, source: str, n_pairs: int, names, seqs, fixed: str | None = None,
             use_pdb: bool = True) -> SplitItem:
        keys = set()
        for n, s in zip(names, seqs):
            code = pdb_code(n) if use_pdb else None
            if code:
                keys.add("pdb:" + code)
            keys.add("seq:" + hashlib.sha256(s.upper().encode()).hexdigest()[:24])
        return SplitItem(name, source, int(n_pairs), tuple(names), tuple(seqs), fixed, frozenset(keys))


class _DSU:
    def __init__(self, n: int):
        self.parent = list(range(n))

    def find(self, x: int) -> int:
        while self.parent[x] != x:
            self.parent[x] = self.parent[self.parent[x]]
            x = self.parent[x]
        return x

    def union(self, a: int, b: int) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.parent[max(ra, rb)] = min(ra, rb)


def split_links(items: list[SplitItem]) -> list[list[int]]:
    """Connected components (lists of item indices, each sorted) of the shared-key graph."""
    dsu = _DSU(len(items))
    owner: dict[str, int] = {}
    for k, item in enumerate(items):
        for key in item.keys:
            if key in owner:
                dsu.union(owner[key], k)
            else:
                owner[key] = k
    groups: dict[int, list[int]] = {}
    for k in range(len(items)):
        groups.setdefault(dsu.find(k), []).append(k)
    return sorted(groups.values(), key=lambda g: min(items[k].name for k in g))


def leak_free_split(items: list[SplitItem], fractions=(0.8, 0.1, 0.1), seed: int = 0,
                    unbalanced: tuple[str, ...] = ()) -> dict[str, str]:
    """``{item name: side}`` (see the module docstring). Pairs of items whose ``source`` is in
    ``unbalanced`` (e.g. pinned collections) do not count towards the side shares."""
    names = [it.name for it in items]
    if len(set(names)) != len(names):
        dup = next(n for n in names if names.count(n) > 1)
        raise InputError(f"item {dup!r} appears twice")
    comps = split_links(items)
    side_of: dict[str, str] = {}
    totals = dict.fromkeys(SIDES, 0)  # pairs of balanced items per side
    free = []
    for comp in comps:
        fixed = {items[k].fixed for k in comp if items[k].fixed}
        if len(fixed) > 1:
            shown = ", ".join(f"{items[k].name} ({items[k].fixed})" for k in comp if items[k].fixed)
            raise InputError(f"items pinned to different sides share a PDB code or sequence: {shown}")
        if fixed:
            side = fixed.pop()
            for k in comp:
                side_of[items[k].name] = side
            totals[side] += sum(items[k].n_pairs for k in comp if items[k].source not in unbalanced)
        else:
            free.append(comp)
    order = np.random.default_rng(int(seed)).permutation(len(free))
    target = np.asarray(fractions, float) / float(sum(fractions))
    grand = sum(it.n_pairs for it in items if it.source not in unbalanced)
    for idx in order:
        comp = free[int(idx)]
        # the side furthest below its share of all pairs (ties: train, valid, test)
        deficit = [target[s] * grand - totals[side] for s, side in enumerate(SIDES)]
        side = SIDES[int(np.argmax(deficit))]
        for k in comp:
            side_of[items[k].name] = side
        totals[side] += sum(items[k].n_pairs for k in comp if items[k].source not in unbalanced)
    return side_of


def crossing_keys(items: list[SplitItem], side_of: dict[str, str]) -> dict[str, set]:
    """Keys (``pdb:...`` / ``seq:...``) found on more than one side: empty for a leak-free split."""
    seen: dict[str, set] = {}
    for item in items:
        for key in item.keys:
            seen.setdefault(key, set()).add(side_of[item.name])
    return {k: v for k, v in seen.items() if len(v) > 1}


# --------------------------------------------------------------------------------------
# the project's split of ../shared/data (structural/ + pfam_seed/ + tmalign_pairs/)
# --------------------------------------------------------------------------------------
STRUCTURAL_SOURCES = ("homstrad", "sabre", "prefab", "oxbench")


def structural_files(root) -> dict[str, list]:
    """``{source: [files, sorted]}`` of ``root/structural/<source>/``."""
    from pathlib import Path

    base = Path(root) / "structural"
    return {src: sorted(p for p in (base / src).iterdir() if p.is_file() and not p.name.startswith("."))
            for src in STRUCTURAL_SOURCES}


def data_split_items(root, *, min_tm: float = 0.5) -> tuple[list[SplitItem], dict]:
    """Split items of ``root`` (a ``shared/data`` folder): every structural family / set, the
    Pfam protein families (pinned to their seeded ``shards build --alphabet protein --split
    0.6,0.2,0.2 --seed 0`` split, the one BENCHMARKS.md reports) and the TM-align pairs with
    min TM >= ``min_tm`` (pinned to ``test``: an outside evaluation set). Returns (items, {file path: sha256})."""
    from pathlib import Path

    from sinkalign.io.alignments import read_stockholm, read_tmalign_pairs
    from sinkalign.io.shards import split_families
    from sinkalign.io.structural import read_reference_alignment
    from sinkalign.utils import file_sha256

    root = Path(root)
    items: list[SplitItem] = []
    shas: dict[str, str] = {}
    for src, files in structural_files(root).items():
        for f in files:
            shas[str(f.relative_to(root))] = file_sha256(f)
            for msa in read_reference_alignment(f):
                n = len(msa)
                items.append(SplitItem.make(msa.family, src, n * (n - 1) // 2, msa.ids,
                                            [msa.ungapped(k) for k in range(n)]))
    pfam = []
    for f in sorted((root / "pfam_seed").glob("*.sto")):
        for msa in read_stockholm(f):
            if msa.alphabet != "protein":
                continue
            name = msa.family or f.stem
            pfam.append((name, msa))
    # the project's Pfam evaluation split (BENCHMARKS.md, benchmarks/aligner_fit.py):
    # `shards build --alphabet protein --split 0.6,0.2,0.2 --seed 0`
    sides = split_families([n for n, _ in pfam], (0.6, 0.2, 0.2), 0)
    side_of = {n: s for s, ns in sides.items() for n in ns}
    for name, msa in pfam:
        n = len(msa)
        items.append(SplitItem.make(name, "pfam", n * (n - 1) // 2, msa.ids, [msa.ungapped(k) for k in range(n)],
                                    fixed=side_of[name], use_pdb=False))
    tm = root / "tmalign_pairs" / "valid.tsv"
    if tm.is_file():
        for k, p in enumerate(read_tmalign_pairs(tm, min_tm=min_tm)):
            items.append(SplitItem.make(f"tmalign/{k}:{p.query_id}_{p.target_id}", "tmalign", 1,
                                        [p.query_id, p.target_id], [p.query_seq, p.target_seq], fixed="test"))
    return items, shas


def data_split_manifest(root, *, seed: int = 0, fractions=(0.8, 0.1, 0.1)) -> dict:
    """The split manifest of a ``shared/data`` folder (``data_manifests/structural_split.json``)."""
    items, shas = data_split_items(root)
    side_of = leak_free_split(items, fractions, seed, unbalanced=("pfam", "tmalign"))
    comps = split_links(items)
    counts: dict = {}
    for it in items:
        c = counts.setdefault(it.source, {s: {"items": 0, "pairs": 0} for s in SIDES})
        c[side_of[it.name]]["items"] += 1
        c[side_of[it.name]]["pairs"] += it.n_pairs
    return {
        "seed": int(seed),
        "fractions": list(fractions),
        "rule": "connected components of families/sets linked by a shared PDB code (first four characters "
                "of a name, after the 'd' of SCOP domain ids; not for Pfam ids) or an identical sequence; "
                "Pfam families pinned to their seeded family split (--split 0.6,0.2,0.2 --seed 0), TM-align "
                "pairs (min TM >= 0.5) pinned to test; other components shuffled (seed) and each sent to the "
                "side furthest below its share of the structural pairs",
        "n_components": len(comps),
        "largest_component_items": max(len(c) for c in comps),
        "counts": counts,
        "assignment": {it.name: side_of[it.name] for it in items if it.source != "tmalign"},
        "pinned_test": sorted(it.name for it in items if it.source == "tmalign"),
        "files_sha256": shas,
    }
