"""A space of one's own for ``gflownet-measure check`` and ``run``: ``MODULE:FACTORY`` or ``PATH.py:FACTORY`` imported and
called with the ``--set`` pairs. Every mistake (a module that does not load, a missing or non-callable factory, one that raises or
returns something else than a graph) is a one-line :class:`~gflownet_measure.experiments.settings.ConfigError`."""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import inspect
import os
import sys
import traceback
import typing
from pathlib import Path
from typing import Any, Callable, NamedTuple

from gflownet_measure.densities import Policy
from gflownet_measure.graph import PointedGraph
from gflownet_measure.options import Setting, settings_of

from .settings import ConfigError, build, resolve

__all__ = ["FactorySettings", "load_user_space", "load_factory", "factory_settings", "call_factory"]


def _first_line(e: BaseException, origin: str | None = None) -> str:
    """``Type: message (file, line n)`` of ``e``, its message cut at the first line: the line is a syntax error's own,
    else the last one of the file ``origin`` (the user's module) that the traceback passes through, else the last one
    outside this file and the import machinery."""
    if isinstance(e, SyntaxError):
        return f"{type(e).__name__}: {e.msg} ({e.filename}, line {e.lineno})"
    message = str(e).strip().splitlines()
    frames = [f for f in traceback.extract_tb(e.__traceback__) if not f.filename.startswith("<") and f.filename != __file__]
    where = next((f for f in reversed(frames) if f.filename == origin), frames[-1] if frames else None)
    return f"{type(e).__name__}{': ' + message[0] if message else ''}{f' ({where.filename}, line {where.lineno})' if where else ''}"


def _import_module(target: str, module: str, command: str):
    """The module ``module`` of ``target``: a path to a ``.py`` file (its folder put first on ``sys.path``, as
    ``python PATH.py`` does), or a dotted module importable from the current directory (put first on ``sys.path``, as
    ``python -m`` does)."""
    expected = "expected MODULE:FACTORY, MODULE a dotted module importable from the current directory or a path to a .py file"
    if module.endswith(".py") or "/" in module or os.sep in module:
        path = Path(module).expanduser().resolve()
        if not path.is_file():
            raise ConfigError(f"{command}: {target}: no file {module}; {expected}")
        name = path.stem
        taken = sys.modules.get(name)
        if taken is not None and Path(getattr(taken, "__file__", None) or "").resolve() != path:
            raise ConfigError(
                f"{command}: {target}: the module name {name} is already taken by {getattr(taken, '__file__', None) or 'a built-in module'}; rename {path.name}"
            )
        if str(path.parent) not in sys.path:
            sys.path.insert(0, str(path.parent))
        spec = importlib.util.spec_from_file_location(name, path)
        assert spec is not None and spec.loader is not None  # a .py path always has a source loader
        loaded = importlib.util.module_from_spec(spec)
        sys.modules[name] = loaded  # dataclasses and typing look a class's module up there
        try:
            spec.loader.exec_module(loaded)
        except Exception as e:
            del sys.modules[name]
            raise ConfigError(f"{command}: {target}: importing {module} raised {_first_line(e, str(path))}") from None
        return loaded
    if not all(part.isidentifier() for part in module.split(".")):
        raise ConfigError(f"{command}: {target}: {module!r} is not a dotted module name; {expected}")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    importlib.invalidate_caches()  # a file written since the interpreter started
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as e:
        if e.name is not None and (module == e.name or module.startswith(e.name + ".")):
            raise ConfigError(f"{command}: {target}: no module named {e.name} in {os.getcwd()} or on sys.path; {expected}") from None
        raise ConfigError(f"{command}: {target}: importing {module} raised {_first_line(e)}") from None
    except Exception as e:
        raise ConfigError(f"{command}: {target}: importing {module} raised {_first_line(e)}") from None


def _keyword_settings(target: str, hints: dict, params: list) -> tuple[dict[str, Setting], list[str]]:
    """The :class:`Setting` of each keyword parameter of ``factory`` with a default of type int, float, bool or str (or
    annotated so, with that default), and the names of those without a default (required)."""
    schema, required = {}, []
    for p in params:
        if p.kind is p.POSITIONAL_ONLY:
            continue
        kind = hints.get(p.name, type(p.default) if p.default is not p.empty else None)
        if p.default is p.empty:
            required.append(p.name)
        elif kind in (int, float, bool, str) and isinstance(p.default, kind):
            schema[p.name] = Setting(p.default, f"argument {p.name} of {target}")
    return schema, required


class FactorySettings(NamedTuple):
    """What a factory takes: ``schema``, the settings with a default; ``required``, the parameters without one; and
    ``arguments(assignments) -> (args, kwargs)``, the ``--set`` pairs (strings, or values of the settings' types) parsed into its call."""

    schema: dict[str, Setting]
    required: list[str]
    arguments: Callable[[dict[str, Any]], tuple[tuple, dict[str, Any]]]


