"""Plain command lines call the command without typer's parsing; typer reads every other one.

typer (0.29) coerces each parameter through a pydantic TypeAdapter it builds while parsing: importing
pydantic and building the adapters of `planner estimate`'s 28 parameters is a third of the whole command
(measured on this project's 2-core machine, best of 11 processes: `planner estimate llama-3.1-8b --context
8192` 0.34 s CPU parsed by typer, 0.24 s called directly). Most command lines are plain:
a command, its positional values, `--option value` or `--option=value`, and flags. `direct_call` reads
those against the app's own declarations -- typer's click parameters (option names, flags, defaults,
required), the command function's annotations and its typer.Option bounds -- so nothing is declared twice.
Anything else returns None and typer handles it as before, errors included: help, an unknown or repeated
option, a value typer would coerce or refuse (1e3, -5, a choice not listed, a bound crossed), a missing
required value, a command group, a parameter with a callback, prompt or environment variable.
"""

from __future__ import annotations

import inspect
import os
import re
import sys
from enum import Enum
from functools import partial
from types import UnionType
from typing import Any, Callable, Union, get_args, get_origin, get_type_hints

import typer
from typer.main import get_command_from_info, get_command_name

_INT = re.compile(r"[0-9]+")
_FLOAT = re.compile(r"[0-9]+(\.[0-9]+)?")


class _NotPlain(Exception):
    """This command line is typer's to read."""


def direct_call(app: typer.Typer, argv: list[str]) -> Callable[[], Any] | None:
    """The command function with its arguments, ready to call, or None: let typer parse this command line."""
    if not argv:
        return None
    infos = {info.name or get_command_name(info.callback.__name__): info
             for info in app.registered_commands if info.callback is not None}
    info = infos.get(argv[0])
    if info is None:
        return None
    # the click command typer builds for this one command (get_command would build all of them)
    command = get_command_from_info(info, pretty_exceptions_short=app.pretty_exceptions_short,
                                    rich_markup_mode=app.rich_markup_mode)
    try:
        return partial(info.callback, **_arguments(command.params, info.callback, argv[1:]))
    except _NotPlain:
        return None


def _arguments(params: list[Any], function: Callable[..., Any], tokens: list[str]) -> dict[str, Any]:
    hints = get_type_hints(function)
    declared = {name: p.default for name, p in inspect.signature(function).parameters.items()}
    options: dict[str, Any] = {}
    positional = []
    for param in params:
        _check_plain(param, declared[param.name])
        if param.param_type_name == "option":
            options.update((opt, param) for opt in param.opts)
        else:
            positional.append(param)
    given: dict[str, Any] = {}
    rest = list(tokens)
    while rest:
        token = rest.pop(0)
        if not token.startswith("-"):
            if not positional:
                raise _NotPlain
            param = positional.pop(0)
            given[param.name] = _value(hints[param.name], token, declared[param.name])
            continue
        name, equals, text = token.partition("=") if token.startswith("--") else (token, "", "")
        param = options.get(name)
        if param is None or (param.name in given and not param.multiple) or (param.is_flag and equals):
            raise _NotPlain
        if param.is_flag:
            given[param.name] = True
            continue
        if not equals:
            if not rest or rest[0].startswith("-"):
                raise _NotPlain
            text = rest.pop(0)
        value = _value(hints[param.name], text, declared[param.name])
        if param.multiple:
            given.setdefault(param.name, []).append(value)
        else:
            given[param.name] = value
    for param in params:
        if param.name not in given:
            if param.required:
                raise _NotPlain
            given[param.name] = param.default
    return given


def _check_plain(param: Any, declared: Any) -> None:
    """A parameter typer does more with than read one value is left to typer."""
    if (param.envvar or param.callback or param.is_eager or not param.expose_value or param.nargs != 1
            or getattr(param, "secondary_opts", None) or getattr(param, "count", False)
            or getattr(param, "prompt", None) or getattr(declared, "clamp", False)
            or getattr(declared, "parser", None) or getattr(declared, "click_type", None)
            or getattr(declared, "case_sensitive", True) is False):
        raise _NotPlain


def _value(hint: Any, text: str, declared: Any) -> Any:
    """One value as typer would hand it over, for the spellings that leave no doubt."""
    if get_origin(hint) in (Union, UnionType):
        kinds = [a for a in get_args(hint) if a is not type(None)]
        if len(kinds) != 1:
            raise _NotPlain
        hint = kinds[0]
    if get_origin(hint) is list:
        hint = get_args(hint)[0]
    if isinstance(hint, type) and issubclass(hint, Enum):
        member = next((m for m in hint if m.value == text), None)
        if member is None:
            raise _NotPlain
        return member
    if hint is str:
        return text
    if hint is int and _INT.fullmatch(text):
        number: float = int(text)
    elif hint is float and _FLOAT.fullmatch(text):
        number = float(text)
    else:
        raise _NotPlain
    low, high = getattr(declared, "min", None), getattr(declared, "max", None)
    if (low is not None and number < low) or (high is not None and number > high):
        raise _NotPlain
    return number


def run_standalone(call: Callable[[], Any]) -> None:
    """Run a command as typer's standalone mode ends one: Ctrl-C prints Aborted! and exits 1, and a reader that
    closed the pipe (planner ... | head) ends it quietly with exit 1."""
    try:
        call()
        sys.stdout.flush()
    except KeyboardInterrupt:
        print("\nAborted!", file=sys.stderr)
        sys.exit(1)
    except BrokenPipeError:
        # Python's advice (docs: signal, "Note on SIGPIPE"): point stdout at devnull so the exit flush is quiet
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(1)
