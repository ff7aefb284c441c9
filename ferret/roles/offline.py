"""The offline optimizer: a search over a kernel template's parameters, with no model behind it.

`tasks/<op>/templates/` holds a jinja2 template of a whole candidate file and `space.yaml`, the
parameter space (names -> ordered lists of values), its default point and how points are named.
`TemplateSearchOptimizer` proposes points of that space round by round:

* round 1: the default point, alone;
* with a passing point that the gate timed (`{"speedup": x}` in the feedback): first the space's untried
  `starts` (approach families several steps from the default), then untried points nearest to the fastest
  passing one, one parameter moved one step first;
* with a passing point but no timing (the CPU profile: an interpreter time is never a speedup): nothing,
  `[]`: no proposal could be shown to be better;
* with no passing point yet: untried points nearest to the default, simpler ones first;
* `must_pivot`: untried points that differ in the space's pivot parameter (for rmsnorm the
  `block_policy`), nearest to the best (or last) point otherwise.

No approach is proposed twice (`context.tried_approaches` and the history are both honoured). Ties are
broken by a fixed permutation drawn from `seed`, so a run is reproducible. The points are held as one compact table
(ferret.roles.point_table: the MLA space has 2.8M of them), each made a dict, and named, only when read.

    optimizer = TemplateSearchOptimizer(Path("tasks/rmsnorm/templates"))
    proposals = optimizer.propose(context)   # list[Proposal]: source, approach, notes

One template may serve several ops (tasks/mla_attention_paged renders tasks/mla_attention's template with the
cache paged): `template` (and `extends`) name a file beside space.yaml or, as `<op>/templates/<file>`, one in
another op's templates folder under the same tasks folder (no `..`, no absolute path); `constants` are passed to
every render beside the point (never a search axis: a constant named like a parameter is an error); `extends`
reads another space.yaml first, the keys this one sets replacing the base's whole (one level; an extending space
names its own `op` and `template`); a constant of the extending space named like one of the base's parameters pins
that axis to its value (the axis, its default, conditions, labels, languages and its entries in `starts` are dropped).

`languages` marks values whose points are candidates in another language than the template's own (MLA's
`attention_kernel: wgmma` renders kernel 3 in CUDA C++): such points are proposed only where the run can judge that
language (`OptimizerContext.languages`: the dispatcher leaves CUDA out on a machine without a GPU), so one space
serves the CPU profile and the GPU's.
"""

from __future__ import annotations

import functools
import math
import random
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import jinja2
import numpy as np
import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from ferret.errors import UsageError
from ferret.roles.base import (
    OptimizerContext,
    Proposal,
    RoundFeedback,
    register_optimizer,
)
from ferret.roles.point_table import NOT_APPLYING, Point, PointTable

SPACE_FILE = "space.yaml"


