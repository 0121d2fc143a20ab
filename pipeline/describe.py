"""``npuflow describe [WHAT]`` (also ``python -m pipeline.describe``): what exists and what
a key means, read from the schemas and ``conf/`` themselves, so it cannot drift from them.

    npuflow describe                      the config groups, one line each
    npuflow describe hardware             the profiles (any group: its YAML files), or
    npuflow describe stages | passes      the stage components and the optimizer passes
    npuflow describe hardware.sram.size_kb
        its type, unit, default (in the default composition), allowed values or range,
        the plausible range and the comment the schema gives it

A key's text is the comment block above its field in the schema dataclass (and the comment
at the end of its line); a section's is its class docstring. An unknown name gets the
closest known ones (``did_you_mean``), as every config error does.
"""

from __future__ import annotations

import dataclasses
import enum
import inspect
import sys
import typing
from pathlib import Path
from typing import Any

import yaml

from pipeline.configuration.schema_keys import (
    all_keys,
    did_you_mean,
    field_docs,
    schema_class,
    type_hints,
)

CONF = Path(__file__).resolve().parent.parent / "conf"
EXTRA_LISTS = ("stages", "passes")
# a key's unit from its name's last word (npuflow's naming rule: the unit is in the name)
UNITS = {"kb": "KB (1024 bytes)", "mb": "MB", "mhz": "MHz", "gbps": "GB/s", "ns": "ns",
         "us": "microseconds", "ms": "milliseconds", "s": "seconds", "seconds": "seconds",
         "c": "degrees C", "pj": "pJ", "mw": "mW", "w": "W", "bytes": "bytes",
         "cycles": "cycles", "fps": "frames per second", "gflops": "GFLOP/s",
         "percentile": "percent"}


def _type_name(kind: Any) -> str:
    if isinstance(kind, type) and issubclass(kind, enum.Enum):
        return "one of " + " | ".join(m.name for m in kind)
    if isinstance(kind, type):
        return kind.__name__
    return str(kind).replace("typing.", "")


def _unit(name: str) -> str | None:
    return UNITS.get(name.rsplit("_", 1)[-1]) if "_" in name else None


def _default(key: str) -> Any:
    from omegaconf import OmegaConf

    from pipeline import api

    try:
        value = OmegaConf.select(api.compose(), key)
    except Exception:  # an interpolation the default composition cannot resolve there
        return "?"
    if OmegaConf.is_config(value):
        return OmegaConf.to_container(value, enum_to_str=True)
    return value.name if isinstance(value, enum.Enum) else value


def describe_key(key: str) -> str:
    """The text for one dotted key; ValueError (with suggestions) for an unknown one."""
    cls, field, parts = schema_class(), None, key.split(".")
    owner: type = cls
    for i, part in enumerate(parts):
        if parts[:i] == ["hardware", "units"]:  # a unit's own section (hardware/units/)
            cls = _unit_section(key, part)
            if i == len(parts) - 1:
                return _section_text(key, cls)
            continue
        if not dataclasses.is_dataclass(cls):  # an entry of a free-form mapping
            mapping = ".".join(parts[:i])
            return "\n".join([key, f"  an entry of {mapping} (a mapping; any key)",
                              f"  default: {_default(key)!r}",
                              *([f"  {mapping}: {field_docs(owner)[field.name]}"]
                                if field is not None and field.name in field_docs(owner)
                                else [])])
        fields = {f.name: f for f in dataclasses.fields(cls)}
        if part not in fields:
            raise ValueError(f"'{key}' is not a config key{did_you_mean(key, all_keys())}")
        owner, field = cls, fields[part]
        cls = type_hints(owner)[part]
        if i < len(parts) - 1 and not dataclasses.is_dataclass(cls) \
                and typing.get_origin(cls) is not dict:
            raise ValueError(f"'{key}': {'.'.join(parts[:i + 1])} has no keys below it")
    assert field is not None
    lines = [key]
    if dataclasses.is_dataclass(cls):
        lines = _section_text(key, cls).splitlines()
    else:
        lines.append(f"  type: {_type_name(cls)}")
    unit = _unit(field.name)
    if unit:
        lines.append(f"  unit: {unit}")
    allowed = field.metadata.get("range")
    if allowed is not None:
        lines.append(f"  allowed: {allowed.text()}")
    plausible = field.metadata.get("plausible")
    if plausible:
        lines.append(f"  plausible: {plausible[0]:g} to {plausible[1]:g} (outside: a warning)")
    if parts[:2] == ["hardware", "units"] and _default(key) is None:
        lines.append("  default: none (the default profile does not fit this unit)")
    elif not dataclasses.is_dataclass(cls):
        lines.append(f"  default: {_default(key)!r} (in the default composition, "
                     "conf/config.yaml)")
    doc = field_docs(owner).get(field.name)
    if doc:
        lines.append(f"  {doc}")
    return "\n".join(lines)


