"""Build a rollout from a :class:`~agentfly_cli.recipes.loader.RunSettings` and run it.

This is the library behind ``agentfly rollout`` and ``agentfly eval``, in two phases:
:func:`resolve_run` resolves the model, loads the chat template and parser, and looks up the
tools, reward, env specs and backend (in the plugin registry, or objects passed in);
:func:`assemble` builds the engine over a backend the caller chose. The trainer builds its
train backend between the two. Then :func:`run_rollout` runs the engine over the tasks.
"""

from __future__ import annotations

import importlib
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from agentfly_cli.envs.manager import ResourceManager
from agentfly_cli.errors import UserError
from agentfly_cli.rollout.engine import RolloutEngine
from agentfly_cli.rollout.engine_protocol import Engine
from agentfly_cli.rollout.outcome import check_some_chain_ran
from agentfly_cli.rollout.task_tool_schemas import check_task_tools
from agentfly_cli.settings.run import RunSettings
from agentfly_cli.trajectory import Trajectory, TrajectoryWriter, check_output_path


@dataclass
class RolloutRun:
    """Everything a rollout needs, built and checked, before anything runs."""

    config: RunSettings
    engine: Engine
    tasks: list[dict[str, Any]]
    setup_s: float = 0.0
    info: dict[str, Any] = field(default_factory=dict)


@dataclass
class RolloutResult:
    trajectories: list[Trajectory]
    wall_s: float
    setup_s: float
    envs: dict[str, dict[str, Any]] = field(default_factory=dict)  # env pool counters, by name


SERVE_EXTRA = ("starlette", "uvicorn")  # what the gateway of an ``agent`` run needs


def check_agent_extra(config: RunSettings) -> None:
    """A run with an ``agent`` program serves it through the gateway: without the ``serve``
    extra that is one line naming the install, before anything loads."""
    if config.agent is None:
        return
    missing = []
    for name in SERVE_EXTRA:
        try:
            importlib.import_module(name)
        except ImportError:
            missing.append(name)
    if missing:
        raise UserError(
            f"agent {config.agent.entry!r} runs through the gateway, which needs "
            f"{' and '.join(missing)}: pip install 'agentfly-cli[serve]'"
        )


def _reward_for(config: RunSettings, host):
    from agentfly_cli.components.rewards import CombinedReward
    from agentfly_cli.plugin_host.loading import resolve_reward

    if not config.reward:
        return None
    parts = [
        (resolve_reward(c.name, host).with_options(c.options), c.weight) for c in config.reward
    ]
    if len(parts) == 1 and parts[0][1] == 1.0:
        return parts[0][0]
    return CombinedReward(parts)


def _tools_for(entries: list, host) -> list:
    """Every entry's tools: a name (an ``mcp:`` entry gives several) or a ``Tool`` object; a
    name given twice is an error."""
    from agentfly_cli.plugin_host.loading import resolve_tools

    tools, source = [], {}
    for entry in entries:
        named = isinstance(entry, str)
        label = entry if named else f"a Tool object ({getattr(entry, 'name', entry)!r})"
        for tool in resolve_tools(entry, host) if named else [entry]:
            if tool.name in source:
                raise UserError(
                    f"tools: the name '{tool.name}' is given by both '{source[tool.name]}' and "
                    f"'{label}'; list it once (or prefix an MCP server's tools: mcp[p]:...)"
                )
            source[tool.name] = label
            tools.append(tool)
    return tools


@dataclass
class ResolvedRun:
    """Phase one of a build: a run's components, resolved and checked from its config, before
    any backend, env or model weights exist."""

    config: RunSettings
    tasks: list[dict[str, Any]]
    backend_config: Any  # the config's backend settings, ``model`` set to the resolved folder
    backend_ref: Any  # the registered backend (its ``factory``)
    chat: Any  # ChatTemplate
    parser: Any
    tools: list
    reward: Any
    envs: ResourceManager  # the env pools' settings and options, checked; nothing started
    resolve_s: float = 0.0
    agent: Any = None  # the agent function, when the run has an ``agent``

    @property
    def model_path(self) -> str:
        return self.backend_config.model

    def build_backend(self):
        """The registered rollout backend for this run (the trainer may build its own)."""
        return self.backend_ref.factory(self.backend_config, self.chat)


