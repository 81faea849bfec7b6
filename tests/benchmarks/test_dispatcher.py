"""``python -m bench``: every command in its table resolves to a function,
every module of ``bench/`` with a command is listed, and a bad name is
refused with exit status 2."""

from __future__ import annotations

import importlib
from pathlib import Path

from bench import __main__ as dispatcher


def test_every_listed_command_is_a_function_of_its_module():
    for name, (module, function, about) in dispatcher.COMMANDS.items():
        assert callable(getattr(importlib.import_module(module), function)), name
        assert about and name in dispatcher.usage()


def test_every_module_that_defines_a_command_is_in_the_table():
    folder = Path(dispatcher.__file__).parent
    listed = {module.removeprefix("bench.") for module, _, _ in dispatcher.COMMANDS.values()}
    defining = set()
    for path in folder.glob("*.py"):
        source = path.read_text(encoding="utf-8")
        if path.stem != "__main__" and ("\ndef main(argv" in source or "_main(argv" in source):
            defining.add(path.stem)
    assert defining <= listed


def test_an_unknown_or_invalid_name_is_refused(capsys):
    assert dispatcher.main(["no_such_benchmark"]) == 2
    assert "no benchmark named 'no_such_benchmark'" in capsys.readouterr().err
    assert dispatcher.main(["../etc"]) == 2
    assert dispatcher.main([]) == 2 and "latency" in capsys.readouterr().out