class TemplateSpace(BaseModel):
    """`space.yaml` of a templates folder."""

    model_config = ConfigDict(extra="forbid")

    op: str
    template: str = Field(
        description="The jinja2 template: a file name beside space.yaml, or <op>/templates/<file> in another op's "
        "templates folder (the tasks folder two levels above the `templates` folder holding space.yaml)."
    )
    constants: dict[str, Any] = Field(
        default_factory=dict,
        description="name -> value passed to every render beside the point's parameters (not a search axis), e.g. "
        "one template's cache layout for each op that renders it.",
    )
    parameters: dict[str, list[Any]] = Field(description="name -> values, simplest first; order defines neighbours.")
    applies_when: dict[str, dict[str, list[Any]]] = Field(
        default_factory=dict, description="parameter -> {other parameter: values under which it applies}."
    )
    default: dict[str, Any]
    labels: dict[str, str | dict[Any, str]] = Field(
        default_factory=dict, description="parameter -> format string with {} or value -> text ('' leaves it out)."
    )
    pivot: str = Field(default="block_policy", description="The parameter that names the approach family, changed on a pivot.")
    starts: list[dict[str, Any]] = Field(
        default_factory=list,
        description="Points, each given as its changes from the default, proposed as soon as a point passes with a "
        "time and before any neighbour: approach families that a one-step search from the default would need "
        "several improving steps to reach. The gate judges them like any other point.",
    )
    invariants: str = Field(
        description="What every point keeps (the math, the stages it exposes), quoted in each proposal's plan for the reviewer."
    )
    languages: dict[str, dict[Any, str]] = Field(
        default_factory=dict,
        description="parameter -> {value: the language a point with that value is written in} (e.g. cuda where a "
        "value renders a kernel in CUDA C++); such points are proposed only where the run can judge the language.",
    )

    @model_validator(mode="after")
    def _consistent(self) -> TemplateSpace:
        names = set(self.parameters)
        for name, values in self.parameters.items():
            if not values:
                raise ValueError(f"parameter {name!r} has no values")
            if len(set(map(repr, values))) != len(values):
                raise ValueError(f"parameter {name!r} repeats a value: {values}")
        if set(self.default) != names:
            raise ValueError(f"default must name every parameter {sorted(names)}, got {sorted(self.default)}")
        for name, value in self.default.items():
            if value not in self.parameters[name]:
                raise ValueError(f"default {name}={value!r} is not one of {self.parameters[name]}")
        for name, condition in self.applies_when.items():
            if name not in names:
                raise ValueError(f"applies_when names unknown parameter {name!r}")
            for other, values in condition.items():
                if other not in names or other == name:
                    raise ValueError(f"applies_when of {name!r} depends on unknown parameter {other!r}")
                if other in self.applies_when:
                    raise ValueError(f"applies_when of {name!r} depends on {other!r}, itself conditional")
                unknown = [v for v in values if v not in self.parameters[other]]
                if unknown:
                    raise ValueError(f"applies_when of {name!r}: {other} has no values {unknown}")
        for name in self.labels:
            if name not in names:
                raise ValueError(f"labels name unknown parameter {name!r}")
        for name in self.constants:
            if name in names:
                raise ValueError(
                    f"constants: {name!r} is also a parameter (a search axis); a constant is the same at every point"
                )
            if not name.isidentifier():
                raise ValueError(f"constants: {name!r} is not a template variable name")
        for name, by_value in self.languages.items():
            if name not in names:
                raise ValueError(f"languages name unknown parameter {name!r}")
            unknown = [v for v in by_value if v not in self.parameters[name]]
            if unknown:
                raise ValueError(f"languages of {name!r}: no values {unknown}")
        if self.language_of(self.default_point()) is not None:
            raise ValueError("the default point must need no language beyond the template's own (every run proposes it first)")
        if self.pivot not in names:
            raise ValueError(f"pivot {self.pivot!r} is not a parameter")
        if self.pivot in self.applies_when:
            raise ValueError(f"pivot {self.pivot!r} must apply at every point")
        for index, start in enumerate(self.starts):
            self._check_start(index, start)
        return self

    def _check_start(self, index: int, start: dict[str, Any]) -> None:
        for name, value in start.items():
            if name not in self.parameters:
                raise ValueError(f"starts[{index}] names unknown parameter {name!r}")
            if value not in self.parameters[name]:
                raise ValueError(f"starts[{index}]: {name}={value!r} is not one of {self.parameters[name]}")
            if not self.applies(name, {**self.default, **start}):
                raise ValueError(f"starts[{index}]: {name} does not apply at that point (applies_when)")
        if self.canonical({**self.default, **start}) == self.canonical(dict(self.default)):
            raise ValueError(f"starts[{index}] is the default point")

    # ------------------------------------------------------------------------------------------ points
    def applies(self, name: str, point: Point) -> bool:
        return all(point.get(other) in values for other, values in self.applies_when.get(name, {}).items())

    def canonical(self, point: Point) -> Point:
        """The point with every parameter that does not apply set to None (parameter order kept)."""
        missing = set(self.parameters) - set(point)
        if missing:
            raise ValueError(f"point lacks parameters {sorted(missing)}")
        return {name: (point[name] if self.applies(name, point) else None) for name in self.parameters}

    def point_table(self) -> PointTable:
        """Every distinct point, in a fixed order (the default's first values vary slowest), as one compact table
        (ferret.roles.point_table): the MLA space has 2.8M of them. Two distinct points named alike (labels that
        hide a difference) are a ValueError."""
        return PointTable(self)

    def points(self) -> list[Point]:
        """Every distinct point as a dict, in the table's order: for small spaces (the optimizer reads the table)."""
        return list(self.point_table())

    def named_points(self) -> dict[str, Point]:
        """Every distinct point by its approach name, in the order of `points`: for small spaces."""
        return dict(self.point_table().by_approach.items())

    def default_point(self) -> Point:
        return self.canonical(dict(self.default))

    def language_of(self, point: Point) -> str | None:
        """The language a point's candidate is written in where a value of it says (`languages`), else None (the
        template's own)."""
        for name, by_value in self.languages.items():
            language = by_value.get(point.get(name))
            if language is not None:
                return language
        return None

    def start_points(self) -> list[Point]:
        """The `starts`, as whole points, in the order the space lists them."""
        return [self.canonical({**self.default, **start}) for start in self.starts]

    def approach(self, point: Point) -> str:
        """A short stable name of the point, e.g. `rows=4,warps=8,single-pass`."""
        texts = (self.label_text(name, value) for name, value in point.items() if value is not None)
        return ",".join(text for text in texts if text)

    def label_text(self, name: str, value: Any) -> str:
        """One value's part of an approach name ("" for none)."""
        label = self.labels.get(name)
        if label is None:
            return f"{name}={value}"
        if isinstance(label, str):
            return label.format(value)
        return label.get(value, f"{name}={value}")

    def place(self, name: str, value: Any) -> int:
        """A value's place in its parameter's list; None (the parameter does not apply) at the default's place."""
        return self.parameters[name].index(self.default[name] if value is None else value)

    def distance(self, a: Point, b: Point) -> int:
        """Steps between two points: per parameter, how far apart their values sit in its list. A parameter
        that applies to neither point counts 0; one that applies to one side only is measured from the
        default's value."""
        total = 0
        for name in self.parameters:
            if a[name] is None and b[name] is None:
                continue
            total += abs(self.place(name, a[name]) - self.place(name, b[name]))
        return total

    def complexity(self, point: Point) -> int:
        """How far into its lists a point's values sit: the lists put the simpler values first."""
        return sum(self.parameters[name].index(value) for name, value in point.items() if value is not None)

    def describe(self, point: Point) -> str:
        return ", ".join(f"{name}={value}" for name, value in point.items() if value is not None)


