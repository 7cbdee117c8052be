"""How `gpuplan` lists, loads and runs its commands, and the one place CLI errors are shown.

Commands are declared in small tables of `Lazy` entries (`api.cli.COMMANDS`,
`api.cli.bench.BENCH_COMMANDS`): the command name, `"module:attribute"` naming a typer
function (one command) or a `typer.Typer` (a group), and the one-line summary shown in the
listing. A command's module is imported only when that command runs or prints its own help,
so `gpuplan --help` loads no solver, simulator, plotting or HTTP library.

Help is click's plain layout (no rich panels): flags as `--resume`, enums with their
choices (`--solver <auto|cp_sat|milp|heuristic>`), arguments in capitals (`REQUEST`). A
command with a required parameter prints its help when called with no arguments at all.
typer (>= 0.29) ships click as `typer._click`; the classes extended here come from there.

`LazyGroup.invoke` is the CLI's error boundary: every usage error (a missing argument, a
`typer.BadParameter` raised by a command) is one line on stderr with exit status 2, and an
exception no command expected is one line naming it with exit status 1. No traceback reaches
the user; set `GPUPLAN_TRACEBACK=1` to let it through when debugging.
"""

from __future__ import annotations

import difflib
import importlib
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, NoReturn

import typer
import typer.main
from typer._click import Context, HelpFormatter
from typer._click.core import Command as ClickCommand
from typer._click.exceptions import ClickException, NoArgsIsHelpError, UsageError
from typer.core import TyperCommand, TyperGroup

#: Environment variable that lets an unexpected exception's traceback through.
TRACEBACK_ENV = "GPUPLAN_TRACEBACK"


def one_line(message: str) -> str:
    """`message` with its whitespace (newlines included) collapsed to single spaces."""
    return " ".join(str(message).split())


def echo_error(message: str) -> None:
    """Print `gpuplan: error: <message>` as one line on stderr."""
    typer.echo(f"gpuplan: error: {one_line(message)}", err=True)


def _exit_usage(error: UsageError, ctx: Context) -> NoReturn:
    """Show a usage error as one line pointing at the command's help; exit 2."""
    where = error.ctx.command_path if error.ctx is not None else ctx.command_path
    echo_error(f"{error.format_message()} (see '{where} --help')")
    raise typer.Exit(error.exit_code) from None


class Command(TyperCommand):
    """A leaf command whose usage line names its arguments in capitals (`REQUEST PLAN`)."""

    def __init__(self, name: str | None, **kwargs: Any) -> None:
        super().__init__(name, **kwargs)
        for param in self.params:
            if param.param_type_name == "argument" and param.metavar is None and param.name:
                param.metavar = param.name.upper()

    def collect_usage_pieces(self, ctx: Context) -> list[str]:
        """`[OPTIONS] REQUEST [MODEL] INPUTS...`: required bare, optional in brackets."""
        pieces = [self.options_metavar] if self.options_metavar else []
        for param in self.get_params(ctx):
            if param.param_type_name != "argument":
                pieces.extend(param.get_usage_pieces(ctx))
                continue
            name = param.metavar or (param.name or "ARG").upper()
            piece = name if param.required else f"[{name}]"
            pieces.append(piece + ("..." if param.nargs != 1 else ""))
        return pieces


@dataclass(frozen=True)
class Lazy:
    """A command imported on first use.

    `target` is `"module:attribute"`: a typer command function or a `typer.Typer` group;
    `summary` is the line `--help` lists it with (kept short: the listing never cuts it).
    """

    target: str
    summary: str

    def resolve(self) -> Callable[..., Any] | typer.Typer:
        """Import the module and return the function or Typer the target names."""
        module_name, _, attribute = self.target.partition(":")
        return getattr(importlib.import_module(module_name), attribute)

    def load(self, name: str) -> ClickCommand:
        """The click command for `name`, built from the target with this module's classes."""
        obj = self.resolve()
        if isinstance(obj, typer.Typer):
            obj.rich_markup_mode = None
            for info in obj.registered_commands:
                if info.cls in (None, TyperCommand):  # typer's default: use ours instead
                    info.cls = Command
            cmd = typer.main.get_command(obj)
        else:
            holder = typer.Typer(rich_markup_mode=None, add_completion=False)
            holder.command(name, cls=Command)(obj)
            cmd = typer.main.get_command(holder)
        cmd.name = name
        if any(p.required for p in cmd.params):
            cmd.no_args_is_help = True
        return cmd


class LazyGroup(TyperGroup):
    """A command group whose sub-commands come from the `lazy` table, loaded on demand.

    Subclass it with `lazy = {...}` and pass the subclass as `typer.Typer(cls=...)`. Used
    as is (empty table), it is a plain group with the same listing (summaries never cut
    short) and the same one-line error boundary.
    """

    lazy: ClassVar[Mapping[str, Lazy]] = {}

    def list_commands(self, ctx: Context) -> list[str]:
        """The table's names in table order (then any command added eagerly)."""
        return [*self.lazy, *(n for n in self.commands if n not in self.lazy)]

    def get_command(self, ctx: Context, cmd_name: str) -> ClickCommand | None:
        """The command named `cmd_name`, importing its module the first time."""
        if cmd_name not in self.commands and cmd_name in self.lazy:
            self.commands[cmd_name] = self.lazy[cmd_name].load(cmd_name)
        return self.commands.get(cmd_name)

    def format_commands(self, ctx: Context, formatter: HelpFormatter) -> None:
        """List the commands from the table's summaries, without importing any of them."""
        rows = [(name, entry.summary) for name, entry in self.lazy.items()]
        rows += [(n, c.get_short_help_str(200)) for n, c in self.commands.items()
                 if n not in self.lazy and not c.hidden]
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)

    def resolve_command(
        self, ctx: Context, args: list[str]
    ) -> tuple[str | None, ClickCommand | None, list[str]]:
        """Resolve as usual; an unknown name gets the closest names of the table."""
        try:
            return super().resolve_command(ctx, args)
        except UsageError as e:
            close = difflib.get_close_matches(args[0], self.list_commands(ctx)) if args else []
            if close and "Did you mean" not in e.message:
                e.message = f"{e.message.rstrip('.')}. Did you mean {', '.join(close)}?"
            raise

    def parse_args(self, ctx: Context, args: list[str]) -> list[str]:
        """Parse the group's own options; a usage error is one line (exit 2)."""
        try:
            return super().parse_args(ctx, args)
        except NoArgsIsHelpError:
            raise
        except UsageError as e:
            _exit_usage(e, ctx)

    def invoke(self, ctx: Context) -> Any:
        """Run the sub-command; show any error as one line (see the module docstring)."""
        try:
            return super().invoke(ctx)
        except (typer.Exit, typer.Abort, NoArgsIsHelpError):
            raise
        except UsageError as e:
            _exit_usage(e, ctx)
        except ClickException as e:
            echo_error(e.format_message())
            raise typer.Exit(e.exit_code) from None
        except Exception as e:
            if os.environ.get(TRACEBACK_ENV):
                raise
            echo_error(f"internal error: {type(e).__name__}: {e} "
                       f"(set {TRACEBACK_ENV}=1 to see the traceback)")
            raise typer.Exit(1) from None
