"""Pfam pair shards: reference-aligned sequence pairs on disk, split by family.

Format (version 2, which also reads version 1; the full description is ``data_manifests/shards_format.md``)
----------------------------------------------------------------------------------------------------------
A shard directory holds::

    index.json                      written last; the only entry point
    train-00000.npz                 pair shards, one split per file
    train-00000.emb.safetensors     optional per-residue embeddings of that shard
    valid-00000.npz ...

``<split>-<k>.npz`` is a NumPy ``.npz`` archive readable with ``allow_pickle=False``.
Strings live in one JSON document stored as bytes; numbers are plain arrays
(P pairs in the shard, S sequences, N aligned residue pairs in all):

=====================  ==========  ========================================================
key                    dtype       shape / meaning
=====================  ==========  ========================================================
``header``             uint8       UTF-8 JSON: ``format_version``, ``split``, ``seq_ids`` [S],
                                   ``seqs`` [S], ``families``, ``sources``, ``meta`` [P]
``query``              int32       [P] query row in the sequence table
``target``             int32       [P] target row in the sequence table
``family``             int32       [P] index into ``header.families``
``source``             int32       [P] index into ``header.sources``
``pair_offsets``       int64       [P + 1] pair p owns ``pairs[pair_offsets[p]:pair_offsets[p+1]]``
``pairs``              int32       [N, 2] 0-based (i, j) residue indices, ungapped sequences
``percent_identity``   float32     [P] see :func:`sinkalign.io.alignments.percent_identity`
``core_offsets``       int64       [P + 1] (optional, version 2) pair p owns
                                   ``core[core_offsets[p]:core_offsets[p+1]]``
``core``               uint8       per residue of the query then the target: 1 = trusted
                                   (structure-based references with a core mask)
=====================  ==========  ========================================================

``<split>-<k>.emb.safetensors`` maps each sequence id of the shard to a
``[L, D]`` float16/float32 array (safetensors metadata ``name`` and ``dtype``).

``index.json`` records ``format`` / ``format_version``, the build parameters and the
sha256 of every input file, and per split the families, counts and the shard list
(file, sha256, byte size, pair count, embeddings file and sha256), plus per-family
details and the embedding description (``name``, ``dim``, ``dtype``) or ``null``.

Split convention
----------------
Whole families go to ``train`` / ``valid`` / ``test`` (never single pairs). Family
names are sorted, permuted with ``numpy.random.default_rng(seed)`` and cut by
counts: ``round(fraction * F)`` families per split (largest remainder). When there
are at least 3 families every split with a positive fraction gets at least one
family (taken from the largest split). The split depends only on the family names,
the fractions and the seed (not on input order). Within a split, pairs are stored
family by family (sorted names), rows ``a < b`` in alignment order.

Atomicity: a build writes every file (shards, then ``index.json``) into a hidden staging
folder inside the output directory and, once the new build is complete, swaps it in by
renames: the previous build's index and shards are set aside, the new files moved in, the new
``index.json`` last, and only then are the old files removed. An interrupted rebuild leaves
the previous build as it was (a kill during the few renames of the swap leaves it set aside,
and the next build puts it back); the next build also removes what killed builds left (their
staging folders, temporary files, shard files no index lists). Files of the output directory
that are not the build's own are kept, and an ``index.json`` that is not a shard index is never
replaced. Readers verify each file's sha256 against the index.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import hashlib
import io
import json
import logging
import math
import os
import re
import shutil
import tempfile
import zipfile
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import safetensors.numpy
from tqdm.auto import tqdm

from sinkalign.errors import AlphabetError, FormatError, InputError, MissingFileError, OutputExistsError, SinkalignError
from sinkalign.io.alignments import MSA, ReferencePair, msa_to_pairs, percent_identity, read_stockholm
from sinkalign.utils import atomic_write_bytes, atomic_write_text, file_sha256

__all__ = [
    "FORMAT_NAME",
    "FORMAT_VERSION",
    "INDEX_NAME",
    "SPLITS",
    "ShardDataset",
    "ShardExample",
    "add_embeddings",
    "build_shards",
    "check_split",
    "embedder_label",
    "read_index",
    "shard_summary",
    "split_families",
    "verify_shards",
]

logger = logging.getLogger(__name__)

FORMAT_NAME = "sinkalign-pair-shards"
FORMAT_VERSION = 2
READABLE_VERSIONS = (1, 2)  # version 1 (no core masks) still loads
INDEX_NAME = "index.json"
SPLITS = ("train", "valid", "test")
EMBEDDING_DTYPES = ("float16", "float32")
_ARRAY_KEYS = ("header", "query", "target", "family", "source", "pair_offsets", "pairs", "percent_identity")
_CORE_KEYS = ("core_offsets", "core")  # version 2, only in shards holding pairs with a core mask


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def check_split(split: Sequence[float]) -> tuple[float, float, float]:
    """Return ``split`` as three floats (train, valid, test) or raise :class:`InputError` (a ValueError).

    They must be finite, non-negative, sum to 1 (within 1e-6) and give train a positive share.
    """
    try:
        fractions = tuple(float(x) for x in split)
    except (TypeError, ValueError):
        raise InputError(f"split={split!r} must be three fractions (train, valid, test)") from None
    if len(fractions) != 3 or any(not math.isfinite(f) or f < 0 for f in fractions):
        raise InputError(f"split={split!r} must be three non-negative finite fractions (train, valid, test)")
    if abs(sum(fractions) - 1.0) > 1e-6:
        raise InputError(f"split={split!r} must sum to 1 (sums to {sum(fractions):.6g})")
    if fractions[0] <= 0:
        raise InputError(f"split={split!r}: the train fraction must be positive")
    return fractions  # type: ignore[return-value]


def split_families(
    families: Iterable[str], split: Sequence[float] = (0.8, 0.1, 0.1), seed: int = 0
) -> dict[str, list[str]]:
    """Assign whole families to ``train`` / ``valid`` / ``test`` (see the module docstring).

    Returns:
        ``{"train": [...], "valid": [...], "test": [...]}``, each list sorted.
    """
    fractions = check_split(split)
    if not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"seed={seed!r} must be a non-negative integer")
    names = sorted(set(families))
    n = len(names)
    ideal = [f * n for f in fractions]
    counts = [math.floor(x) for x in ideal]
    by_remainder = sorted(range(3), key=lambda k: (-(ideal[k] - counts[k]), k))
    for k in by_remainder[: n - sum(counts)]:
        counts[k] += 1
    if n >= 3:
        for k in range(3):
            if fractions[k] > 0 and counts[k] == 0:
                donor = max(range(3), key=lambda m: (counts[m], -m))
                counts[donor] -= 1
                counts[k] += 1
    elif n > 0 and counts[0] == 0:
        donor = max(range(3), key=lambda m: counts[m])
        counts[donor] -= 1
        counts[0] += 1
    order = np.random.default_rng(int(seed)).permutation(n)
    shuffled = [names[k] for k in order]
    out, start = {}, 0
    for name, count in zip(SPLITS, counts):
        out[name] = sorted(shuffled[start : start + count])
        start += count
    return out


def _sequence_key(seq: str) -> int:
    """A 64-bit digest of an ungapped, upper-case sequence (8 bytes a sequence to compare splits)."""
    return int.from_bytes(hashlib.blake2b(seq.encode("utf-8"), digest_size=8).digest(), "little")


def _warn_shared_sequences(assignment: dict[str, list[str]], by_name: dict, split_source: str) -> None:
    """Warn when one sequence (the same residues, case and gaps aside) is in more than one split.

    A split by family names cannot see that two families hold the same sequences (one
    alignment under two names, a sequence in two families); a model then meets test sequences
    in training. The split is kept as it is (reproducible); the warning names a few families and
    the count. Memory: one 64-bit digest per sequence."""
    keys = {}
    for split_name in SPLITS:
        digests = (_sequence_key(by_name[f].msa.ungapped(k)) for f in assignment[split_name]
                   for k in range(len(by_name[f].msa)))
        keys[split_name] = np.unique(np.fromiter(digests, dtype=np.uint64))
    values, counts = np.unique(np.concatenate(list(keys.values())), return_counts=True)
    shared = set(values[counts > 1].tolist())
    if not shared:
        return
    first: dict[int, tuple[str, str]] = {}
    examples: dict[tuple[str, str], None] = {}  # ordered set of "family (split)" pairs
    for split_name in SPLITS:
        for fam in assignment[split_name]:
            msa = by_name[fam].msa
            for k in range(len(msa)):
                key = _sequence_key(msa.ungapped(k))
                if key not in shared:
                    continue
                seen = first.setdefault(key, (split_name, fam))
                if seen[0] != split_name:
                    examples.setdefault((f"{seen[1]} ({seen[0]})", f"{fam} ({split_name})"))
    shown = "; ".join(f"{a} and {b}" for a, b in list(examples)[:3])
    more = f"; {len(examples) - 3} more pairs of families" if len(examples) > 3 else ""
    remedy = ("the seeded split keeps families apart by name only; remove the duplicates or give a leak-free "
              "--split-manifest (sinkalign.io.splits.leak_free_split)" if split_source == "seeded"
              else "the split assignment puts them on different sides; a leak-free one "
                   "(sinkalign.io.splits.leak_free_split) keeps identical sequences together")
    logger.warning("%d distinct sequences (identical residues, case and gaps aside) are in more than one split, so "
                   "they leak between train, valid and test: e.g. families %s%s; %s", len(shared), shown, more, remedy)


def _family_rng(seed: int, family: str) -> np.random.Generator:
    key = int.from_bytes(hashlib.sha256(family.encode("utf-8")).digest()[:8], "little")
    return np.random.default_rng([int(seed), key])


@dataclass(frozen=True)
class _Family:
    name: str
    msa: MSA
    n_in_file: int


def _subset(msa: MSA, keep: list[int]) -> MSA:
    return MSA(
        ids=tuple(msa.ids[k] for k in keep),
        rows=tuple(msa.rows[k] for k in keep),
        source=msa.source,
        format=msa.format,
        alphabet=msa.alphabet,
        family=msa.family,
        accession=msa.accession,
        index=msa.index,
    )


def _read_alignments(path: Path) -> list[MSA]:
    """Stockholm files as before; PIR (HOMSTRAD) and bench1.0 aligned FASTA by content."""
    from sinkalign.io.structural import detect_alignment_format, read_reference_alignment

    if detect_alignment_format(path) == "stockholm":
        return list(read_stockholm(path))
    return read_reference_alignment(path)


def _check_alphabets(families: list[_Family], paths: list[Path]) -> None:
    """Refuse families of more than one alphabet (AlphabetError naming the odd files)."""
    by_alphabet: dict[str, list[_Family]] = collections.defaultdict(list)
    for fam in families:
        by_alphabet[fam.msa.alphabet].append(fam)
    if len(by_alphabet) < 2:
        return
    major = max(by_alphabet, key=lambda a: (len(by_alphabet[a]), a == "protein"))
    odd = [f for a, fs in by_alphabet.items() if a != major for f in fs]
    shown = ", ".join(f"{f.msa.source} (family {f.name}: {f.msa.alphabet})" for f in odd[:5])
    more = f" and {len(odd) - 5} more" if len(odd) > 5 else ""
    raise AlphabetError(
        f"the inputs mix alphabets: {shown}{more} among {len(by_alphabet[major])} {major} families; a model is "
        f"trained on one alphabet, so pass --alphabet {major} to keep only the {major} families (the others are "
        "skipped and listed in the index), or --mixed-alphabets to keep both on purpose"
    )


def _load_families(
    paths: list[Path], min_length: int, max_length: int | None, alphabet: str | None
) -> tuple[list[_Family], dict[str, str]]:
    families: dict[str, _Family] = {}
    skipped: dict[str, str] = {}
    seq_owner: dict[str, tuple[str, str]] = {}
    for path in paths:
        for msa in _read_alignments(path):
            name = msa.family or (path.stem if msa.index == 0 else f"{path.stem}#{msa.index + 1}")
            if name in families or name in skipped:
                other = families[name].msa.source if name in families else "an earlier input"
                raise InputError(f"family {name!r} appears twice: {other} and {path} (alignment #{msa.index + 1})")
            if alphabet is not None and msa.alphabet != alphabet:
                skipped[name] = f"alphabet {msa.alphabet} (kept only {alphabet})"
                logger.info("skipping family %s from %s: %s", name, path, skipped[name])
                continue
            keep = [
                k
                for k in range(len(msa))
                if len(msa.ungapped(k)) >= min_length and (max_length is None or len(msa.ungapped(k)) <= max_length)
            ]
            if len(keep) < 2:
                skipped[name] = (f"{len(msa)} sequence: no pair to make" if len(msa) < 2 else
                                 f"{len(keep)} of {len(msa)} sequences within the length limits")
                logger.warning("skipping family %s from %s: %s", name, path, skipped[name])
                continue
            sub = _subset(msa, keep)
            if sub.format in ("pir", "bench"):
                # structure collections reuse chain names for different segments (HOMSTRAD
                # domain families, SABmark domains): such a clash gets the family as a prefix
                ids = tuple(
                    f"{name}:{sid}" if sid in seq_owner and seq_owner[sid][1] != sub.ungapped(k) else sid
                    for k, sid in enumerate(sub.ids)
                )
                sub = dataclasses.replace(sub, ids=ids)
            for k, sid in enumerate(sub.ids):
                seq = sub.ungapped(k)
                if sid in seq_owner and seq_owner[sid][1] != seq:
                    raise InputError(
                        f"sequence id {sid!r} has different sequences in families {seq_owner[sid][0]!r} "
                        f"and {name!r}; ids must identify sequences (embeddings are keyed by id)"
                    )
                seq_owner.setdefault(sid, (name, seq))
            families[name] = _Family(name=name, msa=sub, n_in_file=len(msa))
    return list(families.values()), skipped


def _encode_shard(pairs: list[ReferencePair], split: str, pids: list[float]) -> bytes:
    seq_index: dict[str, int] = {}
    seq_ids: list[str] = []
    seqs: list[str] = []
    fam_index: dict[str | None, int] = {}
    src_index: dict[str, int] = {}

    def seq_row(sid: str, seq: str) -> int:
        if sid not in seq_index:
            seq_index[sid] = len(seq_ids)
            seq_ids.append(sid)
            seqs.append(seq)
        return seq_index[sid]

    query = np.empty(len(pairs), dtype=np.int32)
    target = np.empty(len(pairs), dtype=np.int32)
    family = np.empty(len(pairs), dtype=np.int32)
    source = np.empty(len(pairs), dtype=np.int32)
    offsets = np.zeros(len(pairs) + 1, dtype=np.int64)
    with_core = any(pair.query_core is not None for pair in pairs)
    core_offsets = np.zeros(len(pairs) + 1, dtype=np.int64)
    core_chunks: list[np.ndarray] = []
    for p, pair in enumerate(pairs):
        if with_core:
            if pair.query_core is None:  # every residue trusted
                chunk = np.ones(len(pair.query_seq) + len(pair.target_seq), np.uint8)
            else:
                chunk = np.concatenate([pair.query_core, pair.target_core]).astype(np.uint8)
            core_chunks.append(chunk)
            core_offsets[p + 1] = core_offsets[p] + len(chunk)
        query[p] = seq_row(pair.query_id, pair.query_seq)
        target[p] = seq_row(pair.target_id, pair.target_seq)
        family[p] = fam_index.setdefault(pair.family, len(fam_index))
        source[p] = src_index.setdefault(pair.source, len(src_index))
        offsets[p + 1] = offsets[p] + pair.n_aligned
    header = {
        "format_version": FORMAT_VERSION,
        "split": split,
        "seq_ids": seq_ids,
        "seqs": seqs,
        "families": list(fam_index),
        "sources": list(src_index),
        "meta": [pair.meta for pair in pairs],
    }
    arrays = {
        "header": np.frombuffer(json.dumps(header, separators=(",", ":")).encode("utf-8"), dtype=np.uint8),
        "query": query,
        "target": target,
        "family": family,
        "source": source,
        "pair_offsets": offsets,
        "pairs": np.concatenate([p.pairs for p in pairs]).astype(np.int32) if pairs else np.zeros((0, 2), np.int32),
        "percent_identity": np.asarray(pids, dtype=np.float32),
    }
    if with_core:
        arrays["core_offsets"] = core_offsets
        arrays["core"] = np.concatenate(core_chunks) if core_chunks else np.zeros(0, np.uint8)
    buf = io.BytesIO()
    np.savez_compressed(buf, **arrays)
    return buf.getvalue()


def _write_shard(directory: Path, name: str, data: bytes) -> dict:
    """Write one shard file atomically; return its index entry."""
    atomic_write_bytes(directory / name, data)
    return {"file": name, "sha256": _sha256(data), "bytes": len(data)}


#: the names of a build's own files, besides ``index.json``
_SHARD_FILE = re.compile(r"(train|valid|test)-\d{5}(\.npz|\.emb\.safetensors)")
#: temporary files of :func:`~sinkalign.utils.atomic_write` for those names (a killed build's)
_TEMP_FILE = re.compile(r"\.((train|valid|test)-\d{5}(\.npz|\.emb\.safetensors)|index\.json)\.\w+\.tmp")
#: a build's staging folder ("new") and the previous build set aside while swapping ("old")
_WORK_PREFIX = {"new": ".sinkalign-shards-new-", "old": ".sinkalign-shards-old-"}
_WORK_DIR = re.compile(r"\.sinkalign-shards-(new|old)-\w+\.tmp")


def _foreign_index(path: Path) -> str | None:
    """``None`` when ``path`` is a shard index (``format`` is :data:`FORMAT_NAME`, whatever its
    version); else why it is not one, for the message refusing to replace it."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError:
        return "not UTF-8 text"
    except ValueError:
        return "not valid JSON"
    except OSError as err:
        return f"cannot be read: {err.strerror or err}"
    if not isinstance(data, dict) or data.get("format") != FORMAT_NAME:
        found = data.get("format") if isinstance(data, dict) else None
        return f"format={found!r}, a shard index has {FORMAT_NAME!r}"
    return None


