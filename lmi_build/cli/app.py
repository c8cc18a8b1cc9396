"""The app factory and the options every command shares, declared once.

Every command registered on an app from ``new_app`` takes ``--json``, ``--quiet`` and ``--debug``
(added at registration by ``with_output_options``; no command declares them). They are eager:
click applies them before it converts any other value, so the command body and an error in a
later flag (``--pp abc``) both see the chosen mode. The same three are taken before the command
name too (``lmi-build --json plan ...``, ``lmi-build profiles --json list``): by the root callback
and by every command group's callback.
"""

import functools
import importlib
import inspect
from collections.abc import Callable
from types import ModuleType
from typing import Annotated, Any, TypeVar

import typer

from lmi_build import __version__
from lmi_build.cli.user_config import endpoint_default
from lmi_build.reporting import events
from lmi_build.reporting.output import Mode, current, reset, set_debugging, set_mode

CONTEXT_SETTINGS = {"help_option_names": ["-h", "--help"]}

CommandFunction = TypeVar("CommandFunction", bound=Callable[..., Any])


def _json_mode(value: bool) -> None:
    if value:
        set_mode(Mode.JSON)


def _quiet_mode(value: bool) -> None:
    if value and current().mode is not Mode.JSON:  # --json wins, whichever comes first
        set_mode(Mode.QUIET)


def _debug_mode(value: bool) -> None:
    if value:
        set_debugging(True)


JSON_HELP = "Print one JSON object on stdout (for CI); an error is {\"error\": {code, message, hint}}."
QUIET_HELP = "Print nothing but errors."
DEBUG_HELP = "Show tracebacks and what libraries print (also LMI_BUILD_DEBUG=1)."
JsonOpt = Annotated[bool, typer.Option("--json", is_eager=True, callback=_json_mode, help=JSON_HELP)]
QuietOpt = Annotated[bool, typer.Option("--quiet", "-q", is_eager=True, callback=_quiet_mode, help=QUIET_HELP)]
DebugOpt = Annotated[bool, typer.Option("--debug", is_eager=True, callback=_debug_mode, help=DEBUG_HELP)]
def _events_to(value: str | None) -> str | None:
    """``--events PATH`` (``-``: stderr): from now on every event of the command is a JSON line there
    (``lmi_build.reporting.events``; closed, with the ``result`` event, when the command ends)."""
    if value is not None:
        try:
            events.open_sink(value)
        except OSError as error:
            raise typer.BadParameter(f"cannot write {value}: {error.strerror or error}") from None
    return value


EVENTS_HELP = ("Write what the command does as JSON lines to PATH (- for stderr): the plan, each step's start "
               "and end, bytes done of transfers and conversions, retries, cache hits, the result (docs/EVENTS.md).")
EventsOpt = Annotated[str | None, typer.Option("--events", is_eager=True, callback=_events_to, metavar="PATH",
                                               help=EVENTS_HELP)]
EVENTS_PARAMETER = inspect.Parameter("events_path", inspect.Parameter.KEYWORD_ONLY, default=None, annotation=EventsOpt)


def with_events_option(command: Callable[..., Any]) -> Callable[..., Any]:
    """``command`` (a long one: a build, matrix, publish, pull, verify) with ``--events`` added; the
    option's callback does its work, so the value is dropped before the command is called."""
    signature = inspect.signature(command, eval_str=True)

    @functools.wraps(command)
    def run(**kwargs: Any) -> Any:
        kwargs.pop(EVENTS_PARAMETER.name, None)
        return command(**kwargs)

    run.__signature__ = signature.replace(  # type: ignore[attr-defined]
        parameters=[*signature.parameters.values(), EVENTS_PARAMETER])
    return run


def _endpoint_default(value: str | None) -> str | None:
    return endpoint_default(value)


EndpointOpt = Annotated[str | None, typer.Option(
    "--endpoint-url", callback=_endpoint_default,
    help="S3 endpoint for every s3:// location (--model, --publish, artifacts), e.g. MinIO or SeaweedFS. "
    "Default: AWS_ENDPOINT_URL, else endpoint_url in ~/.config/lmi-build/config.toml, else AWS S3.")]

OUTPUT_PARAMETERS = tuple(
    inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=False, annotation=annotation)
    for name, annotation in (("json_output", JsonOpt), ("quiet", QuietOpt), ("debug", DebugOpt))
)


