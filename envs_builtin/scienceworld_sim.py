"""One ScienceWorld simulator: its JVM, driven over py4j (blocking; one caller at a time).

The ``scienceworld`` package ships the simulator as a jar and wraps its Scala
``PythonInterface`` in ``scienceworld.ScienceWorldEnv``. :class:`Simulator` drives the same
interface directly, for two reasons measured on a 2-core machine: the JVM starts with options
(a capped heap and the serial GC: about 340 MB instead of 500-1100 MB per JVM, at the same
speed), and a step asks for the score, completion and move count only (about 20 ms instead of
50-90 ms: the package's ``step`` also lists the ~1000 valid actions after every move).
``import scienceworld`` happens on first use, never at import of this module.
"""

from __future__ import annotations

import collections
import functools
import os
import select
import shutil
import subprocess
import threading
from typing import Any

from agentfly_cli.errors import UserError

INSTALL = "scienceworld is not installed; run: pip install 'agentfly-cli[tasks]'"
NO_JAVA = (
    "ScienceWorld needs Java 17 or newer and 'java' is not on PATH; install a JRE (e.g. "
    "apt-get install openjdk-17-jre-headless) or set JAVA_HOME"
)
# A capped heap and the serial GC: about 340 MB resident after 20 tasks instead of 500-1100 MB,
# at the same speed. (-XX:TieredStopAtLevel=1 starts 0.2 s faster but makes long tasks 3x
# slower.) Raise -Xmx with the env's java_options for ScienceWorld's longest tasks.
JAVA_OPTIONS = ("-Xmx256m", "-XX:+UseSerialGC")
EXIT_WAIT_S = 5.0
PORT_WAIT_S = 60.0  # for the JVM to print the port it listens on
MAX_SCORE = 100


def import_scienceworld():
    """The ``scienceworld`` package, or a one-line UserError saying how to install it."""
    try:
        import scienceworld
        import scienceworld.constants
    except ImportError:
        raise UserError(INSTALL) from None
    return scienceworld


class TaskError(UserError, ValueError):
    """A task that ScienceWorld does not have (the dataset's problem, not the model's)."""


def tidy(text: str) -> str:
    """Simulator text without trailing spaces on its lines or blank lines at its ends."""
    return "\n".join(line.rstrip() for line in str(text).splitlines()).strip("\n")


@functools.cache
def java_path() -> str:
    """The ``java`` launcher ($JAVA_HOME/bin/java, else the one on PATH), or a UserError."""
    home = os.environ.get("JAVA_HOME")
    if home and os.access(os.path.join(home, "bin", "java"), os.X_OK):
        return os.path.join(home, "bin", "java")
    found = shutil.which("java")
    if found is None:
        raise UserError(NO_JAVA)
    return found


def _launch(java_options: list[str], output: collections.deque) -> tuple[int, subprocess.Popen]:
    """Start py4j's gateway server with ScienceWorld's jar (what ``py4j.launch_gateway`` does,
    but a JVM that fails to start is reaped and its error reported); the port and process."""
    from py4j.java_gateway import find_jar_path
    from scienceworld.constants import BASEPATH, JAR_PATH

    classpath = os.pathsep.join((find_jar_path(), JAR_PATH))
    command = [java_path(), "-classpath", classpath, *java_options, "py4j.GatewayServer"]
    # --die-on-broken-pipe: the JVM exits when its stdin closes, so also when this process dies
    command += ["--die-on-broken-pipe", "0"]
    process = subprocess.Popen(
        command,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=BASEPATH,
    )
    ready, _, _ = select.select([process.stdout], [], [], PORT_WAIT_S)
    first = process.stdout.readline() if ready else b""  # the port it listens on
    if not first.strip().isdigit():
        process.kill()
        _, errors = process.communicate()
        said = (first + errors).decode(errors="replace").strip().splitlines()
        raise RuntimeError(
            f"the ScienceWorld JVM did not start ({said[0] if said else 'no port in time'}); "
            f"check that `{java_path()} -version` shows Java 17+ and the java options "
            f"{java_options}"
        )
    for stream in (process.stdout, process.stderr):  # keep the pipes from filling up
        threading.Thread(target=_drain, args=(stream, output), daemon=True).start()
    return int(first), process


def _drain(stream, output: collections.deque) -> None:
    for line in iter(stream.readline, b""):
        output.append(line.decode(errors="replace").rstrip())
    stream.close()


