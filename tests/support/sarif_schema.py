"""The official SARIF 2.1.0 JSON schema (support/schemas/, see its README), as a
validator: `valid_sarif(log)` parses a log as a reader would and fails the
test with the schema's errors. jsonschema checks no `uri` format of its own:
a small RFC 3986 one is added."""

from __future__ import annotations

import json
import re
from functools import cache
from typing import Any

import jsonschema
from jsonschema.validators import validator_for

from support.paths import SUPPORT

SCHEMA_PATH = SUPPORT / "schemas" / "sarif-schema-2.1.0.json"


def is_uri_reference(value: object) -> bool:
    """RFC 3986's characters, every `%` followed by two hex digits."""
    return isinstance(value, str) and re.fullmatch(r"(?:[A-Za-z0-9\-._~!$&'()*+,;=:@/?#]|%[0-9A-Fa-f]{2})*", value) is not None


def is_uri(value: object) -> bool:
    return is_uri_reference(value) and re.match(r"[A-Za-z][A-Za-z0-9+.\-]*:", str(value)) is not None


@cache
def sarif_validator() -> Any:
    schema = json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))
    cls = validator_for(schema)
    assert cls is jsonschema.Draft4Validator, "the official 2.1.0 schema declares draft-04"
    cls.check_schema(schema)
    formats = jsonschema.FormatChecker()
    formats.checks("uri")(is_uri)
    formats.checks("uri-reference")(is_uri_reference)
    return cls(schema, format_checker=formats)


def valid_sarif(log: object) -> dict[str, Any]:
    """`log` (a dict, or JSON text) as a reader gets it, validated against the schema."""
    text = log if isinstance(log, str | bytes) else json.dumps(log, ensure_ascii=False)
    parsed: dict[str, Any] = json.loads(text)
    errors = sorted(sarif_validator().iter_errors(parsed), key=lambda error: list(error.absolute_path))
    assert not errors, "\n".join(f"{list(error.absolute_path)}: {error.message[:300]}" for error in errors[:10])
    return parsed