def located(template_dir: str | Path, name: str, field: str = "template") -> Path:
    """The file a space.yaml in `template_dir` names in `field` (`template`, `extends`): `name` is a file name
    beside it, or `<op>/templates/<file>` in another op's templates folder of the same tasks folder (the parent of
    the op folder whose `templates` holds space.yaml, tasks/rmsnorm/templates/cuda included). Any other form
    (`..`, `.`, an absolute path, a backslash, a path leaving the tasks folder through a link) is a ValueError."""
    parts = name.split("/")
    plain = all(part not in ("", ".", "..") and "\\" not in part for part in parts)
    if plain and len(parts) == 1:
        return Path(template_dir) / name
    folder = Path(template_dir).resolve()
    templates = next((p for p in (folder, *folder.parents) if p.name == "templates"), None)
    if not plain or len(parts) < 3 or parts[1] != "templates" or templates is None:
        raise ValueError(
            f"{field} {name!r}: expected a file name beside {SPACE_FILE} or <op>/templates/<file> "
            "(another op's templates folder, inside a tasks/<op>/templates folder)"
        )
    tasks = templates.parent.parent
    path = tasks / name
    if not path.resolve().is_relative_to(tasks):
        raise ValueError(f"{field} {name!r} leaves the tasks folder {tasks}")
    return path


def _mapping(path: Path) -> dict[str, Any]:
    data = yaml.safe_load(path.read_text())
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a mapping")  # noqa: TRY004 - the file's content, not an argument
    return data


def _space_data(template_dir: Path) -> dict[str, Any]:
    """space.yaml's mapping, over the space it `extends` (if any): its keys replace the base's whole."""
    path = template_dir / SPACE_FILE
    data = _mapping(path)
    if "extends" not in data:
        return data
    name = data.pop("extends")
    if not isinstance(name, str):
        raise ValueError(f"{path}: extends: expected <op>/templates/{SPACE_FILE}, got {name!r}")
    try:
        base_path = located(template_dir, name, "extends")
    except ValueError as err:
        raise ValueError(f"{path}: {err}") from None
    if not base_path.is_file():
        raise ValueError(f"{path}: extends {name!r}: no such file")
    base = _mapping(base_path)
    if "extends" in base:
        raise ValueError(f"{path}: extends {name!r}, which extends another space (one level only)")
    missing = sorted({"op", "template"} - set(data))
    if missing:
        raise ValueError(f"{path}: a space that extends another names its own {' and '.join(missing)}")
    pinned = sorted(set(data.get("constants") or {}) & set(base.get("parameters") or {}))
    if pinned:
        base = _without_axes(base, pinned, path)
    return {**base, **data}


