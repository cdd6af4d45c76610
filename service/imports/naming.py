"""The name and the label a client gives an import: `Naming`, and their rules.

Owns `Naming` (the display name shown instead of the file's name, and a free
short label such as "v3 fp16"; either may be absent) and `named`, the one
check of a given value: at least one character that is not a space, at most
`MAX_NAME` (`MAX_LABEL`) characters, every character printable (no control,
format or line-separator character: nothing hidden in a list or a log); a
value that breaks a rule is `BadInput` naming the field and the rule, never
shown back whole. A multipart upload's form fields, and the JSON import's
members, are checked here (`service.imports.sources.multipart`,
`service.api.routes.models`). A tenant's holding keeps them
(`TenantRecord.input` and `.label`); an import that gives either to a model
the tenant holds already renames its holding (`service.imports.pipeline`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from service.errors import BadInput, bounded

MAX_NAME: Final = 200  # characters, as a file name's display name (`service.imports.sources.upload.MAX_DISPLAY_NAME`)
MAX_LABEL: Final = 100
LIMITS: Final = {"name": MAX_NAME, "label": MAX_LABEL}
MAX_FIELD_BYTES: Final = 4 * MAX_NAME  # the most UTF-8 bytes of either a form field may hold before it is refused unread


@dataclass(frozen=True, slots=True)
class Naming:
    """What a request gave: the model's display name and its label (None: not given)."""

    name: str | None = None
    label: str | None = None

    @property
    def given(self) -> bool:
        return self.name is not None or self.label is not None

    def over(self, earlier: Naming) -> Naming:
        """These values where given, `earlier`'s for the others."""
        return Naming(self.name if self.name is not None else earlier.name, self.label if self.label is not None else earlier.label)


def named(field: str, value: str) -> str:
    """`value` of the field `field` ("name" or "label") if it keeps the rules (see the module comment); else BadInput."""
    limit = LIMITS[field]
    if len(value) > limit:
        raise BadInput(f"the {field} has {len(value)} characters, more than {limit}")
    if not value.strip():
        raise BadInput(f"the {field} is empty: give at least one character that is not a space, or leave the {field} out")
    hidden = next((character for character in value if not character.isprintable()), None)
    if hidden is not None:
        raise BadInput(f"the {field} holds the character U+{ord(hidden):04X}, which is not printable: {bounded(ascii(value), 80)}")
    return value


def naming_of(name: str | None, label: str | None) -> Naming:
    """A request's name and label (None: not given), each checked (`named`)."""
    return Naming(None if name is None else named("name", name), None if label is None else named("label", label))
