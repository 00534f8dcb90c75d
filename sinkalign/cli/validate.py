"""``sinkalign validate``: the paper's validation harness as commands researchers can run."""

from __future__ import annotations

import json
from pathlib import Path

import click
from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from sinkalign.cli.options import FiniteFloatRange, OutputPath
from sinkalign.kernels.cache import CHOICES as CACHE_CHOICES
from sinkalign.utils import is_stdio, open_output

_console = Console()  # standard error instead with --json - (see _json_output)


def _enable_x64() -> None:
    import jax

    jax.config.update("jax_enable_x64", True)


def _fmt(x) -> str:
    if x is None:
        return "-"
    if isinstance(x, bool):
        return "yes" if x else "NO"
    if isinstance(x, float):
        return f"{x:.2e}"
    return str(x)


_TEXT_COLUMNS = ("case", "mode")


def _table(title: str, rows: list[dict], columns: list[str], *, console: Console | None = None) -> list:
    """Tables of ``rows`` that fit ``console``'s width without truncating a number.

    One table when it fits; otherwise one table per ``case`` (the case as its title), so no
    cell is ever cut to ``0.000e...`` at 80 columns.
    """
    console = console or _console
    cells = [[_fmt(row.get(c)) for c in columns] for row in rows]
    widths = [max([len(c)] + [len(r[k]) for r in cells]) for k, c in enumerate(columns)]
    if _width(widths) <= console.width or "case" not in columns:
        return [_one_table(title, columns, cells)]
    k = columns.index("case")
    rest = columns[:k] + columns[k + 1 :]
    rest_widths = widths[:k] + widths[k + 1 :]
    out: list = [Text(title, style="italic", justify="center")]
    groups: dict[str, list[list[str]]] = {}
    for r in cells:
        groups.setdefault(r[k], []).append(r[:k] + r[k + 1 :])
    for case, group in groups.items():
        # still too wide: the numbers in slices, each beside the row's keys (R, mode, ...)
        for part, slice_ in enumerate(_column_slices(rest, rest_widths, console.width)):
            out.append(_one_table(case if part == 0 else "", [rest[j] for j in slice_],
                                  [[r[j] for j in slice_] for r in group]))
    return out


#: columns that say which row it is: repeated in every slice of a table too wide for the console
_KEY_COLUMNS = ("case", "mode", "R", "seed", "L")


def _width(widths: list[int]) -> int:
    """The printed width of a table of columns this wide (rich's SIMPLE_HEAD box: two spaces a column)."""
    return sum(widths) + 2 * len(widths) + 2


def _column_slices(columns: list[str], widths: list[int], width: int) -> list[list[int]]:
    """Indices of ``columns`` in slices that each fit ``width``: the key columns in every
    slice, the others added in order while they fit (at least one a slice)."""
    keys = [j for j, c in enumerate(columns) if c in _KEY_COLUMNS]
    slices, current = [], list(keys)
    for j in (j for j in range(len(columns)) if j not in keys):
        if len(current) > len(keys) and _width([widths[i] for i in current + [j]]) > width:
            slices.append(current)
            current = list(keys)
        current.append(j)
    slices.append(current)
    return [sorted(s) for s in slices]


def _one_table(title: str, columns: list[str], cells: list[list[str]]) -> Table:
    table = Table(title=title, box=box.SIMPLE_HEAD, title_justify="left")
    for col in columns:
        if col in _TEXT_COLUMNS:
            table.add_column(col, justify="left", overflow="fold")
        else:  # numbers keep their full width; a long header wraps instead
            widest = max((len(r[columns.index(col)]) for r in cells), default=1)
            table.add_column(col, justify="right", min_width=widest, overflow="fold")
    for row in cells:
        table.add_row(*row)
    return table


def _print(tables: list) -> None:
    for t in tables:
        _console.print(t)


def _json_output(json_path: Path | None, overwrite: bool) -> None:
    """Before any work: refuse an existing --json file unless ``overwrite`` (as every command
    does), and with ``--json -`` print the tables and messages on standard error, leaving
    standard output to the JSON."""
    global _console
    from sinkalign.pipelines.runner import check_outputs

    check_outputs([(json_path, "--json")], overwrite, [])
    _console = Console(stderr=is_stdio(json_path))


