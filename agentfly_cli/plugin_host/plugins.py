"""Load plugins from the ``agentfly`` entry-point group, one at a time, with errors isolated.

Built-in components come through the same entry points as third-party ones. A plugin whose
module fails to import, whose hook raises, or that implements an unknown (misspelled) hook is
recorded with its error and skipped; the CLI keeps working. ``AGENTFLY_LOAD_PLUGINS=dist1,dist2``
loads only those distributions; an empty value loads none.
"""

from __future__ import annotations

import difflib
import importlib
import importlib.metadata
import os
import re
import threading
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

import pluggy

from agentfly_cli import settings
from agentfly_cli.errors import ComponentConflictError, UserError
from agentfly_cli.plugin_host import hookspecs
from agentfly_cli.plugin_host.registry import (
    SINGULAR,
    BackendRef,
    Components,
    Entry,
    Provenance,
    RecipeFamily,
    RecipeRef,
    RegisteredEstimator,
)

#: what an advantage estimator may declare at registration (:class:`RegisteredEstimator`)
ESTIMATOR_TRAITS = ("group_relative", "needs_values", "needs_greedy")
ENTRY_POINT_GROUP = "agentfly"
BUILTIN_DISTRIBUTION = "agentfly-cli"
LOAD_PLUGINS_ENV = "AGENTFLY_LOAD_PLUGINS"
HOOK_KINDS = {
    "register_tools": ("tools",),
    "register_rewards": ("rewards",),
    "register_envs": ("envs",),
    "register_recipes": ("recipes",),
    "register_backends": ("backends",),
    "register_train_backends": ("train_backends",),
    "register_algorithms": ("advantages", "policy_losses"),
    "register_parsers": ("parsers",),
}
ALGORITHM_KINDS = {"advantage": "advantages", "policy_loss": "policy_losses"}


def hook_names() -> list[str]:
    """Every hookspec name, in declaration order."""
    marker = f"{hookspecs.PROJECT_NAME}_spec"
    return [name for name, value in vars(hookspecs).items() if hasattr(value, marker)]


def normalize_distribution(name: str) -> str:
    """PEP 503 normalisation: ``My_Plugin`` and ``my-plugin`` are the same distribution."""
    return re.sub(r"[-_.]+", "-", name).lower()


@dataclass
class PluginInfo:
    """One entry point of the ``agentfly`` group and how its loading went."""

    name: str
    module: str
    distribution: str | None
    version: str | None
    builtin: bool
    hooks: list[str] = field(default_factory=list)
    error: str | None = None
    hook_errors: dict[str, str] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.error is None and not self.hook_errors

    @property
    def provenance(self) -> Provenance:
        return Provenance(self.name, self.distribution, self.version, self.builtin)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class PluginHost:
    """The loaded plugins, their registered components, and the pluggy manager behind them.

    The ``register_*`` hooks run on first use of :attr:`components` or :attr:`plugins`, not at
    load: building the CLI (which only needs the plugins' commands) stays cheap, so
    ``agentfly --help`` imports no tool, env or reward module.
    """

    def __init__(self, manager: pluggy.PluginManager) -> None:
        self.manager = manager
        self.missing_requested: list[str] = []
        self._plugins: list[PluginInfo] = []
        self._components: Components | None = None
        self._registering = threading.Lock()
        self._commands_added: set[int] = set()

    @property
    def components(self) -> Components:
        """Every registered component, by kind (the plugins' register hooks run on first use)."""
        if self._components is None:
            with self._registering:
                if self._components is None:
                    components = Components()
                    _run_register_hooks(self, components)
                    self._components = components
        return self._components

    @property
    def plugins(self) -> list[PluginInfo]:
        """Each plugin and how its loading and its register hooks went."""
        self.components  # noqa: B018 - a register hook's error belongs to its plugin's info
        return self._plugins

    def plugin(self, name: str) -> PluginInfo:
        return next(p for p in self.plugins if p.name == name)

    @property
    def failed(self) -> list[PluginInfo]:
        return [p for p in self.plugins if not p.ok]

    def add_commands(self, app: Any) -> None:
        """Let each plugin add commands to the Typer ``app`` (once per app).

        A command whose name is already taken (by a built-in or an earlier plugin) is removed
        again and reported on the plugin, never silently replacing the existing one.
        """
        if id(app) in self._commands_added:
            return
        self._commands_added.add(id(app))
        owners = {name: "agentfly" for name in _command_names(app)}
        for implementation in self.manager.hook.register_commands.get_hookimpls():
            info = next(p for p in self._plugins if p.name == implementation.plugin_name)
            commands, groups = len(app.registered_commands), len(app.registered_groups)
            try:
                _call_hook(implementation, app=app)
            except (Exception, SystemExit) as exc:
                info.hook_errors["register_commands"] = _describe(exc)
                del app.registered_commands[commands:], app.registered_groups[groups:]
                continue
            clashes = []
            for registered, start in (
                (app.registered_commands, commands),
                (app.registered_groups, groups),
            ):
                for item in list(registered[start:]):
                    name = _command_name(item)
                    if name in owners:
                        registered.remove(item)
                        clashes.append(f"command '{name}' is already provided by {owners[name]}")
                    else:
                        owners[name] = f"plugin '{info.name}'"
            if clashes:
                info.hook_errors["register_commands"] = "; ".join(clashes)


