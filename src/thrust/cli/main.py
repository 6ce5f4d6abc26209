"""`thrust <command>`: the command-line entry point (console script `thrust`).

Subcommands live in their own modules, each exposing `register(subparsers)` that adds its parser and
sets `func` (a callable taking the parsed namespace and returning an exit code). A new subcommand
is one module plus one entry in `COMMAND_MODULES`; modules that are not installed are skipped.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from typing import Any

__all__ = ["COMMAND_MODULES", "build_parser", "main"]

COMMAND_MODULES: tuple[str, ...] = (
    "thrust.cli.serve",
    "thrust.cli.perf",
    "thrust.cli.bench",
    "thrust.cli.cluster",
    "thrust.cli.messages",
)


# Modules of the optional extras, by top-level name: a tool that needs one tells the user which extra to
# install instead of ending in a bare ModuleNotFoundError (`pip install thrust` has neither; pyproject.toml
# says which feature needs which).
OPTIONAL_MODULES: dict[str, str] = {"hdrh": "cli", "matplotlib": "plot", "uvloop": "uvloop"}


def _missing_extra(exc: ModuleNotFoundError) -> tuple[str, str] | None:
    """(module, extra) for the module `exc` failed to import, when an extra of ours provides it."""
    name = (exc.name or "").partition(".")[0]
    extra = OPTIONAL_MODULES.get(name)
    return None if extra is None else (name, extra)


def _version() -> str:
    import thrust

    return str(thrust.__version__)


class SubcommandParser(argparse.ArgumentParser):
    """The parser of a subcommand (and of `thrust perf`'s modes): an argument it does not know is its own
    usage error. argparse hands a subparser's unknown arguments up to the top-level parser, whose error
    shows `thrust`'s usage instead of the subcommand's, the one that tells what the subcommand takes."""

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: Any = None
    ) -> tuple[argparse.Namespace, list[str]]:
        parsed, extras = super().parse_known_args(args, namespace)
        if extras:
            self.error(f"unrecognized arguments: {' '.join(extras)}")
        return parsed, extras


def build_parser() -> argparse.ArgumentParser:
    """The `thrust` parser with every available subcommand registered."""
    parser = argparse.ArgumentParser(
        prog="thrust", description="asyncio-native Apache RocketMQ 5 client tools and embedded server"
    )
    parser.add_argument("--version", action="version", version=f"thrust {_version()}")
    subparsers = parser.add_subparsers(dest="command", metavar="<command>", parser_class=SubcommandParser)
    for name in COMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name == name:  # that subcommand is not part of this installation
                continue
            raise
        module.register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Parse `argv` (default: `sys.argv[1:]`) and run the chosen subcommand; its exit code (2 when an
    optional dependency the command needs is not installed: one line on stderr says which extra)."""
    try:
        parser = build_parser()
        args = parser.parse_args(argv)
        func = getattr(args, "func", None)
        if func is None:
            parser.print_help()
            return 2
        return int(func(args))
    except ModuleNotFoundError as exc:
        missing = _missing_extra(exc)
        if missing is None:
            raise
        module, extra = missing
        words = list(argv if argv is not None else sys.argv[1:])[:1]
        prog = " ".join(["thrust", *words])
        print(
            f"{prog}: needs the optional module {module!r}, which is not installed: "
            f"pip install 'thrust[{extra}]'",
            file=sys.stderr,
        )
        return 2


if __name__ == "__main__":
    sys.exit(main())
