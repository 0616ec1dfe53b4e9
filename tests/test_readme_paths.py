"""Every file or folder the README names exists (issue 14 moved many: `libs/mjctl` to `tools/mjctl`,
`mahjong_table/domain` to `core/` and `sichuan/`, `mjctl/rebuild_bench.py` to `tools/bench`).

A name in backticks is taken for a path when it has a ``/`` or ends like a source or
configuration file. It must be the end of the path of some file or folder of the repository: the
layout table names files relative to the folder of its row (`servicer.py`, `core/views.py`).
Not paths: command lines and other text with spaces, URLs, npm packages (``@bufbuild/buf``),
placeholders (``<name>``, ``*``), run-time folders (``./data``, ``.cache/``, ``../shared``) and
environment variables or RPC names (``MAHJONG_DATA_DIR/postgresql``, ``TableService/Act``: an
upper-case first part).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parent.parent
SKIPPED_FOLDERS = {".git", ".venv", ".cache", "node_modules", "__pycache__", ".mypy_cache", ".ruff_cache"}
FILE_ENDINGS = (".py", ".md", ".toml", ".proto", ".yml", ".yaml", ".json", ".ini", ".cfg", ".txt", ".xml")
QUOTED = re.compile(r"`([^`\s]+)`")


def named_paths(text: str) -> set[str]:
    names: set[str] = set()
    for name in QUOTED.findall(text):
        if "/" not in name and not name.endswith(FILE_ENDINGS):
            continue
        if name.startswith((".", "-", "@", "http:", "https:")) or any(mark in name for mark in "<>*{}$=:|"):
            continue
        if name.split("/")[0].upper() == name.split("/")[0] or name[0].isupper():
            continue
        names.add(name.rstrip("/"))
    return names


def repository_paths() -> set[str]:
    paths: set[str] = set()
    for folder, subfolders, files in os.walk(REPOSITORY):
        subfolders[:] = [name for name in subfolders if name not in SKIPPED_FOLDERS]
        relative = Path(folder).relative_to(REPOSITORY).as_posix()
        prefix = "" if relative == "." else f"{relative}/"
        paths.update(f"/{prefix}{name}" for name in [*subfolders, *files])
    return paths


def missing(names: set[str], paths: set[str]) -> list[str]:
    return sorted(name for name in names if not any(path.endswith(f"/{name}") for path in paths))


def test_every_path_the_readme_names_exists() -> None:
    names = named_paths((REPOSITORY / "README.md").read_text(encoding="utf-8"))
    assert len(names) > 100, sorted(names)  # the README's layout and commands are read
    assert missing(names, repository_paths()) == []


def test_a_path_that_is_gone_is_found() -> None:
    paths = repository_paths()
    text = "see `libs/mjctl/mjctl/rebuild.py`, `mahjong_table/domain/views.py` and `hand_checks.py`"
    assert missing(named_paths(text), paths) == [
        "hand_checks.py",
        "libs/mjctl/mjctl/rebuild.py",
        "mahjong_table/domain/views.py",
    ]
    kept = "`tools/mjctl/mjctl/rebuild.py`, `core/views.py`, `make test`, `MAHJONG_DATA_DIR/x`, `<name>.py`"
    assert missing(named_paths(kept), paths) == []
