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


def embedder_from_config(config: dict, *, feature_dim: int | None = None, **options) -> Embedder:
    """Rebuild the embedder that produced ``config`` (from :meth:`Embedder.config`), checking it matches.

    ``options`` supply what a config does not hold (for ESM-2: ``weights``,
    ``device``, ``cache_dir``, ...). The rebuilt embedder's config must equal
    ``config`` exactly, so a checkpoint is never paired with other weights.
    ``feature_dim``: the width the caller (a model) expects, named in the error when
    other ESM-2 weights are given.

    Raises:
        InputError: no ``name`` in ``config``, or the rebuilt embedder differs: for other
            ESM-2 weights the message names the file, its sha256, depth and width and the
            recorded ones; otherwise the differing keys are listed (a ValueError).
        MissingFileError: ESM-2 weights that cannot be found; a FileNotFoundError.
    """
    if not isinstance(config, dict) or "name" not in config:
        raise InputError(f"config={config!r} must be a dict with a 'name' (from Embedder.config())")
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
        if name == "esm2" and "weights_sha256" in diff:
            raise InputError(_other_esm2_weights(config, got, embedder, feature_dim))
        raise InputError(
            f"the rebuilt {name!r} embedder differs from the recorded one in {diff}: "
            f"recorded {json.dumps({k: config.get(k) for k in diff})}, got {json.dumps({k: got.get(k) for k in diff})}"
        )
    return embedder


def _other_esm2_weights(config: dict, got: dict, embedder, feature_dim: int | None) -> str:
    """Why ESM-2 weights whose sha256 is not the recorded one are refused, in words: the file,
    its depth and width against the model's (where they can be told), and both hashes."""
    from sinkalign.align.embed.esm2 import ESM2_DIMS, checkpoint_shape
    from sinkalign.errors import SinkalignError

    path = embedder.weights_path
    recorded = config.get("model") or "an unnamed ESM-2 model"
    layers_rec, width_rec = ESM2_DIMS.get(config.get("model"), (None, None))
    width_rec = feature_dim if feature_dim else width_rec
    try:
        layers, width = checkpoint_shape(path)
        unreadable = None
    except SinkalignError as err:
        layers = width = None
        unreadable = str(err).removeprefix(f"{path}: ")
    hashes = (f"sha256 {str(got.get('weights_sha256'))[:16]}..., the model records "
              f"{str(config.get('weights_sha256'))[:16]}... of {recorded}")
    msg = f"the ESM-2 weights {path} are not the ones the model was trained with ({hashes})"
    if unreadable is not None:
        msg += f"; the file cannot be read either: {unreadable}"
    elif width_rec is not None and width != width_rec:
        msg += (f": they give {width}-dim features from {layers} layers, the model takes {width_rec}-dim ones"
                + (f" ({layers_rec} layers)" if layers_rec is not None else ""))
    elif layers_rec is not None and layers != layers_rec:
        msg += f": they have {layers} layers, {recorded} has {layers_rec}"
    else:
        msg += f": they have {layers} layers of width {width}, but other parameters"
    return msg + f"; give the {recorded} weights it was trained with (--esm-weights FILE)"


def embedding_name(embedder: Embedder) -> str:
    """Canonical JSON of ``embedder.config()``: the ``name`` stored with shard embeddings."""
    return json.dumps(embedder.config(), sort_keys=True, separators=(",", ":"))
