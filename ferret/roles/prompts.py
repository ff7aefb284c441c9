"""Rendering a role's prompt (agents/<role>/prompt.md.j2) and getting its one tool call back.

`AGENTS_DIR` is the repository's `agents/` folder: each role's `role.md`, `prompt.md.j2` and `tool.json`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jinja2

from ferret.models.base import Message, Model, ModelError, ModelRequest, ToolSpec

AGENTS_DIR = Path(__file__).resolve().parents[2] / "agents"


def render(agents_dir: Path, role: str, context: dict[str, Any]) -> tuple[str, str]:
    """(system, user) text of a role: its role.md and its rendered prompt template."""
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(agents_dir / role)),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        autoescape=False,
    )
    system = (agents_dir / role / "role.md").read_text()
    return system, env.get_template("prompt.md.j2").render(**context)


def call_tool(model: Model, agents_dir: Path, role: str, tool: str, context: dict[str, Any]) -> dict[str, Any]:
    system, user = render(agents_dir, role, context)
    schema = json.loads((agents_dir / role / "tool.json").read_text())
    request = ModelRequest(
        system=system,
        messages=[Message(role="user", content=user)],
        tools=[ToolSpec(name=tool, description=f"The {role}'s answer.", input_schema=schema)],
    )
    response = model.complete(request)
    for call in response.tool_calls:
        if call.name == tool:
            return call.input
    raise ModelError(f"{model.name} answered without calling {tool}: {response.text[:300]!r}")