def _without_axes(base: dict[str, Any], pinned: list[str], path: Path) -> dict[str, Any]:
    """The base space without the axes an extending space pins with its constants: their values, default,
    conditions, labels and languages, and their entries in `starts` (a start left with no change is dropped). An axis
    that is the pivot, or that another parameter's condition reads, cannot be pinned."""
    if base.get("pivot") in pinned:
        raise ValueError(f"{path}: constants pin {base['pivot']!r}, the base space's pivot")
    read = sorted(
        {other for name, condition in (base.get("applies_when") or {}).items() if name not in pinned for other in condition}
        & set(pinned)
    )
    if read:
        raise ValueError(f"{path}: constants pin {read}, which another parameter's applies_when reads")

    def dropped(mapping: Any) -> Any:
        return {k: v for k, v in mapping.items() if k not in pinned} if isinstance(mapping, dict) else mapping

    starts = [dropped(start) for start in base.get("starts") or []]
    return {
        **base,
        **{key: dropped(base[key]) for key in ("parameters", "default", "applies_when", "labels", "languages") if key in base},
        "starts": [start for start in starts if start],
    }


def load_space(template_dir: str | Path) -> TemplateSpace:
    path = Path(template_dir) / SPACE_FILE
    data = _space_data(Path(template_dir))
    try:
        space = TemplateSpace.model_validate(data)
    except ValidationError as err:
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'space'}: {e['msg']}" for e in err.errors())
        raise ValueError(f"{path}: {problems}") from None
    try:
        template = located(template_dir, space.template)
    except ValueError as err:
        raise ValueError(f"{path}: {err}") from None
    if not template.is_file():
        raise ValueError(f"{path}: template {space.template!r} not found ({template})")
    return space


def available_templates(op_dir: str | Path) -> bool:
    """Whether `tasks/<op>/` has kernel templates for the offline optimizer (`templates/space.yaml` and the
    template it names)."""
    folder = Path(op_dir) / "templates"
    space_path = folder / SPACE_FILE
    if not space_path.is_file():
        return False
    data = yaml.safe_load(space_path.read_text())
    if not isinstance(data, dict) or not isinstance(data.get("template"), str):
        return False
    try:
        return located(folder, data["template"]).is_file()
    except ValueError:
        return False


def templates_dir_of(contract_path: Path) -> Path:
    """Where the offline optimizer looks for a contract's templates (`Task.templates_dir`)."""
    from ferret.contract.task import Task

    return Task.load(contract_path).templates_dir


class MissingTemplates(UsageError):
    """The contract's op has no kernel templates (no `templates/space.yaml`) for the offline optimizer."""

    def __init__(self, folder: Path):
        self.folder = folder
        super().__init__(
            f"{folder} has no kernel templates for the offline optimizer (no {SPACE_FILE}): write templates "
            "there, or name a model"
        )


def _speedup(feedback: RoundFeedback) -> float | None:
    value = feedback.timing.get("speedup") if feedback.timing else None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