def _emit(result: dict, json_path: Path | None) -> None:
    """Write ``result`` as JSON to ``json_path`` (atomically), or to standard output for ``-``."""
    if json_path is None:
        return
    with open_output(json_path) as handle:
        handle.write(json.dumps(result, indent=2) + "\n")
    if not is_stdio(json_path):
        _console.print(f"wrote {json_path}")


_dtype_option = click.option("--dtype", type=click.Choice(["float64", "float32"]), default="float64",
                             show_default=True, help="Floating-point precision of the whole check.")
_std_option = click.option("--qk-std", type=FiniteFloatRange(min=0, min_open=True), default=1.0, show_default=True,
                           help="Standard deviation of the synthetic q and k entries (scores ~ N(0, std^4)).")
_json_option = click.option("--json", "json_path", type=OutputPath(dir_okay=False, allow_dash=True, path_type=Path),
                            help="Also write the table as JSON to this file (atomically; '-': standard output, the "
                                 "tables then go to standard error).")
_overwrite_option = click.option("--overwrite", is_flag=True,
                                 help="Replace an existing --json file. Without it an existing file is an error.")


@click.group()
def validate() -> None:
    """Validation harness: exactness, tail depth, certificates, orbit, contraction, kernels."""


EXACTNESS_TOLERANCE = {"float64": 1e-12, "float32": 1e-5}  # measured: 1.5e-14, 1.3e-6
KERNEL_TOLERANCE = {"ieee": 1e-5, "tf32x3": 1e-4, "tf32": 1e-2}  # float32 kernels vs the float64 reference


def _verdict(result: dict, tolerance: float, json_path: Path | None) -> None:
    """Write the result (with its tolerance and verdict), then exit 1 when its worst deviation
    exceeds ``tolerance``: a check a script or CI can act on."""
    worst = result["max_abs_deviation"]
    passed = bool(worst <= tolerance)
    result.update(tolerance=tolerance, passed=passed)
    _emit(result, json_path)
    if passed:
        _console.print(f"within the tolerance {tolerance:.0e}: passed")
        return
    _console.print(f"FAILED: max_abs_deviation {worst:.3e} exceeds the tolerance {tolerance:.0e}")
    raise click.exceptions.Exit(1)


_tolerance_option = click.option(
    "--tolerance", type=FiniteFloatRange(min=0, min_open=True), default=None,
    help="Largest max_abs_deviation that passes (exit status 1 above it); default: per precision.")


@validate.command()
@_dtype_option
@_json_option
@_overwrite_option
@click.option("--quick", is_flag=True, help="Only the first three cases (a smoke test).")
@_tolerance_option
def exactness(dtype: str, json_path: Path | None, overwrite: bool, quick: bool, tolerance: float | None) -> None:
    """Every backward mode vs autodiff of the same centered surrogate (R in {1, 2, 4})."""
    _json_output(json_path, overwrite)
    _enable_x64()
    from sinkalign.sinkhorn import validation

    cases = validation.EXACTNESS_CASES[:3] if quick else validation.EXACTNESS_CASES
    with _console.status("compiling and running the sweep") as status:
        result = validation.exactness(
            dtype, cases=cases, progress=lambda r: status.update(f"{r['case']} R={r['R']} {r['mode']}")
        )
    _print(_table(f"backward modes vs autodiff ({dtype}, T=15, eps=1)", result["rows"],
                          ["case", "R", "mode", "dq", "dk", "dv", "d_dustbin", "d_marginals", "forward",
                           "grad_scale"]))
    _console.print(f"max_abs_deviation = {result['max_abs_deviation']:.3e}")
    _verdict(result, EXACTNESS_TOLERANCE[dtype] if tolerance is None else tolerance, json_path)


