"""Shutdown on Ctrl-C and SIGTERM closes every env: no env process outlives its run."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from agentfly_cli.envs.state import pid_alive

SCRIPT = textwrap.dedent(
    """
    import asyncio, signal, sys
    # as in a terminal: a test run started in the background (`make test &`) hands its children
    # an ignored SIGINT, and then Ctrl-C would reach nothing
    signal.signal(signal.SIGINT, signal.default_int_handler)
    from agentfly_cli.envs.manager import ResourceManager
    from agentfly_cli.settings.envs import EnvPoolSettings
    from agentfly_cli.runtime.shutdown import run_with_clean_shutdown
    from envs_builtin.scratchpad import SCRATCHPAD

    async def main():
        config = EnvPoolSettings(provider="process", warm_size=2, pool_max=3)
        manager = ResourceManager({"scratchpad": SCRATCHPAD}, {"scratchpad": config})
        async with manager:
            async with manager.lease("scratchpad") as leased:
                pool = manager._pools["scratchpad"]
                pids = [leased.info["pid"]] + [h.info["pid"] for h, _ in pool._idle]
                print("PIDS", *pids, flush=True)
                await asyncio.sleep(3600)

    run_with_clean_shutdown(main())
    """
)


@pytest.mark.parametrize(
    ("signum", "exit_code"),
    [(signal.SIGTERM, 143), (signal.SIGINT, -signal.SIGINT)],
    ids=["sigterm", "ctrl-c"],
)
def test_a_signal_closes_every_env_process(signum, exit_code):
    process = subprocess.Popen(
        [sys.executable, "-c", SCRIPT],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)},
    )
    try:
        line = process.stdout.readline()
        assert line.startswith("PIDS"), line + process.stderr.read()
        pids = [int(p) for p in line.split()[1:]]
        assert len(pids) == 2 and all(pid_alive(pid) for pid in pids)
        process.send_signal(signum)
        assert process.wait(30) == exit_code
    finally:
        if process.poll() is None:
            process.kill()
    deadline = time.monotonic() + 5
    while any(pid_alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not [pid for pid in pids if pid_alive(pid)]
