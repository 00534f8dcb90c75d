"""The registry of operator backends: the layer that lets kernels plug into the operator.

:func:`sinkalign.sinkhorn.core.tail_operator` runs the pure-JAX reference for
``SinkhornConfig(backend="reference")`` and, for any other ``backend``, the tail operator that a
kernel package registered under that name. The operator never imports a kernel package: the
package registers itself when imported (``import sinkalign.kernels.pallas`` registers
``"pallas"``), which keeps the layers pointing one way (kernels -> sinkhorn).

A registered tail operator has the signature of :func:`sinkalign.sinkhorn.core.tail_operator`:
``fn(q, k, v, q_valid, k_valid, log_a, log_b, support, cfg) -> O``.
"""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["KNOWN", "register_tail_operator", "registered", "tail_operator_for"]

# backend name -> the module whose import registers it (for the error message only)
KNOWN = {"pallas": "sinkalign.kernels.pallas"}

_TAIL_OPERATORS: dict[str, Callable] = {}


def register_tail_operator(name: str, fn: Callable) -> None:
    """Register ``fn`` as the tail operator of ``SinkhornConfig(backend=name)``."""
    if name == "reference":
        raise ValueError("'reference' is the built-in JAX operator and cannot be replaced")
    if not callable(fn):
        raise TypeError(f"backend {name!r}: {fn!r} is not callable")
    _TAIL_OPERATORS[name] = fn


def registered() -> tuple[str, ...]:
    """Names usable as ``backend`` right now: ``reference`` and every registered backend."""
    return ("reference", *sorted(_TAIL_OPERATORS))


def tail_operator_for(name: str) -> Callable:
    """The tail operator registered as ``name``; a clear error when none is."""
    try:
        return _TAIL_OPERATORS[name]
    except KeyError:
        hint = f" (import {KNOWN[name]} to register it)" if name in KNOWN else ""
        raise ValueError(f"backend={name!r} has no registered backend{hint}; registered: {registered()}") from None
