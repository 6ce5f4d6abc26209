"""mkdocs hook (mkdocs.yml `hooks:`): generates the CLI reference page from the real argparse parsers.

`thrust.cli.main.build_parser()` registers every subcommand of `COMMAND_MODULES`; this walks that parser
tree and renders one section per command (usage, description, every argument with its help and default)
into `cli.md` (docs_dir), a page that exists only in the built site. Written by hand it would go stale the
first time someone added a flag; generated, a new subcommand or option appears by itself, and
tests/unit/test_docs_cli.py checks that every registered command is on the page.
"""

from __future__ import annotations

import argparse
import contextlib
import html
import os
from collections.abc import Iterator
from typing import Any

CLI_PAGE = "cli.md"
# Usage lines are wrapped by argparse at the terminal width; a fixed one keeps the page the same on every
# machine (a CI runner has no terminal).
USAGE_WIDTH = "100"


@contextlib.contextmanager
def _columns(width: str) -> Iterator[None]:
    old = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = width
    try:
        yield
    finally:
        if old is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = old


def iter_commands(
    parser: argparse.ArgumentParser, path: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], argparse.ArgumentParser, str]]:
    """(command path, parser, one-line help) of `parser`'s subcommands, depth first, as registered."""
    for action in parser._actions:
        if not isinstance(action, argparse._SubParsersAction):
            continue
        helps = {choice.dest: choice.help or "" for choice in action._choices_actions}
        for name, sub in action.choices.items():
            if sub.prog.split()[-1] != name:  # an alias of a command already listed
                continue
            yield (*path, name), sub, helps.get(name, "")
            yield from iter_commands(sub, (*path, name))


def _text(parser: argparse.ArgumentParser, text: str) -> str:
    """A description or epilog: verbatim when the parser keeps its line breaks, else as a paragraph."""
    text = text.strip("\n")
    if parser.formatter_class is argparse.HelpFormatter:
        return html.escape(" ".join(text.split()), quote=False)
    return f"```text\n{text}\n```"


def _cell(text: str) -> str:
    return html.escape(" ".join(text.split()), quote=False).replace("|", "\\|")


def _arguments(parser: argparse.ArgumentParser) -> list[str]:
    formatter: Any = parser._get_formatter()
    rows: list[str] = []
    for action in parser._actions:
        if action.help == argparse.SUPPRESS or isinstance(
            action, argparse._SubParsersAction | argparse._HelpAction
        ):
            continue
        if action.option_strings:
            metavar = formatter._format_args(action, action.dest.upper()) if action.nargs != 0 else ""
            name = ", ".join(f"`{opt}{' ' + metavar if metavar else ''}`" for opt in action.option_strings)
        else:
            name = f"`{formatter._format_args(action, action.dest)}`"
        help_text = formatter._expand_help(action) if action.help else ""
        default = ""
        if (
            action.option_strings
            and action.nargs != 0
            and action.default not in (None, argparse.SUPPRESS, [], "")
            and "default" not in help_text.lower()
        ):
            default = f"`{action.default}`"
        if action.required:
            default = "required"
        rows.append(f"| {name} | {_cell(help_text)} | {default} |")
    if not rows:
        return []
    return ["| Argument | Help | Default |", "| --- | --- | --- |", *rows, ""]


def render_cli(parser: argparse.ArgumentParser) -> str:
    """The Markdown of the CLI reference for `parser` (the `thrust` parser)."""
    out = [
        "# CLI reference",
        "",
        "Generated at build time from the argparse parsers of `thrust.cli.main` (the same text as "
        "`thrust <command> --help`). `thrust perf` and `thrust bench` need the `cli` extra "
        "(`pip install 'thrust[cli]'`), their `--plot` options the `plot` extra.",
        "",
    ]
    with _columns(USAGE_WIDTH):
        out += [f"```text\n{parser.format_usage().strip()}\n```", ""]
        commands = list(iter_commands(parser))
        out += ["| Command | What it does |", "| --- | --- |"]
        for path, _, summary in commands:
            anchor = "thrust-" + "-".join(path)
            out.append(f"| [`thrust {' '.join(path)}`](#{anchor}) | {_cell(summary)} |")
        out.append("")
        for path, sub, summary in commands:
            anchor = "thrust-" + "-".join(path)
            out += [f"{'#' * min(len(path) + 1, 4)} thrust {' '.join(path)} {{ #{anchor} }}", ""]
            if summary:
                out += [_cell(summary), ""]
            out += [f"```text\n{sub.format_usage().strip()}\n```", ""]
            if sub.description and sub.description.strip() != summary.strip():
                out += [_text(sub, sub.description), ""]
            out += _arguments(sub)
            if sub.epilog:
                out += [_text(sub, sub.epilog), ""]
    return "\n".join(out)


def on_files(files: Any, config: Any) -> Any:
    """mkdocs event: add the generated CLI page to the site's files."""
    from mkdocs.structure.files import File

    from thrust.cli.main import build_parser

    files.append(File.generated(config, CLI_PAGE, content=render_cli(build_parser())))
    return files