def _command_name(item: Any) -> str:
    """The name a Typer command or group is invoked by."""
    if getattr(item, "name", None):
        return item.name
    typer_instance = getattr(item, "typer_instance", None)
    if typer_instance is not None and isinstance(getattr(typer_instance.info, "name", None), str):
        return typer_instance.info.name
    callback = getattr(item, "callback", None)
    return getattr(callback, "__name__", "?").replace("_", "-")


def _command_names(app: Any) -> list[str]:
    return [_command_name(item) for item in (*app.registered_commands, *app.registered_groups)]


def _call_hook(implementation: Any, **arguments: Any) -> Any:
    """Call one plugin's hook with the arguments it declares (pluggy allows a subset)."""
    accepted = set(implementation.argnames) | set(getattr(implementation, "kwargnames", ()))
    return implementation.function(**{k: v for k, v in arguments.items() if k in accepted})


def _describe(exc: BaseException) -> str:
    message = str(exc).strip()
    return f"{type(exc).__name__}: {message}" if message else type(exc).__name__


def requested_distributions(value: str | None = None) -> set[str] | None:
    """The distributions named by ``AGENTFLY_LOAD_PLUGINS`` (None: load all)."""
    value = settings.plugin_selection() if value is None else value
    if value is None:
        return None
    return {normalize_distribution(part.strip()) for part in value.split(",") if part.strip()}


def _entry_points() -> list[importlib.metadata.EntryPoint]:
    seen: set[tuple[str | None, str, str]] = set()
    unique = []
    for entry_point in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        distribution = entry_point.dist.name if entry_point.dist else None
        key = (
            distribution and normalize_distribution(distribution),
            entry_point.name,
            entry_point.value,
        )
        if key not in seen:
            seen.add(key)
            unique.append(entry_point)
    return unique


def load_plugins(
    entry_points: Iterable[importlib.metadata.EntryPoint] | None = None,
    *,
    only: set[str] | None | str = "env",
) -> PluginHost:
    """Load the plugins and register their components. Never raises for a broken plugin."""
    manager = pluggy.PluginManager(hookspecs.PROJECT_NAME)
    manager.add_hookspecs(hookspecs)
    host = PluginHost(manager)
    wanted = requested_distributions() if only == "env" else only
    candidates = list(_entry_points() if entry_points is None else entry_points)
    if wanted is not None:
        present = {normalize_distribution(ep.dist.name) for ep in candidates if ep.dist}
        host.missing_requested = sorted(wanted - present)
        candidates = [
            ep for ep in candidates if ep.dist and normalize_distribution(ep.dist.name) in wanted
        ]

    def order(ep: importlib.metadata.EntryPoint) -> tuple:
        distribution = normalize_distribution(ep.dist.name) if ep.dist else ""
        return (distribution != BUILTIN_DISTRIBUTION, distribution, ep.name)

    for entry_point in sorted(candidates, key=order):
        info = _register_entry_point(manager, entry_point)
        if info is not None:
            host._plugins.append(info)
    return host


def _register_entry_point(manager: pluggy.PluginManager, entry_point) -> PluginInfo | None:
    distribution = entry_point.dist.name if entry_point.dist else None
    info = PluginInfo(
        name=entry_point.name,
        module=entry_point.value,
        distribution=distribution,
        version=entry_point.dist.version if entry_point.dist else None,
        builtin=distribution is not None
        and normalize_distribution(distribution) == BUILTIN_DISTRIBUTION,
    )
    if manager.has_plugin(entry_point.name):
        other = manager.get_plugin(entry_point.name)
        info.error = (
            f"another plugin is already named '{entry_point.name}' "
            f"({getattr(other, '__name__', other)}); rename one entry point"
        )
        return info
    try:
        module = entry_point.load()
    except (Exception, SystemExit) as exc:
        info.error = _describe(exc)
        return info
    try:
        manager.register(module, name=entry_point.name)
    except Exception as exc:  # pluggy.PluginValidationError: bad hook arguments
        info.error = _describe(exc)
        return info
    try:
        manager.check_pending()
    except pluggy.PluginValidationError as exc:
        manager.unregister(module)
        info.error = _pending_message(exc)
        return info
    known = set(hook_names())
    info.hooks = sorted(
        caller.name for caller in manager.get_hookcallers(module) or [] if caller.name in known
    )
    for name in sorted(known - set(info.hooks)):
        if callable(getattr(module, name, None)):
            info.warnings.append(f"function {name}() is not marked with @hookimpl; it is ignored")
    return info


