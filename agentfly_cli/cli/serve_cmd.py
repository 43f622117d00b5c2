"""``agentfly serve``: the OpenAI-compatible gateway that records agents' trajectories."""

from __future__ import annotations

from pathlib import Path

import typer

from agentfly_cli.cli.output import handle_errors, stderr_console
from agentfly_cli.errors import UserError

MODEL = typer.Option(..., "--model", help="A transformers folder or an alias (tiny, smollm2).")
BACKEND = typer.Option("hf", "--backend", help="The rollout backend: hf or vllm.")
HOST = typer.Option("127.0.0.1", "--host", help="The address to listen on.")
PORT = typer.Option(8000, "--port", help="The port (0: any free one).")
PARSER = typer.Option(None, "--parser", help="The tool-call format (default: the model's).")
TEMPLATE = typer.Option(None, "--template", help="A chat template file instead of the model's.")
MAX_TOKENS = typer.Option(1024, "--max-tokens", help="Tokens per reply when a request sets none.")
RECORD = typer.Option(None, "--record", help="Write each ended session's trajectories here.")


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
) -> None:
    """Serve the OpenAI chat API for MODEL, recording each session's requests.

    Point any OpenAI client at http://HOST:PORT/s/EPISODE/v1 and every request of the episode
    is recorded token-exactly. POST /sessions/EPISODE/end with {"reward": R} ends the episode
    and returns its trajectories (and writes them to --record).
    """
    from agentfly_cli.serve import build_gateway
    from agentfly_cli.serve.app import build_app
    from agentfly_cli.serve.server import uvicorn_server

    if not 0 <= port <= 65535:
        raise UserError(f"--port must be from 0 to 65535, not {port}")
    sock = _listening_socket(host, port)  # before the model loads: a taken port fails at once
    writer = None
    if record is not None:
        from agentfly_cli.rollout.trajectory import TrajectoryWriter

        if record.is_dir():
            raise UserError(f"--record {record} is a folder; give a .jsonl file path")
        writer = TrajectoryWriter(record)
    gateway = build_gateway(model, backend=backend, parser=parser, template=template,
                            max_tokens=max_tokens)  # fmt: skip

    def on_episode(episode) -> None:
        if writer is not None:
            for trajectory in episode.trajectories():
                writer.write(trajectory)

    server = uvicorn_server(build_app(gateway, on_episode), host, port)
    bound = sock.getsockname()[1]
    stderr_console().print(
        f"serving {model} ({backend}) at http://{host}:{bound}/v1; per episode: "
        f"http://{host}:{bound}/s/EPISODE/v1 (Ctrl-C stops)"
    )
    try:
        server.run(sockets=[sock])
    finally:
        sock.close()
        if writer is not None:
            writer.close()


def _listening_socket(host: str, port: int):
    """The server's socket, bound before the model loads; one line when it cannot be."""
    import socket

    from agentfly_cli.serve.server import listening_socket

    try:
        return listening_socket(host, port)
    except socket.gaierror as exc:
        raise UserError(f"--host {host}: {exc}; pass an address of this machine") from None
    except OSError as exc:
        raise UserError(
            f"cannot listen on {host}:{port} ({exc.strerror or exc}); pass another --port"
        ) from None