@register_optimizer("template-search")
class TemplateSearchOptimizer:
    """Search over the points of `template_dir/space.yaml`, rendering `template_dir/<template>`.

    `budget` is the most proposals per round (round 1 always proposes the default point alone); `seed`
    fixes the order among equally ranked points.
    """

    name = "template-search"

    @classmethod
    def from_contract(cls, contract_path: Path) -> TemplateSearchOptimizer:
        """The search over the contract's own op: `<project>/tasks/<op>/templates`. No templates there is a
        MissingTemplates; templates that cannot be used are a UsageError naming the folder."""
        folder = templates_dir_of(contract_path)
        if not (folder / SPACE_FILE).is_file():
            raise MissingTemplates(folder)
        try:
            optimizer = cls(folder)
            optimizer.by_approach  # noqa: B018 - two points named alike is the templates' error, said before a dispatch
            return optimizer
        except (ValueError, OSError, yaml.YAMLError, jinja2.TemplateError) as err:
            raise UsageError(f"the offline optimizer cannot use the templates in {folder}: {err}") from None

    def __init__(self, template_dir: str | Path, budget: int = 4, seed: int = 0):
        if budget < 1:
            raise ValueError(f"budget must be at least 1, got {budget}")
        self.template_dir = Path(template_dir)
        self.space = load_space(self.template_dir)
        self.budget = budget
        self.seed = seed
        template_path = located(self.template_dir, self.space.template)
        self.env = jinja2.Environment(
            loader=jinja2.FileSystemLoader(str(template_path.parent)),
            undefined=jinja2.StrictUndefined,
            trim_blocks=True,
            lstrip_blocks=True,
            keep_trailing_newline=True,
            autoescape=False,
        )
        self.template = self.env.get_template(template_path.name)

    # Listed when first needed, not at construction: rendering a point (most of the template tests) needs no list.
    @functools.cached_property
    def table(self) -> PointTable:
        """Every point of the space (ferret.roles.point_table), the listing's ValueError naming space.yaml."""
        try:
            return self.space.point_table()
        except ValueError as err:
            raise ValueError(f"{self.template_dir / SPACE_FILE}: {err}") from None

    @property
    def points(self) -> PointTable:
        """Every point, in the space's order: a sequence whose items are made when read."""
        return self.table

    @property
    def by_approach(self) -> Mapping[str, Point]:
        return self.table.by_approach

    # The ranking's keys as arrays over the table's rows, built once (a ranking over the MLA space's points as dicts
    # took ~30-40 s of Python a round on 2026-12-02).
    @functools.cached_property
    def _tiebreaks(self) -> np.ndarray:
        """[points] each point's place in the seed's permutation of the space's points (`random.shuffle` of the
        rows, whose draws depend on the count alone)."""
        order = list(range(len(self.table)))
        random.Random(self.seed).shuffle(order)
        tiebreaks = np.empty(len(order), np.int64)
        tiebreaks[order] = np.arange(len(order))
        return tiebreaks

    @functools.cached_property
    def _value_indices(self) -> np.ndarray:
        """[points, parameters]: each value's place in its list, a parameter that does not apply at the default's
        place (as `TemplateSpace.distance` measures it)."""
        places = self.table.places
        return np.where(places == NOT_APPLYING, self._places(self.space.default_point()), places)

    @functools.cached_property
    def _complexities(self) -> np.ndarray:
        """`TemplateSpace.complexity` of every point: the places of the values that apply."""
        return np.where(self.table.places == NOT_APPLYING, 0, self.table.places).sum(axis=1, dtype=np.int64)

    def _places(self, point: Point) -> np.ndarray:
        """A point's places, in the table's integer type (differences of two places fit it)."""
        return np.array([self.space.place(name, point[name]) for name in self.space.parameters], self.table.places.dtype)

    # ------------------------------------------------------------------------------------------ render
    def render(self, point: Point) -> str:
        """The candidate file of a point (any parameter that does not apply is passed as None), with the space's
        `constants` beside it."""
        return self.template.render(**self.space.constants, **self.space.canonical(point))

    def approach(self, point: Point) -> str:
        return self.space.approach(self.space.canonical(point))

    def _proposal(self, point: Point, why: str) -> Proposal:
        space = self.space
        constants = f" with {', '.join(f'{k}={v}' for k, v in space.constants.items())}" if space.constants else ""
        plan = (
            f"{why}. Point: {space.describe(point)}. The whole file is rendered from {space.template}{constants} "
            f"(template search, seed {self.seed}); unchanged across points: {space.invariants.strip()}"
        )
        return Proposal(source=self.render(point), approach=space.approach(point), notes=plan)

    # ------------------------------------------------------------------------------------------ search
    def _ranked(self, rows: np.ndarray, anchor: Point | None, count: int) -> list[Point]:
        """The first `count` of the points at `rows` (places in `points`), nearest to `anchor` first, then nearest
        to the default, the simpler, and the seed's order."""
        places = self._value_indices[rows]
        near = np.abs(places - self._places(anchor)).sum(axis=1) if anchor is not None else np.zeros(len(rows), np.int64)
        far = np.abs(places - self._places(self.space.default_point())).sum(axis=1)
        if len(rows) > count:
            # Only points as near (then as far) as the count-th can be among the first `count`: sorting all of the
            # MLA space's points took 1.7 s of a round (a profile, 2026-12-06); the points kept are few.
            distances = near * (int(far.max()) + 1) + far
            kept = distances <= np.partition(distances, count - 1)[count - 1]
            rows, near, far = rows[kept], near[kept], far[kept]
        order = np.lexsort((self._tiebreaks[rows], self._complexities[rows], far, near))
        return [self.table.point(int(rows[i])) for i in order[:count]]

    def _untried(self, tried: set[str], languages: set[str]) -> np.ndarray:
        """Rows of the points whose approach is not in `tried` and that need no language but `languages`."""
        untried = self._judged(frozenset(languages)).copy()
        rows = [self.table.row_named(approach) for approach in tried]
        untried[[row for row in rows if row is not None]] = False
        return np.flatnonzero(untried)

    @functools.cache  # noqa: B019 - one optimizer a run, a few language sets: cached for the optimizer's life
    def _judged(self, languages: frozenset[str]) -> np.ndarray:
        """[points] bool: whether a point needs no language but these (`TemplateSpace.language_of`: the first
        parameter in `languages` whose value names one decides)."""
        judged = np.ones(len(self.table), bool)
        decided = np.zeros(len(self.table), bool)
        for name, by_value in self.space.languages.items():
            column = self.table.column(name)
            for value, language in by_value.items():
                rows = (column == self.space.parameters[name].index(value)) & ~decided
                judged[rows] = language in languages
                decided |= rows
        return judged

    def propose(self, context: OptimizerContext) -> list[Proposal]:
        space = self.space
        if context.op != space.op:
            raise ValueError(f"templates in {self.template_dir} are for op {space.op!r}, not {context.op!r}")
        tried = set(context.tried_approaches) | {h.approach for h in context.history}
        languages = set(context.languages)
        untried = self._untried(tried, languages)
        if not len(untried):
            return []
        default = space.default_point()
        known = [(h, self.by_approach[h.approach]) for h in context.history if h.approach in self.by_approach]
        passing = [(h, p) for h, p in known if h.passed]
        timed = [(s, h, p) for h, p in passing if (s := _speedup(h)) is not None]

        if not passing and space.approach(default) not in tried:
            return [self._proposal(default, "Round 1 of the template search: the default point")]
        if passing and not timed:
            # Correct, but nothing here can show a point to be faster (no GPU, no timing): stop.
            return []

        best = max(timed, key=lambda t: (t[0], -t[1].round))[2] if timed else None
        if context.must_pivot:
            anchor = best or (known[-1][1] if known else default)
            pivot = list(space.parameters).index(space.pivot)
            others = untried[self._value_indices[untried, pivot] != space.place(space.pivot, anchor[space.pivot])]
            chosen = self._ranked(others if len(others) else untried, anchor, self.budget)
            why = (
                f"Pivot (no progress for several rounds): {space.pivot} {anchor[space.pivot]} -> "
                "{new}, an approach family not tried from here"
            )
            return [self._proposal(p, why.format(new=p[space.pivot])) for p in chosen]
        if best is not None:
            speed = max(t[0] for t in timed)
            starts = [
                p for p in space.start_points() if space.approach(p) not in tried and space.language_of(p) in (None, *languages)
            ][: self.budget]
            chosen = self._ranked(
                self._untried(tried | {space.approach(p) for p in starts}, languages), best, self.budget - len(starts)
            )
            return [
                self._proposal(
                    p,
                    f"A start of the space, several steps from the default, tried before any "
                    f"neighbour: {self._moves(default, p)}",
                )
                for p in starts
            ] + [
                self._proposal(
                    p,
                    f"One step from the fastest passing point {space.approach(best)} "
                    f"(speedup {speed:.3g}x): {self._moves(best, p)}",
                )
                for p in chosen
            ]
        chosen = self._ranked(untried, default, self.budget)
        return [
            self._proposal(
                p,
                f"No point has passed yet: the simplest untried point near the default "
                f"({self._moves(default, p) or 'the default itself'})",
            )
            for p in chosen
        ]

    def _moves(self, origin: Point, point: Point) -> str:
        changes = [f"{name} {origin[name]} -> {point[name]}" for name in self.space.parameters if origin[name] != point[name]]
        return "; ".join(changes)