class Simulator:
    """A ScienceWorld JVM. Methods block; callers make one call at a time.

    Scores are ScienceWorld's: 0-100, and negative (-100) when the task has failed (e.g. the
    agent focused on the wrong thing).
    """

    def __init__(self, java_options: tuple[str, ...] | list[str] = JAVA_OPTIONS) -> None:
        import_scienceworld()
        from py4j.java_gateway import GatewayParameters, JavaGateway

        self.output: collections.deque[str] = collections.deque(maxlen=20)  # the JVM's last lines
        port, self.process = _launch(list(java_options), self.output)
        self.closed = False
        try:
            self._gateway = JavaGateway(
                gateway_parameters=GatewayParameters(auto_field=True, port=port),
                java_process=self.process,
            )
            self._server = self._gateway.jvm.scienceworld.runtime.pythonapi.PythonInterface()
            self.task_names: list[str] = list(self._server.getTaskNames())
        except BaseException:
            self.close()
            raise

    @property
    def pid(self) -> int:
        return self.process.pid

    def alive(self) -> bool:
        return not self.closed and self.process.poll() is None

    # -- tasks ---------------------------------------------------------------------------------
    def max_variations(self, task_name: str) -> int:
        return int(self._server.getTaskMaxVariations(task_name))

    def variations(self, split: str = "train") -> list[int]:
        """The variation ids of ScienceWorld's train, dev or test split of the loaded task."""
        getter = {
            "train": self._server.getVariationsTrain,
            "dev": self._server.getVariationsDev,
            "test": self._server.getVariationsTest,
        }[split]
        return [int(v) for v in getter()]

    def load(
        self, task_name: str, variation: int = 0, simplifications: str = "", gold: bool = False
    ) -> None:
        """Load a task variation (``gold=True`` also plans a gold action sequence)."""
        from scienceworld.utils import infer_task

        name = infer_task(task_name)
        if name not in self.task_names:
            raise TaskError(
                f"unknown ScienceWorld task {task_name!r}; the tasks are: "
                + ", ".join(self.task_names)
            )
        count = self.max_variations(name)
        if not 0 <= variation < count:
            raise TaskError(f"task {name!r} has variations 0-{count - 1}, not {variation}")
        allowed = ["easy", *str(self._server.getPossibleSimplifications()).split(", ")]
        for item in filter(None, simplifications.split(",")):
            if item not in allowed:
                raise TaskError(
                    f"unknown simplification {item!r}; use a comma-separated list of: "
                    + ", ".join(allowed)
                )
        self._server.load(name, variation, simplifications, gold)

    def reset(self) -> str:
        """Restart the loaded task; the first observation (``look around``)."""
        self._server.reset()
        return str(self._server.step("look around"))

    def gold_actions(self) -> list[str]:
        """The planned gold action sequence (the task must be loaded with ``gold=True``)."""
        return [str(a) for a in self._server.getGoldActionSequence()]

    def plan(
        self, task_name: str, variation: int = 0, simplifications: str = "", tries: int = 8
    ) -> list[str]:
        """A gold action sequence that replays on any JVM, from ScienceWorld's planner.

        The planner sometimes answers an "Ambiguous request" prompt by number, and the order
        of that prompt's choices differs between JVMs; such plans are drawn again (the planner
        picks its target at random). Leaves the task loaded (with its gold path).
        """
        for _ in range(tries):
            self.load(task_name, variation, simplifications, gold=True)
            actions = self.gold_actions()
            if actions and not any(a.strip().isdigit() for a in actions):
                return actions
        raise RuntimeError(f"no replayable gold path for {task_name} #{variation}")

    # -- playing -------------------------------------------------------------------------------
    def step(self, action: str) -> str:
        return str(self._server.step(action))

    def score(self) -> int:
        """The task score, 0-100 (negative when the task has failed)."""
        return int(round(MAX_SCORE * float(self._server.getScore())))

    def completed(self) -> bool:
        return bool(self._server.getCompleted())

    def moves(self) -> int:
        return int(self._server.getNumMoves())

    def look(self) -> str:
        """Where the agent is and what it sees (uses no move)."""
        return str(self._server.freeActionLook())

    def inventory(self) -> str:
        return str(self._server.freeActionInventory())

    def task_description(self) -> str:
        return str(self._server.getTaskDescription())

    def valid_actions(self) -> list[str]:
        """Every valid action-object combination now (about 400-1000 strings)."""
        return [str(a) for a in self._server.getValidActionObjectCombinations()]

    def action_templates(self) -> list[str]:
        """The action templates, e.g. ``open OBJ``, ``move OBJ to OBJ``."""
        return [str(a) for a in self._server.getPossibleActions()]

    # -- shutting down -------------------------------------------------------------------------
    def close(self) -> None:
        """Stop the JVM and reap it; safe to call twice. Closing its stdin makes it exit
        (``--die-on-broken-pipe``); one that does not within 5 s is killed."""
        if self.closed:
            return
        self.closed = True
        gateway: Any = getattr(self, "_gateway", None)
        if gateway is not None:
            try:
                gateway.close()  # this side's sockets only: never waits on the JVM
            except Exception:  # noqa: BLE001 - closing best-effort; the JVM is stopped below
                pass
            # Proxies of Java objects sit in reference cycles and are freed by the cyclic GC
            # at any later time, in any thread; each then tells the JVM to free its object.
            # Marked disconnected, the client skips that instead of trying to reconnect to a
            # stopped JVM, which logs an error with a traceback from inside the GC (and when
            # the GC runs inside ast.parse, Python 3.11 then raises "AST constructor recursion
            # depth mismatch").
            client = getattr(gateway, "_gateway_client", None)
            if client is not None:
                client.is_connected = False
        process = self.process
        try:
            if process.stdin is not None:
                process.stdin.close()
        except OSError:
            pass
        try:
            process.wait(EXIT_WAIT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