@validate.command("tail-depth")
@_dtype_option
@_json_option
@_overwrite_option
@_std_option
def tail_depth(dtype: str, json_path: Path | None, overwrite: bool, qk_std: float) -> None:
    """Stopped-base gradient vs full backprop through the base (L=512, d=8, T=15, W=256)."""
    _json_output(json_path, overwrite)
    _enable_x64()
    from sinkalign.sinkhorn import validation

    with _console.status("full backprop through the base for R in 0, 1, 2, 4"):
        result = validation.tail_depth(dtype, qk_std=qk_std)
    _print(_table(f"surrogate vs full gradient, worst over seeds 0,1,2 ({dtype})", result["rows"],
                          ["R", "worst_max_abs_gap", "paper"]))
    _console.print(f"Q, K, V, G: {result['distribution']}")
    _emit(result, json_path)


@validate.command()
@_dtype_option
@_json_option
@_overwrite_option
@_std_option
@click.option("--tau", type=FiniteFloatRange(min=0, min_open=True), default=1e-5, show_default=True,
              help="Certified-depth tolerance (max-abs).")
def certificate(dtype: str, json_path: Path | None, overwrite: bool, qk_std: float, tau: float) -> None:
    """A-posteriori bias certificate residual and certified depth (L=128, d=8, T=15, W=128)."""
    _json_output(json_path, overwrite)
    _enable_x64()
    from sinkalign.sinkhorn import validation

    with _console.status("certificate VJPs"):
        result = validation.certificate(dtype, tau=tau, qk_std=qk_std)
    _print(_table(f"Proposition 5 certificate ({dtype})", result["rows"],
                          ["seed", "R", "gap", "certificate_norm", "eta_norm", "residual"]))
    _print(_table(f"Corollary 2: certified depth at tau={tau:g}", result["selection"], ["seed", "selected_R"]))
    _console.print(f"max_residual = {result['max_residual']:.3e}")
    _emit(result, json_path)


@validate.command()
@click.option("--dtype", type=click.Choice(["float64", "float32"]), default="float32", show_default=True,
              help="Floating-point precision of the whole check.")
@_json_option
@_overwrite_option
@_std_option
def orbit(dtype: str, json_path: Path | None, overwrite: bool, qk_std: float) -> None:
    """Rebuild all 2(T+R) base and tail plans from the final plan (T=15, R=2, L=128)."""
    _json_output(json_path, overwrite)
    _enable_x64()
    from sinkalign.sinkhorn import validation

    result = validation.orbit(dtype, qk_std=qk_std)
    _print(_table(f"Proposition 6 orbit reconstruction ({dtype}); paper 1.91e-6", result["rows"],
                          ["seed", "n_plans", "max_log_error"]))
    _emit(result, json_path)


@validate.command()
@_dtype_option
@_json_option
@_overwrite_option
def contraction(dtype: str, json_path: Path | None, overwrite: bool) -> None:
    """Projective contraction certificate vs observed contraction; per-block figures."""
    _json_output(json_path, overwrite)
    _enable_x64()
    from sinkalign.sinkhorn import validation

    result = validation.contraction(dtype)
    _print(_table(f"Proposition 4 on dense positive problems ({dtype})", result["rows"],
                          ["L", "eps", "rho_h", "rho_range", "max_observed_ratio", "bound_holds"]))
    b = result["blocks"]
    _print(_table(f"per-128-row blocks, L={b['L']}, W={b['W']}, eps=1 (synthetic)", [b],
                          ["n_blocks", "median_rho_h", "max_rho_h", "median_rho_range", "max_rho_range"]))
    _emit(result, json_path)


@validate.command("kernels")
@click.option("--backend", type=click.Choice(["pallas", "triton"]), required=True, help="Kernel family to check.")
@click.option("--interpret", is_flag=True,
              help="Run the kernels in the Pallas / Triton interpreter on the CPU (sets TRITON_INTERPRET=1 "
                   "before triton is imported). Without it the kernels run natively (needs a GPU/TPU).")
@_json_option
@_overwrite_option
@click.option("--quick", is_flag=True, help="Only the first three cases (a smoke test).")
@click.option("--block", type=click.IntRange(min=8), default=None,
              help="Tile size (queries and keys); default 16 in the interpreter, the backend's default natively.")
@click.option("--long", "long_", is_flag=True,
              help="Also check forward agreement of the blockwise reference and the Pallas kernels with a plain "
                   "dense computation at long lengths (pallas only).")