def factory_settings(target: str, factory: Callable, command: str = "check") -> FactorySettings:
    """The :class:`FactorySettings` of ``factory``: an instance of the dataclass of :func:`~gflownet_measure.options.option`
    fields that annotates its first parameter (the schema: its options), or keyword arguments parsed as their
    annotations (or defaults) say (the schema: those with a default of type int, float, bool or str)."""
    try:
        signature = inspect.signature(factory)
    except (TypeError, ValueError):  # a built-in without a signature: nothing to set

        def nothing(assignments: dict[str, Any]) -> tuple[tuple, dict[str, Any]]:
            if assignments:
                raise ConfigError(f"{command}: {target}: its parameters are unknown, so --set has nothing to set; drop --set")
            return (), {}

        return FactorySettings({}, [], nothing)
    try:
        hints = typing.get_type_hints(factory)
    except Exception:  # an annotation that does not resolve: read the parameters' defaults instead
        hints = {}
    params = [p for p in signature.parameters.values() if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    first = hints.get(params[0].name) if params else None
    if isinstance(first, type) and dataclasses.is_dataclass(first) and settings_of(first):
        return FactorySettings(settings_of(first), [], lambda assignments: ((build(first, resolve(settings_of(first), assignments)),), {}))
    schema, required = _keyword_settings(target, hints, params)
    by_name = {p.name: p for p in params if p.kind is not p.POSITIONAL_ONLY}

    def keywords(assignments: dict[str, Any]) -> tuple[tuple, dict[str, Any]]:
        kwargs = {}
        for key, value in assignments.items():
            if key not in by_name:
                raise ConfigError(f"unknown setting {key!r} for {target}; valid: {', '.join(by_name) or 'none (it takes no keyword arguments)'}")
            p = by_name[key]
            kind = hints.get(key, type(p.default))
            if kind not in (int, float, bool, str):
                said = f"annotated {inspect.formatannotation(kind)}" if key in hints else "neither annotated nor defaulted to a value of those types"
                raise ConfigError(f"--set {key}: parameter {key} of {target} is {said}; --set gives int, float, bool or str")
            try:
                kwargs[key] = Setting(kind()).parse(key, value)
            except ValueError as e:
                raise ConfigError(str(e)) from None
        missing = [name for name in required if name not in kwargs]
        if missing:
            raise ConfigError(f"{command}: {target}: {factory.__name__} needs {', '.join(missing)}; give --set {' '.join(f'{m}=VALUE' for m in missing)}")
        return (), kwargs

    return FactorySettings(schema, required, keywords)


def load_factory(target: str, command: str = "check") -> Callable:
    """The factory ``target`` = ``MODULE:FACTORY`` names (imported, not called); a one-line :class:`ConfigError` otherwise."""
    module_name, _, name = target.rpartition(":")
    if not module_name or not name:
        raise ConfigError(f"{command}: {target}: expected MODULE:FACTORY (e.g. my_space:make_graph or spaces/beta.py:make_graph)")
    module = _import_module(target, module_name, command)
    if not hasattr(module, name):
        defined = sorted(k for k, v in vars(module).items() if inspect.isfunction(v) and v.__module__ == module.__name__ and not k.startswith("_"))
        raise ConfigError(
            f"{command}: {target}: module {module.__name__} has no attribute {name}; valid: {', '.join(defined) or 'none (it defines no function)'}"
        )
    factory = getattr(module, name)
    if not callable(factory):
        raise ConfigError(
            f"{command}: {target}: {name} is an object of type {type(factory).__name__}, not callable; expected a function returning a PointedGraph or (graph, pf, pb)"
        )
    return factory


def call_factory(
    target: str, factory: Callable, args: tuple, kwargs: dict[str, Any], command: str = "check"
) -> tuple[PointedGraph, Policy | None, Policy | None]:
    """``(graph, pf, pb)`` that ``factory(*args, **kwargs)`` returns (``None`` for a policy it does not return); what it
    raises, or a return of another kind, is a one-line :class:`ConfigError`."""
    name = getattr(factory, "__name__", target)
    try:
        made = factory(*args, **kwargs)
    except Exception as e:
        raise ConfigError(f"{command}: {target}: {name} raised {_first_line(e, getattr(inspect.getmodule(factory), '__file__', None))}") from None
    parts = made if isinstance(made, tuple) else (made,)
    if not (1 <= len(parts) <= 3 and isinstance(parts[0], PointedGraph) and all(p is None or isinstance(p, Policy) for p in parts[1:])):
        got = f"({', '.join(type(p).__name__ for p in parts)})" if isinstance(made, tuple) else type(made).__name__
        raise ConfigError(
            f"{command}: {target}: {name} returned {got}; expected a PointedGraph or a tuple (graph, pf, pb) of a PointedGraph and Policy or None"
        )
    graph, pf, pb = parts + (None,) * (3 - len(parts))
    return graph, pf, pb


def load_user_space(target: str, assignments: dict[str, str], command: str = "check") -> tuple[PointedGraph, Policy | None, Policy | None]:
    """``(graph, pf, pb)`` of ``target`` = ``MODULE:FACTORY``, the factory called with the ``--set`` pairs
    (:func:`factory_settings`); ``pf`` or ``pb`` is ``None`` where the factory returns none. Every mistake is a
    one-line :class:`ConfigError` naming what was given and what is expected."""
    factory = load_factory(target, command)
    args, kwargs = factory_settings(target, factory, command).arguments(assignments)
    return call_factory(target, factory, args, kwargs, command)
