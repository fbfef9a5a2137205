"""Remove from an assembled Lambda layer the distributions that no shipped code imports (shared/Makefile `LAYER_PRUNE`).

The layer installs the pins of requirements.txt with their dependencies, as pip resolves them; some of those are
required by a package for a part of it gpuwaste never imports. Each named distribution is removed with the files
its RECORD lists inside the layer and its console scripts in `bin/`; naming one the layer does not hold is an
error (a pin changed: look again at what it pulls in). tests/unit/test_layer.py imports every Lambda handler with
the pruned distributions blocked.

Usage: python layer_prune.py TARGET DIST [DIST ...]   (TARGET: the layer's `python/` directory)
"""

from __future__ import annotations

import sys
from importlib.metadata import distributions
from pathlib import Path


def _key(name: str) -> str:
    return name.lower().replace("-", "_").replace(".", "_")


def prune(target: Path, names: list[str]) -> list[str]:
    """Remove the distributions `names` from the layer directory `target`; return what was removed ("name version").

    Raises:
        SystemExit: a name is not installed in `target`.
    """
    root = target.resolve()
    wanted = {_key(n): n for n in names}
    removed: list[str] = []
    dirs: set[Path] = set()
    for dist in distributions(path=[str(root)]):
        name, version = dist.metadata["Name"], dist.version  # read before its METADATA is removed
        key = _key(name)
        if key not in wanted:
            continue
        del wanted[key]
        scripts = [root / "bin" / ep.name for ep in dist.entry_points if ep.group == "console_scripts"]
        files = [Path(str(dist.locate_file(f))).resolve() for f in dist.files or ()]
        for path in [*scripts, *files]:
            if path.is_relative_to(root) and (path.is_file() or path.is_symlink()):
                path.unlink()
                dirs.update(p for p in path.parents if p.is_relative_to(root) and p != root)
        removed.append(f"{name} {version}")
    if wanted:
        raise SystemExit(f"layer_prune: not in the layer: {', '.join(sorted(wanted.values()))}")
    for d in sorted(dirs, key=lambda p: len(p.parts), reverse=True):  # deepest first: parents empty after children
        if d.is_dir() and not any(d.iterdir()):
            d.rmdir()
    return removed


if __name__ == "__main__":
    if len(sys.argv) < 3:
        raise SystemExit(__doc__)
    print("pruned from the layer: " + ", ".join(prune(Path(sys.argv[1]), sys.argv[2:])))
