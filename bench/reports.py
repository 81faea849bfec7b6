"""Where a benchmark's results go: the figures as ``<name>.json`` and the
readable report as ``<name>.md``, side by side in one folder."""

from __future__ import annotations

import json
from pathlib import Path


def report_write(out: Path, name: str, report: dict, markdown: str) -> Path:
    """Write ``out/<name>.json`` (``report``, indented one space) and
    ``out/<name>.md`` (``markdown``), UTF-8, creating ``out`` if needed.

    Returns:
        The Markdown file's path.

    Raises:
        TypeError: ``report`` holds a value JSON cannot encode.
    """
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{name}.json").write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    path = out / f"{name}.md"
    path.write_text(markdown, encoding="utf-8")
    return path
