"""The `lmi-build` command line. This file only wires command groups together (``commands``); each
command lives in its own module, and heavy libraries are imported inside the command functions.
``app`` is the typer app with every command registered; typer draws every --help.
"""

import difflib
import errno
import gc
import os
import signal
import sys
from collections.abc import Sequence
from types import TracebackType

import typer

from lmi_build.cli import commands
from lmi_build.cli.app import click_exceptions, new_app, root_callback
from lmi_build.core.errors import LmiBuildError, Terminated
from lmi_build.core.fs import commit_scope
from lmi_build.core.redaction import redact_text
from lmi_build.reporting import events
from lmi_build.reporting.output import (
    Mode,
    current,
    debugging,
    guard_standard_streams,
    reset,
    set_mode,
    stream_failures,
)


def build_app() -> typer.Typer:
    """The typer app with every command registered."""
    app = new_app(help=commands.APP_HELP, completion=True)
    app.callback(epilog=commands.APP_EPILOG)(root_callback)
    commands.register(app)
    return app


app = build_app()


# click's shell-completion protocol: the completion script calls lmi-build with this variable set.
COMPLETE_VARIABLE = "_LMI_BUILD_COMPLETE"


def main(argv: Sequence[str] | None = None) -> None:
    """The console script. An ``LmiBuildError`` or a usage error (unknown flag, bad value) is one
    line on stderr (and, with --json, ``{"error": ...}`` on stdout) and exit status 1, or 2 for an
    invalid plan or artifact; --debug shows the traceback instead."""
    args = list(sys.argv[1:] if argv is None else argv)
    if COMPLETE_VARIABLE in os.environ:  # the shell asks for completions
        app(prog_name="lmi-build")  # the variable's name is derived from it
        return
    if argv is None:  # the process's own streams and hook (not a caller's, e.g. a test's)
        guard_standard_streams()
        sys.excepthook = _redacted_traceback  # a bug's traceback is redacted too
    status = _run(args)
    if argv is None:  # the process ends here (not a caller's own process, e.g. a test)
        _report_lost_output(status)
        _skip_collection_at_exit()
    sys.exit(status)


def _report_lost_output(status: int) -> None:
    """The exit status is the command's result, whatever could not be written (README, "Exit
    status"). A reader that closed the pipe (``| head``) chose to stop reading: nothing to say.
    Output lost otherwise (stdout on a full disk) is one warning line, where stderr still takes one."""
    lost = stream_failures().get("stdout")
    if lost is not None and lost.errno != errno.EPIPE:
        reason = lost.strerror or type(lost).__name__
        sys.stderr.write(f"warning: the output could not be written to stdout ({reason}); "
                         f"the exit status ({status}) is the command's own\n")
        sys.stderr.flush()


def _redacted_traceback(kind: type[BaseException], error: BaseException, trace: TracebackType | None) -> None:
    current().traceback(error)


def _skip_collection_at_exit() -> None:
    """The interpreter's shutdown garbage-collects every object it holds: with torch and ModelOpt
    imported that took 2.9 s after the last line was printed (0.3 s with this), most of the 5 s a
    person waits on Ctrl-C. The process is about to end, so the objects alive now need not be
    traced: ``gc.freeze`` moves them out of the collector's reach. Finalizers and atexit handlers
    still run (only cycles among these objects are left to the process's end)."""
    gc.freeze()


def _run(args: list[str]) -> int:
    """The command line's exit status; with ``--events`` the ``result`` event ends the file."""
    status = 1
    try:
        status = _run_command(args)
    finally:
        events.close_sink(exit_code=status, outcome=_outcome(status), data=events.take_result())
    return status


def _outcome(status: int) -> str:
    return {0: "ok", 2: "invalid", 3: "incomplete", 130: "interrupted", 143: "interrupted"}.get(status, "failed")


