"""The gateway's side of the runtime workers' private endpoints (workers/runtime_endpoint.py):
one persistent connection per runtime worker, many calls in flight on it."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
from typing import Any, get_args

from workers.adapters.mcp_client import Asker, AskRefused, FailureKind, McpFailure
from workers.runtime_endpoint import MAX_LINE_BYTES, encode

_KINDS = frozenset(get_args(FailureKind))


class RuntimeLink:
    def __init__(self, address: str, secret: bytes) -> None:
        self.address = address
        self.secret = secret.hex()
        self.ids = itertools.count(1)
        self.pending: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self.askers: dict[int, Asker] = {}  # who answers the questions of a call in flight
        self.asking: set[asyncio.Task[None]] = set()
        self.writer: asyncio.StreamWriter | None = None
        self.reader_task: asyncio.Task[None] | None = None
        self.lock = asyncio.Lock()

    async def _connect(self) -> asyncio.StreamWriter:
        async with self.lock:
            if self.writer is not None and not self.writer.is_closing():
                return self.writer
            host, _, port = self.address.rpartition(":")
            try:
                reader, writer = await asyncio.open_connection(
                    host, int(port), limit=MAX_LINE_BYTES
                )
            except OSError as exc:
                raise McpFailure(
                    "connect", f"the runtime worker at {self.address} is not reachable ({exc})."
                ) from exc
            writer.write(encode({"auth": self.secret}))
            self.writer = writer
            self.reader_task = asyncio.create_task(self._read(reader, writer))
            return writer

    async def _read(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while line := await reader.readline():
                message = json.loads(line)
                if "ask" in message:  # the server asks a question during the call
                    task = asyncio.create_task(self._answer(writer, message))
                    self.asking.add(task)
                    task.add_done_callback(self.asking.discard)
                    continue
                future = self.pending.pop(message.get("id"), None)
                if future is not None and not future.done():
                    future.set_result(message)
        except (ConnectionError, ValueError, asyncio.IncompleteReadError):
            pass
        finally:
            if self.writer is writer:
                self.writer = None
            failure = McpFailure("closed", f"the runtime worker at {self.address} went away.")
            for future in list(self.pending.values()):
                if not future.done():
                    future.set_exception(failure)
            self.pending.clear()

    async def _answer(self, writer: asyncio.StreamWriter, message: dict[str, Any]) -> None:
        asker = self.askers.get(message.get("id"))  # type: ignore[arg-type]
        reply: dict[str, Any] = {"answer": message["ask"]}
        try:
            if asker is None:
                raise AskRefused("The call that asked is no longer in flight.")
            reply["result"] = await asker(dict(message.get("params") or {}))
        except AskRefused as exc:
            reply["refused"] = str(exc)
        except Exception as exc:  # the caller's client failed to answer
            reply["refused"] = f"The caller could not answer: {exc}"
        with contextlib.suppress(ConnectionError):
            writer.write(encode(reply))
            await writer.drain()

    async def call(self, request: dict[str, Any], asker: Asker | None = None) -> dict[str, Any]:
        """Send one call and wait for its answer (the caller bounds the wait); a question the
        server asks meanwhile goes to `asker`."""
        writer = await self._connect()
        request_id = next(self.ids)
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self.pending[request_id] = future
        if asker is not None:
            self.askers[request_id] = asker
        try:
            writer.write(encode({**request, "id": request_id}))
            await writer.drain()
        except ConnectionError as exc:
            self.pending.pop(request_id, None)
            self.askers.pop(request_id, None)
            raise McpFailure("connect", f"the runtime worker at {self.address}: {exc}") from exc
        try:
            message = await future
        finally:
            self.pending.pop(request_id, None)
            self.askers.pop(request_id, None)
        if "error" in message:
            error = message["error"]
            kind = error.get("kind")
            raise McpFailure(kind if kind in _KINDS else "protocol", str(error.get("message", "")))
        result: dict[str, Any] = message["result"]
        return result

    async def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        if self.reader_task is not None:
            self.reader_task.cancel()
            with contextlib.suppress(BaseException):
                await self.reader_task
