"""Declared, typed settings: every setting has a type (its default's), a default, a help line and its valid values.

A space's settings are a frozen dataclass whose fields are declared with :func:`option`; its ``__post_init__`` calls
:func:`check_options`, so that a space built from Python with a bad value raises a ``ValueError`` naming the setting
and its valid values, as the command line does (which parses strings with :meth:`Setting.parse`).
"""

from __future__ import annotations

import dataclasses
import math
import os
from dataclasses import dataclass
from typing import Any, Mapping, Sequence, TypeVar

T = TypeVar("T")

__all__ = ["Setting", "option", "settings_of", "check_options", "lookup"]


@dataclass(frozen=True)
class Setting:
    """A key's default, its type (from the default), and either ``choices`` or a closed range ``[low, high]``.

    ``path``: the value names a file; a non-empty one is made absolute when parsed, so that the resolved settings
    (a run's ``config.json``) name the same file from any working directory, except the names in ``keywords`` (a
    shipped data set such as ``sachs``; a keyword ending in ``:`` is a prefix, as ``pgmpy:`` of ``pgmpy:sachs``),
    kept as they are. ``aliases``: former names of the key,
    still accepted (with a deprecation warning) by the command line.
    """

    default: Any
    help: str = ""
    choices: Sequence[Any] | None = None
    low: float | None = None
    high: float | None = None
    path: bool = False
    keywords: tuple[str, ...] = ()
    aliases: tuple[str, ...] = ()

    def check(self, key: str, value: Any) -> None:
        """Raise ``ValueError`` (one line: the key, the value, the valid values) unless ``value`` is of the setting's type and within its choices or range."""
        kind = type(self.default)
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            raise ValueError(f"{key}={value!r} is not a valid {kind.__name__}")
        if kind is float and not math.isfinite(value):  # NaN compares False with any bound: it would pass the range check
            raise ValueError(f"{key}={value!r} is not a finite number")
        if self.choices is not None and value not in self.choices:
            raise ValueError(f"{key}={value!r} is not allowed; valid: {', '.join(map(str, self.choices))}")
        if (self.low is not None and value < self.low) or (self.high is not None and value > self.high):
            raise ValueError(
                f"{key}={value!r} is out of range; valid: [{self.low if self.low is not None else '-inf'}, {self.high if self.high is not None else 'inf'}]"
            )

    def parse(self, key: str, value: Any) -> Any:
        """``value`` (a string from the command line, or a value) converted to the setting's type and checked."""
        kind = type(self.default)
        if isinstance(value, str) and kind is not str:
            try:
                value = (
                    {"true": True, "false": False}[value.lower()]
                    if kind is bool
                    else kind(float(value))
                    if kind is int and float(value).is_integer()
                    else kind(value)
                )
            except (KeyError, ValueError):
                raise ValueError(f"{key}={value!r} is not a valid {kind.__name__}") from None
        if kind is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        self.check(key, value)
        if self.path and value and value not in self.keywords and not value.startswith(tuple(k for k in self.keywords if k.endswith(":"))):
            value = os.path.abspath(os.path.expanduser(value))
        return value


def option(default: Any, help: str = "", **valid: Any) -> Any:
    """A dataclass field declared as a :class:`Setting` (``valid``: ``choices``, ``low``, ``high``, ``path``, ``keywords``, ``aliases``)."""
    return dataclasses.field(default=default, metadata={"setting": Setting(default, help, **valid)})


def settings_of(cls: type) -> dict[str, Setting]:
    """The :class:`Setting` of every :func:`option` field of the dataclass ``cls``, by name, in field order."""
    return {f.name: f.metadata["setting"] for f in dataclasses.fields(cls) if "setting" in f.metadata}


def check_options(obj: Any) -> None:
    """Raise ``ValueError`` for the first :func:`option` field of the dataclass instance ``obj`` out of its type, choices or range."""
    for name, setting in settings_of(type(obj)).items():
        value = getattr(obj, name)
        setting.check(name, float(value) if type(setting.default) is float and type(value) is int else value)


def lookup(table: Mapping[str, T], name: str, what: str) -> T:
    """``table[name]``; a ``ValueError`` naming ``what`` was asked for and the valid names otherwise (a registry's lookup)."""
    if name not in table:
        raise ValueError(f"unknown {what} {name!r}; valid: {', '.join(sorted(table))}")
    return table[name]