def _run_command(args: list[str]) -> int:
    reset()  # the environment of this command line decides --debug's default, not the one at import
    _signals_received.clear()
    _terminate_like_interrupt()
    errors = click_exceptions()
    no_args_is_help = getattr(errors, "NoArgsIsHelpError", ())
    status: object = None
    try:
        # From the moment an output is replaced, an interrupt can no longer fail the command (fs.commit_scope).
        with commit_scope() as commit:
            status = app(args=args, prog_name=commands.prog_name(), standalone_mode=False)
        if commit.late:
            current().warn(f"{'SIGTERM' if commit.late[0] == 15 else 'Ctrl-C'} came after {commit.committed} "
                           "was in place: the build had finished")
    except LmiBuildError as error:
        if debugging():
            current().traceback(error)
            return error.exit_code
        current().failure(error.code, error.message, error.hint, error.details)
        return error.exit_code
    except no_args_is_help:
        return 1  # typer has printed the group's help: no command was given
    except errors.ClickException as error:  # a usage error: unknown flag or command, bad value
        if _asks_for_json(args):  # --json may come after the flag that failed to parse
            set_mode(Mode.JSON)
        context = getattr(error, "ctx", None)
        command = context.command_path if context is not None else "lmi-build"
        if isinstance(error, errors.NoSuchOption) and error.possibilities:
            error.possibilities = close_flags(error.option_name, error.possibilities)
        current().failure("usage", error.format_message(), f"see: {command} --help")
        return 1
    except typer.Abort:
        current().error("aborted")
        return 1
    except KeyboardInterrupt:
        _signals_received.append(_signals_received[-1] if _signals_received else 2)
    except OSError as error:  # a fault of the machine (disk full, permissions), not a bug: one line
        if debugging():
            current().traceback(error)
            return 1
        current().failure("os", _os_error_line(error), _os_error_hint(error))
        return 1
    if _signals_received:
        # typer turns an interrupt into exit status 130 silently; say it, and tell SIGTERM apart.
        signum = _signals_received[-1]
        current().failure("interrupted", "terminated (SIGTERM)" if signum == 15 else "interrupted",
                          current().interrupted_hint or INTERRUPTED_BUILD)
        return 128 + signum
    return status if isinstance(status, int) else 0


# What Ctrl-C of a build leaves (a command that leaves something else says so: Output.interrupted_hint).
INTERRUPTED_BUILD = "the vendor tool was stopped and work directories removed; rerun the same command"


# How alike an unknown flag and a known one must be (difflib ratio of their names without the
# dashes) for the error to suggest it: a typo (--modle, --dtyp, --tpp), not a flag sharing a letter
# or two (click's own 0.6 over the dashed names offered --gpu for --bogus).
FLAG_SUGGESTION_CUTOFF = 0.7


def close_flags(typed: str, known: Sequence[str]) -> list[str]:
    """The flags of ``known`` close enough to ``typed`` to suggest, closest first."""
    names = {flag.lstrip("-"): flag for flag in known}
    close = difflib.get_close_matches(typed.lstrip("-"), list(names), n=3, cutoff=FLAG_SUGGESTION_CUTOFF)
    return [names[name] for name in close]


def _current_directory_gone(error: OSError) -> bool:
    """An error naming no file, raised because the working directory was deleted or moved away."""
    if error.filename is not None or error.errno != errno.ENOENT:
        return False
    try:
        os.getcwd()
    except OSError:
        return True
    return False


def _os_error_line(error: OSError) -> str:
    # An OSError raised with a message and no errno (a library's own check) has no strerror:
    # os.strerror(0) would say "Success".
    if _current_directory_gone(error):
        return "the current directory no longer exists (it was deleted or moved)"
    message = str(error).strip().splitlines()[0] if str(error).strip() else ""
    reason = error.strerror or (os.strerror(error.errno) if error.errno else redact_text(message)) \
        or type(error).__name__
    where = f": {error.filename}" if error.filename else ""
    if error.errno == errno.ENOSPC:
        return f"no space left on the device{where}"
    return f"{reason}{where}"


def _os_error_hint(error: OSError) -> str:
    if _current_directory_gone(error):
        return "cd to a directory that exists and rerun"
    if error.errno in (errno.ENOSPC, errno.EDQUOT):
        return "free space there (or choose another --output / LMI_BUILD_CACHE) and rerun; partial files were removed"
    if error.errno == errno.EFBIG:
        return "a file is larger than the filesystem or the file-size limit (ulimit -f) allows; partial files were removed"
    if error.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return "choose a location you can write, or fix its permissions"
    return "check the path and rerun; --debug shows the traceback"


# The signals that stopped this run (SIGINT 2, SIGTERM 15), newest last.
_signals_received: list[int] = []


def _terminate_like_interrupt() -> None:
    """SIGTERM cleans up as Ctrl-C does (see ``errors.Terminated``)."""
    def _terminate(signum: int, frame: object) -> None:
        _signals_received.append(signum)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second SIGTERM must not interrupt the cleanup
        raise Terminated()

    def _interrupt(signum: int, frame: object) -> None:
        _signals_received.append(signum)
        raise KeyboardInterrupt()

    signal.signal(signal.SIGTERM, _terminate)
    signal.signal(signal.SIGINT, _interrupt)


def _asks_for_json(args: list[str]) -> bool:
    given = args[: args.index("--")] if "--" in args else args
    return "--json" in given
