"""How a setting's text becomes a value: the kinds of value and the rules on them.

Owns `Kind` (parse and show: text, level, path, size with a unit, seconds,
fraction, switch), `Rule` (`within`, `one_of`), `SettingsError`, and the size
helpers `parse_size` and `format_size` (`512MiB`, `2GiB`, `1.5G`, plain
bytes). `service.settings` declares the settings with them.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Generic, TypeVar

from importer.limits import parse_size as parse_byte_size

KIB = 1 << 10
MIB = 1 << 20
GIB = 1 << 30
TIB = 1 << 40
T = TypeVar("T")
N = TypeVar("N", int, float)


class SettingsError(ValueError):
    """A setting has a value the service refuses to start with."""


def parse_size(text: str) -> int:
    """`2GiB` -> 2147483648; `1.5M` -> 1500000; `4096` -> 4096 (the importer's
    notation, `importer.limits.parse_size`, which its command line takes too)."""
    try:
        return parse_byte_size(text)
    except ValueError as error:
        raise SettingsError(str(error)) from None


def format_size(size: int) -> str:
    """2147483648 -> `2GiB`; the largest binary unit that divides it, else bytes."""
    for unit, name in ((TIB, "TiB"), (GIB, "GiB"), (MIB, "MiB"), (KIB, "KiB")):
        if size and size % unit == 0:
            return f"{size // unit}{name}"
    return str(size)


def _finite(text: str, what: str = "") -> float:
    """A finite number; SettingsError saying it is not (`what`: " of seconds")."""
    try:
        value = float(text)
    except ValueError:
        raise SettingsError(f"{text!r} is not a number{what}") from None
    if not math.isfinite(value):
        raise SettingsError(f"{text!r} is not a finite number{what}")
    return value


def _parse_seconds(text: str) -> float:
    return _finite(text, " of seconds")


def _parse_int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise SettingsError(f"{text!r} is not an integer") from None


def _parse_fraction(text: str) -> float:
    """`0.25` or `25%` -> 0.25."""
    number = text.strip().removesuffix("%")
    try:
        value = float(number)
    except ValueError:
        value = math.nan
    if not math.isfinite(value):
        raise SettingsError(f"{text!r} is not a fraction (0.25, or 25%)")
    return value / 100 if number != text.strip() else value


def _number(value: float) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


@dataclass(frozen=True, slots=True)
class Kind(Generic[T]):
    """How a setting's text (flag or variable) becomes a value, and how a value is shown."""

    parse: Callable[[str], T]
    show: Callable[[T], str]


TEXT: Kind[str] = Kind(str, str)
LEVEL: Kind[str] = Kind(str.lower, str)
PATH: Kind[Path] = Kind(Path, str)
OPTIONAL_PATH: Kind[Path | None] = Kind(lambda text: Path(text) if text else None, lambda path: "" if path is None else str(path))
INT: Kind[int] = Kind(_parse_int, str)
SIZE: Kind[int] = Kind(parse_size, format_size)
SECONDS: Kind[float] = Kind(_parse_seconds, _number)
NUMBER: Kind[float] = Kind(_finite, _number)
FRACTION: Kind[float] = Kind(_parse_fraction, lambda value: f"{value * 100:g}%")
SWITCH: Kind[bool] = Kind(lambda text: text == "1", lambda on: "1" if on else "off")  # on only for exactly `1`


@dataclass(frozen=True, slots=True)
class Rule(Generic[T]):
    """A requirement on one setting's value, checked by `Settings.__post_init__`."""

    holds: Callable[[T], bool]
    requirement: str  # completes "--flag ...": "must be within 1 to 256"


def within(low: N, high: N) -> Rule[N]:
    return Rule(lambda value: low <= value <= high, f"must be within {_number(low)} to {_number(high)}")


A_SHARE: Rule[float] = Rule(lambda share: 0 < share <= 1, "must be above 0 and at most 1 (100%)")  # of a FRACTION setting


S3_SCHEME = "s3://"
_BUCKET = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")


def s3_location(text: str) -> tuple[str, str] | None:
    """`s3://BUCKET/PREFIX` -> (bucket, prefix without slashes at its ends);
    None for anything else. The prefix may be empty; it may not hold an empty,
    `.` or `..` segment."""
    if not text.startswith(S3_SCHEME):
        return None
    bucket, _, prefix = text[len(S3_SCHEME) :].partition("/")
    prefix = prefix.strip("/")
    if not _BUCKET.fullmatch(bucket) or any(part in ("", ".", "..") for part in prefix.split("/") if prefix):
        return None
    return bucket, prefix


def one_of(*choices: str) -> Rule[str]:
    return Rule(lambda value: value in choices, f"must be one of {', '.join(choices)}")
