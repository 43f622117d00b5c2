"""Packaged recipes, registered through the ``agentfly`` entry points like a plugin's."""

from agentfly_cli.hookspecs import hookimpl


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
