"""The embedded default's broker in files (kombu's filesystem transport), with each message file
written under a name no reader takes and then renamed into place: a reader never sees it half
written."""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable
from time import monotonic
from typing import Any, cast

from kombu.exceptions import ChannelError
from kombu.transport import TRANSPORT_ALIASES, filesystem
from kombu.utils.json import dumps

_dumps = cast(Callable[[Any], str], dumps)  # kombu's JSON (its types), untyped


class Channel(filesystem.Channel):
    """kombu's writer opens the final `.msg` file and then writes it, so a reader listing the
    folder meanwhile could take an empty message (the quickstart's worker died of one, a
    JSONDecodeError). Here the message is written to a `.part` file (which `_get` skips: its
    name does not end in `.<queue>.msg`) and renamed to its `.msg` name, atomically."""

    # kombu names the argument `message` in its base class and `payload` in this one.
    def _put(self, queue: Any, payload: Any, **kwargs: Any) -> None:  # type: ignore[override]
        name = f"{round(monotonic() * 1000)}_{uuid.uuid4()}.{queue}.msg"
        final = os.path.join(self.data_folder_out, name)
        partial = os.path.join(self.data_folder_out, f".{name}.part")
        try:
            with open(partial, "wb", buffering=0) as file:
                file.write(_dumps(payload).encode())
            os.replace(partial, final)
        except OSError as exc:
            raise ChannelError(f"Cannot add file {final!r} to directory") from exc


class Transport(filesystem.Transport):
    Channel = Channel


# Every process that loads the settings sends and reads `filesystem://` through this transport; a
# process that did not would use kombu's, which reads and writes the same files.
TRANSPORT_ALIASES["filesystem"] = "registry.core.file_broker:Transport"