def with_output_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """``command`` with the shared output options added to its parameters. Their callbacks have
    done their work by the time it runs, so the values are dropped before it is called."""
    signature = inspect.signature(command, eval_str=True)  # typer reads annotations from it
    shared = {parameter.name for parameter in OUTPUT_PARAMETERS}
    if clash := shared & set(signature.parameters):
        raise TypeError(f"{command.__qualname__} declares {sorted(clash)}: the output options are added for it")

    @functools.wraps(command)
    def run(**kwargs: Any) -> Any:
        return command(**{name: value for name, value in kwargs.items() if name not in shared})

    run.__signature__ = signature.replace(  # type: ignore[attr-defined]
        parameters=[*signature.parameters.values(), *OUTPUT_PARAMETERS])
    return run


def _lay_out_help() -> None:
    """Load ``help_layout`` (it draws typer's option panels; see there) before typer draws a help.
    Imported here, not at the top, as typer itself imports its ``rich_utils`` inside ``format_help``:
    rich_utils and the rich modules it loads (markdown, syntax) are 330 M of the 1,120 M instructions
    ``hf --help`` costs, and only a --help needs them (benchmarks/startup.py)."""
    from lmi_build.cli.help_layout import install

    install()


class _Command(typer.core.TyperCommand):
    def format_help(self, ctx: Any, formatter: Any) -> None:
        _lay_out_help()
        super().format_help(ctx, formatter)


class _Group(typer.core.TyperGroup):
    def format_help(self, ctx: Any, formatter: Any) -> None:
        _lay_out_help()
        super().format_help(ctx, formatter)


class _App(typer.Typer):
    """A Typer whose every command gets the output options, so none can miss or redeclare them,
    and whose --help lays the option panels out to cut nothing (``help_layout``)."""

    def command(self, *args: Any, **kwargs: Any) -> Callable[[CommandFunction], CommandFunction]:
        kwargs.setdefault("cls", _Command)
        register = super().command(*args, **kwargs)

        def decorator(function: CommandFunction) -> CommandFunction:
            register(with_output_options(function))
            return function

        return decorator


def group_callback(json_output: JsonOpt = False, quiet: QuietOpt = False, debug: DebugOpt = False) -> None:
    """A command group's own options: the output options, between the group and its command
    (``lmi-build profiles --json list``); their eager callbacks have applied them."""


def new_app(help: str | None = None, *, completion: bool = False) -> typer.Typer:
    """A command group (or, with ``completion``, the root app, which offers typer's
    --install-completion/--show-completion for bash, zsh, fish and PowerShell). Its --help lays the
    option panels out to cut nothing (``help_layout``)."""
    app = _App(
        cls=_Group,
        help=help,
        no_args_is_help=True,
        add_completion=completion,
        pretty_exceptions_enable=False,
        rich_markup_mode="rich",
        context_settings=CONTEXT_SETTINGS,
    )
    app.callback()(group_callback)  # the root app replaces it with root_callback
    return app


def _version(value: bool) -> None:
    if value:
        print(f"lmi-build {__version__}")
        raise typer.Exit()


# The root options. Not eager: the body first resets the output state (each command line starts
# from human output), then applies them; the command's own output options apply after that.
def root_callback(
    json_output: Annotated[bool, typer.Option("--json", help=JSON_HELP)] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help=QUIET_HELP)] = False,
    debug: Annotated[bool, typer.Option("--debug", help=DEBUG_HELP)] = False,
    version: Annotated[
        bool,
        typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit."),
    ] = False,
) -> None:
    reset()
    _json_mode(json_output)
    _quiet_mode(quiet)
    _debug_mode(debug)


def click_exceptions() -> ModuleType:
    """click's exception classes: typer >= 0.29 carries its own copy of click, older typer uses click."""
    try:
        return importlib.import_module("typer._click.exceptions")
    except ImportError:
        return importlib.import_module("click.exceptions")


def click_context() -> Any:
    """The click context of the command running now (None outside one): typer >= 0.29 carries its
    own copy of click, older typer uses click."""
    try:
        click_globals = importlib.import_module("typer._click.globals")
    except ImportError:
        click_globals = importlib.import_module("click.globals")
    return click_globals.get_current_context(silent=True)
