"""Opaque page cursors: what a page's last item was, as a URL-safe token.

Owns `encode_cursor`, `decode_cursor`, `seq_after` and `page_of` (a page, its cursor
and the link to the next one, for every paged route). A cursor is base64url of a JSON
list tagged with what it pages (`tensors`, `models`), so a cursor of one
listing given to another, or a mangled one, is a 400, never a wrong page.
A position's integers are within 0 .. 2**63 - 1 (what SQLite holds) and its
strings encode as UTF-8: a forged cursor beyond those is a 400 too, never a
500 from the query it would reach.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar
from urllib.parse import quote

from service.api.problems import ProblemError

MAX_CURSOR_CHARS = 1024
MAX_POSITION = 2**63 - 1  # SQLite's largest integer
T = TypeVar("T")


def encode_cursor(kind: str, *position: int | str) -> str:
    text = json.dumps([kind, *position], separators=(",", ":"))
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


def decode_cursor(kind: str, token: str, types: tuple[type, ...]) -> list[int | str]:
    """The position a cursor of `kind` holds, each part of the given type."""
    try:
        if len(token) > MAX_CURSOR_CHARS:
            raise ValueError("too long")
        parsed = json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
        if not isinstance(parsed, list) or parsed[:1] != [kind] or len(parsed) != len(types) + 1:
            raise ValueError("not this listing's cursor")
        position = parsed[1:]
        if not all(type(part) is wanted and _in_range(part) for part, wanted in zip(position, types, strict=True)):
            raise ValueError("malformed")
        return position
    except (ValueError, binascii.Error, UnicodeError):
        raise ProblemError("bad-request", "the cursor is not one this listing handed out") from None


def _in_range(part: object) -> bool:
    """An integer a listing can hand out, or a string SQLite can take (UTF-8)."""
    if isinstance(part, int):
        return 0 <= part <= MAX_POSITION
    if isinstance(part, str):
        part.encode("utf-8")  # a lone surrogate (JSON's "\\ud800") raises UnicodeEncodeError
    return True


def seq_after(kind: str, cursor: str | None) -> int:
    """Where a page of a catalogue listing (`tensors`, `diagnostics`) starts:
    after the row of this sequence number (-1: the first page)."""
    if cursor is None:
        return -1
    (position,) = decode_cursor(kind, cursor, (int,))
    return int(position)


@dataclass(frozen=True, slots=True)
class Page(Generic[T]):
    items: list[T]
    next_cursor: str | None
    next_link: str | None


def page_of(rows: list[T], limit: int, kind: str, position: Callable[[T], tuple[int | str, ...]], url: str, **query: str) -> Page[T]:
    """The first `limit` of `rows` (fetched as limit + 1), with the cursor and
    the link of the next page when there is one; `query` is kept in the link."""
    items = rows[:limit]
    if len(rows) <= limit:
        return Page(items, None, None)
    cursor = encode_cursor(kind, *position(items[-1]))
    kept = "".join(f"&{name}={quote(value, safe='')}" for name, value in query.items() if value)
    return Page(items, cursor, f"{url}?limit={limit}&cursor={cursor}{kept}")
