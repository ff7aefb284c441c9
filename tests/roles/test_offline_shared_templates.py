"""One kernel template for several ops (ferret/roles/offline.py): a space.yaml's `template` may name
`<op>/templates/<file>` in another op's templates folder, its `constants` are passed to every render, and it
may `extends` another op's space.yaml. Each rule is checked on a small tasks folder made in tmp_path: what
works, and every refusal naming the file and the field.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from ferret.roles.offline import TemplateSearchOptimizer, available_templates, load_space, located

TEMPLATE = "{{ layout }}:{{ block }}\n"
BASE = {
    "op": "base_op",
    "template": "kernel.py.j2",
    "constants": {"layout": "plain"},
    "parameters": {"block": [16, 32]},
    "default": {"block": 16},
    "pivot": "block",
    "invariants": "the same math",
}


def _tasks(tmp_path: Path, other: dict | None = None) -> Path:
    """tmp/tasks/base_op/templates (BASE and its template) and, if given, tmp/tasks/other_op/templates (`other`)."""
    base = tmp_path / "tasks" / "base_op" / "templates"
    base.mkdir(parents=True)
    (base / "kernel.py.j2").write_text(TEMPLATE)
    (base / "space.yaml").write_text(yaml.safe_dump(BASE))
    folder = tmp_path / "tasks" / "other_op" / "templates"
    folder.mkdir(parents=True)
    if other is not None:
        (folder / "space.yaml").write_text(yaml.safe_dump(other))
    return folder


def test_constants_are_passed_to_every_render(tmp_path):
    _tasks(tmp_path)
    optimizer = TemplateSearchOptimizer(tmp_path / "tasks" / "base_op" / "templates")
    assert [optimizer.render(p) for p in optimizer.points] == ["plain:16\n", "plain:32\n"]
    assert optimizer.space.constants == {"layout": "plain"}
    assert "layout" not in optimizer.space.parameters  # not a search axis: two points, not four


def test_a_template_in_another_ops_folder_renders_with_this_spaces_constants(tmp_path):
    other = {**BASE, "op": "other_op", "template": "base_op/templates/kernel.py.j2", "constants": {"layout": "paged"}}
    folder = _tasks(tmp_path, other)
    optimizer = TemplateSearchOptimizer(folder)
    assert optimizer.render(optimizer.space.default_point()) == "paged:16\n"
    assert available_templates(folder.parent)
    assert located(folder, "base_op/templates/kernel.py.j2") == tmp_path.resolve() / "tasks/base_op/templates/kernel.py.j2"


def test_extends_takes_the_base_spaces_keys_and_replaces_those_it_names(tmp_path):
    other = {
        "extends": "base_op/templates/space.yaml",
        "op": "other_op",
        "template": "base_op/templates/kernel.py.j2",
        "constants": {"layout": "paged"},
    }
    optimizer = TemplateSearchOptimizer(_tasks(tmp_path, other))
    space = optimizer.space
    assert (space.op, space.constants, space.parameters, space.invariants) == (
        "other_op",
        {"layout": "paged"},
        BASE["parameters"],
        "the same math",
    )
    assert [optimizer.render(p) for p in optimizer.points] == ["paged:16\n", "paged:32\n"]


def _pinning_base(tmp_path: Path, other: dict) -> Path:
    """BASE with a second axis, `kernel` (its condition, label, language and a start), and `other` extending it."""
    base = {
        **BASE,
        "parameters": {"block": [16, 32], "kernel": ["triton", "cuda_c"]},
        "default": {"block": 16, "kernel": "triton"},
        "applies_when": {"kernel": {"block": [32]}},
        "labels": {"kernel": {"triton": "", "cuda_c": "in-cuda"}},
        "languages": {"kernel": {"cuda_c": "cuda"}},
        "starts": [{"block": 32, "kernel": "cuda_c"}, {"kernel": "cuda_c", "block": 32}],
    }
    folder = _tasks(tmp_path, other)
    (tmp_path / "tasks" / "base_op" / "templates" / "kernel.py.j2").write_text("{{ layout }}:{{ block }}:{{ kernel }}\n")
    (tmp_path / "tasks" / "base_op" / "templates" / "space.yaml").write_text(yaml.safe_dump(base))
    return folder


def test_a_constant_of_an_extending_space_pins_the_base_axis_it_names(tmp_path):
    """The paged MLA space pins attention_kernel so: the axis, its default, condition, label and language leave the
    space, and so do its entries in `starts` (a start with nothing left is dropped)."""
    other = {
        "extends": "base_op/templates/space.yaml",
        "op": "other_op",
        "template": "base_op/templates/kernel.py.j2",
        "constants": {"layout": "paged", "kernel": "triton"},
    }
    optimizer = TemplateSearchOptimizer(_pinning_base(tmp_path, other))
    space = optimizer.space
    assert (space.parameters, space.default, space.applies_when, space.labels, space.languages) == (
        {"block": [16, 32]},
        {"block": 16},
        {},
        {},
        {},
    )
    assert space.starts == [{"block": 32}, {"block": 32}]
    assert [optimizer.render(p) for p in optimizer.points] == ["paged:16:triton\n", "paged:32:triton\n"]
    base = TemplateSearchOptimizer(tmp_path / "tasks" / "base_op" / "templates")  # the base keeps its axis
    assert [base.approach(p) for p in base.points] == ["block=16", "block=32", "block=32,in-cuda"]


def test_pinning_the_pivot_is_refused_naming_the_file(tmp_path):
    other = {
        "extends": "base_op/templates/space.yaml",
        "op": "other_op",
        "template": "base_op/templates/kernel.py.j2",
        "constants": {"block": 16},
    }
    with pytest.raises(ValueError, match=r"other_op/templates/space.yaml: constants pin 'block', the base space's pivot"):
        load_space(_pinning_base(tmp_path, other))


def test_pinning_an_axis_another_parameter_reads_is_refused_naming_the_file(tmp_path):
    other = {
        "extends": "base_op/templates/space.yaml",
        "op": "other_op",
        "template": "base_op/templates/kernel.py.j2",
        "constants": {"width": 8},
    }
    folder = _pinning_base(tmp_path, other)
    base_file = tmp_path / "tasks" / "base_op" / "templates" / "space.yaml"
    base = yaml.safe_load(base_file.read_text())
    base["parameters"]["width"] = [8, 16]
    base["default"]["width"] = 8
    base["applies_when"]["kernel"] = {"width": [16]}
    base["starts"] = []
    base_file.write_text(yaml.safe_dump(base))
    with pytest.raises(
        ValueError,
        match=r"other_op/templates/space.yaml: constants pin \['width'\], which another "
        r"parameter's applies_when reads",
    ):
        load_space(folder)


def test_a_constant_named_like_a_parameter_is_refused_naming_the_file(tmp_path):
    folder = _tasks(tmp_path, {**BASE, "constants": {"block": 64}})
    with pytest.raises(ValueError, match=r"other_op/templates/space.yaml: .*constants: 'block' is also a parameter"):
        load_space(folder)
    (folder / "space.yaml").write_text(yaml.safe_dump({**BASE, "constants": {"not-a-name": 1}}))
    with pytest.raises(ValueError, match=r"other_op/templates/space.yaml: .*constants: 'not-a-name'"):
        load_space(folder)


@pytest.mark.parametrize(
    "name",
    [
        "../base_op/templates/kernel.py.j2",  # `..`
        "base_op/templates/../templates/kernel.py.j2",
        "./kernel.py.j2",
        "/etc/passwd",  # absolute
        "base_op/kernel.py.j2",  # not a templates folder
        "base_op/templates",  # no file
        "base_op\\templates\\kernel.py.j2",  # backslashes
    ],
)
def test_a_template_outside_the_allowed_forms_is_refused_naming_the_file(tmp_path, name):
    folder = _tasks(tmp_path, {**BASE, "op": "other_op", "template": name})
    with pytest.raises(ValueError, match=r"other_op/templates/space.yaml: template .*expected a file name beside"):
        load_space(folder)
    assert not available_templates(folder.parent)


def test_a_template_leaving_the_tasks_folder_through_a_link_is_refused(tmp_path):
    folder = _tasks(tmp_path, {**BASE, "op": "other_op", "template": "escape/templates/kernel.py.j2"})
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "kernel.py.j2").write_text(TEMPLATE)
    (tmp_path / "tasks" / "escape").mkdir()
    (tmp_path / "tasks" / "escape" / "templates").symlink_to(outside)
    with pytest.raises(ValueError, match=r"other_op/templates/space.yaml: template .* leaves the tasks folder"):
        load_space(folder)


def test_a_missing_cross_op_template_is_refused_naming_it(tmp_path):
    folder = _tasks(tmp_path, {**BASE, "op": "other_op", "template": "base_op/templates/missing.py.j2"})
    with pytest.raises(
        ValueError,
        match=r"other_op/templates/space.yaml: template 'base_op/templates/missing.py.j2' "
        r"not found",
    ):
        load_space(folder)
    assert not available_templates(folder.parent)


@pytest.mark.parametrize(
    "other,message",
    [
        ({"extends": "../base_op/templates/space.yaml", "op": "o", "template": "t"}, r"extends .*expected a file name"),
        (
            {"extends": "base_op/templates/nothing.yaml", "op": "o", "template": "t"},
            r"extends 'base_op/templates/nothing"
            r".yaml': no such file",
        ),
        ({"extends": 3, "op": "o", "template": "t"}, r"extends: expected <op>/templates/space.yaml"),
        ({"extends": "base_op/templates/space.yaml", "op": "other_op"}, r"names its own template"),
        ({"extends": "base_op/templates/space.yaml"}, r"names its own op and template"),
        ({"extends": "other_op/templates/space.yaml", "op": "o", "template": "t"}, r"extends another space"),
    ],
)
def test_a_bad_extends_is_refused_naming_the_file(tmp_path, other, message):
    folder = _tasks(tmp_path, other)
    with pytest.raises(ValueError, match=r"other_op/templates/space.yaml: (.*)?" + message):
        load_space(folder)
