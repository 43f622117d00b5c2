"""One episode's BFCL API backends: fresh instances of the entry's classes, called by name.

BFCL's own executor (``multi_turn_utils.execute_multi_turn_func_call``) keeps its instances in
module globals keyed by model name and entry id, and runs each call with ``eval``. Here an
:class:`ApiSession` owns its instances (nothing global: two episodes of one entry never share
state), and a call is a method looked up by name and invoked with keyword arguments; ground
truth strings (``sort('a.pdf')``) are parsed with :mod:`ast` into literal arguments, never
evaluated. Results are made text as BFCL makes them, so BFCL's response checker compares like
with like.
"""

from __future__ import annotations

import ast
import copy
import importlib
import inspect
import json
from collections.abc import Mapping, Sequence
from typing import Any

from agentfly_cli.errors import UserError

INSTALL = "pip install --no-deps bfcl-eval==2026.3.23"
#: calls BFCL's executor refuses to run, whatever the class
REFUSED = ("kill", "exit", "quit", "remove", "unlink", "popen", "Popen", "run")


def backend_config() -> Any:
    """bfcl-eval's class-to-module table (a light module), or one UserError line."""
    try:
        from bfcl_eval.constants import executable_backend_config
    except ImportError:
        raise UserError(f"the bfcl multi-turn bridge needs bfcl-eval: {INSTALL}") from None
    return executable_backend_config


def api_class(name: str) -> type:
    """The BFCL API class ``name`` (``GorillaFileSystem``, ``TwitterAPI``, ...)."""
    config = backend_config()
    if name not in config.CLASS_FILE_PATH_MAPPING:
        raise UserError(f"{name!r} is not a BFCL API class; known: "
                        + ", ".join(config.CLASS_FILE_PATH_MAPPING))  # fmt: skip
    return getattr(importlib.import_module(config.CLASS_FILE_PATH_MAPPING[name]), name)


def result_text(value: Any) -> str:
    """A call's return as BFCL's executor writes it (a str as is, a dict as JSON)."""
    if type(value) is str:
        return value
    if type(value) is dict:
        try:
            return json.dumps(value)
        except (TypeError, ValueError):
            return str(value)
    return str(value)


def parse_call(text: str) -> tuple[str, list[Any], dict[str, Any]]:
    """``name(1, b='x')`` as ``(name, [1], {"b": "x"})``; literals only (ValueError else)."""
    node = ast.parse(text.strip(), mode="eval").body
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name):
        raise ValueError(f"not a plain function call: {text!r}")
    args = [ast.literal_eval(a) for a in node.args]
    kwargs = {k.arg: ast.literal_eval(k.value) for k in node.keywords if k.arg}
    return node.func.id, args, kwargs


def keyword_arguments(classes: Sequence[str], text: str) -> tuple[str, dict[str, Any]]:
    """A ground-truth call string as ``(name, arguments)`` with its positional arguments named
    after the method's parameters (what a model's keyword call would be)."""
    name, args, kwargs = parse_call(text)
    for class_name in reversed(list(classes)):  # the last class wins, as in BFCL's mapping
        method = getattr(api_class(class_name), name, None)
        if method is not None and not name.startswith("_"):
            params = [p for p in inspect.signature(method).parameters if p != "self"]
            return name, {**dict(zip(params, args, strict=False)), **kwargs}
    return name, kwargs


class ApiSession:
    """Fresh instances of an entry's classes, loaded with its ``initial_config``."""

    def __init__(
        self, classes: Sequence[str], initial_config: Mapping[str, Any], long_context: bool
    ) -> None:
        stateless = backend_config().STATELESS_CLASSES
        self.instances: dict[str, Any] = {}
        self._methods: dict[str, Any] = {}
        for name in classes:
            instance = api_class(name)()
            if name not in stateless:
                scenario = copy.deepcopy(dict(initial_config.get(name, {})))
                instance._load_scenario(scenario, long_context=long_context)
            self.instances[name] = instance
            for method_name, method in inspect.getmembers(instance, predicate=inspect.ismethod):
                if not method_name.startswith("_"):
                    self._methods[method_name] = method

    @classmethod
    def for_entry(cls, bfcl: Mapping[str, Any]) -> ApiSession:
        """A session for a row's ``bfcl`` field."""
        return cls(bfcl["involved_classes"], bfcl.get("initial_config") or {},
                   bool(bfcl.get("long_context")))  # fmt: skip

    def call(self, name: str, arguments: Mapping[str, Any], args: Sequence[Any] = ()) -> str:
        """Run one call; its result as text, or BFCL's ``Error during execution: ...``."""
        try:
            if name in REFUSED:
                raise Exception(f"Function call {name} is not allowed.")
            method = self._methods.get(name)
            if method is None:
                raise Exception(f"name '{name}' is not defined")
            return result_text(method(*args, **dict(arguments)))
        except Exception as exc:  # BFCL reports every failure of a call as its result
            return f"Error during execution: {exc}"

    def call_text(self, text: str) -> str:
        """Run a call written as source (ground truth), parsed, never evaluated."""
        try:
            name, args, kwargs = parse_call(text)
        except (SyntaxError, ValueError) as exc:
            return f"Error during execution: {exc}"
        return self.call(name, kwargs, args)
