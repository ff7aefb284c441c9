"""Claude through the Claude Code CLI (`claude -p`), confined to one workspace folder.

Each `complete` runs, with the workspace as its working directory:

    claude -p <prompt> --output-format json --tools Read,Write,Edit
           --allowedTools Read(//<workspace>/**) --allowedTools Edit(//<workspace>/**)
           --disallowedTools Bash,WebFetch,WebSearch --permission-mode acceptEdits
           --strict-mcp-config --add-dir <workspace> [--model <model>]

and reads the single JSON object it prints (`result` is the answer's text; `is_error`, `subtype` and
`usage` sit next to it).

How the CLI is confined (the CLI's documented flags):
* `--tools` sets the built-in tools that exist in the session at all: only `allowed_tools` (Read, Write,
  Edit by default; Bash and the web tools are refused by the constructor). `--allowedTools` only
  pre-approves tools, it does not restrict them, so it is given path-scoped rules for the workspace
  alone (`//` starts an absolute path in a permission rule; Edit rules cover every file-editing tool).
  `--disallowedTools` removes Bash and the web tools again, in case a CLI ignores `--tools`.
* `--permission-mode acceptEdits` approves edits inside the working directories only; an edit anywhere
  else would need a prompt, which a `-p` run cannot answer, so it is denied. Reading needs no approval
  in Claude Code, so reads are confined by deny rules, which win over every allow rule:
  `--disallowedTools Read(//<path>/**)` and `Edit(//<path>/**)` for each of `denied_paths`. By default
  these are the places where the judge's secrets and the reference live, as seen from the process that
  starts the CLI: the current folder (a project root holds gates/ and tasks/), the folder that holds the
  ferret package, the trust registry and FERRET_GATES_DIR. A path that holds the workspace is left out
  (it would deny the workspace itself).
* The working directory is the workspace, and it is the only directory given (`--add-dir`);
  `--strict-mcp-config` without an `--mcp-config` loads no MCP servers.
* The environment is scrubbed to PATH, HOME, ANTHROPIC_API_KEY and CLAUDE_CONFIG_DIR (when set; the CLI
  keeps its login there), plus `extra_env`. The run lives in its own process group and the whole
  group is killed at `timeout`.
The user's own Claude Code settings (under HOME) still load; allow rules there for paths outside the
workspace would apply too, except where a deny rule above covers the path. Run it under a HOME without
such rules if that matters.

Tool calls. The CLI cannot return an API tool call, so when the request has tools, the first tool is
answered through files in the workspace:
* a tool whose schema has a `source` property (the optimizer's `submit_candidate`): the CLI is told to
  write the whole candidate to `<workspace>/<candidate_name>` (the caller may have put the starting file
  there) and the tool's other arguments, as one JSON object, to `<workspace>/ferret_tool_input.json`. The
  response holds `ToolCall(name=<first tool>, input={...those arguments, "source": <candidate file>})`.
  No candidate file after the run, or one left as it was before the run, is a `ModelError`.
* any other tool (the reviewer's `submit_review`): the CLI writes the tool's arguments as JSON to
  `ferret_tool_input.json`, which becomes the call's input.
If the JSON file is missing or not an object, a JSON object in the CLI's final answer is used instead;
failing that, the `source` case carries the source alone and the other case is a `ModelError`.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ferret.models.base import (
    ModelError,
    ModelRequest,
    ModelResponse,
    ModelUnavailable,
    ToolCall,
    ToolSpec,
    model_requests_forbidden,
)

TOOL_INPUT_FILE = "ferret_tool_input.json"
PERMISSION_MODE = "acceptEdits"
# Built-in tools that touch files only; anything able to run commands or reach the network is refused.
SAFE_TOOLS = {"Read", "Write", "Edit", "MultiEdit", "Glob", "Grep"}
_READ_TOOLS = {"Read", "Glob", "Grep"}
ALWAYS_DISALLOWED = ("Bash", "WebFetch", "WebSearch")
PASSED_ENV = ("PATH", "HOME", "ANTHROPIC_API_KEY", "CLAUDE_CONFIG_DIR")
# Linux caps one argv string at 128 KiB (MAX_ARG_STRLEN); longer prompts go through stdin.
ARGV_PROMPT_LIMIT = 100_000
STDERR_TAIL = 2000


def _tail(text: str, limit: int = STDERR_TAIL) -> str:
    text = text.strip()
    return text if len(text) <= limit else "..." + text[-limit:]


def default_denied_paths() -> list[Path]:
    """The folders a CLI run must not read, as seen from this process (see the module docstring)."""
    from ferret.private_folders import trust_dir

    paths = [Path.cwd(), Path(__file__).resolve().parents[2], trust_dir()]
    if os.environ.get("FERRET_GATES_DIR"):
        paths.append(Path(os.environ["FERRET_GATES_DIR"]))
    return paths


class ClaudeCliModel:
    """`Model` running the Claude Code CLI in print mode, confined to `workspace` (see the module doc).

    `workspace`: the folder the CLI runs in and may write to; a private temporary folder when omitted.
    `candidate_name`: the file, inside the workspace, that a `source` tool call is read back from.
    """

    def __init__(
        self,
        executable: str = "claude",
        workspace: Path | None = None,
        allowed_tools: Sequence[str] = ("Read", "Write", "Edit"),
        timeout: float = 900,
        model: str | None = None,
        candidate_name: str = "candidate.py",
        extra_env: Mapping[str, str] | None = None,
        denied_paths: Sequence[Path] | None = None,
    ):
        refused = [t for t in allowed_tools if t not in SAFE_TOOLS]
        if refused:
            raise ValueError(f"ClaudeCliModel refuses tools {refused}: only {sorted(SAFE_TOOLS)} may be allowed")
        if not allowed_tools:
            raise ValueError("ClaudeCliModel needs at least one file tool (Read, Write, Edit)")
        if Path(candidate_name).name != candidate_name or candidate_name in ("", ".", "..", TOOL_INPUT_FILE):
            raise ValueError(f"candidate_name must be a plain file name, not {candidate_name!r}")
        resolved = shutil.which(executable)
        if resolved is None:
            raise ModelUnavailable(f"claude-cli: the Claude Code CLI {executable!r} is not on PATH")
        self.executable = resolved
        self.workspace = Path(workspace) if workspace is not None else Path(tempfile.mkdtemp(prefix="ferret-claude-"))
        self.workspace.mkdir(parents=True, exist_ok=True)
        self.workspace = self.workspace.resolve()
        if _UNSAFE_PATH.search(str(self.workspace)):
            raise ValueError(
                f"workspace {str(self.workspace)!r} holds characters that cannot go into a permission rule "
                "(spaces, commas, quotes, brackets or glob characters); use a plain path"
            )
        denied = default_denied_paths() if denied_paths is None else [Path(d) for d in denied_paths]
        self.denied_paths = []
        for path in dict.fromkeys(d.resolve() for d in denied):
            if path == self.workspace or path in self.workspace.parents:
                continue
            if _UNSAFE_PATH.search(str(path)):
                raise ValueError(
                    f"denied path {str(path)!r} cannot go into a permission rule (spaces, commas, quotes, "
                    "brackets or glob characters); run from a plain path or pass denied_paths"
                )
            self.denied_paths.append(path)
        self.allowed_tools = tuple(dict.fromkeys(allowed_tools))
        self.timeout = timeout
        self.model = model
        self.candidate_name = candidate_name
        self.extra_env = dict(extra_env or {})
        self.name = "claude-cli" if model is None else f"claude-cli:{model}"

    def __repr__(self) -> str:
        return (
            f"ClaudeCliModel(executable={self.executable!r}, workspace={str(self.workspace)!r}, "
            f"allowed_tools={self.allowed_tools!r}, timeout={self.timeout!r}, model={self.model!r})"
        )

    # -- the command ------------------------------------------------------------------------------

    def permission_rules(self) -> list[str]:
        """`--allowedTools` rules: the allowed tools, each limited to paths inside the workspace."""
        scope = f"/{self.workspace.as_posix()}/**"  # "//abs/path/**": an absolute path in a rule
        rules = []
        for tool in self.allowed_tools:
            rule = f"Read({scope})" if tool in _READ_TOOLS else f"Edit({scope})"
            if rule not in rules:
                rules.append(rule)
        return rules

    def denial_rules(self) -> list[str]:
        """`--disallowedTools` rules: no reading or editing under any of `denied_paths`."""
        return [f"{tool}(/{path.as_posix()}/**)" for path in self.denied_paths for tool in ("Read", "Edit")]

    def command(self, prompt: str | None) -> list[str]:
        """argv of one run; `prompt` None means it is sent on stdin."""
        argv = [self.executable, "-p"]
        if prompt is not None:
            argv.append(prompt)
        argv += [
            "--output-format",
            "json",
            "--tools",
            ",".join(self.allowed_tools),
        ]
        for rule in self.permission_rules():  # one flag per rule: the option is variadic
            argv += ["--allowedTools", rule]
        argv += [
            "--disallowedTools",
            ",".join(ALWAYS_DISALLOWED),
        ]
        for rule in self.denial_rules():
            argv += ["--disallowedTools", rule]
        argv += [
            "--permission-mode",
            PERMISSION_MODE,
            "--strict-mcp-config",
            "--add-dir",
            str(self.workspace),
        ]
        if self.model:
            argv += ["--model", self.model]
        return argv

    def environment(self) -> dict[str, str]:
        env = {name: os.environ[name] for name in PASSED_ENV if os.environ.get(name)}
        env.update(self.extra_env)
        return env

    # -- the prompt -------------------------------------------------------------------------------

    def render_prompt(self, request: ModelRequest) -> str:
        parts = []
        if request.system:
            parts.append(f"<instructions>\n{request.system.strip()}\n</instructions>")
        if len(request.messages) == 1 and request.messages[0].role == "user":
            parts.append(request.messages[0].content)
        else:
            turns = "\n\n".join(f"<{m.role}>\n{m.content}\n</{m.role}>" for m in request.messages)
            parts.append(f"<conversation>\n{turns}\n</conversation>\nContinue as the assistant.")
        if request.tools:
            parts.append(self._tool_instructions(request.tools[0]))
        return "\n\n".join(parts)

    def _tool_instructions(self, tool: ToolSpec) -> str:
        properties = dict((tool.input_schema or {}).get("properties") or {})
        where = f"the current directory ({self.workspace})"
        if "source" in properties:
            others = {k: v for k, v in properties.items() if k != "source"}
            text = (
                f"Answer by submitting `{tool.name}` ({tool.description}) through files:\n"
                f"1. Write the complete file to `{self.candidate_name}` in {where} with your file tools. "
                f"Its whole content is the `source` argument: {json.dumps(properties['source'])}\n"
            )
            if others:
                schema = {**tool.input_schema, "properties": others}
                schema["required"] = [r for r in schema.get("required", []) if r != "source"]
                text += (
                    f"2. Write the other arguments as one JSON object to `{TOOL_INPUT_FILE}` in the same "
                    f"directory, matching this JSON schema:\n{json.dumps(schema, indent=1)}\n"
                )
        else:
            text = (
                f"Answer by submitting `{tool.name}` ({tool.description}): write its arguments as one JSON "
                f"object to `{TOOL_INPUT_FILE}` in {where}, matching this JSON schema:\n"
                f"{json.dumps(tool.input_schema, indent=1)}\n"
            )
        return text + "Write no other files and nothing outside that directory. Then reply with a one-line summary."

    # -- one run ----------------------------------------------------------------------------------

    def complete(self, request: ModelRequest) -> ModelResponse:
        if model_requests_forbidden():
            raise ModelUnavailable(f"{self.name}: model requests are forbidden in this process (forbid_model_requests)")
        tool_input_path = self.workspace / TOOL_INPUT_FILE
        tool_input_path.unlink(missing_ok=True)
        # What the candidate file held before the run: a run that leaves it as it was has submitted nothing
        # (the file would be the caller's starting point, or the previous round's answer).
        candidate = self.workspace / self.candidate_name
        before = candidate.read_bytes() if candidate.is_file() and not candidate.is_symlink() else None
        prompt = self.render_prompt(request)
        # Long prompts, and prompts an option parser could take for a flag, go through stdin.
        via_stdin = len(prompt.encode()) > ARGV_PROMPT_LIMIT or prompt.startswith("-")
        data = self._run(self.command(None if via_stdin else prompt), prompt if via_stdin else None)
        if data.get("is_error") or data.get("subtype") not in (None, "success"):
            raise ModelError(
                f"{self.name}: the CLI reported an error ({data.get('subtype') or 'is_error'}): "
                f"{self._redact(str(data.get('result') or ''))[:500]}"
            )
        text = str(data.get("result") or "")
        calls = [self._read_tool_call(request.tools[0], text, before)] if request.tools else []
        return ModelResponse(
            text=text,
            tool_calls=calls,
            model=self._model_of(data),
            usage=_usage_of(data),
            stop_reason=data.get("stop_reason") or ("tool_use" if calls else "end_turn"),
        )

    def _redact(self, text: str) -> str:
        key = os.environ.get("ANTHROPIC_API_KEY")
        return text.replace(key, "[redacted]") if key else text

    def _run(self, argv: list[str], stdin_text: str | None) -> dict[str, Any]:
        try:
            process = subprocess.Popen(
                argv,
                cwd=self.workspace,
                env=self.environment(),
                stdin=subprocess.PIPE if stdin_text is not None else subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                start_new_session=True,  # its own process group, killed whole on timeout
            )
        except FileNotFoundError as err:
            raise ModelUnavailable(f"{self.name}: the Claude Code CLI {self.executable!r} is gone") from err
        except PermissionError as err:
            raise ModelUnavailable(f"{self.name}: the Claude Code CLI {self.executable!r} cannot be run") from err
        try:
            stdout, stderr = process.communicate(stdin_text, timeout=self.timeout)
        except subprocess.TimeoutExpired:
            _kill_group(process)
            _reap(process)
            raise ModelUnavailable(f"{self.name}: the CLI ran past its {self.timeout}s timeout and was killed") from None
        except BaseException:
            _kill_group(process)
            _reap(process)
            raise
        if process.returncode != 0:
            detail = _tail(stderr) or _tail(stdout)
            raise ModelError(f"{self.name}: the CLI exited with status {process.returncode}: {self._redact(detail)}")
        data = _parse_result(stdout)
        if data is None:
            raise ModelError(f"{self.name}: the CLI printed no JSON result: {self._redact(_tail(stdout, 500))!r}")
        return data

    def _read_tool_call(self, tool: ToolSpec, answer: str, candidate_before: bytes | None = None) -> ToolCall:
        arguments = self._read_tool_input()
        if arguments is None:
            arguments = _json_object_in(answer)
        properties = (tool.input_schema or {}).get("properties") or {}
        if "source" in properties:
            candidate = self.workspace / self.candidate_name
            if candidate.is_symlink() or not candidate.is_file():
                raise ModelError(
                    f"{self.name}: the CLI wrote no candidate file {self.candidate_name} in the workspace; "
                    f"its answer: {answer[:300]!r}"
                )
            if candidate.read_bytes() == candidate_before:
                raise ModelError(
                    f"{self.name}: the CLI left {self.candidate_name} as it was before the run (nothing submitted); "
                    f"its answer: {answer[:300]!r}"
                )
            return ToolCall(name=tool.name, input={**(arguments or {}), "source": candidate.read_text()})
        if arguments is None:
            raise ModelError(f"{self.name}: the CLI answered without writing {TOOL_INPUT_FILE} for {tool.name}: {answer[:300]!r}")
        return ToolCall(name=tool.name, input=arguments)

    def _read_tool_input(self) -> dict[str, Any] | None:
        path = self.workspace / TOOL_INPUT_FILE
        if path.is_symlink() or not path.is_file():
            return None
        try:
            value = json.loads(path.read_text())
        except ValueError:
            return None
        finally:
            path.unlink(missing_ok=True)
        return value if isinstance(value, dict) else None

    def _model_of(self, data: dict[str, Any]) -> str:
        if self.model:
            return self.model
        usage = data.get("modelUsage")
        if isinstance(usage, dict) and usage:
            return str(next(iter(usage)))
        return "claude-cli"


def _kill_group(process: subprocess.Popen) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        process.kill()


def _reap(process: subprocess.Popen) -> None:
    try:
        process.communicate(timeout=10)
    except subprocess.TimeoutExpired:  # something outside the group still holds the pipes
        pass


def _parse_result(stdout: str) -> dict[str, Any] | None:
    text = stdout.strip()
    try:
        value = json.loads(text)
        if isinstance(value, dict):
            return value
    except ValueError:
        pass
    for line in reversed(text.splitlines()):  # tolerate lines printed before the result
        try:
            value = json.loads(line)
        except ValueError:
            continue
        if isinstance(value, dict) and "result" in value:
            return value
    return None


_UNSAFE_PATH = re.compile(r"[\s,()\[\]{}*?\"'\\]")
_FENCED = re.compile(r"```(?:json)?\s*(\{.*?\})\s*```", re.DOTALL)


def _json_object_in(text: str) -> dict[str, Any] | None:
    candidates = [m.group(1) for m in _FENCED.finditer(text)]
    start, end = text.find("{"), text.rfind("}")
    if start != -1 and end > start:
        candidates.append(text[start : end + 1])
    for candidate in reversed(candidates):
        try:
            value = json.loads(candidate)
        except ValueError:
            continue
        if isinstance(value, dict):
            return value
    return None


def _usage_of(data: dict[str, Any]) -> dict[str, int]:
    raw = data.get("usage") or {}
    usage = {
        k: v
        for k in ("input_tokens", "output_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")
        if isinstance(v := raw.get(k), int)
    }
    return usage
