"""The Ray provider: each env lives in its own Ray actor, on any node of a Ray cluster.

Ray is an optional extra, imported only when this provider first connects. The env's factory,
its options, actions and results travel by Ray's (cloud)pickle, so any picklable value works;
on a remote cluster the factory's module must be importable on the workers (or shipped with a
``runtime_env`` in ``init_options``).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import logging
import os
import queue
import re
import threading
from collections.abc import Mapping
from typing import Any

from agentfly_cli.envs.base import EnvSpec
from agentfly_cli.envs.providers.base import EnvHandle, EnvProvider
from agentfly_cli.errors import UserError

#: seconds that ``healthy`` and the graceful part of ``close`` may take
CALL_TIMEOUT = 10.0
#: concurrent calls one actor serves, so ``healthy``/``close`` get through a hung ``step``
ACTOR_CONCURRENCY = 8


def import_ray() -> Any:
    """The ``ray`` module, or a one-line :class:`UserError` saying how to install it."""
    try:
        import ray
    except ImportError:
        raise UserError(
            "provider 'ray' needs Ray: pip install 'agentfly-cli[ray]' (or make install-ray)"
        ) from None
    return ray


@functools.cache
def _ray_thread() -> queue.SimpleQueue:
    """A daemon thread that lives as long as the process, for ``ray.init``/``ray.shutdown``.

    Ray makes its GCS and raylet die with the *thread* that started them (PR_SET_PDEATHSIG), so
    ``asyncio.to_thread`` is unsafe: ``asyncio.run`` ends its executor threads, and Ray with them.
    """
    jobs: queue.SimpleQueue = queue.SimpleQueue()

    def work() -> None:
        while True:
            fn, future = jobs.get()
            if future.set_running_or_notify_cancel():
                try:
                    future.set_result(fn())
                except BaseException as exc:
                    future.set_exception(exc)

    threading.Thread(target=work, name="agentfly-ray", daemon=True).start()
    return jobs


async def _in_ray_thread(fn: Any) -> Any:
    future: concurrent.futures.Future = concurrent.futures.Future()
    _ray_thread().put((fn, future))
    return await asyncio.wrap_future(future)


@functools.cache
def _actor_class() -> Any:
    """The Ray actor class that holds one env (defined lazily: it needs ``import ray``).

    It refers to nothing of agentfly_cli, so workers without the toolkit installed can run it.
    """
    ray = import_ray()

    class EnvActor:
        def __init__(self, name: str, factory: Any, options: dict[str, Any]) -> None:
            self.name, self.factory, self.options, self.env = name, factory, options, None

        async def start(self) -> dict[str, Any]:
            env = self.factory(**self.options)
            missing = [
                m for m in ("start", "reset", "step", "close", "healthy") if not hasattr(env, m)
            ]
            if missing:
                raise TypeError(
                    f"env '{self.name}': factory returned {type(env).__name__}, which lacks the "
                    f"Env methods {'/'.join(missing)}"
                )
            self.env = env
            await env.start()
            context = ray.get_runtime_context()
            return {
                "actor_id": context.get_actor_id(),
                "node_id": context.get_node_id(),
                "pid": os.getpid(),
            }

        async def call(self, method: str, args: tuple, kwargs: dict[str, Any]) -> Any:
            if self.env is None:
                if method == "close":
                    return None  # its factory failed: nothing to close
                raise RuntimeError(f"env '{self.name}' is not started")
            result = getattr(self.env, method)(*args, **kwargs)
            return (
                await result if asyncio.iscoroutine(result) or asyncio.isfuture(result) else result
            )

    return ray.remote(EnvActor)


class RayEnvGone(RuntimeError):
    """The env's actor is not running: never started, closed, killed, crashed or unschedulable."""


def _last_line(exc: BaseException) -> str:
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return re.sub(r"\x1b\[[0-9;]*m", "", lines[-1] if lines else "")[:300]


