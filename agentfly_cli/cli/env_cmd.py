"""``agentfly env``: the environments. ``env list``: the kinds that are registered;
``env up / servers / down``: pool servers that rollouts and training connect to."""

from __future__ import annotations

import typer

from agentfly_cli.cli.envs_cmd import list_envs
from agentfly_cli.cli.fitted_table import print_fitted, wrap_words
from agentfly_cli.cli.output import (
    EXIT_FAILURE,
    JSON_OPTION,
    fail,
    handle_errors,
    print_json,
    stderr_console,
    stdout_console,
)

app = typer.Typer(
    help="Environments: `env list` (the kinds), `env up NAME`, `env servers`, `env down [NAME]`.",
    no_args_is_help=True,
)
app.command("list")(list_envs)


@app.command("up")
@handle_errors
def up(
    name: str = typer.Argument(..., help="The env to serve (see `agentfly env list`)."),
    size: int = typer.Option(None, "--size", min=1, help="Envs kept started (default: 1)."),
    max_size: int = typer.Option(None, "--max", min=1, help="Most envs at once (default: --size)."),
    provider: str = typer.Option(
        "local", "--provider", help="Where envs live: local (the server), process, ray."
    ),
    ray_address: str = typer.Option(None, "--ray-address", help="Ray cluster to join."),
    option: list[str] = typer.Option(
        [], "--option", "-o", help="KEY=VALUE for the env's factory (repeatable)."
    ),
    host: str = typer.Option(
        None, "--host", help="Listen on TCP at this host (a token is made); default: a unix socket."
    ),
    port: int = typer.Option(0, "--port", help="TCP port with --host (0: any free port)."),
    lease_timeout: float = typer.Option(
        None,
        "--lease-timeout",
        help="Most seconds a client may hold an env; then it is taken back and replaced.",
    ),
    wait: float = typer.Option(120.0, "--wait", help="Seconds to wait for the warm envs."),
    foreground: bool = typer.Option(
        False, "--foreground", help="Serve in this process until Ctrl-C (for service managers)."
    ),
    as_json: bool = JSON_OPTION,
) -> None:
    """Start a pool server for NAME with --size warm envs, in the background."""
    from agentfly_cli.api.envs import (
        ServerStartError,
        check_provider,
        check_server_name,
        parse_options,
        pool_config,
        start_server,
    )

    check_server_name(name)
    check_provider(provider)
    size = size or 1
    config = pool_config(
        provider=provider,
        ray_address=ray_address,
        warm_size=size,
        pool_max=max_size or size,
        lease_timeout=lease_timeout,
        options=parse_options(option),
    )
    if foreground:
        from agentfly_cli.api.envs import check_can_serve, serve_pool

        check_can_serve(name)
        stderr_console().print(f"serving env '{name}' until Ctrl-C", highlight=False)
        serve_pool(name, config, host=host, port=port)
        return
    try:
        record = start_server(name, config, host=host, port=port, wait=wait)
    except ServerStartError as exc:
        stderr_console().print(str(exc), markup=False, highlight=False)
        raise fail(f"the '{name}' pool server did not start (log above)", EXIT_FAILURE) from None
    if as_json:
        print_json(record.public() | ({"token": record.token} if record.token else {}))
        return
    out = stdout_console()
    out.print(
        f"env '{name}': {record.size} warm env(s), at most {record.pool_max}, "
        f"provider {record.provider}, pid {record.pid}",
        highlight=False,
    )
    out.print(f"address: {record.address}", highlight=False)
    use = f"--set envs.{name}.address={name}"
    if record.token:
        use = f"--set envs.{name}.address={record.address} --set envs.{name}.token={record.token}"
    out.print(f"use it: agentfly rollout ... {use}", highlight=False, markup=False)


@app.command("servers")
@app.command("ls", hidden=True)  # its first name
@handle_errors
def servers(as_json: bool = JSON_OPTION) -> None:
    """Show the pool servers and the state of their pools."""
    from agentfly_cli.api.envs import list_servers

    rows = list_servers()
    if as_json:
        print_json(rows)
        return
    if not rows:
        stdout_console().print("no pool servers; start one with `agentfly env up NAME`")
        return
    out = stdout_console()
    cells = [(r["name"], r["status"], r["pid"], r["provider"], pool_summary(r)) for r in rows]
    print_fitted(out, f"{len(rows)} pool server(s)", SERVER_COLUMNS, cells)
    for row in rows:
        out.print(wrap_words(row["address"], out.width, f"{row['name']}: "), **PLAIN)
        if row.get("error"):
            out.print(wrap_words(row["error"], out.width, f"{row['name']}: "), **PLAIN)


SERVER_COLUMNS = ("name", "status", "pid", "provider", "envs")
PLAIN = {"markup": False, "highlight": False, "soft_wrap": True}


def pool_summary(row: dict) -> str:
    """A server's pool in words: ``2 in use, 1 idle, max 8; 0 waiting, 0 failed, ...``."""
    stats = row["stats"]
    sizes = f"max {row['pool_max']}"
    if not stats:
        return sizes
    sizes = f"{stats.get('in_use', 0)} in use, {stats.get('idle', 0)} idle, {sizes}"
    counts = ", ".join(f"{stats[key]} {key}" for key in POOL_COUNTS if key in stats)
    return f"{sizes}; {counts}"


POOL_COUNTS = ("waiting", "failed", "restarts", "timeouts", "expired")


@app.command("down")
@handle_errors
def down(
    name: str = typer.Argument(None, help="The server to stop; default: all of them."),
    timeout: float = typer.Option(30.0, "--timeout", help="Seconds before SIGKILL."),
    as_json: bool = JSON_OPTION,
) -> None:
    """Stop pool servers: their envs are closed, then they exit."""
    from agentfly_cli.api.envs import server_names, stop_server

    names = [name] if name is not None else server_names()
    results = [stop_server(n, timeout) for n in names]
    if as_json:
        print_json(results)
        return
    if not results:
        stdout_console().print("no pool servers were running")
    for result in results:
        stdout_console().print(
            f"stopped '{result['name']}' (pid {result['pid']}, {result['stopped_by']})",
            highlight=False,
        )
