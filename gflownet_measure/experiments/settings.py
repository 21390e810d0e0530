"""The command line's settings: layers of ``key=value`` resolved against declared :class:`~gflownet_measure.options.Setting`\\ s,
and the one error type (:class:`ConfigError`) that the command line prints as one line with exit code 2."""

from __future__ import annotations

import dataclasses
import typing
import warnings
from typing import Any, Mapping, Sequence, TypeVar

from gflownet_measure.options import Setting

__all__ = ["ConfigError", "resolve", "parse_assignments", "build", "flatten"]

T = TypeVar("T")


class ConfigError(ValueError):
    """A user error in names or values; its message is one line naming the problem and the valid choices."""


def _aliases(schema: dict[str, Setting]) -> dict[str, str]:
    return {alias: key for key, s in schema.items() for alias in s.aliases}


def resolve(schema: dict[str, Setting], *layers: dict[str, Any]) -> dict[str, Any]:
    """Defaults overridden by each layer in turn (preset, then ``--set``), every key and value validated.

    A former name of a key (:attr:`Setting.aliases`) is read as the key, with a one-line ``FutureWarning``.
    """
    out = {k: s.default for k, s in schema.items()}
    aliases = _aliases(schema)
    for layer in layers:
        for k, v in layer.items():
            if k in aliases:
                warnings.warn(f"setting {k!r} is now called {aliases[k]!r}; give {aliases[k]}={v}", FutureWarning, stacklevel=2)
                k = aliases[k]
            if k not in schema:
                raise ConfigError(f"unknown setting {k!r}; valid: {', '.join(sorted(schema))}")
            try:
                out[k] = schema[k].parse(k, v)
            except ValueError as e:
                raise ConfigError(str(e)) from None
    return out


def parse_assignments(items: Sequence[str]) -> dict[str, str]:
    """``["a=1", "b=x"]`` -> ``{"a": "1", "b": "x"}``; each item must be ``key=value``, each key given once."""
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--set expects key=value, got {item!r}")
        key = key.strip()
        if key in out:
            raise ConfigError(f"--set gives {key} twice ({key}={out[key]} and {key}={value.strip()}); give each key once")
        out[key] = value.strip()
    return out


def build(cls: type[T], cfg: Mapping[str, Any]) -> T:
    """The typed settings dataclass ``cls`` from the resolved settings ``cfg`` (its fields' keys), a field whose type is
    itself a settings dataclass built from the same flat ``cfg`` (an experiment's settings compose its space's, its
    training's and its own: :func:`flatten` is the inverse); a field whose key ``cfg`` lacks keeps its default. The
    ``ValueError`` of a value a dataclass rejects becomes a :class:`ConfigError`."""
    types = typing.get_type_hints(cls)
    values: dict[str, Any] = {}
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]  # cls is a dataclass type (checked by fields)
        kind = types.get(f.name)
        if isinstance(kind, type) and dataclasses.is_dataclass(kind):
            values[f.name] = build(kind, cfg)
        elif f.name in cfg:
            values[f.name] = cfg[f.name]
    try:
        return cls(**values)
    except ValueError as e:
        raise ConfigError(str(e)) from None


def flatten(settings: Any) -> dict[str, Any]:
    """The flat ``key -> value`` of a (composed) settings dataclass, as the command line and ``config.json`` name them:
    the inverse of :func:`build` (nested dataclasses' fields at the top level, in field order)."""
    out: dict[str, Any] = {}
    for f in dataclasses.fields(settings):
        value = getattr(settings, f.name)
        out |= flatten(value) if dataclasses.is_dataclass(value) and not isinstance(value, type) else {f.name: value}
    return out