def _env_error(exc: BaseException, where: str) -> BaseException:
    """What a caller sees for a failed actor call: the env's own exception where Ray kept it."""
    from ray import exceptions

    if isinstance(exc, exceptions.RayTaskError):
        cause = exc.cause
        if isinstance(cause, BaseException) and not isinstance(cause, exceptions.RayError):
            return cause
        return RuntimeError(f"{where}: {exc.function_name} failed: {_last_line(exc)}")
    if getattr(exc, "actor_init_failed", False):  # the factory or its options did not unpickle
        hint = ""
        if "ModuleNotFoundError" in str(exc):
            hint = "; the env factory's module must be importable on the Ray workers"
        return RayEnvGone(f"{where}: could not create the actor: {_last_line(exc)}{hint}")
    if isinstance(exc, exceptions.RayActorError | exceptions.ActorUnschedulableError):
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        return RayEnvGone(f"{where}: the actor is gone ({type(exc).__name__}: {first[:300]})")
    if isinstance(exc, exceptions.RayError):
        return RuntimeError(f"{where}: {type(exc).__name__}: {_last_line(exc)}")
    return exc


class RayEnvProxy:
    """What tools receive as ``env``: the env's async methods, run in its actor.

    Besides start/reset/step/close/healthy, any other public method of the env can be called
    (``await env.run_code(src)``); its arguments and result are pickled.
    """

    def __init__(self, handle: RayEnvHandle) -> None:
        self._handle = handle

    async def start(self) -> None:
        await self._handle.start()

    async def reset(self, task: Mapping[str, Any] | None = None) -> Any:
        return await self._handle.reset(task)

    async def step(self, action: Any) -> Any:
        return await self._handle.step(action)

    async def close(self) -> None:
        await self._handle.close()

    async def healthy(self) -> bool:
        return await self._handle.healthy()

    def __getattr__(self, method: str) -> Any:
        if method.startswith("_"):
            raise AttributeError(method)

        async def forward(*args: Any, **kwargs: Any) -> Any:
            return await self._handle.call(method, *args, **kwargs)

        return forward


class RayEnvHandle(EnvHandle):
    """One env in one Ray actor. The actor is made in :meth:`start` and killed by close/kill."""

    def __init__(self, spec: EnvSpec, options: Mapping[str, Any], actor_options: dict) -> None:
        self.spec, self.options, self.actor_options = spec, dict(options), actor_options
        self.env = RayEnvProxy(self)
        self.info: dict[str, Any] = {"provider": "ray", "actor_id": None}
        self._actor: Any = None
        self._done = False

    @property
    def _where(self) -> str:
        return f"env '{self.spec.name}' (ray actor {self.info.get('actor_id')})"

    async def _remote(self, method: str, *args: Any, timeout: float | None = None) -> Any:
        if self._actor is None or self._done:
            raise RayEnvGone(f"{self._where} is not running")
        try:
            return await asyncio.wait_for(getattr(self._actor, method).remote(*args), timeout)
        except Exception as exc:
            raised = _env_error(exc, self._where)
            if raised is exc:
                raise
            raise raised from None

    async def start(self) -> None:
        if self._actor is not None or self._done:
            raise RayEnvGone(f"{self._where} was already started")
        actor_cls = _actor_class().options(**self.actor_options)
        self._actor = actor_cls.remote(self.spec.name, self.spec.factory, self.options)
        try:
            self.info["actor_id"] = self._actor._actor_id.hex()
        except Exception:  # a Ray client handle: the actor reports its id from start
            pass
        self.info.update(await self._remote("start"))

    async def call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        """Call any method of the env in its actor (awaited there when it is async)."""
        return await self._remote("call", method, args, kwargs)

    async def reset(self, task: Mapping[str, Any] | None = None) -> Any:
        return await self.call("reset", task)

    async def step(self, action: Any) -> Any:
        return await self.call("step", action)

    async def healthy(self) -> bool:
        """False when the actor is gone, does not answer within ``CALL_TIMEOUT``, or says so."""
        try:
            return bool(await self._remote("call", "healthy", (), {}, timeout=CALL_TIMEOUT))
        except Exception:
            return False

    async def close(self) -> None:
        """The env's own close (bounded by ``CALL_TIMEOUT``), then the actor is killed."""
        if self._done or self._actor is None:
            self._done = True
            return
        try:
            await self._remote("call", "close", (), {}, timeout=CALL_TIMEOUT)
        except (TimeoutError, asyncio.TimeoutError, RayEnvGone):
            pass  # hung or already dead: the kill below frees it either way
        finally:
            await self.kill()

    async def kill(self) -> None:
        self._done = True
        actor, self._actor = self._actor, None
        if actor is not None:
            try:
                import_ray().kill(actor, no_restart=True)
            except Exception:
                pass


