"""ClaudeCliModel against a fake `claude` executable put first on PATH.

The fake records its argv, working directory, environment and stdin, then does what `behavior.json`
next to it says: print a JSON result, write files in its working directory, sleep, fail.
"""

import json
import os
import stat
import sys
import time
from pathlib import Path

import pytest

import ferret
from ferret.models import Message, ModelError, ModelRequest, ModelUnavailable, ToolSpec, forbid_model_requests
from ferret.models.claude_cli import ARGV_PROMPT_LIMIT, TOOL_INPUT_FILE, ClaudeCliModel

FAKE = """#!{python}
import json, os, subprocess, sys, time
HERE = {here!r}
behavior = json.load(open(os.path.join(HERE, "behavior.json")))
stdin = "" if sys.stdin is None or sys.stdin.closed else sys.stdin.read()
record = {{"argv": sys.argv, "cwd": os.getcwd(), "env": dict(os.environ), "stdin": stdin, "pid": os.getpid()}}
if behavior.get("grandchild"):
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    record["grandchild"] = child.pid
json.dump(record, open(os.path.join(HERE, "record.json"), "w"))
time.sleep(behavior.get("sleep", 0))
for name, text in behavior.get("write", {{}}).items():
    open(name, "w").write(text)
sys.stderr.write(behavior.get("stderr", ""))
if "raw_stdout" in behavior:
    sys.stdout.write(behavior["raw_stdout"])
else:
    json.dump({{"type": "result", "subtype": behavior.get("subtype", "success"), "is_error": behavior.get("is_error", False),
               "duration_ms": 1200, "num_turns": 2, "result": behavior.get("result", "done"),
               "session_id": "0b7e-fake", "total_cost_usd": 0.0123,
               "usage": {{"input_tokens": 321, "output_tokens": 45, "cache_read_input_tokens": 7}},
               "modelUsage": {{"claude-sonnet-4-6": {{"inputTokens": 321}}}}}}, sys.stdout)
sys.exit(behavior.get("exit", 0))
"""

SUBMIT = ToolSpec(
    name="submit_candidate",
    description="The optimizer's answer.",
    input_schema={
        "type": "object",
        "properties": {"source": {"type": "string"}, "approach": {"type": "string"}, "notes": {"type": "string"}},
        "required": ["source", "approach"],
    },
)
REVIEW = ToolSpec(
    name="submit_review",
    description="The reviewer's answer.",
    input_schema={"type": "object", "properties": {"integrity": {"enum": ["pass", "fail"]}, "plan": {"enum": ["pass", "fail"]}}},
)


class Fake:
    def __init__(self, bin_dir: Path):
        self.dir = bin_dir

    def behave(self, **behavior):
        (self.dir / "behavior.json").write_text(json.dumps(behavior))

    @property
    def record(self):
        return json.loads((self.dir / "record.json").read_text())

    @property
    def ran(self):
        return (self.dir / "record.json").exists()

    def flag_values(self, flag):
        argv = self.record["argv"]
        return [argv[i + 1] for i, a in enumerate(argv) if a == flag]