def _pending_message(exc: pluggy.PluginValidationError) -> str:
    match = re.search(r"unknown hook '([^']+)'", str(exc))
    if not match:
        return _describe(exc)
    name = match.group(1)
    close = difflib.get_close_matches(name, hook_names(), n=1)
    hint = f"did you mean '{close[0]}'?" if close else f"known hooks: {', '.join(hook_names())}"
    return f"unknown hook '{name}'; {hint}"


def _run_register_hooks(host: PluginHost, components: Components) -> None:
    """Call every plugin's ``register_*`` hooks; a hook's error is recorded on its plugin."""
    for hook_name in HOOK_KINDS:
        for implementation in getattr(host.manager.hook, hook_name).get_hookimpls():
            info = next(p for p in host._plugins if p.name == implementation.plugin_name)
            staged: list[Entry] = []
            factory = _REGISTER_FACTORIES[hook_name]
            register = factory(staged, info.provenance, implementation.plugin)
            try:
                _call_hook(implementation, register=register)
            except (Exception, SystemExit) as exc:
                info.hook_errors[hook_name] = _describe(exc)
                continue
            conflicts = []
            for entry in staged:
                try:
                    components.of(entry.kind).add(entry)
                except ComponentConflictError as exc:
                    conflicts.append(str(exc))
            if conflicts:
                info.hook_errors[hook_name] = "; ".join(conflicts)


def _callable_register(kind: str, class_path: str) -> Callable[..., Callable[..., None]]:
    """The ``register(obj, name=None)`` of tools or rewards: a plain function gets wrapped.
    ``class_path`` ("module:Class") is imported when a plugin first registers one."""

    def factory(staged: list[Entry], provenance: Provenance, _: Any) -> Callable[..., None]:
        module, class_name = class_path.split(":")
        component_class = getattr(importlib.import_module(module), class_name)

        def register(obj: Any, name: str | None = None) -> None:
            if not isinstance(obj, component_class):
                component = component_class(obj, name=name)
            else:
                component = obj if name is None else obj.with_name(name)
            if not getattr(component, "is_bound", True):
                raise TypeError(
                    f"tool '{component.name}' is an unbound method; register an instance's "
                    f"tool, e.g. register(MyToolbox().{component.name})"
                )
            staged.append(Entry(kind, component.name, component, provenance, component.description))

        return register

    return factory


def _env_register(staged: list[Entry], provenance: Provenance, _: Any) -> Callable[..., None]:
    from agentfly_cli.envs.base import EnvSpec

    def register(spec: EnvSpec) -> None:
        if not isinstance(spec, EnvSpec):
            raise TypeError(f"register_envs takes an EnvSpec, got {type(spec).__name__}")
        staged.append(Entry("envs", spec.name, spec, provenance, spec.description))

    return register


def _recipe_register(
    staged: list[Entry], provenance: Provenance, plugin: Any
) -> Callable[..., None]:
    module_file = getattr(plugin, "__file__", None)
    base = os.path.dirname(os.path.abspath(module_file)) if module_file else os.getcwd()

    def register(name: str, path: Any, description: str = "") -> None:
        """``path``: a YAML file (relative to the plugin module's folder) or a
        :class:`RecipeFamily` (its recipes are ``name:PARAM``)."""
        if not isinstance(name, str) or not name or ":" in name or name != name.strip():
            raise ValueError(
                f"recipe name {name!r}: give a non-empty name without ':' or surrounding spaces"
            )
        if isinstance(path, RecipeFamily):
            recipe = RecipeRef(name, None, description, family=path)
        else:
            full = os.path.join(base, os.fspath(path))
            if not os.path.isfile(full):
                raise FileNotFoundError(f"recipe '{name}': no file at {full}")
            recipe = RecipeRef(name, full, description)
        staged.append(Entry("recipes", name, recipe, provenance, description))

    return register


