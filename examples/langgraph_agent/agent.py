"""A calculator agent written with LangGraph and langchain-openai (`pip install langgraph
langchain-openai`), and nothing of agentfly.

The graph is the one LangGraph's docs build: a model node (``ChatOpenAI`` with the tools
bound), LangGraph's ``ToolNode`` running the calls the reply names, and back to the model until
it calls ``answer``. Pointed at the gateway (`agentfly train
examples/langgraph_agent/recipe.yaml`), every request is recorded token-exactly. SmolLM2-135M
writes no JSON tool calls, so the recipe has the gateway read its ``CALC:`` / ``ANSWER:`` lines
as calls of these two tools (``chat.parser: line``): the graph sees ordinary OpenAI tool calls.
"""

from __future__ import annotations

import ast
import operator

SYSTEM = (
    "Use the calculator: write CALC: <expression>. You get RESULT: <number>. "
    "Then write ANSWER: <number>."
)
EXAMPLE = [  # one worked example, as chat turns: (role, text)
    ("user", "What is 12 * 34?"),
    ("assistant", "CALC: 12*34"),
    ("user", "RESULT: 408"),
    ("assistant", "ANSWER: 408"),
]
OPERATORS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
             ast.Div: operator.truediv, ast.USub: operator.neg}  # fmt: skip


def arithmetic(expression: str) -> str:
    """+ - * / on numbers; anything else is an error message for the model."""

    def value(node: ast.AST) -> float:
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
            return node.value
        if isinstance(node, (ast.BinOp, ast.UnaryOp)) and type(node.op) in OPERATORS:
            operands = (node.left, node.right) if isinstance(node, ast.BinOp) else (node.operand,)
            return OPERATORS[type(node.op)](*(value(operand) for operand in operands))
        raise ValueError("only numbers and + - * /")

    try:
        result = value(ast.parse(expression.strip(), mode="eval").body)
    except (SyntaxError, ValueError, ZeroDivisionError, RecursionError) as exc:
        return f"error: {exc}"
    return str(int(result)) if float(result).is_integer() else f"{result:.6g}"


def build_graph(base_url: str):
    """The compiled graph, its model served at ``base_url``."""
    from langchain_core.messages import ToolMessage
    from langchain_core.tools import tool
    from langchain_openai import ChatOpenAI
    from langgraph.graph import END, START, MessagesState, StateGraph
    from langgraph.prebuilt import ToolNode, tools_condition

    @tool
    def calculator(expression: str) -> str:
        """Evaluate an arithmetic expression such as 12*34."""
        return arithmetic(expression)

    @tool
    def answer(answer: str) -> str:
        """Give the final answer."""
        return answer.strip()

    tools = [calculator, answer]
    model = ChatOpenAI(
        model="policy", base_url=base_url, api_key="unused", max_tokens=24, max_retries=0
    ).bind_tools(tools)

    def think(state: dict) -> dict:
        return {"messages": [model.invoke(state["messages"])]}

    def after_tools(state: dict) -> str:
        last = state["messages"][-1]
        return END if isinstance(last, ToolMessage) and last.name == "answer" else "model"

    graph = StateGraph(MessagesState)
    graph.add_node("model", think)
    graph.add_node("tools", ToolNode(tools))
    graph.add_edge(START, "model")
    graph.add_conditional_edges("model", tools_condition)  # tool calls -> tools, else the end
    graph.add_conditional_edges("tools", after_tools)
    return graph.compile()


def agent(task: dict, base_url: str, max_turns: int = 4) -> str | None:
    """Answer ``task["question"]``: the ``answer`` tool's argument, or None without one."""
    from langchain_core.messages import ToolMessage
    from langgraph.errors import GraphRecursionError

    messages = [("system", SYSTEM), *EXAMPLE, ("user", task["question"])]
    try:  # each model turn and each tool turn is one step of the graph
        state = build_graph(base_url).invoke(
            {"messages": messages}, {"recursion_limit": 2 * max_turns}
        )
    except GraphRecursionError:
        return None
    last = state["messages"][-1]
    return last.content if isinstance(last, ToolMessage) and last.name == "answer" else None