def _unit_section(key: str, name: str) -> type:
    """The schema of an execution unit's own profile section (``hardware.units.<name>``)."""
    from hardware.units import unit_sections

    sections = unit_sections()
    if name not in sections:
        raise ValueError(f"'{key}': '{name}' is not an execution unit with a profile "
                         f"section (known: {', '.join(sections) or 'none'})")
    return sections[name]


def _section_text(key: str, cls: type) -> str:
    lines = [key, f"  section ({cls.__name__}): "
             + ", ".join(f.name for f in dataclasses.fields(cls))]
    doc = cls.__dict__.get("__doc__") or ""
    if doc and not doc.startswith(f"{cls.__name__}("):
        lines.append("  " + inspect.cleandoc(doc).replace("\n", "\n  "))
    return "\n".join(lines)


def _yaml_line(path: Path) -> str:
    """A config file's one line: its ``description:``, else its first comment line."""
    text = path.read_text()
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError:
        data = None
    if isinstance(data, dict) and isinstance(data.get("description"), str):
        return data["description"]
    for line in text.splitlines():
        if line.startswith("#") and not line.startswith("# @package"):
            return line.lstrip("# ").strip()
    return ""


def _class_doc(cls: type) -> str:
    """A class's own docstring's first line ('' for none, or a dataclass's signature)."""
    doc = cls.__dict__.get("__doc__") or ""
    if not doc or doc.startswith(f"{cls.__name__}("):
        return ""
    return inspect.cleandoc(doc).splitlines()[0]


def _first_line(obj: Any) -> str:
    doc = inspect.getdoc(obj) or ""
    return doc.split("\n\n")[0].replace("\n", " ") if doc else ""


def groups() -> list[tuple[str, str]]:
    hints = type_hints(schema_class())
    notes = {"sweep": "how multiruns sweep", "stages": "the chain and its components",
             "experiment": "presets for sweeps and searches (+experiment=NAME)"}
    out = []
    for folder in sorted(p for p in CONF.iterdir() if p.is_dir() and p.name != "hydra"):
        count = len(list(folder.glob("*.yaml")))
        section = hints.get(folder.name)
        doc = notes.get(folder.name) or (_class_doc(section) if isinstance(section, type)
                                         else "")
        out.append((folder.name, f"{count} option{'s' * (count != 1)}" + (f": {doc}"
                                                                         if doc else "")))
    out.append(("passes", "the optimizer's passes (optimize.passes)"))
    return out


def options(group: str) -> list[tuple[str, str]]:
    if group == "passes":
        from pipeline.optimizer.registry import PASSES

        return [(name, _first_line(p)) for name, p in PASSES.items()]
    if group == "stages":
        from omegaconf import OmegaConf

        stages = OmegaConf.load(CONF / "stages" / "default.yaml")
        out = []
        for name in stages.order:
            target = stages[name]["_target_"]
            module, _, attr = target.rpartition(".")
            owner = sys.modules.get(module) or __import__(module, fromlist=[attr])
            doc = _class_doc(getattr(owner, attr)) or _first_line(owner)
            out.append((name, f"{target}: {doc}"))
        return out
    folder = CONF / group
    if not folder.is_dir():
        known = [g for g, _ in groups()]
        raise ValueError(f"'{group}' is not a config group or key"
                         f"{did_you_mean(group, known + all_keys())}")
    return [(p.stem, _yaml_line(p)) for p in sorted(folder.glob("*.yaml"))]


def render(what: str | None) -> str:
    if what is None:
        rows = groups()
        head = "npuflow's config groups (npuflow describe GROUP lists one; npuflow describe " \
               "KEY explains a key):"
    elif "." in what or (what not in {g for g, _ in groups()} and what in all_keys()):
        return describe_key(what)
    else:
        rows = options(what)
        head = f"{what}:"
    width = max((len(n) for n, _ in rows), default=0)
    return "\n".join([head, *(f"  {n:<{width}}  {text}" for n, text in rows)])


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    if len(args) > 1 or (args and args[0] in ("-h", "--help")):
        print(__doc__.split("\n\n")[1])
        sys.exit(0 if args and args[0] in ("-h", "--help") else 2)
    try:
        print(render(args[0] if args else None))
    except ValueError as exc:
        print(f"npuflow describe: error: {exc}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