def _backend_register(kind: str) -> Callable[..., Callable[..., None]]:
    def factory(staged: list[Entry], provenance: Provenance, _: Any) -> Callable[..., None]:
        def register(name: str, factory: Any, description: str = "") -> None:
            if not callable(factory):
                label = SINGULAR.get(kind, "backend")
                raise TypeError(f"{label} '{name}': factory must be callable")
            backend = BackendRef(name, factory, description)
            staged.append(Entry(kind, name, backend, provenance, description))

        return register

    return factory


def _algorithm_register(staged: list[Entry], provenance: Provenance, _: Any) -> Callable[..., None]:
    def register(kind: str, name: str, fn: Any, description: str = "", **traits: bool) -> None:
        """``kind`` is "advantage" or "policy_loss"; ``fn`` is the estimator or loss. An
        estimator declares ``group_relative``, ``needs_values`` and ``needs_greedy`` (all
        default False)."""
        if kind not in ALGORITHM_KINDS:
            allowed = ", ".join(repr(k) for k in ALGORITHM_KINDS)
            raise ValueError(f"unknown algorithm kind {kind!r} for '{name}'; kinds: {allowed}")
        if not isinstance(name, str) or not name:
            raise TypeError(f"{kind} name must be a non-empty string, got {name!r}")
        if not callable(fn):
            raise TypeError(f"{kind} '{name}': fn must be callable")
        allowed = ESTIMATOR_TRAITS if kind == "advantage" else ()
        unknown = sorted(set(traits) - set(allowed))
        if unknown:
            known = ", ".join(allowed) or "none"
            raise TypeError(f"{kind} '{name}': unknown trait(s) {', '.join(unknown)}; {known}")
        summary = description or (getattr(fn, "__doc__", None) or "").strip().split("\n")[0]
        if kind == "advantage":
            fn = RegisteredEstimator(fn, **{k: bool(v) for k, v in traits.items()})
        staged.append(Entry(ALGORITHM_KINDS[kind], name, fn, provenance, summary))

    return register


def _parser_register(staged: list[Entry], provenance: Provenance, _: Any) -> Callable[..., None]:
    def register(parser: Any, name: str | None = None, description: str = "") -> None:
        """``parser`` is a class with ``parse(text)`` and ``from_options(options)`` (a
        BaseParser subclass); ``name`` defaults to its ``name``, ``description`` to its
        docstring's first line."""
        if not isinstance(parser, type):
            raise UserError(
                "register_parsers takes a parser class (a subclass of "
                "agentfly_cli.chat.parser_output."
                f"BaseParser), got {type(parser).__name__} {parser!r:.60}"
            )
        missing = [m for m in ("parse", "from_options") if not callable(getattr(parser, m, None))]
        if missing:
            raise UserError(
                f"parser class {parser.__name__} has no {' or '.join(missing)} method; subclass "
                "agentfly_cli.chat.parser_output.BaseParser and implement parse_body(text)"
            )
        name = getattr(parser, "name", None) if name is None else name
        if not isinstance(name, str) or not name or ":" in name or name != name.strip():
            raise UserError(
                f"parser class {parser.__name__}: name must be a non-empty string without ':' "
                f"or surrounding spaces, got {name!r}; set its name attribute or pass name="
            )
        summary = description or (parser.__doc__ or "").strip().split("\n")[0]
        staged.append(Entry("parsers", name, parser, provenance, summary))

    return register


_REGISTER_FACTORIES = {
    "register_tools": _callable_register("tools", "agentfly_cli.components.tools:Tool"),
    "register_rewards": _callable_register("rewards", "agentfly_cli.components.rewards:Reward"),
    "register_envs": _env_register,
    "register_recipes": _recipe_register,
    "register_backends": _backend_register("backends"),
    "register_train_backends": _backend_register("train_backends"),
    "register_algorithms": _algorithm_register,
    "register_parsers": _parser_register,
}

_host: PluginHost | None = None
_host_lock = threading.Lock()


def get_plugin_host() -> PluginHost:
    """The process-wide plugin host, loaded on first use."""
    global _host
    if _host is None:
        with _host_lock:
            if _host is None:
                _host = load_plugins()
    return _host


def reset_plugin_host() -> None:
    """Forget the loaded plugins (tests, or after installing a plugin at run time)."""
    global _host
    with _host_lock:
        _host = None


def set_plugin_host(host: PluginHost) -> None:
    """Use ``host`` as the process-wide plugin host (tests and embedding applications)."""
    global _host
    with _host_lock:
        _host = host
