"""An output's format from its file name, as samtools and Biopython users expect.

``sinkalign align -o hits.sam`` writes SAM, ``sinkalign msa -o family.sto`` Stockholm and
``sinkalign generate-dna -o gen.fa`` FASTA without a ``--format``; a ``--format`` that another
format's extension contradicts (``-o hits.bam --format tsv``) is an error, not a text file under
a binary format's name. A name whose extension says nothing (``out``, ``hits.txt`` for
``align``) takes the command's default. A ``.gz``
is looked through (``hits.sam.gz`` is SAM, gzip-compressed).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from pathlib import Path

from sinkalign.errors import InputError

log = logging.getLogger(__name__)

__all__ = ["ALIGNMENT_SUFFIXES", "GENERATED_SUFFIXES", "MSA_SUFFIXES", "MSA_UNWRITTEN", "output_format", "unwritten_msa_format"]

#: extension -> pairwise output format (``sinkalign align``, :func:`sinkalign.io.writers.write_alignments`)
ALIGNMENT_SUFFIXES = {
    ".tsv": "tsv", ".sam": "sam", ".bam": "bam", ".paf": "paf", ".maf": "maf", ".m8": "blast6", ".blast6": "blast6",
    ".json": "json", ".jsonl": "json", ".ndjson": "json", ".sto": "stockholm", ".stk": "stockholm",
    ".sth": "stockholm", ".stockholm": "stockholm", ".fa": "fasta", ".fasta": "fasta", ".fas": "fasta",
    ".afa": "fasta",
}

#: extension -> multiple-alignment output format (``sinkalign msa``)
MSA_SUFFIXES = {
    ".fa": "fasta", ".fasta": "fasta", ".fas": "fasta", ".afa": "fasta", ".mfa": "fasta", ".aln": "clustal",
    ".clustal": "clustal", ".clw": "clustal", ".sto": "stockholm", ".stk": "stockholm", ".sth": "stockholm",
    ".stockholm": "stockholm", ".phy": "phylip", ".phylip": "phylip",
}

#: extension -> generated-sequence output format (``sinkalign generate-dna``): FASTA, or ``plain``
#: (the bases alone on one line)
GENERATED_SUFFIXES = {".fa": "fasta", ".fasta": "fasta", ".fna": "fasta", ".fas": "fasta", ".txt": "plain"}


#: extensions of multiple-alignment formats ``sinkalign msa`` does not write: refused, not
#: written as aligned FASTA under their name (an A2M reader rejects a lower-case row there)
MSA_UNWRITTEN = {".a2m": "an A2M", ".msf": "a GCG MSF", ".pir": "a PIR", ".ali": "a PIR", ".nex": "a NEXUS",
                 ".nexus": "a NEXUS", ".nxs": "a NEXUS", ".selex": "a SELEX", ".slx": "a SELEX", ".mega": "a MEGA",
                 ".meg": "a MEGA", ".emboss": "an EMBOSS"}


def unwritten_msa_format(output) -> None:
    """Refuse an output named as a multiple-alignment format the toolkit does not write (:data:`MSA_UNWRITTEN`)."""
    named = suffix_format(output, MSA_UNWRITTEN)
    if named is not None:
        raise InputError(f"the output {output} is named as {named} file, which sinkalign msa does "
                         f"not write; it writes aligned FASTA (.afa), Clustal (.aln), Stockholm (.sto) and PHYLIP "
                         f"(.phy): name the file so")


def suffix_format(output: str | os.PathLike | None, suffixes: Mapping[str, str]) -> str | None:
    """The format ``output``'s extension names in ``suffixes`` (case-insensitive, through a ``.gz``), or None."""
    if output is None or str(output) == "-" or hasattr(output, "write"):
        return None
    path = Path(output)
    suffix = path.suffix.lower()
    if suffix == ".gz":
        suffix = Path(path.stem).suffix.lower()
    return suffixes.get(suffix)


def output_format(output, fmt: str | None, default: str, suffixes: Mapping[str, str]) -> str:
    """``fmt`` where given, else the format ``output``'s extension names, else ``default``.

    Raises:
        InputError: ``fmt`` is given and the extension names another format (``-o x.bam
            --format tsv``): the file would hold one format under another's name.
    """
    named = suffix_format(output, suffixes)
    if fmt is None:
        if named is None and output is not None and str(output) != "-" and not hasattr(output, "write"):
            name = Path(output).name.lower().removesuffix(".gz")
            if Path(name).suffix and not name.startswith("."):
                log.warning("the extension %s of %s names no format: writing %s (--format, fmt= in Python, "
                            "chooses another)", Path(name).suffix, output, default)
        return named or default
    if named is not None and named != fmt:
        raise InputError(f"the output {output} is named as a {named} file, and the format asked for is {fmt}: "
                         f"leave the format out or give {named} (--format {named}, fmt={named!r}), or name the "
                         "file otherwise")
    return fmt
