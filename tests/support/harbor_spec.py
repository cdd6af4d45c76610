"""Harbor's Scanner Adapter API v1.2 (testdata/harbor, see its README), as a
contract: `check_answer(operation, response)` fails the test unless the
response is one the OpenAPI document lets that operation give.

The answer's status must be one of the operation's responses (401 too, which
the document has no entry for but its security schemes imply: checked as the
document's ErrorResponse under its error media type); its Content-Type one of
that response's media types; its body valid against that media type's
schema; a header the response declares (302's `Refresh-After`) present and
of its type. The schemas are OpenAPI 3.0's, close to JSON Schema: they are
checked as JSON Schema 2020-12 after `nullable: true` is turned into a type
that also takes null, and stricter than the document: an object whose
properties are listed takes no other property unless it says so
(`additionalProperties`), so that a misspelt field fails.
"""

from __future__ import annotations

import copy
import hashlib
from functools import cache
from typing import Any

import httpx
import jsonschema
import yaml

from support.paths import REPO

SPEC_PATH = REPO / "testdata" / "harbor" / "scanner-adapter-openapi-v1.2.yaml"
SPEC_SHA256 = "122fb4af963c2c1e32dfeb25ba72e868006223374785774f03ea1f1d21ecf19a"  # at the commit its README names
ERROR_TYPE = "application/vnd.scanner.adapter.error+json; version=1.0"


def spec_digest() -> str:
    return hashlib.sha256(SPEC_PATH.read_bytes()).hexdigest()


@cache
def spec() -> dict[str, Any]:
    document: dict[str, Any] = yaml.safe_load(SPEC_PATH.read_text(encoding="utf-8"))
    return document


def _json_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """An OpenAPI 3.0 schema (and the schemas within it) as JSON Schema: `nullable`, and closed objects."""
    converted = {key: value for key, value in schema.items() if key != "nullable"}
    if isinstance(schema.get("properties"), dict):
        converted["properties"] = {name: _json_schema(value) for name, value in schema["properties"].items()}
        converted.setdefault("additionalProperties", False)
    for key in ("items", "not"):
        if isinstance(schema.get(key), dict):
            converted[key] = _json_schema(schema[key])
    if isinstance(schema.get("additionalProperties"), dict):
        converted["additionalProperties"] = _json_schema(schema["additionalProperties"])
    for key in ("allOf", "anyOf", "oneOf"):
        if isinstance(schema.get(key), list):
            converted[key] = [_json_schema(item) for item in schema[key]]
    if schema.get("nullable") is True:
        if isinstance(converted.get("type"), str):
            converted["type"] = [converted["type"], "null"]
        else:
            converted = {"anyOf": [converted, {"type": "null"}]}
    return converted


@cache
def _components() -> dict[str, Any]:
    schemas = copy.deepcopy(spec()["components"]["schemas"])
    return {"schemas": {name: _json_schema(schema) for name, schema in schemas.items()}}


def _validate(schema: dict[str, Any], body: Any) -> None:
    root = {"$schema": "https://json-schema.org/draft/2020-12/schema", "components": _components(), **_json_schema(schema)}
    validator = jsonschema.Draft202012Validator(root, format_checker=jsonschema.FormatChecker())
    errors = sorted(validator.iter_errors(body), key=lambda error: list(error.absolute_path))
    assert not errors, "\n".join(f"{list(error.absolute_path)}: {error.message}" for error in errors)


def _same_media_type(one: str, other: str) -> bool:
    def normal(text: str) -> str:
        return ";".join(part.strip().lower() for part in text.split(";"))

    return normal(one) == normal(other)


def operation(operation_id: str) -> dict[str, Any]:
    for item in spec()["paths"].values():
        for found in item.values():
            if isinstance(found, dict) and found.get("operationId") == operation_id:
                return found
    raise AssertionError(f"the document has no operation {operation_id}")


def check_answer(operation_id: str, response: httpx.Response) -> Any:
    """Fail unless `response` is an answer the document lets `operation_id` give; its parsed body (None for none)."""
    responses = {str(status): entry for status, entry in operation(operation_id)["responses"].items()}
    status = str(response.status_code)
    if status == "401":  # the security schemes' refusal: the document's error format
        declared: dict[str, Any] = {"content": {ERROR_TYPE: {"schema": {"$ref": "#/components/schemas/ErrorResponse"}}}}
    else:
        assert status in responses, f"{operation_id} does not answer {status}: {response.text[:500]}"
        declared = responses[status]
    for name, header in declared.get("headers", {}).items():
        assert name in response.headers, f"{operation_id} {status} lacks its {name} header"
        if header.get("schema", {}).get("type") == "integer":
            assert response.headers[name].isdigit(), f"{name}: {response.headers[name]!r} is not an integer"
    content = declared.get("content")
    if not content:
        return None
    given = response.headers.get("content-type", "")
    media_type = next((declared_type for declared_type in content if _same_media_type(declared_type, given)), None)
    assert media_type is not None, f"{operation_id} {status}: Content-Type {given!r} is none of {list(content)}"
    schema = content[media_type]["schema"]
    body = response.json() if schema.get("type") != "string" else response.text
    _validate(schema, body)
    return body
