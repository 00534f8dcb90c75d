"""Write data_manifests/structural_split.json: the leak-free split of ../shared/data.

    python data_manifests/make_structural_split.py ../shared/data

Recomputed and compared by tests/test_structural.py::test_split_manifest_reproduces. See
structural.md for the rule and the counts.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

from sinkalign.io.splits import data_split_manifest
from sinkalign.utils import atomic_write_text

HERE = Path(__file__).resolve().parent


def folder_digests(manifest: dict) -> dict[str, str]:
    """sha256 over the sorted ``path sha256`` lines of each folder's files."""
    out: dict[str, list[str]] = {}
    for path, sha in sorted(manifest["files_sha256"].items()):
        out.setdefault(path.rsplit("/", 1)[0], []).append(f"{path} {sha}\n")
    return {k: hashlib.sha256("".join(v).encode()).hexdigest() for k, v in out.items()}


def main() -> None:
    root = Path(sys.argv[1] if len(sys.argv) > 1 else HERE.parent.parent / "shared" / "data")
    manifest = data_split_manifest(root)
    manifest["folder_sha256"] = folder_digests(manifest)
    atomic_write_text(HERE / "structural_split.json", json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    print(f"{manifest['n_components']} components (largest {manifest['largest_component_items']} items)")
    print("| source | train items / pairs | valid items / pairs | test items / pairs |")
    print("|---|---|---|---|")
    for src, c in manifest["counts"].items():
        print(f"| {src} | " + " | ".join(f"{c[s]['items']} / {c[s]['pairs']}" for s in ("train", "valid", "test"))
              + " |")
    for folder, sha in manifest["folder_sha256"].items():
        n = sum(1 for p in manifest["files_sha256"] if p.rsplit("/", 1)[0] == folder)
        print(f"| {folder}/ | {n} files | {sha} |")


if __name__ == "__main__":
    main()
