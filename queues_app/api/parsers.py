"""A JSON parser that turns every malformed body into a 400, never a 500.

DRF's parser maps ``ValueError`` to a ParseError, but deeply nested JSON ("[[[[...") makes the
stdlib decoder raise ``RecursionError`` (a 500).  We also cap nesting explicitly: no valid
request of this API is deeper than a few levels, so 32 is generous and bounds the work the
serializers do on hostile input.

A NUL character in any string (key or value) is refused here with a 400 naming where it is:
PostgreSQL cannot store it (``DataError``), and no name, label or note of this API has one.
"""
from __future__ import annotations

import json
from typing import Any

from django.conf import settings
from rest_framework.exceptions import ParseError, ValidationError
from rest_framework.parsers import JSONParser

MAX_JSON_DEPTH = 32
NUL_MESSAGE = "Null characters are not allowed."


def _depth_ok(value: Any, limit: int) -> bool:
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (dict, list)):
            if depth > limit:
                return False
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, depth + 1) for child in children)
    return True


def nul_paths(value: Any, limit: int = 20) -> list[str]:
    """Paths (``tasks[0].node_selector``, ``queue``) of strings holding a NUL character; a key
    holding one is reported at its parent's path."""
    found: list[str] = []
    stack: list[tuple[Any, str]] = [(value, "")]
    while stack and len(found) < limit:
        item, path = stack.pop()
        if isinstance(item, str):
            if "\x00" in item:
                found.append(path or "non_field_errors")
        elif isinstance(item, dict):
            for k, v in item.items():
                key = str(k)
                if "\x00" in key:
                    found.append(path or "non_field_errors")
                    continue
                stack.append((v, f"{path}.{key}" if path else key))
        elif isinstance(item, list):
            stack.extend((v, f"{path}[{i}]") for i, v in enumerate(item))
    return sorted(set(found))


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


class BoundedJSONParser(JSONParser):
    def parse(self, stream, media_type=None, parser_context=None):
        parser_context = parser_context or {}
        encoding = parser_context.get("encoding", settings.DEFAULT_CHARSET)
        try:
            raw = stream.read() if stream is not None else b""
            text = raw.decode(encoding)
            data = json.loads(text, parse_constant=_reject_constant)
        except RecursionError:
            raise ParseError(f"JSON parse error - nested deeper than {MAX_JSON_DEPTH} levels.") from None
        except (ValueError, UnicodeDecodeError) as exc:
            raise ParseError(f"JSON parse error - {exc}") from None
        if not _depth_ok(data, MAX_JSON_DEPTH):
            raise ParseError(f"JSON parse error - nested deeper than {MAX_JSON_DEPTH} levels.")
        bad = nul_paths(data)
        if bad:
            raise ValidationError({path: [NUL_MESSAGE] for path in bad})
        return data
