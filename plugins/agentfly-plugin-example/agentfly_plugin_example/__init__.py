"""An example agentfly-cli plugin: a unit-conversion tool, a lenient reward, and a command."""

from __future__ import annotations

from typing import Literal

from agentfly_cli import hookimpl, reward, tool

Unit = Literal["mm", "cm", "m", "km", "in", "ft", "mi", "g", "kg", "lb", "oz", "C", "F", "K"]

# Factor to the base unit of each dimension (metre, kilogram).
LENGTH = {
    "mm": 0.001,
    "cm": 0.01,
    "m": 1.0,
    "km": 1000.0,
    "in": 0.0254,
    "ft": 0.3048,
    "mi": 1609.344,
}
MASS = {"g": 0.001, "kg": 1.0, "lb": 0.45359237, "oz": 0.028349523125}
TEMPERATURE = ("C", "F", "K")


def _to_kelvin(value: float, unit: str) -> float:
    return {"C": value + 273.15, "F": (value - 32) * 5 / 9 + 273.15, "K": value}[unit]


def _from_kelvin(value: float, unit: str) -> float:
    return {"C": value - 273.15, "F": (value - 273.15) * 9 / 5 + 32, "K": value}[unit]


@tool
def unit_convert(value: float, from_unit: Unit, to_unit: Unit) -> str:
    """Convert a quantity between units of length, mass or temperature.

    Args:
        value: The quantity to convert.
        from_unit: The unit of the value.
        to_unit: The unit to convert to (same dimension as from_unit).
    """
    for table in (LENGTH, MASS):
        if from_unit in table and to_unit in table:
            result = value * table[from_unit] / table[to_unit]
            return f"{result:.6g} {to_unit}"
    if from_unit in TEMPERATURE and to_unit in TEMPERATURE:
        return f"{_from_kelvin(_to_kelvin(value, from_unit), to_unit):.6g} {to_unit}"
    raise ValueError(f"cannot convert {from_unit} to {to_unit}: they measure different things")


@reward
def contains_answer(prediction: str, answer: str) -> float:
    """1.0 when the (non-empty) gold answer appears in the final answer, ignoring case."""
    gold = str(answer).strip().lower()
    return 1.0 if gold and gold in str(prediction).lower() else 0.0


@hookimpl
def register_tools(register):
    register(unit_convert)


@hookimpl
def register_rewards(register):
    register(contains_answer)


@hookimpl
def register_commands(app):
    @app.command("example-units")
    def example_units() -> None:
        """List the units that the example plugin's unit_convert tool knows."""
        print("length:", ", ".join(LENGTH))
        print("mass:", ", ".join(MASS))
        print("temperature:", ", ".join(TEMPERATURE))
