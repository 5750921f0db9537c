"""The API's JSON parser: a body nested too deeply, or holding a lone UTF-16 surrogate, is a 400 in
the API's error shape, not a 500."""

from __future__ import annotations

from collections.abc import Mapping
from typing import IO, Any

from rest_framework.exceptions import ParseError
from rest_framework.parsers import JSONParser

from registry.core.json_input import LONE_SURROGATE_MESSAGE, json_has_lone_surrogate


class BoundedJSONParser(JSONParser):
    def parse(
        self,
        stream: IO[Any],
        media_type: str | None = None,
        parser_context: Mapping[str, Any] | None = None,
    ) -> Any:
        try:
            data = super().parse(stream, media_type, parser_context)
        except RecursionError as exc:
            raise ParseError("JSON parse error - the body is nested too deeply.") from exc
        if json_has_lone_surrogate(data):
            raise ParseError(f"JSON parse error - {LONE_SURROGATE_MESSAGE}")
        return data