def _listed_files(index_path: Path) -> set[str]:
    """The shard and embedding files a (shard) index lists, those named as a build names them."""
    names: set[str] = set()
    try:
        old = json.loads(index_path.read_text(encoding="utf-8"))
        for info in old.get("splits", {}).values():
            for shard in info.get("shards", []):
                names.add(shard["file"])
                if shard.get("embeddings"):
                    names.add(shard["embeddings"]["file"])
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        logger.warning("could not read the file list of %s; its shard files are told by their content", index_path)
    return {n for n in names if isinstance(n, str) and _SHARD_FILE.fullmatch(n)}


def _written_by_a_build(path: Path) -> bool:
    """Whether a file named like a shard holds what a build writes there (an ``.npz`` with the
    shard arrays and a header naming its split, a safetensors file with the embedding metadata);
    only such files are removed as an interrupted build's leftovers."""
    try:
        if path.name.endswith(".npz"):
            with np.load(path, allow_pickle=False) as npz:
                if not set(_ARRAY_KEYS) <= set(npz.files):
                    return False
                header = json.loads(npz["header"].tobytes().decode("utf-8"))
            return isinstance(header, dict) and "split" in header and "format_version" in header
        with open(path, "rb") as handle:
            size = int.from_bytes(handle.read(8), "little")
            if not 0 < size <= 1 << 26:
                return False
            meta = json.loads(handle.read(size).decode("utf-8"))["__metadata__"]
        return isinstance(meta, dict) and "name" in meta and "dtype" in meta
    except (OSError, ValueError, KeyError, TypeError, EOFError, zipfile.BadZipFile):  # not one of ours
        return False


