"""``python -m bench NAME [ARGS...]``: run the benchmark module ``bench.NAME``.

Every benchmark is a module in ``bench/`` with ``main(argv: list[str]) ->
int | None``; the dispatcher imports ``bench.NAME`` and calls ``main`` with
the remaining arguments, so a new benchmark needs no change here. A module
whose ``main()`` takes no argument reads ``sys.argv``, which is set to
``["bench.NAME", *ARGS]`` for it.
``python -m bench`` alone lists the modules that have a ``main``.

Exit status: the module's return value (0 for ``None``), 2 for an unknown
or invalid name or missing shared data (one line on stderr).
"""

from __future__ import annotations

import importlib
import pkgutil
import re
import sys
from pathlib import Path

from bench.shared_data import SharedDataMissing

_NAME = re.compile(r"[a-z_][a-z0-9_]*")


def available() -> list[str]:
    """Names of the modules in ``bench/`` that define ``main`` (found by
    reading their source, without importing them)."""
    folder = Path(__file__).resolve().parent
    names = []
    for module in pkgutil.iter_modules([str(folder)]):
        if module.ispkg or module.name.startswith("_"):
            continue
        source = (folder / f"{module.name}.py").read_text(encoding="utf-8", errors="replace")
        if re.search(r"^def main\(", source, re.MULTILINE):
            names.append(module.name)
    return sorted(names)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    usage = f"usage: python -m bench NAME [ARGS...]\nNAME: one of {', '.join(available())}"
    if not argv or argv[0] in ("-h", "--help"):
        print(usage)
        return 0 if argv else 2
    name = argv[0]
    if not _NAME.fullmatch(name):
        print(f"bench: invalid benchmark name {name!r}\n{usage}", file=sys.stderr)
        return 2
    try:
        module = importlib.import_module(f"bench.{name}")
    except ModuleNotFoundError as exc:
        if exc.name != f"bench.{name}":
            raise  # the module exists but one of its imports is missing
        print(f"bench: no benchmark named {name!r}\n{usage}", file=sys.stderr)
        return 2
    entry = getattr(module, "main", None)
    if not callable(entry):
        print(f"bench: bench.{name} has no main(argv)\n{usage}", file=sys.stderr)
        return 2
    import inspect

    try:
        if inspect.signature(entry).parameters:
            result = entry(argv[1:])
        else:  # an older module whose main() reads sys.argv itself
            sys.argv = [f"bench.{name}", *argv[1:]]
            result = entry()
    except SharedDataMissing as exc:
        print(f"bench: {exc}", file=sys.stderr)
        return 2
    return int(result or 0)


if __name__ == "__main__":
    raise SystemExit(main())
