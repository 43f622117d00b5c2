"""``agentfly serve``: the OpenAI-compatible gateway that records agents' trajectories."""

from __future__ import annotations

import os
from pathlib import Path

import typer

from agentfly_cli.api import serving
from agentfly_cli.api.errors import UserError
from agentfly_cli.api.serving import ServeLimits
from agentfly_cli.cli.output import handle_errors, stderr_console

DEFAULTS = ServeLimits()
MODEL = typer.Option(..., "--model", help="A transformers folder or an alias (tiny, smollm2).")
BACKEND = typer.Option("hf", "--backend", help="The rollout backend: hf or vllm.")
HOST = typer.Option(
    "127.0.0.1", "--host", help="The address to listen on (beyond loopback: needs --api-key)."
)
PORT = typer.Option(8000, "--port", help="The port (0: any free one).")
PARSER = typer.Option(None, "--parser", help="The tool-call format (default: the model's).")
TEMPLATE = typer.Option(None, "--template", help="A chat template file instead of the model's.")
MAX_TOKENS = typer.Option(1024, "--max-tokens", help="Tokens per reply when a request sets none.")
RECORD = typer.Option(
    None, "--record", help="Append each ended session's trajectories to this JSONL file."
)
API_KEY = typer.Option(
    None, "--api-key", help="The key every request must send (Authorization: Bearer KEY or "
    "x-api-key: KEY); default: $AGENTFLY_SERVE_API_KEY, else none (loopback only).",
)  # fmt: skip
MAX_BODY = typer.Option(
    DEFAULTS.max_body_bytes, "--max-body-bytes", help="Bytes of one request body (413 beyond)."
)
MAX_STOPS = typer.Option(DEFAULTS.max_stops, "--max-stops", help="Stop strings per request.")
MAX_STOP_CHARS = typer.Option(
    DEFAULTS.max_stop_chars, "--max-stop-chars", help="Characters of one stop string."
)
STOP_CACHE = typer.Option(
    DEFAULTS.stop_cache_size, "--stop-cache", help="Stop lists whose token ids are kept (LRU)."
)
MAX_SESSIONS = typer.Option(
    DEFAULTS.max_sessions, "--max-sessions", help="Sessions open at once (429 beyond)."
)
IDLE = typer.Option(
    DEFAULTS.session_idle_s, "--session-idle-s",
    help="Seconds without a request after which a session ends (and is recorded); 0: never.",
)  # fmt: skip
ENDED_KEPT = typer.Option(
    DEFAULTS.ended_kept, "--ended-kept",
    help="Ended session ids remembered (a request to one gets 409); the oldest are forgotten.",
)  # fmt: skip


@handle_errors
def serve(
    model: str = MODEL,
    backend: str = BACKEND,
    host: str = HOST,
    port: int = PORT,
    parser: str | None = PARSER,
    template: str | None = TEMPLATE,
    max_tokens: int = MAX_TOKENS,
    record: Path | None = RECORD,
    api_key: str | None = API_KEY,
    max_body_bytes: int = MAX_BODY,
    max_stops: int = MAX_STOPS,
    max_stop_chars: int = MAX_STOP_CHARS,
    stop_cache: int = STOP_CACHE,
    max_sessions: int = MAX_SESSIONS,
    session_idle_s: float = IDLE,
    ended_kept: int = ENDED_KEPT,
) -> None:
    """Serve the OpenAI chat API for MODEL, recording each session's requests.

    Point any OpenAI client at http://HOST:PORT/s/EPISODE/v1 and every request of the episode
    is recorded token-exactly (an Anthropic client at http://HOST:PORT/s/EPISODE: the Messages
    API, recorded alike). POST /sessions/EPISODE/end with {"reward": R} ends the episode
    and returns its trajectories (and appends them to --record).
    """
    if not 0 <= port <= 65535:
        raise UserError(f"--port must be from 0 to 65535, not {port}")
    if max_tokens < 1:
        raise UserError(f"--max-tokens must be at least 1, not {max_tokens}")
    limits = _limits(max_body_bytes, max_stops, max_stop_chars, stop_cache, max_sessions,
                     session_idle_s, ended_kept)  # fmt: skip
    key = _api_key(api_key)
    if record is not None:
        _check_record(record)
    sock = _listening_socket(host, port)  # before the model loads: a taken port fails at once
    loopback = serving.loopback_bind(host)
    if not loopback and key is None:
        sock.close()
        raise UserError(
            f"--host {host} listens beyond this machine, and the gateway has no API key: "
            "pass --api-key KEY (or set AGENTFLY_SERVE_API_KEY), or listen on 127.0.0.1"
        )
    writer = None

    def open_record() -> None:  # every flag is good: only now is the record file touched
        nonlocal writer
        if record is not None:
            writer = _open(record)

    try:
        gateway = serving.build_gateway(model, backend=backend, parser=parser, template=template,
                                max_tokens=max_tokens, limits=limits,
                                before_load=open_record)  # fmt: skip
    except BaseException:
        sock.close()
        if writer is not None:
            writer.close()
        raise

    def on_episode(episode) -> None:
        if writer is not None:
            for trajectory in episode.trajectories():
                writer.write(trajectory)

    # Host names are checked where no key is: a key already keeps rebinding pages out (and a
    # reverse proxy in front of a loopback bind sends its own Host).
    app = serving.gateway_app(
        gateway, on_episode, api_key=key, loopback_only=loopback and key is None
    )
    server = serving.uvicorn_server(app, host, port)
    serving.settle_heap()  # no 200 ms collector pauses over the loaded model while serving
    bound = sock.getsockname()[1]
    console = stderr_console()
    console.print(
        f"serving {model} ({backend}) at http://{host}:{bound}/v1; per episode: "
        f"http://{host}:{bound}/s/EPISODE/v1 (Ctrl-C stops)"
    )
    if not loopback:
        console.print(f"listening beyond loopback ({host}): every request needs the API key")
    try:
        server.run(sockets=[sock])
    finally:
        sock.close()
        if writer is not None:
            writer.close()