def _restore_set_aside(out: Path) -> None:
    """Put back the previous build that a rebuild killed while swapping had set aside, and remove
    what killed builds left: staging folders and :func:`~sinkalign.utils.atomic_write` temporary
    files. Only entries named as a build names them are touched."""
    entries = sorted(out.iterdir())
    for work in entries:
        kind = _WORK_DIR.fullmatch(work.name)
        if kind is None or work.is_symlink() or not work.is_dir():
            continue
        if kind.group(1) == "old" and (work / INDEX_NAME).is_file() and not (out / INDEX_NAME).exists():
            for f in sorted(work.iterdir(), key=lambda f: f.name == INDEX_NAME):  # the index last
                if f.name == INDEX_NAME or _SHARD_FILE.fullmatch(f.name):
                    os.replace(f, out / f.name)
            logger.warning("%s: put back the previous build, which a rebuild killed while swapping in its files "
                           "had set aside in %s", out, work.name)
        else:
            logger.warning("%s: removing %s, left by an interrupted build", out, work.name)
        shutil.rmtree(work, ignore_errors=True)
    for f in entries:
        if _TEMP_FILE.fullmatch(f.name) and f.is_file():
            logger.warning("%s: removing %s, left by an interrupted build", out, f.name)
            f.unlink(missing_ok=True)