def resolve_run(
    config: RunSettings,
    host: Any = None,
    *,
    tasks: Sequence[Mapping[str, Any]] | None = None,
    tools: list | None = None,
    reward: Any = None,
    source: str | None = None,
) -> ResolvedRun:
    """Resolve every component ``config`` names, from ``host`` (default: the installed
    plugins); errors are one-line UserErrors. ``tools`` and ``reward`` (objects, e.g. defined
    in a notebook; ``tools`` may mix them with registered names) replace the config's.
    ``tasks``: the run's task rows, in memory, used as given (``data.path`` and the data
    selection are not read); checked as a file's rows are, with errors naming ``source``
    (default ``tasks``)."""
    started = time.perf_counter()
    from agentfly_cli.chat.parsers import get_parser
    from agentfly_cli.chat.templates import ChatTemplate
    from agentfly_cli.models import resolve_model
    from agentfly_cli.rollout.tasks import check_system_prompt

    if host is None:
        from agentfly_cli.plugin_host.plugins import get_plugin_host

        host = get_plugin_host()
    check_agent_extra(config)
    if config.out:
        check_output_path(config.out)
    tasks, source, rows = _run_tasks(config, tasks, source)
    if config.agent is None:  # an agent program brings its own prompts
        check_system_prompt(config.chat.system_prompt, tasks, source)
    tools = _tools_for(config.tools if tools is None else list(tools), host)
    if config.agent is None:  # every row of the file, numbered as in the file
        check_task_tools(rows, source, config.data.tools_field, [t.name for t in tools])
    reward = _reward_for(config, host) if reward is None else reward
    if reward is not None:
        missing = sorted(set(getattr(reward, "fields", [])) - set(tasks[0]))
        if missing:
            raise UserError(
                f"reward needs the data field(s) {', '.join(missing)}, which "
                f"{source} lacks; add them to every row or pick another reward"
            )
    env_specs = {}
    for t in tools:  # a tool may bring its own env spec (MCP tools do); else the registry's
        if t.env and t.env not in env_specs:
            env_specs[t.env] = t.env_spec or host.components.envs.get(t.env)
    _add_opening_env(config, env_specs, host)
    task_env = _task_tools_env(config, host)
    if task_env is not None and task_env[0] not in env_specs:
        env_specs[task_env[0]] = task_env[1]
    for name in config.envs:
        if name not in env_specs:
            used = ", ".join(sorted(env_specs)) or "none"
            raise UserError(
                f"envs.{name}: no tool of this run uses an env named '{name}' (envs in use: "
                f"{used}); remove it or add a tool that needs it"
            )
    envs = ResourceManager(env_specs, config.envs)  # bad pool sizes or options: before the model
    backend_ref = host.components.backends.get(config.backend.name)

    model = config.model
    if model is None:
        raise UserError(
            "no model: pass --model PATH (a transformers folder) or an alias: tiny, smollm2"
        )
    model_path = resolve_model(model)
    backend_config = config.backend.model_copy(update={"model": str(model_path)})
    chat = ChatTemplate.load(
        backend_config.tokenizer or str(model_path),
        config.chat.template,
        config.chat.observation,
        config.chat.chat_template_kwargs or None,
        tokenizer_loader=backend_config.tokenizer_loader,
    )
    parser_name = config.chat.parser or chat.default_parser
    parser = get_parser(parser_name, config.chat.parser_options, host=host)
    agent = None
    if config.agent is not None:
        from agentfly_cli.rollout.agent_engine import load_agent

        agent = load_agent(config.agent.entry)
    return ResolvedRun(
        config,
        tasks,
        backend_config,
        backend_ref,
        chat,
        parser,
        tools,
        reward,
        envs,
        time.perf_counter() - started,
        agent,
    )


def _add_opening_env(config: RunSettings, env_specs: dict[str, Any], host: Any) -> None:
    """Check ``rollout.opening_env`` against the run's envs (an env no tool uses is taken from
    the registry); one UserError line when it names none."""
    name = config.rollout.opening_env
    if name is None:
        return
    if config.agent is not None:
        raise UserError(
            "rollout.opening_env: an agent program writes its own prompts, so no env can speak "
            "first; remove rollout.opening_env or the agent"
        )
    if name in env_specs:
        return
    if name not in host.components.envs:
        used = ", ".join(sorted(env_specs)) or "none"
        raise UserError(
            f"rollout.opening_env: '{name}' is not an env of this run (its tools use: {used}) "
            "nor a registered env (agentfly env list); name one of them"
        )
    env_specs[name] = host.components.envs.get(name)


