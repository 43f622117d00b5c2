"""Length-prefixed frames over asyncio streams: pickle between trusted processes, JSON on sockets.

A frame is a 4-byte big-endian length, then the payload. The subprocess provider talks pickle
over a private socket pair (it may carry any Python object); the pool server talks JSON, so a
peer can never make it unpickle code.
"""

from __future__ import annotations

import asyncio
import json
import pickle
import struct
from typing import Any

MAX_FRAME = 64 * 2**20
_HEADER = struct.Struct(">I")


class FrameError(ConnectionError):
    """The peer sent something that is not a frame (or closed the connection mid-frame)."""


async def read_frame(
    reader: asyncio.StreamReader, codec: str = "json", max_size: int = MAX_FRAME
) -> Any:
    """The next message; ``EOFError`` when the peer closed the connection between frames.

    A frame announced larger than ``max_size`` is refused from its header, before a byte of it
    is buffered.
    """
    try:
        header = await reader.readexactly(_HEADER.size)
    except asyncio.IncompleteReadError as exc:
        if not exc.partial:
            raise EOFError("the peer closed the connection") from None
        raise FrameError("the connection closed inside a frame header") from None
    (size,) = _HEADER.unpack(header)
    if size > max_size:
        raise FrameError(f"frame of {size} bytes exceeds the {max_size}-byte limit")
    try:
        payload = await reader.readexactly(size)
    except asyncio.IncompleteReadError:
        raise FrameError("the connection closed inside a frame") from None
    return decode(payload, codec)


async def write_frame(writer: asyncio.StreamWriter, message: Any, codec: str = "json") -> None:
    payload = encode(message, codec)
    writer.write(_HEADER.pack(len(payload)) + payload)
    await writer.drain()


def encode(message: Any, codec: str) -> bytes:
    if codec == "pickle":
        payload = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    else:
        payload = json.dumps(message, ensure_ascii=False, default=_not_json).encode()
    if len(payload) > MAX_FRAME:
        raise FrameError(f"message of {len(payload)} bytes exceeds the {MAX_FRAME}-byte limit")
    return payload


def decode(payload: bytes, codec: str) -> Any:
    if codec == "pickle":
        return pickle.loads(payload)
    try:
        return json.loads(payload)
    except ValueError as exc:
        raise FrameError(f"not a JSON frame: {exc}") from None


def _not_json(value: Any) -> Any:
    raise TypeError(
        f"{type(value).__name__} is not JSON-serialisable; envs served by a pool server must "
        "take and return JSON values (str, numbers, lists, dicts)"
    )


def describe_error(exc: BaseException) -> dict[str, str]:
    """An exception as data: its type name and message."""
    return {"type": type(exc).__name__, "message": str(exc)}


class RemoteEnvError(RuntimeError):
    """An env raised in another process; the message keeps the original type and text."""

    def __init__(self, type_name: str, message: str) -> None:
        super().__init__(f"{type_name}: {message}")
        self.type_name = type_name
        self.remote_message = message


def rebuild_error(type_name: str, message: str) -> Exception:
    """The env's exception on this side: the same built-in type where there is one, and a
    :class:`~agentfly_cli.errors.UserError` (a configuration problem) stays one."""
    import builtins

    from agentfly_cli import errors

    cls = getattr(builtins, type_name, None)
    if cls is None and type_name in ("UserError", "EnvConfigError"):
        cls = errors.UserError
    if isinstance(cls, type) and issubclass(cls, Exception):
        try:
            return cls(message)
        except Exception:
            pass
    return RemoteEnvError(type_name, message)
