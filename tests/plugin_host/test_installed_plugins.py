"""Real plugin packages installed with pip, seen by the `agentfly` command in a fresh process."""

from __future__ import annotations

import importlib.metadata
import json
import os
import subprocess
import sys

import pytest

from tests.helpers.paths import REPO_ROOT

EXAMPLE = REPO_ROOT / "plugins" / "agentfly-plugin-example"
BROKEN = REPO_ROOT / "tests" / "fixtures" / "agentfly-plugin-broken"


def pip_install(package, target):
    """Install ``package`` with pip into ``target`` (a folder put on PYTHONPATH later)."""
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "--target",
            str(target),
            str(package),
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )


def agentfly(*arguments, site=None):
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTFLY_")}
    if site is not None:
        env["PYTHONPATH"] = os.pathsep.join(str(s) for s in site)
    return subprocess.run(
        [sys.executable, "-m", "agentfly_cli", *arguments],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )


def _installed(distribution):
    try:
        importlib.metadata.distribution(distribution)
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


@pytest.fixture(scope="module")
def example_site(tmp_path_factory):
    target = tmp_path_factory.mktemp("example-site")
    pip_install(EXAMPLE, target)
    return target


@pytest.fixture(scope="module")
def broken_site(tmp_path_factory):
    target = tmp_path_factory.mktemp("broken-site")
    pip_install(BROKEN, target)
    return target


def test_example_plugin_tool_is_listed_and_attributed(example_site):
    if not _installed("agentfly-plugin-example"):  # someone may have pip-installed it already
        before = json.loads(agentfly("tools", "list", "--json").stdout)
        assert "unit_convert" not in {t["name"] for t in before}
    result = agentfly("tools", "list", "--json", site=[example_site])
    assert result.returncode == 0, result.stderr
    tools = {t["name"]: t for t in json.loads(result.stdout)}
    assert tools["unit_convert"]["plugin"] == "example"
    assert tools["unit_convert"]["distribution"] == "agentfly-plugin-example"
    assert tools["unit_convert"]["builtin"] is False
    assert tools["calculator"]["plugin"] == "builtin_tools"


def test_example_plugin_tool_reward_and_command_work(example_site):
    call = agentfly(
        "tools",
        "call",
        "unit_convert",
        "--args",
        '{"value": 5, "from_unit": "km", "to_unit": "mi"}',
        site=[example_site],
    )
    assert call.returncode == 0 and call.stdout.strip() == "3.10686 mi"
    wrong = agentfly(
        "tools",
        "call",
        "unit_convert",
        "--args",
        '{"value": 5, "from_unit": "km", "to_unit": "kg"}',
        site=[example_site],
    )
    assert wrong.returncode == 1 and "cannot convert km to kg" in wrong.stdout
    rewards = json.loads(agentfly("rewards", "list", "--json", site=[example_site]).stdout)
    assert {r["name"]: r["plugin"] for r in rewards}["contains_answer"] == "example"
    command = agentfly("example-units", site=[example_site])
    assert command.returncode == 0 and command.stdout.startswith("length: mm, cm")


def test_broken_plugin_is_reported_and_the_cli_still_works(broken_site, example_site):
    plugins = agentfly("plugins", "--json", site=[broken_site, example_site])
    assert plugins.returncode == 0, plugins.stderr
    by_name = {p["name"]: p for p in json.loads(plugins.stdout)["plugins"]}
    assert by_name["broken"]["distribution"] == "agentfly-plugin-broken"
    assert by_name["broken"]["error"] == (
        "ImportError: No module named 'a_dependency_that_is_not_installed'"
    )
    assert by_name["example"]["error"] is None

    human = agentfly("plugins", site=[broken_site])
    assert human.returncode == 0 and "a_dependency_that_is_not_installed" in human.stdout

    tools = agentfly("tools", "list", "--json", site=[broken_site, example_site])
    assert tools.returncode == 0
    names = {t["name"] for t in json.loads(tools.stdout)}
    assert {"calculator", "answer", "unit_convert"} <= names
    assert "1 plugin(s) had errors (broken)" in tools.stderr
    assert "Traceback" not in tools.stderr


def test_load_plugins_selects_distributions(example_site):
    only_example = agentfly("tools", "list", "--json", site=[example_site])
    assert "unit_convert" in only_example.stdout
    env_site = {"PYTHONPATH": str(example_site), "AGENTFLY_LOAD_PLUGINS": "agentfly-plugin-example"}
    result = subprocess.run(
        [sys.executable, "-m", "agentfly_cli", "tools", "list", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **env_site},
    )
    assert [t["name"] for t in json.loads(result.stdout)] == ["unit_convert"]


def test_help_does_not_import_torch():
    code = (
        "import sys\n"
        "from agentfly_cli.cli.app import main\n"
        "sys.argv = ['agentfly', '--help']\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        # the register hooks (tools, envs, rewards and pydantic) wait for a command's first use
        "heavy = ('torch', 'transformers', 'sympy', 'math_verify', 'pydantic', 'chess',\n"
        "         'agentfly_cli.components.tools', 'envs_builtin.chess_env',\n"
        "         'tools_builtin.answer',\n"
        # the root page is drawn by cli/root_help.py: Typer's Rich help module costs ~0.1 s
        "         'typer.rich_utils', 'rich.markdown')\n"
        "heavy = [m for m in heavy if m in sys.modules]\n"
        "print('HEAVY=' + ','.join(heavy))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60
    )
    assert "Usage" in result.stdout and "tools" in result.stdout
    assert result.stdout.strip().splitlines()[-1] == "HEAVY="


def test_console_script_is_installed():
    script = os.path.join(os.path.dirname(sys.executable), "agentfly")
    result = subprocess.run([script, "--version"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and result.stdout.startswith("agentfly-cli ")