@pytest.fixture
def fake(tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "claude"
    script.write_text(FAKE.format(python=sys.executable, here=str(bin_dir)))
    script.chmod(script.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
    f = Fake(bin_dir)
    f.behave()
    return f


@pytest.fixture
def workspace(tmp_path):
    path = tmp_path / "ws"
    path.mkdir()
    return path


def _request(text="Make rmsnorm fast.", tools=(), system="You write Triton kernels."):
    return ModelRequest(system=system, messages=[Message(role="user", content=text)], tools=list(tools))


def test_flags_cwd_and_plain_answer(fake, workspace):
    fake.behave(result="Use a single pass.")
    model = ClaudeCliModel(workspace=workspace)
    response = model.complete(_request())
    record = fake.record
    argv = record["argv"]
    assert argv[1] == "-p"
    assert "You write Triton kernels." in argv[2] and "Make rmsnorm fast." in argv[2]
    assert fake.flag_values("--output-format") == ["json"]
    assert fake.flag_values("--tools") == ["Read,Write,Edit"]
    rules = fake.flag_values("--allowedTools")
    assert rules and all(r.split("(")[0] in {"Read", "Write", "Edit"} for r in rules)
    assert all(r.endswith(f"(/{workspace.resolve()}/**)") for r in rules)  # scoped to the workspace
    assert not any("Bash" in v for v in fake.flag_values("--tools") + rules)
    assert "Bash" in fake.flag_values("--disallowedTools")[0].split(",")
    assert fake.flag_values("--permission-mode") == ["acceptEdits"]
    assert fake.flag_values("--add-dir") == [str(workspace.resolve())]
    assert "--strict-mcp-config" in argv
    assert "--dangerously-skip-permissions" not in argv and "bypassPermissions" not in argv
    assert "--model" not in argv
    assert Path(record["cwd"]).resolve() == workspace.resolve()

    assert response.text == "Use a single pass."
    assert response.tool_calls == []
    assert response.usage == {"input_tokens": 321, "output_tokens": 45, "cache_read_input_tokens": 7}
    assert response.model == "claude-sonnet-4-6" and response.stop_reason == "end_turn"


def test_environment_is_scrubbed(fake, workspace, monkeypatch):
    monkeypatch.setenv("AWS_SECRET", "aws-secret-value")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "aws-secret-value")
    monkeypatch.setenv("GITHUB_TOKEN", "gh-token")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-cli-key")
    ClaudeCliModel(workspace=workspace).complete(_request())
    env = fake.record["env"]
    env.pop("LC_CTYPE", None)  # Python's own C-locale coercion in the fake, not something we passed
    assert set(env) <= {"PATH", "HOME", "ANTHROPIC_API_KEY", "CLAUDE_CONFIG_DIR"}
    assert env["ANTHROPIC_API_KEY"] == "sk-ant-cli-key" and env["PATH"] == os.environ["PATH"]
    assert "aws-secret-value" not in json.dumps(fake.record) and "gh-token" not in json.dumps(fake.record)


def test_model_flag(fake, workspace):
    model = ClaudeCliModel(workspace=workspace, model="opus")
    response = model.complete(_request())
    assert fake.flag_values("--model") == ["opus"]
    assert model.name == "claude-cli:opus" and response.model == "opus"


def test_candidate_tool_call_is_read_back_from_the_workspace(fake, workspace):
    (workspace / "candidate.py").write_text("# the baseline the caller put there\n")
    fake.behave(
        result="Wrote candidate.py.",
        write={"candidate.py": "import triton\n# fused\n", TOOL_INPUT_FILE: json.dumps({"approach": "fused", "notes": "n"})},
    )
    response = ClaudeCliModel(workspace=workspace).complete(_request(tools=[SUBMIT]))
    prompt = fake.record["argv"][2]
    assert "candidate.py" in prompt and TOOL_INPUT_FILE in prompt and "submit_candidate" in prompt
    (call,) = response.tool_calls
    assert call.name == "submit_candidate"
    assert call.input == {"source": "import triton\n# fused\n", "approach": "fused", "notes": "n"}
    assert response.stop_reason == "tool_use"
    assert not (workspace / TOOL_INPUT_FILE).exists()  # consumed, so a later run cannot reread it


def test_candidate_arguments_fall_back_to_json_in_the_answer(fake, workspace):
    fake.behave(result='Done.\n```json\n{"approach": "tiled"}\n```', write={"candidate.py": "x = 1\n"})
    call = ClaudeCliModel(workspace=workspace).complete(_request(tools=[SUBMIT])).tool_calls[0]
    assert call.input == {"source": "x = 1\n", "approach": "tiled"}


def test_no_candidate_file_is_a_model_error(fake, workspace):
    fake.behave(result="I could not do it.")
    with pytest.raises(ModelError, match="no candidate file"):
        ClaudeCliModel(workspace=workspace).complete(_request(tools=[SUBMIT]))


def test_a_stale_tool_input_file_is_not_reused(fake, workspace):
    (workspace / TOOL_INPUT_FILE).write_text(json.dumps({"integrity": "pass", "plan": "pass"}))
    fake.behave(result="no file this time")
    with pytest.raises(ModelError, match=TOOL_INPUT_FILE):
        ClaudeCliModel(workspace=workspace).complete(_request(tools=[REVIEW]))


def test_non_source_tool_reads_the_json_file(fake, workspace):
    fake.behave(write={TOOL_INPUT_FILE: json.dumps({"integrity": "fail", "plan": "pass"})})
    call = ClaudeCliModel(workspace=workspace).complete(_request(tools=[REVIEW])).tool_calls[0]
    assert (call.name, call.input) == ("submit_review", {"integrity": "fail", "plan": "pass"})


def test_long_prompts_go_through_stdin(fake, workspace):
    text = "x" * (ARGV_PROMPT_LIMIT + 10)
    ClaudeCliModel(workspace=workspace).complete(_request(text=text))
    record = fake.record
    assert record["argv"][1] == "-p" and record["argv"][2].startswith("--")
    assert text in record["stdin"]


def _alive(pid):
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    except OSError:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True
    return state not in ("Z", "X")


def test_timeout_kills_the_whole_process_group(fake, workspace):
    fake.behave(sleep=60, grandchild=True)
    started = time.monotonic()
    with pytest.raises(ModelUnavailable, match="timeout"):
        ClaudeCliModel(workspace=workspace, timeout=1).complete(_request())
    assert time.monotonic() - started < 15
    record = fake.record
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and (_alive(record["pid"]) or _alive(record["grandchild"])):
        time.sleep(0.05)
    assert not _alive(record["pid"]) and not _alive(record["grandchild"])


def test_nonzero_exit_is_a_model_error_with_the_stderr_tail(fake, workspace, monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-cli-SECRET")
    fake.behave(exit=1, stderr="noise\n" * 1000 + "Invalid API key sk-ant-cli-SECRET - Please run /login\n")
    with pytest.raises(ModelError) as info:
        ClaudeCliModel(workspace=workspace).complete(_request())
    message = str(info.value)
    assert "status 1" in message and "Please run /login" in message
    assert "SECRET" not in message and len(message) < 3000


def test_error_results_and_garbage_output_are_model_errors(fake, workspace):
    fake.behave(is_error=True, subtype="error_max_turns", result="")
    with pytest.raises(ModelError, match="error_max_turns"):
        ClaudeCliModel(workspace=workspace).complete(_request())
    fake.behave(raw_stdout="not json at all")
    with pytest.raises(ModelError, match="no JSON result"):
        ClaudeCliModel(workspace=workspace).complete(_request())


def test_missing_executable_is_unavailable(workspace):
    with pytest.raises(ModelUnavailable, match="not on PATH"):
        ClaudeCliModel(executable="claude-does-not-exist-here", workspace=workspace)


def test_unsafe_tools_are_refused(fake, workspace):
    for tools in [("Read", "Bash"), ("WebFetch",), ()]:
        with pytest.raises(ValueError):
            ClaudeCliModel(workspace=workspace, allowed_tools=tools)


def test_forbid_switch_blocks_before_the_cli_runs(fake, workspace):
    model = ClaudeCliModel(workspace=workspace)
    forbid_model_requests()
    try:
        with pytest.raises(ModelUnavailable, match="forbidden"):
            model.complete(_request())
    finally:
        forbid_model_requests(False)
    assert not fake.ran


def test_reads_outside_the_workspace_are_denied_where_the_secrets_live(fake, workspace, tmp_path, monkeypatch):
    """Claude Code reads without asking, so the project (gates/, tasks/), the ferret checkout, the trust
    registry and FERRET_GATES_DIR are denied by rules that win over every allow rule."""
    project = tmp_path / "project"
    project.mkdir()
    monkeypatch.chdir(project)
    monkeypatch.setenv("FERRET_GATES_DIR", str(tmp_path / "elsewhere-gates"))
    fake.behave(result="ok")
    ClaudeCliModel(workspace=workspace).complete(_request())
    denied = fake.flag_values("--disallowedTools")[1:]
    from ferret.gate.trust import trust_dir

    for folder in (project, Path(ferret.__file__).resolve().parents[1], trust_dir(), tmp_path / "elsewhere-gates"):
        assert f"Read(/{folder.resolve()}/**)" in denied and f"Edit(/{folder.resolve()}/**)" in denied, (folder, denied)
    assert not any(str(workspace.resolve()) in rule for rule in denied)


def test_a_denied_path_that_holds_the_workspace_is_left_out(fake, workspace):
    model = ClaudeCliModel(workspace=workspace, denied_paths=[workspace.parent, Path("/opt/secrets")])
    assert model.denial_rules() == ["Read(//opt/secrets/**)", "Edit(//opt/secrets/**)"]


def test_a_candidate_file_left_as_it_was_is_not_a_submission(fake, workspace):
    """The starting file the caller put there (or the previous round's answer) comes back unchanged when
    the CLI writes nothing: that is no candidate, not a new one under a new approach name."""
    (workspace / "candidate.py").write_text("# the previous round's answer\n")
    fake.behave(result="Done.", write={TOOL_INPUT_FILE: json.dumps({"approach": "tiled", "notes": "n"})})
    with pytest.raises(ModelError, match="as it was before the run"):
        ClaudeCliModel(workspace=workspace).complete(_request(tools=[SUBMIT]))
