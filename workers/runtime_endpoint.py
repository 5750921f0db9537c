"""The private endpoint of a runtime worker: the gateway's way to the stdio and sandboxed
servers this worker holds (docs/workers.md, docs/gateway.md). Not a Celery round trip.

More: docs/workers.md, "Module notes"."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import hmac
import itertools
import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from mcp.shared.dispatcher import ProgressFnT

from workers.adapters.mcp_client import Asker, AskRefused, CallLog, McpConnection, McpFailure
from workers.definitions import DefinitionChanged, definition_changed

logger = logging.getLogger(__name__)

MAX_LINE_BYTES = 16 * 1024 * 1024
# A call, and how to ask the gateway's caller a question the server asks during it.
CallHandler = Callable[[dict[str, Any], Asker], Awaitable[dict[str, Any]]]


# Where the server's progress reports of the call being served in this task go (the gateway).
call_progress: contextvars.ContextVar[ProgressFnT | None] = contextvars.ContextVar(
    "toolroom_runtime_call_progress", default=None
)

# Where the server's log messages of the call being served in this task go (the gateway), when
# the gateway's caller asked for them (the request's `log_level`).
call_log: contextvars.ContextVar[CallLog | None] = contextvars.ContextVar(
    "toolroom_runtime_call_log", default=None
)


def _forget(calls: dict[Any, Any], call_id: Any, _: object) -> None:
    calls.pop(call_id, None)


def call_work(
    request: dict[str, Any], ask: Asker, listed: Callable[[], dict[str, str] | None]
) -> Callable[[McpConnection], Awaitable[dict[str, Any]]]:
    """What a gateway's request asks of the session it runs on: a resource read, a prompt or a
    tool call; the call is refused, never sent, when that session lists (`listed`: what it listed
    on open or since) the tool with another definition than the one the call was allowed for."""
    timeout = float(request.get("timeout") or 30.0)
    op, name = str(request.get("op") or "call_tool"), str(request.get("name") or "")
    tool, arguments = str(request.get("tool") or ""), dict(request.get("arguments") or {})
    approved = str(request.get("definition_hash") or "")
    progress = call_progress.get()  # the server's reports go to the gateway
    log = call_log.get()  # and its log messages, if the caller asked for them

    async def work(connection: McpConnection) -> dict[str, Any]:
        if op == "read_resource":
            return await connection.read_resource(name, timeout=timeout)
        if op == "get_prompt":
            prompt_arguments = {
                str(k): str(v) for k, v in dict(request.get("op_arguments") or {}).items()
            }
            return await connection.get_prompt(name, prompt_arguments, timeout=timeout)
        if definition_changed(listed(), tool, approved):
            raise DefinitionChanged(tool)  # a rug pull seen as the session opened, or since
        return await connection.call_tool(
            tool,
            arguments,
            timeout=timeout,
            meta=dict(request.get("meta") or {}) or None,
            asker=ask,
            progress=progress,
            log=log,
        )

    return work


def encode(message: dict[str, Any]) -> bytes:
    return json.dumps(message, separators=(",", ":"), default=str).encode() + b"\n"


class RuntimeEndpoint:
    """Listens on host:port (0: any free port) and hands each call to `handle`."""

    def __init__(self, *, host: str, port: int, secret: bytes, handle: CallHandler) -> None:
        self.host = host
        self.port = port
        self.secret = secret.hex()
        self.handle = handle
        self.server: asyncio.Server | None = None
        self.connections: set[asyncio.Task[Any]] = set()

    async def start(self) -> str:
        self.server = await asyncio.start_server(
            self._connection, self.host, self.port, limit=MAX_LINE_BYTES
        )
        port = self.server.sockets[0].getsockname()[1]
        return f"{self.host}:{port}"

    async def close(self) -> None:
        if self.server is not None:
            self.server.close()
        connections = list(self.connections)
        for task in connections:
            task.cancel()
        await asyncio.gather(*connections, return_exceptions=True)
        if self.server is not None:
            with contextlib.suppress(Exception):
                await self.server.wait_closed()

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        current = asyncio.current_task()
        if current is not None:
            self.connections.add(current)
            current.add_done_callback(self.connections.discard)
        tasks: set[asyncio.Task[None]] = set()
        by_id: dict[Any, asyncio.Task[None]] = {}
        lock = asyncio.Lock()
        questions: dict[int, asyncio.Future[dict[str, Any]]] = {}
        question_ids = itertools.count(1)

        async def answer(message: dict[str, Any]) -> None:
            async with lock:
                writer.write(encode(message))
                await writer.drain()

        async def serve(request: dict[str, Any]) -> None:
            async def ask(method: str, params: dict[str, Any]) -> dict[str, Any]:
                number = next(question_ids)
                future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
                questions[number] = future
                asked = {"id": request.get("id"), "ask": number, "method": method, "params": params}
                try:
                    await answer(asked)
                    reply = await future
                finally:
                    questions.pop(number, None)
                if "refused" in reply:
                    raise AskRefused(str(reply["refused"]))
                return dict(reply.get("result") or {})

            async def report(progress: float, total: float | None, message: str | None) -> None:
                sent = {"progress": progress, "total": total, "message": message}
                with contextlib.suppress(ConnectionError):
                    await answer({"id": request.get("id"), "progress": sent})

            call_progress.set(report)
            level = request.get("log_level")
            if isinstance(level, str):

                async def log(level: str, data: Any, logger_name: str | None) -> None:
                    sent = {"level": level, "data": data, "logger": logger_name}
                    with contextlib.suppress(ConnectionError):
                        await answer({"id": request.get("id"), "log": sent})

                call_log.set(CallLog(level, log))
            try:
                result = await self.handle(request, ask)
            except DefinitionChanged as refusal:  # refused by the worker, never sent
                await answer(
                    {
                        "id": request.get("id"),
                        "error": {"refusal": refusal.code, "message": refusal.message},
                    }
                )
            except McpFailure as failure:
                await answer(
                    {
                        "id": request.get("id"),
                        "error": {"kind": failure.kind, "message": str(failure)},
                    }
                )
            except Exception as exc:
                logger.exception("runtime endpoint call failed")
                await answer(
                    {"id": request.get("id"), "error": {"kind": "protocol", "message": str(exc)}}
                )
            else:
                await answer({"id": request.get("id"), "result": result})

        try:
            hello = json.loads(await reader.readline() or b"{}")
            if not hmac.compare_digest(str(hello.get("auth", "")), self.secret):
                return
            while line := await reader.readline():
                message = json.loads(line)
                if "answer" in message:  # the gateway answers a question of a call
                    waiting = questions.get(message["answer"])
                    if waiting is not None and not waiting.done():
                        waiting.set_result(message)
                    continue
                if "cancel" in message:  # the gateway no longer waits for this call
                    cancelled = by_id.get(message["cancel"])
                    if cancelled is not None:
                        cancelled.cancel()
                    continue
                task = asyncio.create_task(serve(message))
                tasks.add(task)
                task.add_done_callback(tasks.discard)
                by_id[message.get("id")] = task
                task.add_done_callback(functools.partial(_forget, by_id, message.get("id")))
        except (ConnectionError, ValueError, asyncio.IncompleteReadError):
            pass
        except asyncio.CancelledError:
            # `close` cancels the connections; the handler ends quietly, since Python 3.11's
            # stream server asks a cancelled handler task for its exception and logs the
            # CancelledError as an error ("Exception in callback ... connection_made").
            if current is None or current.cancelling() == 0:
                raise
            current.uncancel()
        finally:
            for task in tasks:
                task.cancel()
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()
