"""Read one profile YAML the way Hydra composes it, without Hydra.

A profile may derive from a sibling in the same folder through Hydra's own defaults list
(``defaults: [ethos_u55_256, _self_]``): a variant of a chip then states only what differs,
and a fix to the family's assumptions lands in one file. Hydra resolves that list at
compose time; tools that read profiles without composing a run (``load_profile``, the
supported-ops tables, npuflow-calibrate's calibrated copy) resolve it here, with the same
order rule (each entry merged in turn, the file's own keys where ``_self_`` stands, last
when it is not listed). Written here rather than by calling Hydra because Hydra composes
whole primary configs, not one group member on its own.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import yaml
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from hardware.bounds import BoundsError


class ProfileError(BoundsError):
    """A profile value that is well-typed but unusable; ``key`` is its full dotted name."""


MAX_YAML_BYTES = 1 << 20  # a profile is a few KB; the largest shipped config is 12 KB
MAX_YAML_NODES = 100_000  # nodes after aliases are expanded (rk3588.yaml: about 600)


def check_yaml(path: Path) -> None:
    """Refuse a YAML file that would stall whoever loads it: over a megabyte, or whose
    aliases expand to more than ``MAX_YAML_NODES`` nodes (a "billion laughs" file of twelve
    nested nine-fold aliases is 1 KB on disk and 2.8e11 nodes once OmegaConf copies each
    alias). The composed node graph shares aliased nodes, so counting its expanded size
    with a memo is linear in the file."""
    try:
        size = path.stat().st_size
    except OSError as exc:
        raise ProfileError(str(path), f"cannot read profile: {exc.strerror}") from exc
    if size > MAX_YAML_BYTES:
        raise ProfileError(str(path), f"{size} bytes; a config file is at most "
                                      f"{MAX_YAML_BYTES} bytes")
    try:
        root = yaml.compose(path.read_text(), Loader=getattr(yaml, "CSafeLoader",
                                                               yaml.SafeLoader))
    except yaml.YAMLError:
        return  # a syntax error: the loader reports it with its line and column
    memo: dict[int, int] = {}

    def expanded(node: yaml.Node) -> int:
        if id(node) in memo:
            return memo[id(node)]
        memo[id(node)] = MAX_YAML_NODES + 1  # a node that contains itself is unbounded
        children = node.value if isinstance(node, yaml.SequenceNode) else \
            [n for pair in node.value for n in pair] if isinstance(node, yaml.MappingNode) \
            else []
        total = 1 + sum(expanded(c) for c in children)
        memo[id(node)] = total
        return total

    try:
        too_big = root is not None and expanded(root) > MAX_YAML_NODES
    except RecursionError:
        too_big = True
    if too_big:
        raise ProfileError(str(path), f"its aliases expand to more than {MAX_YAML_NODES} "
                                      "nodes; write the values out")


def _sibling_defaults(file: Path) -> list[str]:
    """Plain names in a config's defaults list that name files beside it (Hydra's own
    group entries, ``override /x: y``, are not siblings). Read without aliases expanded
    by the caller's check first; a file that does not parse has none."""
    try:
        check_yaml(file)
        data = yaml.safe_load(file.read_text()) or {}
    except (OSError, yaml.YAMLError, ProfileError):
        return []
    entries = data.get("defaults") if isinstance(data, dict) else None
    if not isinstance(entries, list):
        return []
    return [e for e in entries if isinstance(e, str) and "/" not in e
            and e != "_self_" and (file.parent / f"{e}.yaml").is_file()]


def derived_from(path: Path) -> list[Path]:
    """Every sibling config ``path`` derives from, transitively, each once."""
    seen: list[Path] = []
    todo = [path]
    while todo:
        for name in _sibling_defaults(todo.pop()):
            parent = path.parent / f"{name}.yaml"
            if parent not in seen and parent != path:
                seen.append(parent)
                todo.append(parent)
    return seen


def defaults_cycle(path: Path) -> list[str] | None:
    """The chain of sibling configs through which ``path``'s defaults list names itself
    (``defaults: [me, _self_]``, or a -> b -> a), or None."""
    def walk(file: Path, chain: list[str]) -> list[str] | None:
        for name in _sibling_defaults(file):
            if name in chain:
                return [*chain, name]
            found = walk(file.parent / f"{name}.yaml", [*chain, name])
            if found:
                return found
        return None

    return walk(path, [path.stem])


def read_profile_yaml(path: str | Path, search: Sequence[Path] = (),
                      _seen: tuple[Path, ...] = ()) -> DictConfig:
    """The profile at ``path`` merged over the profiles its defaults list names, looked up
    beside it, then in the ``search`` folders (Hydra's search path: a user's profile may
    derive from a shipped one); errors name the file and say what is wrong (a missing
    parent, a cycle, a non-mapping)."""
    path = Path(path)
    if path.resolve() in _seen:
        chain = " -> ".join(p.stem for p in (*_seen, path.resolve()))
        raise ProfileError(str(path), f"defaults: profiles derive from each other in a cycle "
                                     f"({chain})")
    check_yaml(path)
    try:
        raw = OmegaConf.load(path)
    except (OSError, OmegaConfBaseException, ValueError) as exc:
        raise ProfileError(str(path), f"cannot read profile: {exc}") from exc
    if not isinstance(raw, DictConfig):
        raise ProfileError(str(path), "a profile is a mapping of keys, not a list")
    entries = raw.pop("defaults", None) or []
    if not isinstance(entries, (list, tuple)) and not OmegaConf.is_list(entries):
        raise ProfileError(f"{path}: defaults", "a list of sibling profile names")
    names = [str(e) for e in entries]
    if "_self_" not in names:
        names.append("_self_")
    parts = []
    for name in names:
        if name == "_self_":
            parts.append(raw)
            continue
        found = [d / f"{name}.yaml" for d in (path.parent, *search)
                 if "/" not in name and (d / f"{name}.yaml").is_file()]
        if not found:
            raise ProfileError(f"{path}: defaults", f"{name!r} is not a profile beside this "
                                                   f"file (no {path.parent / name}.yaml)")
        parts.append(read_profile_yaml(found[0], search, (*_seen, path.resolve())))
    merged = OmegaConf.merge(*parts)
    assert isinstance(merged, DictConfig)
    return merged