def _run_tasks(
    config: RunSettings, tasks: Sequence[Mapping[str, Any]] | None, source: str | None
) -> tuple[list[dict[str, Any]], str, list[dict[str, Any]]]:
    """The run's tasks, the name its errors give them, and every row they come from: rows
    given in memory, checked, or ``data``'s side of ``data.path`` (and the file's rows)."""
    from agentfly_cli.rollout.tasks import RowRules, check_tasks, data_side, read_tasks

    rules = RowRules.of(config)
    if tasks is not None:
        source = source or "tasks"
        if not tasks:
            raise UserError(f"{source}: no task rows given; pass at least one")
        rows = check_tasks(tasks, source, rules)
        return rows, source, rows
    if not config.data.path:
        raise UserError("no data: pass --data FILE.jsonl (or set data.path in the settings)")
    path = str(config.data.path)
    rows = read_tasks(path, rules)
    return data_side(rows, config.data, path), path, rows


def _task_tools_env(config: RunSettings, host: Any) -> tuple[str, Any] | None:
    """The env (name, spec) that runs the rows' tools under ``rollout.task_tools.on_call:
    env``; a name no plugin registers is one line."""
    from agentfly_cli.errors import UnknownComponentError

    settings = config.rollout.task_tools
    if settings.on_call != "env" or not config.data.tools_field or config.agent is not None:
        return None
    try:
        return settings.env, host.components.envs.get(settings.env)
    except UnknownComponentError as exc:
        raise UserError(f"rollout.task_tools.env: {exc}") from None


def assemble(resolved: ResolvedRun, backend: Any) -> RolloutRun:
    """Phase two: the engine over ``backend`` (built by the caller) and the run's env pools."""
    started = time.perf_counter()
    config, chat = resolved.config, resolved.chat
    tokenizer_source = resolved.backend_config.tokenizer or resolved.model_path
    meta = {"tokenizer": tokenizer_source, "template": chat.name, "backend": config.backend.name}
    if config.agent is not None:  # an agent program, through the gateway
        from agentfly_cli.rollout.agent_engine import AgentEngine

        engine: Engine = AgentEngine(
            backend, chat, resolved.parser, resolved.agent, resolved.reward, config.rollout,
            config.agent, env_manager=resolved.envs, meta={**meta, "agent": config.agent.entry},
        )  # fmt: skip
    else:
        engine = RolloutEngine(
            backend,
            chat,
            resolved.parser,
            resolved.tools,
            resolved.reward,
            config.rollout,
            system_prompt=config.chat.system_prompt,
            examples=config.chat.examples,
            env_manager=resolved.envs,
            meta=meta,
            user_turns_field=config.data.user_turns_field,
            tools_field=config.data.tools_field,
        )
    info = {
        "model": resolved.model_path,
        "backend": config.backend.name,
        "parser": resolved.parser.name,
        "template": chat.name,
    }
    setup_s = resolved.resolve_s + time.perf_counter() - started
    return RolloutRun(config, engine, resolved.tasks, setup_s, info)


def build_rollout(config: RunSettings, host: Any = None, **components: Any) -> RolloutRun:
    """Both phases with the registered backend: what ``agentfly rollout`` and ``eval`` run.
    ``components``: ``tools`` and ``reward`` objects, as for :func:`resolve_run`."""
    resolved = resolve_run(config, host, **components)
    return assemble(resolved, resolved.build_backend())


async def run_rollout_async(
    run: RolloutRun,
    *,
    out: str | None = None,
    on_finish: Callable[[Trajectory], Any] | None = None,
) -> RolloutResult:
    """Run every task's chains; write each trajectory to ``out`` as it finishes.

    Raises :class:`~agentfly_cli.rollout.outcome.AllChainsAbortedError` (after writing ``out``)
    when every chain aborted."""
    writer = TrajectoryWriter(out) if out else None

    def finished(trajectory: Trajectory) -> None:
        if writer is not None:
            writer.write(trajectory)
        if on_finish is not None:
            on_finish(trajectory)

    started = time.perf_counter()
    try:
        async with run.engine.backend, run.engine.envs:
            trajectories = await run.engine.run(run.tasks, on_finish=finished)
            env_stats = run.engine.envs.stats()
    finally:
        if writer is not None:
            writer.close()
    if writer is not None:  # keep the file in task order, as the summary and `view --index` see it
        from agentfly_cli.trajectory import write_trajectories

        write_trajectories(out, trajectories)
    check_some_chain_ran(trajectories)  # every chain aborted: an error, not a table of zeros
    return RolloutResult(trajectories, time.perf_counter() - started, run.setup_s, env_stats)


def run_rollout(run: RolloutRun, **options: Any) -> RolloutResult:
    """Blocking :func:`run_rollout_async`."""
    from agentfly_cli.runtime.shutdown import run_with_clean_shutdown

    return run_with_clean_shutdown(run_rollout_async(run, **options))
