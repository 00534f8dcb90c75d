"""Embedders by name: ``get_embedder("esm2" | "builtin", **options)``."""

from __future__ import annotations

import dataclasses
import json

from sinkalign.align.embed.base import Embedder
from sinkalign.errors import InputError

__all__ = ["EMBEDDERS", "embedder_from_config", "embedding_name", "get_embedder"]

#: Registered names and what they are.
EMBEDDERS = {
    "builtin": "fixed BLOSUM62 / one-hot / physico-chemical features for protein and DNA (D=53, no download)",
    "esm2": "fair-esm ESM-2 protein language model (local weights or the torch hub cache; default esm2_t6_8M_UR50D)",
}


def _classes():
    from sinkalign.align.embed.builtin import BuiltinConfig, BuiltinEmbedder
    from sinkalign.align.embed.esm2 import ESM2Config, ESM2Embedder

    return {"builtin": (BuiltinEmbedder, BuiltinConfig), "esm2": (ESM2Embedder, ESM2Config)}


def get_embedder(name: str, **options) -> Embedder:
    """Build the embedder registered as ``name`` with keyword ``options``.

    Options are the fields of :class:`~sinkalign.align.embed.builtin.BuiltinConfig` or
    :class:`~sinkalign.align.embed.esm2.ESM2Config`.

    Raises:
        InputError: unknown name (the valid ones are listed), unknown option (the valid
            ones are listed) or a bad option value; a ValueError.
        MissingFileError: ESM-2 weights that cannot be found; a FileNotFoundError.
    """
    if name not in EMBEDDERS:
        raise InputError(f"embedder {name!r} is not one of {tuple(sorted(EMBEDDERS))}")
    cls, cfg_cls = _classes()[name]
    fields = [f.name for f in dataclasses.fields(cfg_cls)]
    unknown = sorted(set(options) - set(fields))
    if unknown:
        raise InputError(f"unknown option(s) {unknown} for embedder {name!r}; valid options: {fields}")
    return cls(cfg_cls(**options))


def embedder_from_config(config: dict, **options) -> Embedder:
    """Rebuild the embedder that produced ``config`` (from :meth:`Embedder.config`), checking it matches.

    ``options`` supply what a config does not hold (for ESM-2: ``weights``,
    ``device``, ``cache_dir``, ...). The rebuilt embedder's config must equal
    ``config`` exactly, so a checkpoint is never paired with other weights.

    Raises:
        ValueError: no ``name`` in ``config``, or the rebuilt embedder differs (the
            differing keys are listed).
    """
    if not isinstance(config, dict) or "name" not in config:
        raise ValueError(f"config={config!r} must be a dict with a 'name' (from Embedder.config())")
    name = config["name"]
    if name == "builtin":
        options = {"alphabet": config.get("alphabet", "auto"), **options}
    elif name == "esm2":
        options = {
            "model": config.get("model"),
            "layer": config.get("layer", -1),
            "window": config.get("window", 1022),
            "overlap": config.get("overlap", 256),
            "fp16": config.get("fp16", False),
            **options,
        }
    embedder = get_embedder(name, **options)
    got = embedder.config()
    if got != config:
        diff = sorted(k for k in set(got) | set(config) if got.get(k) != config.get(k))
        raise ValueError(
            f"the rebuilt {name!r} embedder differs from the recorded one in {diff}: "
            f"recorded {json.dumps({k: config.get(k) for k in diff})}, got {json.dumps({k: got.get(k) for k in diff})}"
        )
    return embedder


def embedding_name(embedder: Embedder) -> str:
    """Canonical JSON of ``embedder.config()``: the ``name`` stored with shard embeddings."""
    return json.dumps(embedder.config(), sort_keys=True, separators=(",", ":"))
