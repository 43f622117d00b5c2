"""docs/config.md is generated and current; every setting and AGENTFLY_* variable is documented."""

from __future__ import annotations

import re
from pathlib import Path

from agentfly_cli.settings import VARIABLES
from agentfly_cli.settings.reference import markdown, sections

ROOT = Path(__file__).resolve().parents[2]
SOURCES = ("agentfly_cli", "envs_builtin", "tools_builtin", "rewards_builtin", "bridges_builtin")


def test_every_setting_has_a_description_and_every_section_a_docstring():
    found = sections()
    assert len(found) > 10 and sum(len(s.fields) for s in found) > 150
    undocumented = [f.key for s in found for f in s.fields if not f.description.strip()]
    assert undocumented == []
    assert [s.prefix for s in found if not (s.model.__doc__ or "").strip()] == []


def test_docs_config_md_is_current():
    page = ROOT / "docs" / "config.md"
    assert page.read_text(encoding="utf-8") == markdown(), (
        "docs/config.md is out of date: run `make config-docs`"
    )
    for key in ("rollout.seed", "trainer.backend.lora.r", "envs.NAME.pool_max", "reward[].weight"):
        assert f"| `{key}` |" in markdown()


def _source_files():
    for folder in SOURCES:
        yield from sorted((ROOT / folder).rglob("*.py"))


def test_every_agentfly_variable_is_declared_and_read_in_one_place():
    used: dict[str, list[str]] = {}
    direct_reads = []
    for path in _source_files():
        text = path.read_text(encoding="utf-8")
        relative = path.relative_to(ROOT).as_posix()
        for name in re.findall(r"AGENTFLY_[A-Z_]+", text):
            used.setdefault(name, []).append(relative)
        if relative != "agentfly_cli/settings/variables.py" and re.search(
            r"(environ\.get|getenv|environ\[)\(?\s*[\"']AGENTFLY_", text
        ):
            direct_reads.append(relative)
    assert sorted(set(used) - set(VARIABLES)) == [], (
        "declare these in agentfly_cli/settings/variables.py"
    )
    assert sorted(set(VARIABLES) - set(used)) == [], "declared but never used"
    assert direct_reads == [], (
        "read AGENTFLY_* variables through agentfly_cli/settings/variables.py"
    )
