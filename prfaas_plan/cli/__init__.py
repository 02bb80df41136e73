"""The ``prfaas-plan`` command line: the typer app, its commands registered, and :func:`main`.

Every command prints a human table by default and ``--format json|csv`` for machines. Bad input
raises :class:`~prfaas_plan.errors.PlanError`, which :func:`main` prints as one line on stderr
with exit code 2 (no traceback). The command modules import only typer and the vocabularies at
start-up; each command imports the library it uses when it runs, so that ``--help`` is fast.
"""

from __future__ import annotations

import sys

import typer

from prfaas_plan.cli import data, pages, planning, simulating, validating
from prfaas_plan.cli.bench import bench_app
from prfaas_plan.errors import PlanError

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="Capacity planning for cross-datacenter prefill/decode-disaggregated LLM serving (PrfaaS). "
    "Token counts accept 32K, 32k or 32768 (K = 1024 tokens).",
)
app.add_typer(bench_app, name="bench")
for command in (data.models, data.hardware, data.kv, data.bandwidth, data.profile, planning.plan, planning.sweep,
                pages.compare, pages.report, simulating.simulate, validating.validate):
    app.command()(command)


def main(argv: list[str] | None = None) -> None:
    """Entry point: run the app; user errors become one line on stderr and exit code 2."""
    try:
        code = app(args=argv, prog_name="prfaas-plan", standalone_mode=False)
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
