"""Declared settings with validation: every user-facing key has a type, a default and its valid values."""
from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Any, Sequence

__all__ = ["Setting", "ConfigError", "resolve", "parse_assignments"]


class ConfigError(ValueError):
    """A user error in names or values; its message is one line naming the problem and the valid choices."""


@dataclass(frozen=True)
class Setting:
    """A key's default, its type (from the default), and either ``choices`` or a closed range ``[low, high]``.

    ``path``: the value names a file; a non-empty one is made absolute when parsed, so that the resolved settings
    (a run's ``config.json``) name the same file from any working directory.
    """

    default: Any
    help: str = ""
    choices: Sequence[Any] | None = None
    low: float | None = None
    high: float | None = None
    path: bool = False

    def parse(self, key: str, value: Any) -> Any:
        kind = type(self.default)
        if isinstance(value, str) and kind is not str:
            try:
                value = {"true": True, "false": False}[value.lower()] if kind is bool else kind(float(value)) if kind is int and float(value).is_integer() else kind(value)
            except (KeyError, ValueError):
                raise ConfigError(f"{key}={value!r} is not a valid {kind.__name__}") from None
        if kind is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            raise ConfigError(f"{key}={value!r} is not a valid {kind.__name__}")
        if kind is float and not math.isfinite(value):  # NaN compares False with any bound: it would pass the range check
            raise ConfigError(f"{key}={value!r} is not a finite number")
        if self.choices is not None and value not in self.choices:
            raise ConfigError(f"{key}={value!r} is not allowed; valid: {', '.join(map(str, self.choices))}")
        if (self.low is not None and value < self.low) or (self.high is not None and value > self.high):
            raise ConfigError(f"{key}={value!r} is out of range; valid: [{self.low if self.low is not None else '-inf'}, {self.high if self.high is not None else 'inf'}]")
        if self.path and value:
            value = os.path.abspath(os.path.expanduser(value))
        return value


def resolve(schema: dict[str, Setting], *layers: dict[str, Any]) -> dict[str, Any]:
    """Defaults overridden by each layer in turn (preset, then ``--set``), every key and value validated."""
    out = {k: s.default for k, s in schema.items()}
    for layer in layers:
        for k, v in layer.items():
            if k not in schema:
                raise ConfigError(f"unknown setting {k!r}; valid: {', '.join(sorted(schema))}")
            out[k] = schema[k].parse(k, v)
    return out


def parse_assignments(items: Sequence[str]) -> dict[str, str]:
    """``["a=1", "b=x"]`` -> ``{"a": "1", "b": "x"}``; each item must be ``key=value``, each key given once."""
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--set expects key=value, got {item!r}")
        key = key.strip()
        if key in out:
            raise ConfigError(f"--set gives {key} twice ({key}={out[key]} and {key}={value.strip()}); give each key once")
        out[key] = value.strip()
    return out
