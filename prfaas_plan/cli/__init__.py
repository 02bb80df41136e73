"""The ``prfaas-plan`` command line: the typer app, its commands registered, and :func:`main`.

Every command prints a human table by default and ``--format json|csv`` for machines. Bad input
raises :class:`~prfaas_plan.errors.PlanError`, which :func:`main` prints as one line on stderr
with exit code 2 (no traceback). The command modules import only typer and the vocabularies at
start-up; each command imports the library it uses when it runs, so that ``--help`` is fast.
:func:`main` builds only the command it runs (:func:`run` is the console script) (typer turns every registered function into a
click command on each run, ~0.05 s for all of them), lists the commands without building their
parameters (:func:`listing_app`), and ``--help`` skips the two rich modules that typer's help
formatter imports but does not use (:func:`_help_formatter`).
"""

from __future__ import annotations

import gc
import sys
import types
from collections.abc import Callable, Iterable

import typer

from prfaas_plan.cli import data, pages, planning, simulating, sizing, validating
from prfaas_plan.cli.bench import bench_app
from prfaas_plan.errors import PlanError

GROUPS: dict[str, typer.Typer] = {"bench": bench_app}
"""Command groups by name."""
COMMANDS: dict[str, Callable[..., object]] = {
    "models": data.models, "hardware": data.hardware, "kv": data.kv, "bandwidth": data.bandwidth,
    "profile": data.profile, "plan": planning.plan, "sweep": planning.sweep, "compare": pages.compare,
    "report": pages.report, "simulate": simulating.simulate, "size": sizing.size,
    "validate": validating.validate,
}
"""Commands by name, in the order ``--help`` lists them."""
HELP = ("Capacity planning for cross-datacenter prefill/decode-disaggregated LLM serving (PrfaaS). "
        "Token counts accept 32K, 32k or 32768 (K = 1024 tokens).")


def _group() -> None:
    """The root of a one-command app (keeps the command a subcommand: ``prfaas-plan kv ...``)."""


def _app(callback: Callable[[], None] | None = None) -> typer.Typer:
    """An empty ``prfaas-plan`` app: its settings and help."""
    return typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False, help=HELP,
                       callback=callback)


def build_app(names: Iterable[str] = (*GROUPS, *COMMANDS)) -> typer.Typer:
    """The typer app with the groups and commands ``names`` (default: all of them)."""
    names = tuple(names)
    built = _app(callback=_group if len(names) == 1 and names[0] in COMMANDS else None)
    for name in names:
        if name in GROUPS:
            built.add_typer(GROUPS[name], name=name)
        else:
            built.command()(COMMANDS[name])
    return built


app = build_app()
"""The whole command line (for ``typer.testing.CliRunner``)."""


def _listed() -> None:
    """A listed command's stand-in (never run: a run builds the real command)."""


def listing_app() -> typer.Typer:
    """The app as ``prfaas-plan --help`` lists it, and as a run that names no command meets it (a
    typo, an unknown option): every group and command by name with its help, none of their
    parameters, which typer would otherwise build for every command only to list the names."""
    listed = _app()
    for name, group in GROUPS.items():
        listed.add_typer(typer.Typer(help=group.info.help), name=name)
    for name, command in COMMANDS.items():
        listed.command(name, help=command.__doc__)(_listed)
    return listed


def _help_formatter() -> None:
    """Import ``typer.rich_utils`` (typer's rich help formatter) with stand-ins for ``rich.markdown``
    and ``rich.traceback``, which it imports at the top but uses only for markdown markup and
    pretty tracebacks (both off here): 0.1-0.15 s of every ``--help``. The stand-ins leave
    ``sys.modules`` at once, so that anything else importing those modules gets the real ones."""
    if "typer.rich_utils" in sys.modules:
        return
    stand_ins = {}
    for name, attr in (("rich.markdown", "Markdown"), ("rich.traceback", "Traceback")):
        if name not in sys.modules:
            stand_ins[name] = sys.modules[name] = types.ModuleType(name, "not imported for --help")
            setattr(stand_ins[name], attr, type(attr, (), {}))
    try:
        import typer.rich_utils  # noqa: F401
    finally:
        for name in stand_ins:
            del sys.modules[name]


def _app_for(args: list[str]) -> typer.Typer:
    """The app a run with ``args`` needs: only the command it names, else the listing (help, a typo)."""
    if "--help" in args or not args:
        _help_formatter()
    if args and (args[0] in COMMANDS or args[0] in GROUPS):
        return build_app([args[0]])
    return listing_app()


def main(argv: list[str] | None = None) -> None:
    """Entry point: run the app; user errors become one line on stderr and exit code 2."""
    args = sys.argv[1:] if argv is None else list(argv)
    try:
        code = _app_for(args)(args=args, prog_name="prfaas-plan", standalone_mode=False)
    except PlanError as exc:
        typer.echo(f"prfaas-plan: error: {exc}", err=True)
        sys.exit(2)
    except Exception as exc:
        # click's usage errors (typer vendors click, so match by shape, not by class)
        if hasattr(exc, "format_message") and hasattr(exc, "exit_code"):
            if not exc.format_message() and getattr(exc, "ctx", None) is not None:  # no arguments: show help
                typer.echo(exc.ctx.get_help())
                sys.exit(0)
            typer.echo(f"prfaas-plan: error: {exc.format_message()} (see prfaas-plan --help)", err=True)
            sys.exit(exc.exit_code)
        raise
    sys.exit(code if isinstance(code, int) else 0)


def run() -> None:
    """The console script: :func:`main`, then the collector's objects frozen (``gc.freeze``) on the
    way out, so that the interpreter's last garbage collection at shutdown skips them: 0.1-0.2 s of
    every command, more after pandas or altair (atexit handlers and stream flushing still run). Not
    in :func:`main`, which tests and notebooks call in a process that goes on."""
    try:
        main()
    finally:
        gc.freeze()
