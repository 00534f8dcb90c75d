"""The aligner: decoding transport plans into alignments, classical baselines, accuracy metrics."""

from sinkalign.align.baselines import (
    BaselineAlignment,
    Scoring,
    Throughput,
    align_pair,
    align_pairs,
    measure_throughput,
    score_pairs,
)
from sinkalign.align.decode import (
    Alignment,
    AlignmentStats,
    Posteriors,
    alignment_columns,
    alignment_stats,
    cigar,
    mea_align,
    mea_from_posteriors,
    plan_posteriors,
    to_gapped,
)
from sinkalign.align.metrics import (
    PairScores,
    binned_table,
    macro_average,
    micro_average,
    pair_scores,
    percent_identity,
    render_table,
)

__all__ = [
    "Alignment",
    "AlignmentStats",
    "BaselineAlignment",
    "PairScores",
    "Posteriors",
    "Scoring",
    "Throughput",
    "align_pair",
    "align_pairs",
    "alignment_columns",
    "alignment_stats",
    "binned_table",
    "cigar",
    "macro_average",
    "mea_align",
    "mea_from_posteriors",
    "measure_throughput",
    "micro_average",
    "pair_scores",
    "percent_identity",
    "plan_posteriors",
    "render_table",
    "score_pairs",
    "to_gapped",
]
