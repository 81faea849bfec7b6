"""The repository reads as a product: no words of how it was made, small
modules, a README an operator can read through.

Fast tier: reads tracked files only (``git ls-files``), no model, no server.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

#: Words that speak of how the work was organised rather than of the product.
HOW_IT_WAS_MADE = re.compile(r"\bsession [0-9]|\bissue [0-9]|\bturn [0-9]", re.IGNORECASE)  # not "tissue 3-"
#: Third-party text kept as data: the corpora in data/ and the stored model
#: inputs and outputs drawn from them (a Cochrane abstract cites the journal
#: issue that first published a review).
THIRD_PARTY_TEXT = ("data/",)
STORED_TEXT_SUFFIXES = (".jsonl",)
MAX_MODULE_LINES = 600
MAX_README_LINES = 400


def tracked_files() -> list[Path]:
    """Every file git tracks or would add (untracked, not ignored), as paths under ROOT."""
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
        cwd=ROOT, check=True, capture_output=True).stdout.decode().split("\0")
    return [ROOT / name for name in listed if name and (ROOT / name).is_file()]


def test_no_file_speaks_of_how_the_work_was_organised():
    hits = []
    for path in tracked_files():
        rel = path.relative_to(ROOT).as_posix()
        if rel.startswith(THIRD_PARTY_TEXT) or rel.endswith(STORED_TEXT_SUFFIXES):
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue  # images and other binary files
        hits += [f"{rel}:{number}: {line.strip()[:100]}"
                 for number, line in enumerate(text.splitlines(), 1) if HOW_IT_WAS_MADE.search(line)]
    assert hits == []


def test_the_check_finds_such_words():
    assert HOW_IT_WAS_MADE.search(f"as measured in Session {12}")
    assert HOW_IT_WAS_MADE.search(f"see issue {48}")
    assert HOW_IT_WAS_MADE.search(f"in turn {3}")
    assert not HOW_IT_WAS_MADE.search("each turn of the conversation; a session cookie")


def test_no_module_of_the_product_is_over_600_lines():
    long = {path.relative_to(ROOT).as_posix(): lines for path in tracked_files()
            if path.suffix == ".py" and path.relative_to(ROOT).parts[0] in ("clinical", "inference")
            and (lines := len(path.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES}
    assert long == {}


def test_the_readme_is_a_guide_of_at_most_400_lines():
    assert len((ROOT / "README.md").read_text(encoding="utf-8").splitlines()) <= MAX_README_LINES
