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

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from hardware.bounds import BoundsError


class ProfileError(BoundsError):
    """A profile value that is well-typed but unusable; ``key`` is its full dotted name."""


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
