"""A tool's result in the shape each function-calling SDK accepts back as a tool result (the REST
call endpoint's `?format=`), so an agent hands it on as it is.

More: docs/gateway.md, "Module notes"."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

RESULT_FORMATS = ("mcp", "openai", "anthropic")
# The image types both APIs accept as base64 images.
IMAGE_TYPES = frozenset({"image/jpeg", "image/png", "image/gif", "image/webp"})
PDF_TYPE = "application/pdf"


def result_format_error(value: str) -> str | None:
    """Why `value` is not a result format (None when it is one)."""
    if value in RESULT_FORMATS:
        return None
    return f"format must be one of {', '.join(RESULT_FORMATS)} (mcp when absent), not {value!r}."


def render_result(result: Mapping[str, Any], fmt: str) -> dict[str, Any]:
    """`result` (an MCP CallToolResult as JSON) in the format `fmt` (one of RESULT_FORMATS)."""
    content = [block for block in result.get("content") or [] if isinstance(block, Mapping)]
    structured = result.get("structuredContent")
    is_error = bool(result.get("isError", False))
    if fmt == "openai":
        parts = _parts(content, structured, _OPENAI)
        return {"type": "function_call_output", "output": parts}
    if fmt == "anthropic":
        return {
            "type": "tool_result",
            "content": _parts(content, structured, _ANTHROPIC),
            "is_error": is_error,
        }
    return {"content": list(content), "structuredContent": structured, "isError": is_error}


class _Shapes:
    """How one API spells the few kinds of part a tool result can hold."""

    def __init__(
        self,
        *,
        text: Callable[[str], dict[str, Any]],
        image: Callable[[str, str], dict[str, Any]],
        text_document: Callable[[str, str], dict[str, Any]],
        pdf: Callable[[str, str], dict[str, Any]],
    ) -> None:
        self.text = text
        self.image = image
        self.text_document = text_document
        self.pdf = pdf


def _file_name(uri: str) -> str:
    return uri.rstrip("/").rsplit("/", 1)[-1] or "resource"


_OPENAI = _Shapes(
    text=lambda text: {"type": "input_text", "text": text},
    image=lambda mime, data: {"type": "input_image", "image_url": f"data:{mime};base64,{data}"},
    text_document=lambda uri, text: {"type": "input_text", "text": f"Resource {uri}:\n{text}"},
    pdf=lambda uri, data: {
        "type": "input_file",
        "filename": _file_name(uri),
        "file_data": f"data:{PDF_TYPE};base64,{data}",
    },
)
_ANTHROPIC = _Shapes(
    text=lambda text: {"type": "text", "text": text},
    image=lambda mime, data: {
        "type": "image",
        "source": {"type": "base64", "media_type": mime, "data": data},
    },
    text_document=lambda uri, text: {
        "type": "document",
        "source": {"type": "text", "media_type": "text/plain", "data": text},
        "title": uri,
    },
    pdf=lambda uri, data: {
        "type": "document",
        "source": {"type": "base64", "media_type": PDF_TYPE, "data": data},
        "title": uri,
    },
)


def _not_carried(what: str, mime: str, data: str) -> str:
    return (
        f"[The tool returned {what} ({mime or 'no type given'}, {len(data)} characters of "
        "base64), which this format cannot carry.]"
    )


def _link_text(block: Mapping[str, Any]) -> str:
    name = str(block.get("title") or block.get("name") or "")
    text = (
        f"Resource link: {name} <{block.get('uri', '')}>"
        if name
        else f"Resource link: <{block.get('uri', '')}>"
    )
    if block.get("mimeType"):
        text += f" ({block['mimeType']})"
    if block.get("description"):
        text += f": {block['description']}"
    return text


def _part(block: Mapping[str, Any], shapes: _Shapes) -> dict[str, Any] | None:
    kind = block.get("type")
    if kind == "text":
        text = str(block.get("text") or "")
        return shapes.text(text) if text else None  # an empty text block is refused by both
    if kind in ("image", "audio"):
        mime, data = str(block.get("mimeType") or ""), str(block.get("data") or "")
        if kind == "image" and mime in IMAGE_TYPES:
            return shapes.image(mime, data)
        return shapes.text(_not_carried(f"an {kind}" if kind == "image" else "audio", mime, data))
    if kind == "resource_link":
        return shapes.text(_link_text(block))
    if kind == "resource":
        resource = block.get("resource")
        if not isinstance(resource, Mapping):
            return None
        uri, mime = str(resource.get("uri") or ""), str(resource.get("mimeType") or "")
        if "text" in resource:
            return shapes.text_document(uri, str(resource.get("text") or ""))
        blob = str(resource.get("blob") or "")
        if mime in IMAGE_TYPES:
            return shapes.image(mime, blob)
        if mime == PDF_TYPE:
            return shapes.pdf(uri, blob)
        return shapes.text(_not_carried(f"the resource {uri}", mime, blob))
    return shapes.text(f"[The tool returned a {kind!s} block, which this format cannot carry.]")


def _parts(
    content: list[Mapping[str, Any]], structured: Any, shapes: _Shapes
) -> list[dict[str, Any]]:
    parts = [part for block in content if (part := _part(block, shapes)) is not None]
    if not parts and structured is not None:
        # A server should repeat structured content as text; one that did not still answers.
        parts.append(shapes.text(json.dumps(structured, ensure_ascii=False)))
    return parts
