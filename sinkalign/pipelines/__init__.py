"""Pipelines: FASTA in, tables, figures and reports out (GC profiles, ...)."""

from sinkalign.pipelines.gc_profile import (
    ContinuationComparison,
    GCProfile,
    GCProfileOutputs,
    RecordSummary,
    compare_continuations,
    continuation_description,
    gc_profile,
    gc_trajectory,
    plot_overlay,
    plot_profile,
    run_gc_profile,
    trajectory_correlation,
    write_overlay_tsv,
    write_report,
    write_tsv,
)

__all__ = [
    "ContinuationComparison",
    "GCProfile",
    "GCProfileOutputs",
    "RecordSummary",
    "compare_continuations",
    "continuation_description",
    "gc_profile",
    "gc_trajectory",
    "plot_overlay",
    "plot_profile",
    "run_gc_profile",
    "trajectory_correlation",
    "write_overlay_tsv",
    "write_report",
    "write_tsv",
]