def _check_output(out: Path, overwrite: bool) -> list[str]:
    """Refuse an output directory a build must not write into; return the files of an earlier
    build there (those its index lists, and shard files with no index: an interrupted build's),
    which the new build replaces. Puts back or cleans up after killed builds first."""
    if out.exists() and not out.is_dir():
        raise InputError(f"out_dir={str(out)!r} exists and is not a directory")
    if not out.is_dir():
        return []
    index_path = out / INDEX_NAME
    if index_path.exists() or index_path.is_symlink():
        why = _foreign_index(index_path)
        if why is not None:  # a user's own index.json: never replaced, --overwrite or not
            raise OutputExistsError(f"{index_path} is not a sinkalign shard index ({why}); it is left alone, and so "
                                    "is its directory: give a new or empty directory for the shards")
    _restore_set_aside(out)
    has_index = index_path.exists()
    if has_index and not overwrite:
        raise OutputExistsError(f"{index_path} already exists; pass --overwrite to rebuild")
    listed = _listed_files(index_path) if has_index else set()
    own, leftovers, others = [], [], []
    for entry in sorted(out.iterdir()):
        name = entry.name
        if name == INDEX_NAME:
            continue
        if name in listed and entry.is_file():
            own.append(name)
        elif _SHARD_FILE.fullmatch(name) and entry.is_file() and not entry.is_symlink() and _written_by_a_build(entry):
            leftovers.append(name)
        else:
            others.append(name)
    look_alike = [n for n in others if _SHARD_FILE.fullmatch(n)]
    if look_alike:  # a new shard of that name would replace it
        raise OutputExistsError(f"{out} holds {', '.join(look_alike[:3])}{', ...' if len(look_alike) > 3 else ''}, "
                                "named like a shard file but not one a build wrote; move it away to build there")
    if others and not has_index:  # not a shard folder: a user's, never written into
        raise OutputExistsError(f"{out} holds other files ({', '.join(others[:3])}{', ...' if len(others) > 3 else ''})"
                                "; give a new or empty directory for the shards")
    if leftovers:
        logger.warning("%s: %d shard files that no index.json lists (left by an interrupted build: %s%s) are removed "
                       "when this build completes", out, len(leftovers), ", ".join(leftovers[:3]),
                       ", ..." if len(leftovers) > 3 else "")
    return own + leftovers