def actor_options(resources: Mapping[str, float]) -> dict[str, Any]:
    """Ray actor options for an env spec's ``resources``: cpu, gpu, memory_mb, custom keys."""
    resources = dict(resources)
    options: dict[str, Any] = {
        "num_cpus": resources.pop("cpu", 1),
        "max_restarts": 0,
        "max_concurrency": ACTOR_CONCURRENCY,
    }
    if "gpu" in resources:
        options["num_gpus"] = resources.pop("gpu")
    if "memory_mb" in resources:
        options["memory"] = int(resources.pop("memory_mb") * 2**20)
    if resources:
        options["resources"] = resources
    return options


class _NotMainThread(logging.Filter):
    """Drops Ray's warning that ``ray.init`` outside the main thread sets no SIGTERM handler."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "SIGTERM handler is not set" not in record.getMessage()


_NOT_MAIN_THREAD = _NotMainThread()


class RayProvider(EnvProvider):
    """Envs as Ray actors: a local Ray instance, or a cluster at ``address``."""

    name = "ray"

    def __init__(
        self,
        address: str | None = None,
        namespace: str = "agentfly",
        init_options: dict[str, Any] | None = None,
    ) -> None:
        self.address, self.namespace = address, namespace
        self.init_options = dict(init_options or {})
        self._lock = asyncio.Lock()
        self._connected = False
        self._started_ray = False

    def _connect_sync(self) -> None:
        ray = import_ray()
        if ray.is_initialized():
            return
        os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
        logging.getLogger("ray._private.worker").addFilter(_NOT_MAIN_THREAD)
        if self.address is not None:
            ray.init(address=self.address, namespace=self.namespace, **self.init_options)
        else:
            options = {
                "num_cpus": os.cpu_count(),
                "include_dashboard": False,
                "log_to_driver": False,
                "logging_level": logging.WARNING,
                "namespace": self.namespace,
                **self.init_options,
            }
            ray.init(**options)
        self._started_ray = True

    async def connect(self) -> None:
        """Join Ray once (in a thread of its own: ``ray.init`` blocks for seconds)."""
        async with self._lock:
            if not self._connected:
                await _in_ray_thread(self._connect_sync)
                self._connected = True

    async def create(self, spec: EnvSpec, options: Mapping[str, Any]) -> EnvHandle:
        await self.connect()
        return RayEnvHandle(spec, options, actor_options(spec.resources))

    async def shutdown(self) -> None:
        """Stop Ray (or leave the cluster) only if this provider connected; envs are gone by now."""
        if self._started_ray:
            self._started_ray = self._connected = False
            await _in_ray_thread(import_ray().shutdown)

    def describe(self) -> dict[str, Any]:
        out: dict[str, Any] = {"provider": self.name, "address": self.address}
        if self._connected:
            ray = import_ray()
            if ray.is_initialized():
                out["nodes"] = sum(1 for node in ray.nodes() if node.get("Alive"))
        return out
