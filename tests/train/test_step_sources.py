"""The step loops are two sources of steps over one public ``Trainer.train_on``; no module of
the loop reaches into another object's private attributes."""

from __future__ import annotations

import ast
from pathlib import Path

import agentfly_cli.train as train_package

TRAIN = Path(train_package.__file__).parent
PACKAGE = TRAIN.parent
LOOP_MODULES = [
    TRAIN / "trainer.py",
    TRAIN / "update.py",
    TRAIN / "checkpoint.py",
    PACKAGE / "algorithms" / "value_head.py",
    *sorted((TRAIN / "steps").glob("*.py")),
]


def private_reaches(source: str) -> list[str]:
    """``x._name`` where ``x`` is not ``self`` or ``cls`` (dunders aside)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if (
            isinstance(node, ast.Attribute)
            and node.attr.startswith("_")
            and not node.attr.startswith("__")
            and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"))
        ):
            found.append(f"{ast.unparse(node)} (line {node.lineno})")
    return found


def test_the_check_sees_a_reach_into_private_state():
    assert private_reaches("trainer._prepare(x)\nself._ok()\nx.__class__") == [
        "trainer._prepare (line 1)"
    ]


def test_no_loop_module_reaches_into_another_objects_private_state():
    reaches = {
        str(path.relative_to(PACKAGE)): found
        for path in LOOP_MODULES
        if (found := private_reaches(path.read_text()))
    }
    assert not reaches, reaches


def test_both_sources_train_through_the_public_method():
    from agentfly_cli.train.steps import async_steps, sync

    for module in (sync, async_steps):
        assert "trainer.train_on(" in Path(module.__file__).read_text(), module.__name__
