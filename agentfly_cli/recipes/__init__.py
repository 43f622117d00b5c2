"""Packaged recipes, registered through the ``agentfly`` entry points like a plugin's."""

from agentfly_cli.plugin_host.hookspecs import hookimpl


@hookimpl
def register_recipes(register):
    register(
        "calculator",
        "calculator.yaml",
        "arithmetic with the calculator tool in the plain CALC:/ANSWER: line protocol "
        "(small models such as SmolLM2-135M)",
    )
    register(
        "calculator-json",
        "calculator_json.yaml",
        "arithmetic with the calculator tool as <tool_call> JSON (Qwen, Hermes-style models)",
    )
    register(
        "scienceworld",
        "scienceworld.yaml",
        "ScienceWorld science tasks (find a living thing, the longest-lived animal, ...) in its "
        "simulator (Java); tool: ACTION: lines; reward: the task score",
    )
    register(
        "textworld",
        "textworld.yaml",
        "ALFWorld-style household text games (TextWorld): take, open, go, put; reward: the "
        "game score",
    )
    register(
        "chess_puzzles",
        "chess_puzzles.yaml",
        "mate-in-1/2 chess puzzles against Stockfish (python-chess): MOVE:, BOARD and MOVES "
        "lines; reward: checkmate delivered in time",
    )
    register(
        "code_math",
        "code_math.yaml",
        "math word problems (rates, equations, percentages, series) solved with the sandboxed "
        "python tool: PYTHON: and ANSWER: lines; reward: math-verify",
    )
    register(
        "search_qa",
        "search_qa.yaml",
        "multi-hop questions over a packaged fictional encyclopedia with a BM25 search tool: "
        "SEARCH: and ANSWER: lines; reward: EM and F1",
    )
