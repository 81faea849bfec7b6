"""Inference engines for clinical plain-language translation.

Plain Python: nothing in this package imports Django. The web app, the
management commands, the benchmarks and the tests all reach the engines
through :func:`inference.factory.create_engine` and the
:class:`inference.base.Engine` interface.
"""

from inference.base import Delta, Engine, EngineError, EngineInfo, EnginePreempted, GenerationParams

__all__ = ["Delta", "Engine", "EngineError", "EngineInfo", "EnginePreempted", "GenerationParams"]
