"""Byte plumbing of an attached container: Docker's stream frames, JSON-RPC lines, a stderr tail.

With `tty=False` the engine multiplexes stdout and stderr on the attach connection: each frame is
an 8-byte header (stream type, three zero bytes, big-endian payload length) and the payload. These
classes are pure (no I/O) and bounded: a server cannot make the worker hold more than one maximal
line of its output.
"""

from __future__ import annotations

import struct
from collections import deque
from collections.abc import Iterator

STDOUT = 1
STDERR = 2
_HEADER = struct.Struct(">BxxxL")


class StreamProtocolError(Exception):
    """The attach connection carried something that is not Docker's stream framing."""


class FrameDemuxer:
    """Splits the attach connection's bytes into (stream, payload) pieces as they arrive."""

    def __init__(self) -> None:
        self._buffer = bytearray()
        self._stream = 0
        self._remaining = 0

    def feed(self, data: bytes) -> Iterator[tuple[int, bytes]]:
        """Pieces of frames in `data`; a frame's payload may come out in several pieces."""
        self._buffer += data
        while self._buffer:
            if self._remaining == 0:
                if len(self._buffer) < _HEADER.size:
                    return
                stream, size = _HEADER.unpack_from(self._buffer)
                if stream not in (0, STDOUT, STDERR) or self._buffer[1:4] != b"\0\0\0":
                    raise StreamProtocolError(
                        f"unexpected bytes on the attach stream: {bytes(self._buffer[:8])!r}"
                    )
                del self._buffer[: _HEADER.size]
                self._stream, self._remaining = stream, size
                continue
            piece = bytes(self._buffer[: self._remaining])
            del self._buffer[: len(piece)]
            self._remaining -= len(piece)
            yield self._stream, piece

    @property
    def pending(self) -> int:
        """Bytes of a frame still expected (0 at a frame boundary)."""
        return self._remaining + len(self._buffer)


class LineTooLongError(Exception):
    def __init__(self, limit: int) -> None:
        super().__init__(f"the server sent a line longer than {limit} bytes without a newline")
        self.limit = limit


class LineSplitter:
    """Whole lines out of a byte stream; refuses a line longer than `max_bytes`."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._partial = bytearray()

    def feed(self, data: bytes) -> list[bytes]:
        self._partial += data
        if b"\n" not in data:
            if len(self._partial) > self.max_bytes:
                raise LineTooLongError(self.max_bytes)
            return []
        *lines, rest = bytes(self._partial).split(b"\n")
        self._partial = bytearray(rest)
        if any(len(line) > self.max_bytes for line in lines) or len(rest) > self.max_bytes:
            raise LineTooLongError(self.max_bytes)
        return lines

    def rest(self) -> bytes:
        """What came after the last newline (at the end of the stream)."""
        return bytes(self._partial)


class StderrTail:
    """The last `max_lines` lines of a server's stderr, each cut to `max_line_chars`."""

    def __init__(self, max_lines: int, max_line_chars: int = 1000) -> None:
        self.lines: deque[str] = deque(maxlen=max(max_lines, 0))
        self.max_line_chars = max_line_chars
        self._partial = ""
        self.total_lines = 0

    def feed(self, data: bytes) -> list[str]:
        """Add output; returns the lines completed by it (for logging)."""
        text = self._partial + data.decode("utf-8", errors="replace")
        *complete, self._partial = text.split("\n")
        if len(self._partial) > self.max_line_chars:
            complete.append(self._partial)
            self._partial = ""
        done = [line.rstrip("\r")[: self.max_line_chars] for line in complete]
        self.lines.extend(done)
        self.total_lines += len(done)
        return done

    def finish(self) -> None:
        if self._partial:
            self.feed(b"\n")

    def tail(self) -> tuple[str, ...]:
        return tuple(self.lines)
