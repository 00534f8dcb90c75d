"""The learned model's residue encoder on the numpy engine: time per sequence, with the shipped
GELU (``x * sigmoid(2 u)``, one ``exp``) against the tanh form it replaced (session 18), in one
process, one thread, alternating, best of ``--repeats``; and the largest difference between the
two encodings (they are the same function).

    python benchmarks/encoder_time.py --lengths 100 300 1000
"""

from __future__ import annotations

import argparse
import datetime
import math
import timeit
from pathlib import Path

import numpy as np
from _common import machine, write_json
from threadpoolctl import threadpool_limits

import sinkalign.align.engine as engine
from sinkalign.align.aligner import Aligner

RESULTS = Path(__file__).resolve().parent / "results" / "encoder_time.json"


def gelu_tanh(x: np.ndarray) -> np.ndarray:
    """The form before session 18: ``0.5 x (1 + tanh u)``."""
    inner = x * x
    inner *= 0.044715 * x
    inner += x
    inner *= math.sqrt(2.0 / math.pi)
    np.tanh(inner, out=inner)
    inner += 1.0
    inner *= 0.5
    inner *= x
    return inner


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lengths", type=int, nargs="+", default=[100, 300, 1000])
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--json", default=str(RESULTS))
    args = ap.parse_args()
    shipped = engine._gelu
    encoder = Aligner.load("learned", workers=1)._numpy.encoder
    rows = []
    for length in args.lengths:
        idx = np.random.default_rng(length).integers(0, 20, length)
        number = max(1, 6000 // length)
        best = {"tanh": math.inf, "exp": math.inf}
        with threadpool_limits(1):
            for _ in range(args.repeats):
                for name, fn in (("tanh", gelu_tanh), ("exp", shipped)):
                    engine._gelu = fn
                    best[name] = min(best[name], timeit.timeit(lambda: encoder.context(idx), number=number) / number)
        engine._gelu = gelu_tanh
        before = encoder.context(idx)
        engine._gelu = shipped
        diff = float(np.abs(encoder.context(idx) - before).max())
        rows.append({"length": length, "tanh_ms": 1e3 * best["tanh"], "exp_ms": 1e3 * best["exp"],
                     "ratio": best["tanh"] / best["exp"], "max_abs_diff": diff})
        print(f"L={length}: tanh {1e3 * best['tanh']:.2f} ms, exp {1e3 * best['exp']:.2f} ms, "
              f"{best['tanh'] / best['exp']:.2f}x, largest difference {diff:.1e}")
    write_json(args.json, {"machine": machine(), "date": datetime.date.today().isoformat(), "rows": rows})
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
