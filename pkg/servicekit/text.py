"""Text field types that refuse bytes no client means to send and PostgreSQL cannot store.

`PlainText` (names, reasons, ids, URLs, e-mail addresses, event types, cursors, filters) refuses
every control character: C0 (U+0000-U+001F, so NUL, tab and newline too), DEL (U+007F) and C1
(U+0080-U+009F). `MultilineText` (free-form descriptions) allows tab, LF and CR, nothing else of
those; `TAB_ONLY` (cron expressions, whose fields spaces or tabs separate) allows tab alone. All
refuse lone surrogates (U+D800-U+DFFF): JSON `"\\ud800"` decodes to one, and it has no UTF-8
encoding, so the database driver would fail on it. The refusal is a pydantic error (422
naming the field); the JSON Schema carries the same rule as a `pattern`, so clients and fuzzers
see it.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import GetCoreSchemaHandler, GetJsonSchemaHandler
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import core_schema

# ECMA-262 and Python `re` both read these escapes; surrogates are left out of the published
# pattern (no conforming JSON text produces them) but refused by the validator.
PLAIN_PATTERN = r"^[^\u0000-\u001f\u007f-\u009f]*$"
MULTILINE_PATTERN = r"^[^\u0000-\u0008\u000b\u000c\u000e-\u001f\u007f-\u009f]*$"
TAB_PATTERN = r"^[^\u0000-\u0008\u000a-\u001f\u007f-\u009f]*$"
# RFC 9110 §5.5 field-value without obs-text: visible ASCII, space and horizontal tab.
HEADER_VALUE_PATTERN = r"^[\t\u0020-\u007e]*$"
# RFC 9110 §5.6.2 token (a field name).
TOKEN_PATTERN = r"^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$"

_MULTILINE_ALLOWED = frozenset("\t\n\r")
_TAB_ALLOWED = frozenset("\t")
_TOKEN_CHARS = frozenset(
    "!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
)


def _describe(ch: str) -> str:
    return f"U+{ord(ch):04X}"


def forbidden_char(value: str, *, allow: frozenset[str] = frozenset()) -> str | None:
    """The first control character or lone surrogate in `value` (not in `allow`), or None."""
    for ch in value:
        code = ord(ch)
        if (code < 0x20 or 0x7F <= code <= 0x9F or 0xD800 <= code <= 0xDFFF) and ch not in allow:
            return ch
    return None


class NoControlChars:
    """Annotated metadata: refuse control characters (those in `allow` excepted) and publish the
    rule as the JSON Schema `pattern`. Put length constraints before it, so an over-long value
    is refused as too long before it is scanned."""

    def __init__(self, *, allow: frozenset[str] = frozenset(), pattern: str = PLAIN_PATTERN):
        self.allow = allow
        self.pattern = pattern

    def check(self, value: Any) -> Any:
        if not isinstance(value, str):  # an optional parameter's None
            return value
        bad = forbidden_char(value, allow=self.allow)
        if bad is not None:
            allowed = ""
            if self.allow:
                allowed = " other than tab" + (" and newline" if "\n" in self.allow else "")
            raise ValueError(
                f"must not contain control characters{allowed} ({_describe(bad)} found)"
            )
        return value

    def __get_pydantic_core_schema__(
        self, source: Any, handler: GetCoreSchemaHandler
    ) -> core_schema.CoreSchema:
        return core_schema.no_info_after_validator_function(self.check, handler(source))

    def __get_pydantic_json_schema__(
        self, schema: core_schema.CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        json_schema = handler(schema)
        json_schema["pattern"] = self.pattern
        return json_schema


NO_CONTROL_CHARS = NoControlChars()
TAB_AND_NEWLINE_ONLY = NoControlChars(allow=_MULTILINE_ALLOWED, pattern=MULTILINE_PATTERN)
TAB_ONLY = NoControlChars(allow=_TAB_ALLOWED, pattern=TAB_PATTERN)


def is_token(value: str) -> bool:
    """True for an RFC 9110 token (what a header field name must be)."""
    return bool(value) and set(value) <= _TOKEN_CHARS


def header_value_problem(value: str) -> str | None:
    """Why `value` cannot be sent as an HTTP field value, or None. Non-ASCII is refused rather
    than encoded: RFC 9110 §5.5 leaves obs-text to the recipient, and receivers disagree."""
    for ch in value:
        if ch == "\t" or " " <= ch <= "~":
            continue
        if ord(ch) > 0x7E and forbidden_char(ch) is None:
            return f"must be ASCII (RFC 9110 §5.5); {_describe(ch)} found"
        return f"must not contain control characters ({_describe(ch)} found)"
    return None


PlainText = Annotated[str, NO_CONTROL_CHARS]
MultilineText = Annotated[str, TAB_AND_NEWLINE_ONLY]
