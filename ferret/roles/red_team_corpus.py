"""The red team's scripted model: a corpus of attack templates, replayed in order, offline.

Each template (`ferret/roles/red_team_attacks/<slug>.py.j2`, jinja2) turns a contract's honest candidate into an
attack of one class: judge detection (Triton's settings, the environment, argv, the module's name, the command
line, torch's thread count), computing in lower precision, skipping work on long rows, caching by content,
numerics on the host, a torch op through a computed name, the honest math on the traced run only, the CPU
profile's tell. Its first line is a jinja comment
`{#- attack: <what it does> -#}`. A template sees `honest` (the honest candidate's source, whose `run` it may
rename with `_common.j2`'s `honest_as`), `op`, `inputs` and `outputs` (the contract's names, in order) and
`first_input`, so one template serves every contract whose candidate defines `run` at the top level.

    model = AttackCorpusModel(honest_source, task.contract)   # a ferret.models.base.Model
    team = RedTeam(model, check, harm, work_dir=w)            # ferret.roles.red_team
    team.run(task, honest_source, budget=len(model.attacks))
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import jinja2

from ferret.contract.model import Contract
from ferret.contract.task import Task
from ferret.errors import UsageError
from ferret.models import registry
from ferret.models.base import Model, ModelRequest, ModelResponse, ModelUnavailable
from ferret.models.testing import ScriptExhausted, tool_call_response
from ferret.roles.red_team import TOOL

ATTACKS_DIR = Path(__file__).resolve().parent / "red_team_attacks"
SUFFIX = ".py.j2"
_DESCRIPTION = re.compile(r"\A\{#-?\s*attack:\s*(.+?)\s*-?#\}", re.DOTALL)


@dataclass(frozen=True)
class AttackTemplate:
    slug: str
    description: str
    path: Path


def attack_templates(folder: Path = ATTACKS_DIR) -> list[AttackTemplate]:
    """Every template of the corpus, by slug; a template without its `attack:` comment is a ValueError naming it."""
    found = []
    for path in sorted(folder.glob(f"*{SUFFIX}")):
        if path.name.startswith("_"):
            continue
        described = _DESCRIPTION.match(path.read_text())
        if described is None:
            raise ValueError(f"{path}: an attack template opens with a comment {{#- attack: <what it does> -#}}")
        found.append(AttackTemplate(path.name[: -len(SUFFIX)], " ".join(described.group(1).split()), path))
    return found


def render_attack(template: AttackTemplate, honest_source: str, contract: Contract) -> str:
    """The attack's candidate file: the template applied to the honest candidate of `contract`."""
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(template.path.parent)),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        autoescape=False,
    )
    inputs = [spec.name for spec in contract.inputs]
    source = env.get_template(template.path.name).render(
        honest=honest_source,
        op=contract.op,
        inputs=inputs,
        outputs=[spec.name for spec in contract.outputs],
        first_input=inputs[0],
    )
    return source.strip() + "\n"


class AttackCorpusModel:
    """A `Model` that answers each request with the next attack of the corpus as a `submit_attack` call.

    It reads nothing of the request (it is scripted) but records every one, as `ScriptedModel` does; asking for
    more attacks than the corpus holds raises `ScriptExhausted`."""

    def __init__(self, honest_source: str, contract: Contract, attacks: list[AttackTemplate] | None = None):
        self.attacks = attack_templates() if attacks is None else list(attacks)
        self.honest_source = honest_source
        self.contract = contract
        self.name = "scripted:red-team-corpus"
        self.requests: list[ModelRequest] = []

    def complete(self, request: ModelRequest) -> ModelResponse:
        index = len(self.requests)
        if index >= len(self.attacks):
            raise ScriptExhausted(f"{self.name} holds {len(self.attacks)} attacks; attack #{index + 1} was asked for")
        self.requests.append(request.model_copy(deep=True))
        attack = self.attacks[index]
        source = render_attack(attack, self.honest_source, self.contract)
        return tool_call_response(TOOL, model=self.name, source=source, attack=attack.slug, notes=attack.description)


def red_team_model(spec: str, honest_source: str, contract: Contract) -> AttackCorpusModel | Model:
    """The model `--model` names: `scripted` is the attack corpus; anything else a model spec
    (ferret.models.registry: anthropic[:MODEL], claude-cli, openai:URL:MODEL, scripted:PATH.json). A spec that names
    nothing, or a model that cannot be reached here, is a UsageError naming it."""
    if spec.strip() == "scripted":
        return AttackCorpusModel(honest_source, contract)
    try:
        return registry.model_from_spec(spec)
    except (ValueError, ModelUnavailable) as err:
        raise UsageError(f"--model {spec!r}: {err}; or `scripted`, the offline attack corpus") from None


def default_honest_candidate(task: Task) -> Path:
    """The contract's own honest candidate: `tasks/<op>/candidates/<language>_<op>.py`, else the shortest-named
    `<language>_*.py` there; none is a UsageError asking for --candidate."""
    language = task.contract.backend.language
    folder = task.project_root / "tasks" / task.contract.op / "candidates"
    named = folder / f"{language}_{task.contract.op}.py"
    if named.is_file():
        return named
    others = sorted(folder.glob(f"{language}_*.py"), key=lambda p: (len(p.name), p.name))
    if not others:
        raise UsageError(f"{folder} holds no {language}_*.py honest candidate: name one with --candidate FILE")
    return others[0]