@click.option("--long-lengths", type=click.IntRange(min=1), multiple=True, default=(512, 2048, 8192, 16384),
              show_default=True, help="Lengths of the --long check (repeat the option).")
@click.option("--long-band", type=click.IntRange(min=1), default=256, show_default=True,
              help="Band half-width W of the --long check.")
@click.option("--precision", type=click.Choice(["ieee", "tf32x3", "tf32"]), default="ieee", show_default=True,
              help="Float32 dots of the kernels: exact, or (natively on a GPU) three or one TF32 tensor-core passes.")
@click.option("--cache-scores", type=click.Choice(list(CACHE_CHOICES)), default="auto", show_default=True,
              help="The kernels' score cache: auto is their default (cached with exact float32 dots); on or off "
                   "checks one path whatever the dots.")
@_tolerance_option
def kernels(backend: str, interpret: bool, json_path: Path | None, overwrite: bool, quick: bool, block: int | None,
            long_: bool, long_lengths: tuple[int, ...], long_band: int, precision: str, cache_scores: str,
            tolerance: float | None) -> None:
    """Pallas or Triton kernels (float32) vs the float64 JAX reference: forward and gradients."""
    if long_ and backend != "pallas":
        raise click.UsageError("--long is implemented for --backend pallas")
    if block is not None and block & (block - 1):
        raise click.BadParameter(f"{block=} must be a power of two", param_hint="--block")
    _json_output(json_path, overwrite)
    if backend == "triton":
        import importlib.util

        from sinkalign.errors import DependencyError, require

        require("torch", "torch", "sinkalign validate kernels --backend triton")
        if importlib.util.find_spec("triton") is None:  # not imported here: TRITON_INTERPRET comes first
            raise DependencyError("sinkalign validate kernels --backend triton needs triton, which is not "
                                  "installed; install the 'torch' extra: pip install 'sinkalign[torch]'")
    _enable_x64()
    from sinkalign.kernels import validation as kval

    kval.check_backend(backend, interpret)  # InputError (no GPU for native kernels): one 'Error:' line
    if precision != "ieee" and interpret:
        raise click.UsageError(f"--precision {precision} (TF32 tensor-core dots) needs native kernels on a GPU; "
                               "the interpreters compute float32 dots exactly")
    cases = kval.KERNEL_CASES[:3] if quick else kval.KERNEL_CASES
    cache = CACHE_CHOICES[cache_scores]
    mode = "interpreter" if interpret else "native"
    with _console.status(f"{backend} ({mode}) vs reference") as status:
        result = kval.kernels(backend, interpret, cases=cases, block=block, precision=precision, cache_scores=cache,
                              progress=lambda r: status.update(f"{r['case']}: {r['max_abs_deviation']:.2e}"))
    dots = ("" if precision == "ieee" else f", {precision} dots") + (
        "" if cache_scores == "auto" else f", score cache {cache_scores}")
    _print(_table(f"{backend} ({mode}, float32{dots}) vs JAX reference (float64, autodiff)", result["rows"],
                      ["case", "O", "dq", "dk", "dv", "d_dustbin", "d_marginals", "max_abs_deviation", "seconds"]))
    _console.print(f"max_abs_deviation = {result['max_abs_deviation']:.3e}")
    if long_:
        with _console.status("long-length forward agreement") as status:
            long_result = kval.long_forward(tuple(long_lengths), band=long_band, interpret=interpret,
                                            cache_scores=cache,
                                            progress=lambda r: status.update(f"L={r['L']} done"))
        _print(_table(f"forward vs dense computation (W={long_band}, d=16, T=15, float32; dense "
                          f"{long_result['dense_dtype']})", long_result["rows"],
                          ["L", "reference_vs_dense", "kernel_vs_dense", "dense_seconds", "reference_seconds",
                           "kernel_seconds"]))
        _console.print(f"long: worst deviation = {long_result['max_abs_deviation']:.3e}")
        result["long"] = long_result
    _verdict(result, KERNEL_TOLERANCE[precision] if tolerance is None else tolerance, json_path)
