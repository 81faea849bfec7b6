"""Where the real clinical text lives: ``$SHARED_DATA_DIR``, by default
``../shared/data`` beside the project (laymaker-dev.csv and the Cochrane
validation pairs; the README's "Test data" says where they come from).

The tests and benchmarks read it; the product never does at run time.
"""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


class SharedDataMissing(FileNotFoundError):
    """A shared data file is not where ``SHARED_DATA_DIR`` points."""


def shared_data_dir() -> Path:
    """``$SHARED_DATA_DIR``, default ``../shared/data`` beside the project."""
    return Path(os.environ.get("SHARED_DATA_DIR") or ROOT.parent / "shared" / "data")


def shared_data_file(name: str) -> Path:
    """The path of ``name`` in the shared data folder.

    Raises:
        SharedDataMissing: the file is not there; the message is one line
            that names the folder and the variable to set.
    """
    path = shared_data_dir() / name
    if not path.is_file():
        raise SharedDataMissing(
            f"shared data missing: {path} not found. The tests and benchmarks read laymaker-dev.csv and "
            f"cochrane-val.* from ../shared/data (see the README's \"Test data\"); set SHARED_DATA_DIR "
            f"to the folder that holds them.")
    return path
