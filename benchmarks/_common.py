"""Shared helpers for the benchmark scripts: machine description, timing, JSON output."""

from __future__ import annotations

import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sinkalign.utils import atomic_write_text


def machine() -> dict:
    import jax

    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "cores_usable": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "cpu_quota": cpu_quota(),
        "blas": blas_threads(),
        "python": platform.python_version(),
        "jax": jax.__version__,
        "jax_backend": jax.default_backend(),
        "devices": [str(d) for d in jax.devices()],
    }


def cpu_quota() -> float | None:
    """CPUs this process's cgroup may use at once (its CFS quota over its period; v2 or v1), or
    None without a limit: a container can hold fewer CPUs than its affinity mask lists."""
    for path, parse in (("/sys/fs/cgroup/cpu.max", lambda text: text.split()),
                        ("/sys/fs/cgroup/cpu/cpu.cfs_quota_us", lambda text: [text.strip(), Path(
                            "/sys/fs/cgroup/cpu/cpu.cfs_period_us").read_text().strip()])):
        try:
            quota, period = parse(Path(path).read_text())[:2]
        except (OSError, ValueError):
            continue
        return None if quota in ("max", "-1") else int(quota) / int(period)
    return None


def blas_threads() -> list | str:
    """The BLAS libraries NumPy and SciPy loaded, with their thread counts (threadpoolctl), or
    why they are not known: an aligner's threads and worker processes run BLAS on one thread
    only where threadpoolctl is importable."""
    try:
        import numpy  # noqa: F401  (loads its BLAS)
        from threadpoolctl import threadpool_info
    except ImportError as exc:
        return f"threadpoolctl not importable: {exc}"
    return [{k: info.get(k) for k in ("internal_api", "version", "num_threads", "threading_layer")}
            for info in threadpool_info() if info.get("user_api") == "blas"]


def time_fn(fn, *args, reps: int = 10, warmup: int = 1) -> dict:
    """Mean, median and minimum wall time (s) of fn(*args) after compilation/warmup."""
    import jax

    for _ in range(warmup):
        jax.block_until_ready(fn(*args))
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        jax.block_until_ready(fn(*args))
        times.append(time.perf_counter() - t0)
    return {"mean_s": statistics.fmean(times), "median_s": statistics.median(times), "min_s": min(times),
            "reps": reps}


def xla_memory(jitted, *args) -> dict:
    """Peak-memory figures from XLA's buffer assignment of the compiled program (bytes)."""
    compiled = jitted.lower(*args).compile()
    m = compiled.memory_analysis()
    if m is None:
        return {}
    return {
        "temp_bytes": int(m.temp_size_in_bytes),
        "argument_bytes": int(m.argument_size_in_bytes),
        "output_bytes": int(m.output_size_in_bytes),
        "peak_bytes": int(m.temp_size_in_bytes + m.argument_size_in_bytes + m.output_size_in_bytes),
    }


def pair_groups(sources, identities) -> dict[str, list[int]]:
    """Index lists of the groups the aligner benchmarks report, from each pair's source
    (``"pfam"`` or a structural set) and percent identity: pooled, structural, structural below
    20% identity, Pfam."""
    struct = [i for i, s in enumerate(sources) if s != "pfam"]
    return {"all": list(range(len(sources))), "structural": struct,
            "structural <20%": [i for i in struct if identities[i] < 20],
            "pfam": [i for i, s in enumerate(sources) if s == "pfam"]}


def _flat(x) -> bool:
    """A list of scalars, or of lists of scalars: written on one line."""
    scalar = lambda v: not isinstance(v, (dict, list))  # noqa: E731
    return isinstance(x, list) and all(scalar(v) or (isinstance(v, list) and all(map(scalar, v))) for v in x)


def _dumps(x, level: int = 0) -> str:
    """``json.dumps(x, indent=2)``, except that flat lists (per-pair counts, ...) take one line."""
    pad, inner = "  " * level, "  " * (level + 1)
    if isinstance(x, dict) and x:
        items = (f"{inner}{json.dumps(str(k))}: {_dumps(v, level + 1)}" for k, v in x.items())
        return "{\n" + ",\n".join(items) + "\n" + pad + "}"
    if isinstance(x, list) and x and not _flat(x):
        return "[\n" + ",\n".join(inner + _dumps(v, level + 1) for v in x) + "\n" + pad + "]"
    return json.dumps(x, separators=(", ", ": "))


def write_json(path: str | Path, payload: dict) -> None:
    atomic_write_text(path, _dumps(payload) + "\n")


def mib(x: float | None) -> str:
    return "-" if x is None else f"{x / 2**20:.1f}"


def replace_sentence(text: str, start: str, sentence: str) -> str:
    """``text`` without its sentence that begins with ``start`` (up to the next ``". "`` or the
    end), and with ``sentence`` appended: a model's provenance keeps one note per fit."""
    at = text.find(" " + start) if not text.startswith(start) else 0
    if at >= 0:
        end = text.find(". ", at + 1)
        text = text[:at] + ("" if end < 0 else text[end + 1:])
    return f"{text.strip()} {sentence}".strip()


def export_with_msa_calibration(source, out, cal, start: str, sentence: str) -> None:
    """Write the aligner ``source`` (its weights, pairwise calibration and E-value null) to
    ``out`` with the multiple-alignment calibration ``cal``, its provenance's note that begins
    with ``start`` replaced by ``sentence`` (:func:`replace_sentence`)."""
    from sinkalign.align.checkpoints import export_model

    export_model(out, source.params, source.config, provenance=replace_sentence(source.provenance, start, sentence),
                 calibration=source.calibration.to_dict(),
                 significance=None if source.significance is None else source.significance.to_dict(),
                 msa_calibration=cal.to_dict())


DNA_LETTERS = "ACGT"


def random_dna(rng, n: int) -> str:
    """``n`` uniform random bases from ``rng`` (a numpy Generator)."""
    return "".join(rng.choice(list(DNA_LETTERS), n))


def substitute_bases(rng, seq: str, rate: float) -> str:
    """``seq`` with each base replaced, with probability ``rate``, by one of the three others."""
    out = list(seq)
    for k, c in enumerate(out):
        if rng.random() < rate:
            out[k] = rng.choice([b for b in DNA_LETTERS if b != c])
    return "".join(out)
