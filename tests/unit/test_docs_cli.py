"""The CLI reference of the documentation site (scripts/docs_hooks.py, `make docs`) lists every command.

The page is generated from `thrust.cli.main.build_parser()` at build time; these tests walk that parser
on their own and check that every registered command, at every depth, has its section on the page with
every one of its options, so that a new subcommand or flag cannot be left out.
"""

from __future__ import annotations

import argparse
import importlib.util
import re
from pathlib import Path
from types import ModuleType

from thrust.cli.main import COMMAND_MODULES, build_parser

HOOKS = Path(__file__).resolve().parents[2] / "scripts" / "docs_hooks.py"


def _hooks() -> ModuleType:
    spec = importlib.util.spec_from_file_location("docs_hooks", HOOKS)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _commands(
    parser: argparse.ArgumentParser, path: tuple[str, ...] = ()
) -> dict[str, argparse.ArgumentParser]:
    found: dict[str, argparse.ArgumentParser] = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found[" ".join((*path, name))] = sub
                found.update(_commands(sub, (*path, name)))
    return found


def test_every_registered_command_has_a_section_with_every_option() -> None:
    parser = build_parser()
    page = _hooks().render_cli(parser)
    headings = set(re.findall(r"^#+ thrust ([\w -]+?) \{ #", page, re.MULTILINE))
    commands = _commands(parser)
    # Every command module registers at least one top-level command (none is skipped in this install).
    assert len([c for c in commands if " " not in c]) >= len(COMMAND_MODULES)
    assert {"serve", "cluster", "perf", "perf e2e", "bench", "send", "consume"} <= set(commands)
    assert headings == set(commands)
    sections = re.split(r"^#+ thrust ", page, flags=re.MULTILINE)
    for name, sub in commands.items():
        [section] = [s for s in sections if s.startswith(name + " {")]
        for action in sub._actions:
            for option in action.option_strings:
                if option in ("-h", "--help"):
                    continue
                # Options whose help is suppressed are described in the command's epilog (serve's fault
                # flags), which the page shows verbatim; the others are rows of the arguments table.
                shown = option if action.help == argparse.SUPPRESS else f"`{option}"
                assert shown in section, (name, option)


def test_a_new_subcommand_appears_on_the_page() -> None:
    parser = build_parser()
    subparsers = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    extra = subparsers.add_parser("frobnicate", help="a command added after the page was written")
    extra.add_argument("--level", type=int, default=3, help="how much")
    page = _hooks().render_cli(parser)
    assert "## thrust frobnicate { #thrust-frobnicate }" in page
    assert "a command added after the page was written" in page
    assert "| `--level LEVEL` | how much | `3` |" in page