def _limits(body: int, stops: int, stop_chars: int, cache: int, sessions: int,
            idle: float, ended: int) -> ServeLimits:  # fmt: skip
    """The flags' bounds, checked (one line naming the flag)."""
    for flag, value in (("--max-body-bytes", body), ("--max-stops", stops),
                        ("--max-stop-chars", stop_chars), ("--stop-cache", cache),
                        ("--max-sessions", sessions), ("--ended-kept", ended)):  # fmt: skip
        if value < 1:
            raise UserError(f"{flag} must be at least 1, not {value}")
    if not (idle >= 0 and idle != float("inf")):
        raise UserError(f"--session-idle-s must be a number of seconds (0: never), not {idle}")
    return ServeLimits(max_body_bytes=body, max_stops=stops, max_stop_chars=stop_chars,
                       stop_cache_size=cache, max_sessions=sessions,
                       session_idle_s=idle or None, ended_kept=ended)  # fmt: skip


def _api_key(flag: str | None) -> str | None:
    """The API key from ``--api-key``, else ``AGENTFLY_SERVE_API_KEY``; checked."""
    source, key = "--api-key", flag
    if key is None:
        source, key = "AGENTFLY_SERVE_API_KEY", serving.serve_api_key()
        if key is not None and not key.strip():
            return None  # set but empty: as unset
    if key is None:
        return None
    problem = serving.api_key_problem(key)
    if problem is not None:
        raise UserError(
            f"{source} {problem}; pass a key such as the output of "
            "`python -c 'import secrets; print(secrets.token_urlsafe(32))'`"
        )
    return key


def _check_record(record: Path) -> None:
    """--record names a file this process may append to (nothing is written yet)."""
    if record.is_dir():
        raise UserError(f"--record {record} is a folder; give a .jsonl file path")
    if record.exists():
        if not os.access(record, os.W_OK):
            raise UserError(f"--record {record} cannot be written (permission denied)")
        return
    parent = next((p for p in [record.parent, *record.parent.parents] if p.exists()), None)
    if parent is None or not parent.is_dir():
        raise UserError(f"--record {record}: {parent} is not a folder; give a .jsonl file path")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise UserError(f"--record {record} cannot be created ({parent} is not writable)")


def _open(record: Path):
    """The record file opened for appending (what it holds already is kept)."""
    try:
        return serving.trajectory_writer(record)
    except OSError as exc:
        raise UserError(f"--record {record} cannot be opened ({exc.strerror or exc})") from None


def _listening_socket(host: str, port: int):
    """The server's socket, bound before the model loads; one line when it cannot be."""
    import socket

    try:
        return serving.listening_socket(host, port)
    except socket.gaierror as exc:
        raise UserError(f"--host {host}: {exc}; pass an address of this machine") from None
    except OSError as exc:
        raise UserError(
            f"cannot listen on {host}:{port} ({exc.strerror or exc}); pass another --port"
        ) from None
