"""What the operator check reports: `Diagnostic`, its severities and its codes.

Owns the stable vocabulary of `importer.check`: each `Code` is a token callers
may act on (never renamed), with the severity it has by default. A finding in
a domain imported at an opset newer than the schema table is reported as a
warning whatever its code (the table cannot know that opset). Messages are
bounded (`importer.errors` clips every quoted name), so a diagnostic never
grows with the input.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Final

from importer.errors import MAX_MESSAGE_CHARS


class Severity(StrEnum):
    ERROR = "error"  # the model breaks a rule of its operators' schemas
    WARNING = "warning"  # something the check could not decide, or did not check


class Code(StrEnum):
    """Stable diagnostic codes; what each means is in `importer.check`."""

    # the op itself
    UNKNOWN_OP = "unknown-op"
    OP_NOT_YET_DEFINED = "op-not-yet-defined"
    OP_DEPRECATED = "op-deprecated"
    EXPERIMENTAL_OP = "experimental-op"
    DOMAIN_NOT_IMPORTED = "domain-not-imported"
    FUNCTION_OPSET_INCOMPATIBLE = "function-opset-incompatible"
    # inputs and outputs
    NO_INPUTS_OR_OUTPUTS = "no-inputs-or-outputs"
    TOO_FEW_INPUTS = "too-few-inputs"
    TOO_MANY_INPUTS = "too-many-inputs"
    INPUT_COUNT_NOT_ALLOWED = "input-count-not-allowed"
    REQUIRED_INPUT_EMPTY = "required-input-empty"
    TOO_FEW_OUTPUTS = "too-few-outputs"
    TOO_MANY_OUTPUTS = "too-many-outputs"
    OUTPUT_COUNT_NOT_ALLOWED = "output-count-not-allowed"
    REQUIRED_OUTPUT_EMPTY = "required-output-empty"
    # attributes
    UNKNOWN_ATTRIBUTE = "unknown-attribute"
    ATTRIBUTE_TYPE = "attribute-type"
    DUPLICATE_ATTRIBUTE = "duplicate-attribute"
    MISSING_ATTRIBUTE = "missing-attribute"
    CONSTANT_VALUE = "constant-value"
    # types
    INPUT_TYPE = "input-type"
    INPUT_TYPES_DIFFER = "input-types-differ"
    # the model
    OPSET_NEWER_THAN_TABLE = "opset-newer-than-table"
    DOMAIN_NOT_CHECKED = "domain-not-checked"
    CHECK_INCOMPLETE = "check-incomplete"  # the check itself broke (a caller's report; a bug to fix)


_WARNINGS: Final = frozenset({Code.EXPERIMENTAL_OP, Code.OPSET_NEWER_THAN_TABLE, Code.DOMAIN_NOT_CHECKED, Code.CHECK_INCOMPLETE})

SEVERITY: Final[dict[Code, Severity]] = {code: Severity.WARNING if code in _WARNINGS else Severity.ERROR for code in Code}


@dataclass(frozen=True, slots=True)
class Diagnostic:
    """One finding, with its place in the file.

    `field_path`: the field at fault (`ModelProto.graph.node[17].attribute[0]`),
    or the node itself when something is missing; `offset`: the byte offset
    of that field's key. `node_name`, `op_type` and `domain` describe the
    node (None for a finding about the model, such as an opset import).
    """

    severity: Severity
    code: Code
    message: str
    node_name: str | None
    op_type: str | None
    domain: str | None
    field_path: str
    offset: int

    def as_dict(self) -> dict[str, object]:
        """The JSON-ready form used by the command line and the service."""
        return {
            "severity": self.severity.value,
            "code": self.code.value,
            "message": self.message,
            "node_name": self.node_name,
            "op_type": self.op_type,
            "domain": self.domain,
            "field_path": self.field_path,
            "offset": self.offset,
        }


def bounded(message: str) -> str:
    return message if len(message) <= MAX_MESSAGE_CHARS else message[:MAX_MESSAGE_CHARS] + "..."
