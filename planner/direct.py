"""The command line's parameters declared without typer, and plain command lines read without it.

Importing typer (0.29) and letting it parse cost a short command dearly: typer coerces each parameter
through a pydantic TypeAdapter it builds while parsing (measured on this project's 2-core machine, best of 11
processes: `planner estimate llama-3.1-8b --context 8192` 0.34 s CPU parsed by typer, 0.24 s called directly),
and `import typer` alone is about 30 ms more (python -X importtime). So the commands declare their parameters
with Option and Argument here, which record what typer.Option and typer.Argument would be given, and
typer_command hands typer the same declarations when typer reads a command line: nothing is declared twice.

Most command lines are plain: a command, its positional values, `--option value` or `--option=value`, and
flags. direct_call reads those against the declarations (option names, flags, defaults, required values,
min/max bounds, the annotations) as typer reads them. Anything else returns None and typer handles it as
before, errors included: help, an unknown or repeated option, a value typer would coerce or refuse (1e3, -5,
a choice not listed, a bound crossed), a missing required value, a command group, a parameter declared with
more than a help text, a metavar and bounds (a callback, a prompt, an environment variable ...).
"""

from __future__ import annotations

import functools
import inspect
import os
import re
import sys
from enum import Enum
from types import UnionType
from typing import TYPE_CHECKING, Any, Callable, Mapping, Union, get_args, get_origin

if TYPE_CHECKING:
    import typer

_INT = re.compile(r"[0-9]+")
_FLOAT = re.compile(r"[0-9]+(\.[0-9]+)?")
REQUIRED = ...  # typer's marker of a value the command line must give
_PLAIN_SETTINGS = frozenset({"help", "metavar", "min", "max"})


class Parameter:
    """One parameter as declared: what typer.Option(default, *decls, **settings) or typer.Argument(default,
    **settings) is given."""

    def __init__(self, kind: str, default: Any, decls: tuple[str, ...], settings: dict[str, Any]) -> None:
        self.kind, self.default, self.decls, self.settings = kind, default, decls, settings

    def for_typer(self) -> Any:
        import typer

        make = typer.Option if self.kind == "option" else typer.Argument
        return make(self.default, *self.decls, **self.settings)


def Option(default: Any = REQUIRED, *decls: str, **settings: Any) -> Any:  # noqa: N802 - typer's name
    return Parameter("option", default, decls, settings)


def Argument(default: Any = REQUIRED, **settings: Any) -> Any:  # noqa: N802 - typer's name
    return Parameter("argument", default, (), settings)


def command_name(function: Callable[..., Any]) -> str:
    """typer's name for a command registered without one (typer.main.get_command_name)."""
    return function.__name__.lower().replace("_", "-")


def typer_command(function: Callable[..., Any]) -> Callable[..., Any]:
    """The command as typer reads it: the same function, its Parameters handed over as typer's own."""
    signature = inspect.signature(function)
    parameters = [p.replace(default=p.default.for_typer()) if isinstance(p.default, Parameter) else p
                  for p in signature.parameters.values()]

    @functools.wraps(function)
    def command(**kwargs: Any) -> Any:
        return function(**kwargs)

    command.__signature__ = signature.replace(parameters=parameters)  # type: ignore[attr-defined]
    return command


class _NotPlain(Exception):
    """This command line is typer's to read."""


def direct_call(commands: Mapping[str, Callable[..., Any]] | typer.Typer, argv: list[str]) -> Callable[[], Any] | None:
    """The command function with its arguments, ready to call, or None: let typer parse this command line.
    `commands`: the command functions by name, or the typer app built from them."""
    if not argv:
        return None
    if not isinstance(commands, Mapping):
        commands = {info.name or command_name(info.callback): inspect.unwrap(info.callback)
                    for info in commands.registered_commands if info.callback is not None}
    function = commands.get(argv[0])
    if function is None:
        return None
    try:
        return functools.partial(function, **_arguments(function, argv[1:]))
    except _NotPlain:
        return None


def _declared(function: Callable[..., Any]) -> dict[str, Parameter]:
    parameters = {name: p.default for name, p in inspect.signature(function).parameters.items()}
    for declared in parameters.values():
        if not isinstance(declared, Parameter) or not _PLAIN_SETTINGS.issuperset(declared.settings):
            raise _NotPlain  # a parameter typer does more with than read one value
    return parameters


def _option_names(name: str, declared: Parameter) -> list[str]:
    """The option's spellings as typer declares them (a flag's --no- form is typer's to read)."""
    if any("/" in decl for decl in declared.decls):
        raise _NotPlain
    return list(declared.decls) or ["--" + name.replace("_", "-")]


class _Hints(dict):
    """The command function's annotations, each evaluated (as typing.get_type_hints evaluates it) when first asked
    for: get_type_hints compiles every one, and a command line names a few of estimate's 28 parameters."""

    def __init__(self, function: Callable[..., Any]) -> None:
        super().__init__()
        self.function = function

    def __missing__(self, name: str) -> Any:
        hint = self.function.__annotations__[name]
        if isinstance(hint, str):  # `from __future__ import annotations`: the command module's own source text
            hint = eval(hint, self.function.__globals__)  # noqa: S307
        self[name] = hint
        return hint


def _arguments(function: Callable[..., Any], tokens: list[str]) -> dict[str, Any]:
    hints = _Hints(function)
    declared = _declared(function)
    options: dict[str, str] = {}
    positional = []
    for name, param in declared.items():
        if param.kind == "option":
            options.update((spelling, name) for spelling in _option_names(name, param))
        elif get_origin(hints[name]) is list:
            raise _NotPlain  # a positional list takes many values
        else:
            positional.append(name)
    given: dict[str, Any] = {}
    rest = list(tokens)
    while rest:
        token = rest.pop(0)
        if not token.startswith("-"):
            if not positional:
                raise _NotPlain
            name = positional.pop(0)
            given[name] = _value(hints[name], token, declared[name])
            continue
        spelling, equals, text = token.partition("=") if token.startswith("--") else (token, "", "")
        name = options.get(spelling)
        if name is None:
            raise _NotPlain
        multiple, flag = get_origin(_optional_inner(hints[name])) is list, hints[name] is bool
        if (name in given and not multiple) or (flag and (equals or not declared[name].decls)):
            raise _NotPlain  # repeated, a value for a flag, or a flag typer names --x/--no-x
        if flag:
            given[name] = True
            continue
        if not equals:
            if not rest or rest[0].startswith("-"):
                raise _NotPlain
            text = rest.pop(0)
        value = _value(hints[name], text, declared[name])
        if multiple:
            given.setdefault(name, []).append(value)
        else:
            given[name] = value
    for name, param in declared.items():
        if name not in given:
            if param.default is REQUIRED:
                raise _NotPlain
            given[name] = param.default
    return given


def _optional_inner(hint: Any) -> Any:
    """X for Optional[X] (X | None); the hint itself otherwise."""
    if get_origin(hint) in (Union, UnionType):
        kinds = [a for a in get_args(hint) if a is not type(None)]
        if len(kinds) != 1:
            raise _NotPlain
        return kinds[0]
    return hint


def _value(hint: Any, text: str, declared: Parameter) -> Any:
    """One value as typer would hand it over, for the spellings that leave no doubt."""
    hint = _optional_inner(hint)
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
        try:
            number: float = int(text)
        except ValueError:  # past Python's limit on the digits of an integer (4,300): typer's to refuse
            raise _NotPlain from None
    elif hint is float and _FLOAT.fullmatch(text):
        number = float(text)
    else:
        raise _NotPlain
    low, high = declared.settings.get("min"), declared.settings.get("max")
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