def _fsync_dir(directory: Path) -> None:
    """Make the renames in ``directory`` durable (best effort: not every system opens folders)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _swap_in(out: Path, staging: Path, old_files: list[str], new_files: list[str]) -> None:
    """Replace the build in ``out`` (its ``index.json`` and ``old_files``) by the complete one in
    ``staging`` (``new_files`` and its ``index.json``), by renames within ``out``'s filesystem.

    The old index and files are first set aside in a hidden folder, then the new files are
    moved in and the new index last; the old files are removed only then. An exception on the
    way (Ctrl-C) moves everything back; a kill leaves the set-aside folder, which the next build
    puts back (:func:`_restore_set_aside`)."""
    aside = Path(tempfile.mkdtemp(prefix=_WORK_PREFIX["old"], suffix=".tmp", dir=out))
    moved_old: list[str] = []
    moved_new: list[str] = []
    try:
        for name in [INDEX_NAME] + old_files:  # the index first: no index ever lists a moved file
            if (out / name).exists():
                os.replace(out / name, aside / name)
                moved_old.append(name)
        for name in new_files:
            os.replace(staging / name, out / name)
            moved_new.append(name)
        os.replace(staging / INDEX_NAME, out / INDEX_NAME)
    except BaseException:
        for name in moved_new:
            (out / name).unlink(missing_ok=True)
        for name in reversed(moved_old):  # the index last
            os.replace(aside / name, out / name)
        shutil.rmtree(aside, ignore_errors=True)
        raise
    _fsync_dir(out)
    shutil.rmtree(aside, ignore_errors=True)


def build_shards(
    stockholm_paths: str | os.PathLike | Iterable[str | os.PathLike],
    out_dir: str | os.PathLike,
    *,
    split: Sequence[float] = (0.8, 0.1, 0.1),
    seed: int = 0,
    pairs_per_shard: int = 4096,
    max_pairs_per_family: int | None = None,
    min_length: int = 10,
    max_length: int | None = None,
    alphabet: str | None = None,
    overwrite: bool = False,
    progress: bool = False,
    mixed_alphabets: bool = False,
    assignment: dict[str, str] | None = None,
) -> dict:
    """Build a family-disjoint pair-shard directory from Stockholm alignments.

    Also reads structure-based references (:mod:`sinkalign.io.structural`, recognised by
    content): HOMSTRAD PIR files (one family each) and bench1.0 aligned FASTA sets (SABRE,
    PREFAB, OXBench; one family each, named ``<parent dir>/<file stem>``) whose pairs carry
    their core mask into the shards.

    Every alignment in every file is one family (name: ``#=GF ID``, else the file
    stem, with ``#k`` for the k-th alignment of a file after the first). Sequences
    outside ``[min_length, max_length]`` residues (ungapped) are dropped; a family left
    with fewer than 2 sequences is skipped (recorded under ``skipped_families``).
    Then every pair of the remaining sequences (or ``max_pairs_per_family`` of them,
    drawn with a per-family generator seeded by ``seed`` and the family name) is
    stored with its aligned residue pairs (:func:`msa_to_pairs`).

    Args:
        stockholm_paths: one Stockholm file or many.
        out_dir: output directory; created if needed. A directory that already has a shard
            index needs ``overwrite=True``; the new build replaces the old one only when
            complete, and files there that are not the build's own are kept (module
            docstring, Atomicity).
        split: (train, valid, test) fractions of families, summing to 1.
        seed: split and subsampling seed.
        pairs_per_shard: pairs per shard file (the last shard of a split may be smaller).
        max_pairs_per_family: cap on pairs per family (``None``: all N(N-1)/2).
        min_length, max_length: ungapped sequence length limits (inclusive;
            ``max_length=None``: no upper limit).
        alphabet: keep only ``"protein"`` or ``"dna"`` families (``None``: all, which must then
            share one alphabet unless ``mixed_alphabets``).
        overwrite: replace the build in an existing shard directory.
        progress: show a tqdm progress bar.
        mixed_alphabets: accept protein and DNA families in one directory.
        assignment: ``{family: "train" | "valid" | "test"}`` for every family (e.g. a leak-free
            split manifest, ``data_manifests/structural_split.json``) instead of the seeded
            split; ``split`` is then not used.

    Returns:
        The index (the parsed content of ``index.json``).

    Raises:
        InputError: a bad split, the same family twice, a sequence id with two different
            sequences, no family left after filtering, a bad ``assignment`` (all ValueErrors;
            other bad arguments raise plain ValueError).
        FormatError: unreadable alignments (file, alignment, row, column).
        AlphabetError: families of more than one alphabet (see ``mixed_alphabets``).
        MissingFileError: an input file that does not exist (a FileNotFoundError).
        OutputExistsError: an existing index without ``overwrite``; an ``index.json`` that is not
            a shard index (``overwrite`` or not); a directory of other files and no shard index;
            a file named like a shard that no build wrote (all FileExistsErrors).

    Warnings (logged): a family that gives no aligned residue pair, sequences that are in more
    than one split, families of ``assignment`` that no input holds.
    """
    if isinstance(stockholm_paths, (str, os.PathLike)):
        stockholm_paths = [stockholm_paths]
    paths = [Path(p) for p in stockholm_paths]
    if not paths:
        raise ValueError("stockholm_paths is empty: give at least one Stockholm file")
    for p in paths:
        if not p.is_file():
            raise MissingFileError(f"{p}: no such Stockholm file")
    fractions = check_split(split)
    if not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"seed={seed!r} must be a non-negative integer")
    if not isinstance(pairs_per_shard, (int, np.integer)) or pairs_per_shard < 1:
        raise ValueError(f"pairs_per_shard={pairs_per_shard!r} must be a positive integer")
    if max_pairs_per_family is not None and (
        not isinstance(max_pairs_per_family, (int, np.integer)) or max_pairs_per_family < 1
    ):
        raise ValueError(f"max_pairs_per_family={max_pairs_per_family!r} must be a positive integer or None")
    if not isinstance(min_length, (int, np.integer)) or min_length < 1:
        raise ValueError(f"min_length={min_length!r} must be a positive integer")
    if max_length is not None and (not isinstance(max_length, (int, np.integer)) or max_length < min_length):
        raise ValueError(f"max_length={max_length!r} must be an integer >= min_length={min_length} or None")
    if alphabet not in (None, "protein", "dna"):
        raise ValueError(f"alphabet={alphabet!r} is not one of (None, 'protein', 'dna')")
    out = Path(out_dir)
    old_files = _check_output(out, bool(overwrite))

    families, skipped = _load_families(paths, int(min_length), max_length, alphabet)
    if not families:
        raise InputError(f"no family left to shard (skipped: {skipped})")
    if alphabet is None and not mixed_alphabets:
        _check_alphabets(families, paths)
    if assignment is None:
        assignment = split_families([f.name for f in families], fractions, int(seed))
        split_source = "seeded"
    else:
        if not isinstance(assignment, dict):
            raise InputError(f"the split assignment must map family names to splits, got a {type(assignment).__name__}")
        bad = sorted({repr(v) for v in assignment.values() if not isinstance(v, str) or v not in SPLITS})
        if bad:
            raise InputError(f"the split assignment uses {', '.join(bad)}; valid splits: {', '.join(SPLITS)}")
        missing = sorted(f.name for f in families if f.name not in assignment)
        if missing:
            raise InputError(f"the split assignment has no entry for {len(missing)} families, e.g. {missing[:5]}")
        unknown = sorted(set(assignment) - {f.name for f in families} - set(skipped))
        if unknown:
            logger.warning("the split assignment names %d families that no input holds, ignored: %s%s (family names "
                           "are #=GF ID, else the file stem; <folder>/<file name> for the other formats)", len(unknown),
                           ", ".join(unknown[:5]), ", ..." if len(unknown) > 5 else "")
        assignment = {s: sorted(f.name for f in families if assignment[f.name] == s) for s in SPLITS}
        split_source = "assignment"
    by_name = {f.name: f for f in families}
    if len(families) < 3:
        logger.warning("only %d families: some splits are empty", len(families))
    _warn_shared_sequences(assignment, by_name, split_source)

    index: dict = {
        "format": FORMAT_NAME,
        "format_version": FORMAT_VERSION,
        "build": {
            "seed": int(seed),
            "split_fractions": list(fractions),
            "pairs_per_shard": int(pairs_per_shard),
            "max_pairs_per_family": None if max_pairs_per_family is None else int(max_pairs_per_family),
            "min_length": int(min_length),
            "max_length": None if max_length is None else int(max_length),
            "alphabet": alphabet,
            "mixed_alphabets": bool(mixed_alphabets),
            "split_source": split_source,
            "inputs": [{"path": str(p), "sha256": file_sha256(p)} for p in paths],
        },
        "splits": {},
        "families": {},
        "skipped_families": skipped,
        "embeddings": None,
    }
    total = sum(
        (len(f.msa) * (len(f.msa) - 1) // 2)
        if max_pairs_per_family is None
        else min(max_pairs_per_family, len(f.msa) * (len(f.msa) - 1) // 2)
        for f in families
    )
    created = not out.exists()
    out.mkdir(parents=True, exist_ok=True)
    # the new build goes into a hidden folder inside out (so on its filesystem: renames are
    # atomic) and replaces the old one only when complete (module docstring, Atomicity)
    staging = Path(tempfile.mkdtemp(prefix=_WORK_PREFIX["new"], suffix=".tmp", dir=out))
    bar = tqdm(total=total, unit="pair", desc="shards", disable=not progress)
    try:
        for split_name in SPLITS:
            shards: list[dict] = []
            buffer: list[ReferencePair] = []
            pids: list[float] = []
            seq_ids: set[str] = set()
            n_aligned = 0

            def flush() -> None:
                name = f"{split_name}-{len(shards):05d}.npz"
                entry = _write_shard(staging, name, _encode_shard(buffer, split_name, pids))
                entry["n_pairs"] = len(buffer)
                entry["embeddings"] = None
                shards.append(entry)
                buffer.clear()
                pids.clear()

            for fam_name in assignment[split_name]:
                fam = by_name[fam_name]
                pairs = msa_to_pairs(fam.msa, max_pairs=max_pairs_per_family, rng=_family_rng(seed, fam_name))
                fam_pids = [percent_identity(p) for p in pairs]
                finite = [x for x in fam_pids if not math.isnan(x)]
                index["families"][fam_name] = {
                    "split": split_name,
                    "accession": fam.msa.accession,
                    "source": fam.msa.source,
                    "alignment_index": fam.msa.index,
                    "alphabet": fam.msa.alphabet,
                    "n_sequences_in_file": fam.n_in_file,
                    "n_sequences": len(fam.msa),
                    "n_pairs": len(pairs),
                    "mean_percent_identity": round(float(np.mean(finite)), 4) if finite else None,
                }
                seq_ids.update(fam.msa.ids)
                for pair, pid in zip(pairs, fam_pids):
                    if pair.family != fam_name:  # alignments without #=GF ID are named after their file
                        pair = dataclasses.replace(pair, family=fam_name)
                    buffer.append(pair)
                    pids.append(pid)
                    n_aligned += pair.n_aligned
                    if len(buffer) == pairs_per_shard:
                        flush()
                bar.update(len(pairs))
            if buffer:
                flush()
            index["splits"][split_name] = {
                "families": assignment[split_name],
                "n_families": len(assignment[split_name]),
                "n_sequences": len(seq_ids),
                "n_pairs": sum(s["n_pairs"] for s in shards),
                "n_aligned_residue_pairs": n_aligned,
                "shards": shards,
            }
        bar.close()
        atomic_write_text(staging / INDEX_NAME, json.dumps(index, indent=1) + "\n")
        new_files = [s["file"] for info in index["splits"].values() for s in info["shards"]]
        _swap_in(out, staging, old_files, new_files)
    except BaseException:
        bar.close()
        shutil.rmtree(staging, ignore_errors=True)
        if created:  # a directory this build made, left empty
            with contextlib.suppress(OSError):
                out.rmdir()
        raise
    shutil.rmtree(staging, ignore_errors=True)
    logger.info(
        "wrote %s: %s",
        out,
        ", ".join(f"{k} {v['n_families']} families / {v['n_pairs']} pairs" for k, v in index["splits"].items()),
    )
    return index


def embedder_label(name: str) -> str:
    """The embedder as a person reads it: its name and options (``esm2 (layer=33)``), where the
    index keeps its JSON spec."""
    try:
        spec = json.loads(name)
    except (TypeError, ValueError):
        return str(name)
    if not isinstance(spec, dict):
        return str(name)
    label = str(spec.get("name", "embedder"))
    options = ", ".join(f"{k}={v}" for k, v in spec.items() if k != "name")
    return f"{label} ({options})" if options else label


def read_index(directory: str | os.PathLike) -> dict:
    """Read and check ``index.json`` of a shard directory.

    Raises:
        MissingFileError: no index (not a shard directory, or an interrupted build); a
            FileNotFoundError.
        FormatError: not valid JSON, unknown format or version; a ValueError.
    """
    directory = Path(directory)
    path = directory / INDEX_NAME
    if not path.is_file():
        raise MissingFileError(
            f"{path} not found: {directory} is not a shard directory (or its build was interrupted); "
            f"build one with `sinkalign shards build ALIGNMENTS --out {directory}`"
        )
    try:
        index = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as err:
        raise FormatError(f"{path}: not valid JSON: {err}") from err
    if not isinstance(index, dict) or index.get("format") != FORMAT_NAME:
        found = index.get("format") if isinstance(index, dict) else None
        raise FormatError(f"{path}: format={found!r}, expected {FORMAT_NAME!r}")
    if index.get("format_version") not in READABLE_VERSIONS:
        raise FormatError(
            f"{path}: format_version={index.get('format_version')!r}, this sinkalign reads format versions "
            f"{', '.join(map(str, READABLE_VERSIONS))}"
        )
    _check_index_shape(index, path)
    return index


def _check_index_shape(index: dict, path: Path) -> None:
    """FormatError naming the entry of an index (edited by hand, or a foreign writer's) that lacks
    what the readers look up: ``splits`` -> each split's ``shards`` -> each shard's ``file``,
    ``sha256`` and ``n_pairs`` (and its ``embeddings``' ``file`` and ``sha256`` where present)."""
    splits = index.get("splits")
    if not isinstance(splits, dict):
        raise FormatError(f"{path}: no 'splits' object (split name -> its shards); rebuild the shards")
    for name, info in splits.items():
        shards = info.get("shards") if isinstance(info, dict) else None
        if not isinstance(shards, list):
            raise FormatError(f"{path}: split {name!r} has no 'shards' list; rebuild the shards")
        for k, entry in enumerate(shards):
            if not isinstance(entry, dict):
                raise FormatError(f"{path}: shard entry {k} of split {name!r} is not an object")
            for key, kind in (("file", str), ("sha256", str), ("n_pairs", int)):
                if not isinstance(entry.get(key), kind) or isinstance(entry.get(key), bool):
                    raise FormatError(f"{path}: shard entry {k} of split {name!r} lacks {key!r} (a "
                                      f"{kind.__name__}); rebuild the shards")
            emb = entry.get("embeddings")
            if emb is not None and not (isinstance(emb, dict) and isinstance(emb.get("file"), str)
                                        and isinstance(emb.get("sha256"), str)):
                raise FormatError(f"{path}: the embeddings of shard entry {k} of split {name!r} lack 'file' or "
                                  "'sha256'; embed again (`sinkalign shards embed --overwrite`)")


def _read_verified(path: Path, sha256: str) -> bytes:
    if not path.is_file():
        raise MissingFileError(f"{path}: listed in {INDEX_NAME} but missing")
    data = path.read_bytes()
    got = _sha256(data)
    if got != sha256:
        raise FormatError(f"{path}: sha256 {got} does not match {INDEX_NAME} ({sha256}); the file is corrupt or stale")
    return data


@dataclass(frozen=True)
class _Shard:
    header: dict
    arrays: dict[str, np.ndarray]
    embeddings: dict[str, np.ndarray] | None


def _load_shard(directory: Path, entry: dict, load_embeddings: bool) -> _Shard:
    data = _read_verified(directory / entry["file"], entry["sha256"])
    try:
        npz = np.load(io.BytesIO(data), allow_pickle=False)
    except (ValueError, OSError, zipfile.BadZipFile) as exc:  # the sha256 matched: the index lists a non-shard
        raise FormatError(f"{directory / entry['file']}: not a shard (.npz) file: {exc}") from exc
    if not isinstance(npz, np.lib.npyio.NpzFile):  # a bare .npy array
        raise FormatError(f"{directory / entry['file']}: not a shard (.npz) file: one array, not an archive")
    with npz:
        missing = [k for k in _ARRAY_KEYS if k not in npz.files]
        if missing:
            raise FormatError(f"{directory / entry['file']}: missing arrays {missing}")
        arrays = {k: npz[k] for k in _ARRAY_KEYS}
        present = [k for k in _CORE_KEYS if k in npz.files]
        if present and len(present) != len(_CORE_KEYS):
            raise FormatError(f"{directory / entry['file']}: has {present} but not all of {list(_CORE_KEYS)}")
        arrays.update({k: npz[k] for k in present})
    header = json.loads(arrays.pop("header").tobytes().decode("utf-8"))
    if header.get("format_version") not in READABLE_VERSIONS:
        raise FormatError(f"{directory / entry['file']}: format_version={header.get('format_version')!r}")
    embeddings = None
    if load_embeddings and entry.get("embeddings"):
        emb = entry["embeddings"]
        try:
            embeddings = safetensors.numpy.load(_read_verified(directory / emb["file"], emb["sha256"]))
        except Exception as exc:  # safetensors' own error types; the sha256 matched: the index lists a non-embedding
            if isinstance(exc, SinkalignError):
                raise
            raise FormatError(f"{directory / emb['file']}: not an embeddings (safetensors) file: {exc}") from exc
    return _Shard(header=header, arrays=arrays, embeddings=embeddings)


def _shard_pair(shard: _Shard, p: int) -> ReferencePair:
    h, a = shard.header, shard.arrays
    q, t = int(a["query"][p]), int(a["target"][p])
    lo, hi = int(a["pair_offsets"][p]), int(a["pair_offsets"][p + 1])
    cores = {}
    if "core" in a:
        c0, c1 = int(a["core_offsets"][p]), int(a["core_offsets"][p + 1])
        mask = a["core"][c0:c1].astype(bool)
        lq = len(h["seqs"][q])
        if mask.shape[0] != lq + len(h["seqs"][t]):
            raise FormatError(f"shard {h.get('split')}: pair {p} has a core mask of {mask.shape[0]} entries for "
                             f"{lq} + {len(h['seqs'][t])} residues")
        if not mask.all():
            cores = {"query_core": mask[:lq], "target_core": mask[lq:]}
    return ReferencePair(
        query_id=h["seq_ids"][q],
        target_id=h["seq_ids"][t],
        query_seq=h["seqs"][q],
        target_seq=h["seqs"][t],
        pairs=a["pairs"][lo:hi],
        source=h["sources"][int(a["source"][p])],
        family=h["families"][int(a["family"][p])],
        meta=h["meta"][p],
        **cores,
    )


@dataclass(frozen=True, eq=False)
class ShardExample:
    """One stored pair, with its per-residue embeddings when the shards have them.

    Attributes:
        pair: the reference pair.
        percent_identity: as stored (:func:`~sinkalign.io.alignments.percent_identity`).
        query_embedding: ``[Lq, D]`` array or ``None``.
        target_embedding: ``[Lt, D]`` array or ``None``.
    """

    pair: ReferencePair
    percent_identity: float
    query_embedding: np.ndarray | None = None
    target_embedding: np.ndarray | None = None


class ShardDataset:
    """Random-access, iterable view of one split of a shard directory.

    ``dataset[k]`` is the k-th pair (storage order); iteration goes in storage
    order; :meth:`iter_batches` gives a deterministic shuffle per (seed, epoch).
    Shard files are loaded on demand, checked against their sha256, and kept in a
    small LRU cache (``cache_shards`` files).

    Args:
        directory: a directory made by :func:`build_shards`.
        split: ``"train"``, ``"valid"`` or ``"test"``.
        load_embeddings: attach embeddings when the directory has them.
        cache_shards: how many decoded shards to keep in memory.

    Errors a user can fix are :mod:`sinkalign.errors` classes naming the file: a
    missing index or shard file is a ``MissingFileError``, a corrupt one a
    ``FormatError``, an unknown ``split`` an ``InputError``.
    """

    def __init__(
        self,
        directory: str | os.PathLike,
        split: str,
        *,
        load_embeddings: bool = True,
        cache_shards: int = 8,
    ) -> None:
        if not isinstance(cache_shards, int) or cache_shards < 1:
            raise ValueError(f"cache_shards={cache_shards!r} must be a positive integer")
        self.directory = Path(directory)
        self.index = read_index(self.directory)
        if split not in self.index["splits"]:
            raise InputError(f"split={split!r} is not one of {tuple(self.index['splits'])}")
        self.split = split
        info = self.index["splits"][split]
        self.families: list[str] = list(info["families"])
        self._entries: list[dict] = list(info["shards"])
        for entry in self._entries:
            if not (self.directory / entry["file"]).is_file():
                raise MissingFileError(f"{self.directory / entry['file']}: listed in {INDEX_NAME} but missing")
            emb = entry.get("embeddings")
            if emb and not (self.directory / emb["file"]).is_file():
                raise MissingFileError(f"{self.directory / emb['file']}: the embeddings of pair shard {entry['file']}, "
                                       f"listed in {INDEX_NAME} but missing (the pair shards are there): embed "
                                       f"again (`sinkalign shards embed {self.directory} --overwrite`)")
        self.embeddings_info: dict | None = self.index.get("embeddings")
        self._load_embeddings = bool(load_embeddings and self.embeddings_info)
        self._starts = np.cumsum([0] + [int(e["n_pairs"]) for e in self._entries])
        self._cache: collections.OrderedDict[int, _Shard] = collections.OrderedDict()
        self._cache_size = cache_shards

    @property
    def has_embeddings(self) -> bool:
        return self._load_embeddings

    def __len__(self) -> int:
        return int(self._starts[-1])

    def any_aligned(self) -> bool:
        """Whether any reference alignment of the split aligns a residue pair (reads shards until
        one does: all of them only when none does, as from all-lower-case Stockholm rows)."""
        return any(int(self._shard(s).arrays["pair_offsets"][-1]) > 0 for s in range(len(self._entries)))

    def _shard(self, s: int) -> _Shard:
        if s in self._cache:
            self._cache.move_to_end(s)
            return self._cache[s]
        shard = _load_shard(self.directory, self._entries[s], self._load_embeddings)
        n = len(shard.arrays["query"])
        if n != int(self._entries[s]["n_pairs"]):
            entry = self._entries[s]
            raise FormatError(f"{self.directory / entry['file']}: {n} pairs, {INDEX_NAME} says {entry['n_pairs']}")
        self._cache[s] = shard
        while len(self._cache) > self._cache_size:
            self._cache.popitem(last=False)
        return shard

    def __getitem__(self, k: int) -> ShardExample:
        if not isinstance(k, (int, np.integer)):
            raise TypeError(f"index {k!r} must be an integer")
        n = len(self)
        if k < 0:
            k += n
        if not 0 <= k < n:
            raise IndexError(f"index {k} out of range for split {self.split!r} with {n} pairs")
        s = int(np.searchsorted(self._starts, k, side="right") - 1)
        shard = self._shard(s)
        p = int(k - self._starts[s])
        pair = _shard_pair(shard, p)
        q_emb = t_emb = None
        if shard.embeddings is not None:
            q_emb = shard.embeddings[pair.query_id]
            t_emb = shard.embeddings[pair.target_id]
        return ShardExample(
            pair=pair,
            percent_identity=float(shard.arrays["percent_identity"][p]),
            query_embedding=q_emb,
            target_embedding=t_emb,
        )

    def __iter__(self) -> Iterator[ShardExample]:
        for k in range(len(self)):
            yield self[k]

    def iter_batches(
        self, batch_size: int, seed: int = 0, epoch: int = 0, *, shuffle: bool = True, drop_last: bool = False
    ) -> Iterator[list[ShardExample]]:
        """Yield lists of ``batch_size`` examples in a deterministic order.

        The order is ``numpy.random.default_rng([seed, epoch]).permutation(len(self))``
        (storage order when ``shuffle=False``): the same (seed, epoch) gives the same
        batches, another epoch a different order. The last batch is shorter unless
        ``drop_last``.
        """
        if not isinstance(batch_size, (int, np.integer)) or batch_size < 1:
            raise ValueError(f"batch_size={batch_size!r} must be a positive integer")
        for name, value in (("seed", seed), ("epoch", epoch)):
            if not isinstance(value, (int, np.integer)) or value < 0:
                raise ValueError(f"{name}={value!r} must be a non-negative integer")
        n = len(self)
        order = np.random.default_rng([int(seed), int(epoch)]).permutation(n) if shuffle else np.arange(n)
        stop = n - n % batch_size if drop_last else n
        for lo in range(0, stop, batch_size):
            yield [self[int(k)] for k in order[lo : min(lo + batch_size, stop)]]


def _to_numpy(x) -> np.ndarray:
    if hasattr(x, "detach"):  # torch tensor
        x = x.detach().cpu().numpy()
    return np.asarray(x)


def add_embeddings(
    directory: str | os.PathLike,
    embed_fn: Callable[[str], np.ndarray],
    *,
    name: str,
    dtype: str = "float16",
    overwrite: bool = False,
    progress: bool = False,
) -> dict:
    """Compute per-residue embeddings of every stored sequence and add them to the shards.

    ``embed_fn(seq)`` gets an ungapped sequence of length L and returns a ``[L, D]``
    array (NumPy, or anything ``numpy.asarray`` or ``.detach().cpu().numpy()``
    converts); D must be the same for every sequence and the values finite. One
    ``<shard>.emb.safetensors`` file per shard holds the embeddings of that shard's
    sequences keyed by id. The index is removed while the files are written and
    rewritten last, so an interrupted run leaves either no index entry for
    embeddings or a complete one.

    Args:
        directory: shard directory.
        embed_fn: the embedding function.
        name: what made the embeddings (e.g. ``"esm2_t6_8M_UR50D layer 6"``), stored.
        dtype: ``"float16"`` or ``"float32"`` storage type.
        overwrite: replace existing embeddings.
        progress: show a tqdm progress bar.

    Returns:
        The updated index.
    """
    if dtype not in EMBEDDING_DTYPES:
        raise ValueError(f"dtype={dtype!r} is not one of {EMBEDDING_DTYPES}")
    if not isinstance(name, str) or not name:
        raise ValueError(f"name={name!r} must be a non-empty string")
    if not callable(embed_fn):
        raise ValueError(f"embed_fn={embed_fn!r} must be callable")
    directory = Path(directory)
    index = read_index(directory)
    if index.get("embeddings") and not overwrite:
        raise OutputExistsError(f"{directory} already has embeddings ({embedder_label(index['embeddings']['name'])}); pass "
                                "--overwrite to replace them")
    # Validate every shard before touching anything, then drop the embeddings from the index
    # while their files are (re)written.
    entries = [(s, e) for s, info in index["splits"].items() for e in info["shards"]]
    for _, entry in entries:
        _read_verified(directory / entry["file"], entry["sha256"])
    stripped = json.loads(json.dumps(index))
    stripped["embeddings"] = None
    for info in stripped["splits"].values():
        for entry in info["shards"]:
            entry["embeddings"] = None
    atomic_write_text(directory / INDEX_NAME, json.dumps(stripped, indent=1) + "\n")

    dim: int | None = None
    previous: dict[str, np.ndarray] = {}
    n_seqs = 0
    bar = tqdm(total=len(entries), unit="shard", desc="embeddings", disable=not progress)
    try:
        for split_name, entry in entries:
            shard = _load_shard(directory, {**entry, "embeddings": None}, load_embeddings=False)
            current: dict[str, np.ndarray] = {}
            for sid, seq in zip(shard.header["seq_ids"], shard.header["seqs"]):
                if sid in previous:
                    current[sid] = previous[sid]
                    continue
                emb = _to_numpy(embed_fn(seq))
                if emb.ndim != 2 or emb.shape[0] != len(seq):
                    raise ValueError(
                        f"embed_fn returned shape {emb.shape} for sequence {sid!r} of length {len(seq)}; "
                        "expected [L, D]"
                    )
                if dim is None:
                    dim = int(emb.shape[1])
                elif emb.shape[1] != dim:
                    raise ValueError(f"embed_fn returned D={emb.shape[1]} for {sid!r}, earlier sequences had D={dim}")
                if not np.issubdtype(emb.dtype, np.number) or not np.all(np.isfinite(emb)):
                    raise ValueError(f"embed_fn returned non-finite or non-numeric values for {sid!r}")
                with np.errstate(over="ignore"):
                    cast = np.ascontiguousarray(emb, dtype=dtype)
                if not np.all(np.isfinite(cast)):
                    raise ValueError(f"embedding of {sid!r} overflows {dtype}")
                current[sid] = cast
                n_seqs += 1
            data = safetensors.numpy.save(current, metadata={"name": name, "dtype": dtype})
            emb_name = entry["file"].removesuffix(".npz") + ".emb.safetensors"
            atomic_write_bytes(directory / emb_name, data)
            entry["embeddings"] = {"file": emb_name, "sha256": _sha256(data), "bytes": len(data)}
            previous = current
            bar.update(1)
    finally:
        bar.close()
    index["embeddings"] = {"name": name, "dim": dim, "dtype": dtype}
    atomic_write_text(directory / INDEX_NAME, json.dumps(index, indent=1) + "\n")
    logger.info("added %s embeddings (D=%s, %s) of %d sequences to %s", name, dim, dtype, n_seqs, directory)
    return index


def verify_shards(directory: str | os.PathLike) -> int:
    """Check every file listed in the index against its sha256; return how many were checked."""
    directory = Path(directory)
    index = read_index(directory)
    n = 0
    for info in index["splits"].values():
        for entry in info["shards"]:
            _read_verified(directory / entry["file"], entry["sha256"])
            n += 1
            if entry.get("embeddings"):
                _read_verified(directory / entry["embeddings"]["file"], entry["embeddings"]["sha256"])
                n += 1
    return n


def shard_summary(directory: str | os.PathLike) -> dict:
    """Counts per split and per family, read from the index (no shard is opened).

    Returns:
        ``{"splits": [{"split", "n_families", "n_sequences", "n_pairs", "n_shards", "bytes"}],
        "families": [{"family", "split", "accession", "alphabet", "n_sequences", "n_pairs",
        "mean_percent_identity"}], "embeddings": ..., "skipped_families": ...}``
    """
    index = read_index(directory)
    splits = []
    for name, info in index["splits"].items():
        splits.append(
            {
                "split": name,
                "n_families": info["n_families"],
                "n_sequences": info["n_sequences"],
                "n_pairs": info["n_pairs"],
                "n_shards": len(info["shards"]),
                "bytes": sum(
                    s["bytes"] + (s["embeddings"]["bytes"] if s.get("embeddings") else 0) for s in info["shards"]
                ),
            }
        )
    families = [
        {
            "family": fam,
            "split": f["split"],
            "accession": f["accession"],
            "alphabet": f["alphabet"],
            "n_sequences": f["n_sequences"],
            "n_pairs": f["n_pairs"],
            "mean_percent_identity": f["mean_percent_identity"],
        }
        for fam, f in sorted(index["families"].items(), key=lambda kv: (SPLITS.index(kv[1]["split"]), kv[0]))
    ]
    return {
        "splits": splits,
        "families": families,
        "embeddings": index.get("embeddings"),
        "skipped_families": index.get("skipped_families", {}),
    }
