"""The user's own config folders, checked before Hydra reads them.

Hydra loads a config file whole, with every alias copied, and follows a defaults list
wherever it leads: a profile whose ``defaults`` names itself ends in a RecursionError
thousands of lines long, and a 1 KB file of nested aliases never finishes loading. The
folders a user adds (``--config-dir``/``-cd`` and ``hydra.searchpath``) are therefore
checked first, with the same rules the profile reader applies
(``hardware.profile_file.check_yaml`` and ``defaults_cycle``). The shipped ``conf/`` is
checked by the tests instead.
"""

from __future__ import annotations

from pathlib import Path

from hardware.profile_file import ProfileError, check_yaml, defaults_cycle, derived_from
from pipeline.errors import UserError


def user_config_dirs(argv: list[str]) -> list[Path]:
    """Folders named by ``--config-dir DIR``, ``-cd DIR``, ``--config-dir=DIR`` and
    ``hydra.searchpath=[file://DIR, ...]`` on a command line."""
    dirs: list[str] = []
    for i, arg in enumerate(argv):
        if arg in ("--config-dir", "-cd") and i + 1 < len(argv):
            dirs.append(argv[i + 1])
        elif arg.startswith("--config-dir="):
            dirs.append(arg.partition("=")[2])
        elif arg.lstrip("+").startswith("hydra.searchpath="):
            value = arg.partition("=")[2].strip("[]")
            dirs += [p.strip().strip("'\"") for p in value.split(",")]
    out = []
    for d in dirs:
        if d.startswith("pkg://"):
            continue
        path = Path(d.removeprefix("file://"))
        if path.is_dir():
            out.append(path)
    return out


def _chosen(argv: list[str]) -> list[tuple[str, str]]:
    """``(group, option)`` of every group choice on the command line (``hardware=x``,
    ``+experiment=y``); key overrides (``a.b=1``) are not choices."""
    out = []
    for arg in argv:
        name, eq, value = arg.lstrip("+~").partition("=")
        if eq and "." not in name and value and not value.startswith(("[", "{")):
            out += [(name, v.strip()) for v in value.split(",")]  # a multirun's options
    return out


def check_user_configs(argv: list[str]) -> None:
    """Every config file chosen on the command line from the user's folders, and every
    sibling its defaults list derives from, loads in bounded time and derives from no
    cycle; else one line naming the file."""
    for folder in user_config_dirs(argv):
        for group, option in _chosen(argv):
            path = folder / group / f"{option}.yaml"
            if not path.is_file():
                continue
            cycle = defaults_cycle(path)
            if cycle:
                raise UserError(f"{path}: defaults: configs derive from each other in a "
                                f"cycle ({' -> '.join(cycle)})")
            for file in [path, *derived_from(path)]:
                try:
                    check_yaml(file)
                except ProfileError as exc:
                    raise UserError(str(exc)) from exc
