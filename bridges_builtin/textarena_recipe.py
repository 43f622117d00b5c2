"""The settings of a ``textarena:GAME`` recipe, and its seeded games as task rows."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agentfly_cli.recipes.families import tasks_file, whole_option, write_tasks

DEFAULT_SIZE = 200
WARM_START_GAMES = 8  # solved games imitated before RL (docs/bridges/textarena.md#measured)
MAX_TURNS_CAP = 30  # a game's own turn limit, but never more chains' turns than this
SYSTEM_PROMPT = (
    "You play a game. Read the rules, then make one move per turn on one line as "
    "MOVE: <move>, written exactly as the game asks (for example MOVE: [5])."
)


def game_turns(game_id: str) -> int:
    """The rollout's turn limit for a game: its own (registry ``max_turns``), capped."""
    from textarena.envs.registration import ENV_REGISTRY

    kwargs = getattr(ENV_REGISTRY[game_id], "kwargs", {}) or {}
    turns = kwargs.get("max_turns")
    return min(int(turns), MAX_TURNS_CAP) if isinstance(turns, int) and turns > 0 else 10


def build(param: str | None, options: Mapping[str, Any]) -> dict[str, Any]:
    """The settings of ``textarena:<param>``, after writing its games to the cache."""
    import textarena

    from bridges_builtin.textarena_env import check_game, game_family
    from bridges_builtin.textarena_tasks import SOLVERS, game_rows

    game_id = check_game(param, "textarena:GAME")
    size = whole_option("textarena", options, "size", DEFAULT_SIZE, 2)
    seed = whole_option("textarena", options, "seed", 0, 0)
    key = {"game": game_id, "size": size, "seed": seed, "textarena": textarena.__version__}
    path = write_tasks(
        tasks_file("textarena", game_id, key), lambda: game_rows(game_id, size, seed)
    )
    solved = game_family(game_id) in SOLVERS
    settings: dict[str, Any] = {
        "name": f"textarena:{game_id}",
        "description": f"the textarena game {game_id}: the game speaks first, MOVE: lines, "
        "the game's own reward",
        "model": "smollm2",
        "backend": {"name": "hf"},
        "data": {"path": str(path), "holdout": 0.1, "holdout_seed": 0},
        "tools": ["textarena_move"],
        "reward": "env_reward",
        "envs": {"textarena": {"pool_max": 64}},
        "chat": {
            "parser": "line",
            "parser_options": {
                "commands": {"MOVE": {"tool": "textarena_move", "argument": "action"}}
            },
            "observation": {"role": "user", "template": "{observation}"},
            "system_prompt": SYSTEM_PROMPT,
        },
        "rollout": {
            "opening_env": "textarena",
            "n": 8,
            "max_turns": game_turns(game_id),
            "max_tokens_per_turn": 24,
            "max_total_tokens": 2048,
            "max_errors": 3,
            "temperature": 1.0,
            "stop": ["\n"],
        },
        "trainer": {
            "steps": 20,
            "tasks_per_step": 4,
            "micro_batch_tokens": 1024,
            "algorithm": {"advantage": "grpo", "policy_loss": "ppo"},
            "backend": {"name": "torch", "lr": 8.0e-6, "gradient_checkpointing": True},
        },
    }
    if solved:  # the winning moves of each seeded game: the warm start's and the check's gold
        # the move format from a few games' solutions; how to win is RL's to find (all the
        # solutions teach GuessTheNumber outright: nothing is left for RL)
        settings["trainer"]["warm_start"] = {
            "enabled": True,
            "limit": WARM_START_GAMES,
            "responses": [{"each": "solution", "say": "MOVE: {item}"}],
        }
        settings["check"] = {
            "gold": "bridges_builtin.textarena_tasks:gold_responses",
            # two invalid moves end a game (textarena forgives one)
            "junk": [["MOVE: [0]", "MOVE: [0]"]],
            # another game's winning moves can win this one too (bisections share prefixes)
            "skip_junk": ["other_task"],
        }
    return settings
