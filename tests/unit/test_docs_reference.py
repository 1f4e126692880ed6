"""The reference docs say what the code does.

The CLI synopsis of README.md and docs/cli.md is one text listing exactly each command's options;
the table of errors in docs/cli.md gives the exit code and the HTTP status each error class gets;
the status table of docs/http.md lists exactly the API's error codes.
"""

from __future__ import annotations

import re
from pathlib import Path

import click
import pytest

from stepline import errors
from stepline.cli import cli
from stepline.cli._common import cli_errors
from stepline.http.api import client_errors
from stepline.http.errors import ERROR_CODES, ApiError

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text(encoding="utf-8")
CLI_MD = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
HTTP_MD = (ROOT / "docs" / "http.md").read_text(encoding="utf-8")


def synopsis(text: str) -> str:
    """The first code block that starts with the global options."""
    start = text.index("```\nstepline [--database URL] [--config FILE] COMMAND ...\n") + 4
    return text[start : text.index("```", start)]


def documented_commands() -> dict[tuple[str, ...], set[str]]:
    """Each command of the synopsis (continuation lines joined): the options it shows."""
    lines: list[str] = []
    for line in synopsis(CLI_MD).splitlines():
        if line.startswith(" ") and lines:
            lines[-1] += line
        elif line:
            lines.append(line)
    found: dict[tuple[str, ...], set[str]] = {}
    for line in lines:
        path: list[str] = []
        for word in line.split()[1:]:
            if not re.fullmatch(r"[a-z][a-z-]*", word):
                break
            path.append(word)
        found.setdefault(tuple(path), set()).update(re.findall(r"--[a-z][a-z-]*", line))
    return found


def commands(command: click.Command, path: tuple[str, ...] = ()) -> dict[tuple[str, ...], set[str]]:
    """Every command under ``command`` with its long options (``--help`` left out)."""
    if isinstance(command, click.Group):
        ctx = click.Context(command)
        found = {} if path else {(): _options(command)}
        for name in command.list_commands(ctx):
            sub = command.get_command(ctx, name)
            assert sub is not None
            found.update(commands(sub, (*path, name)))
        return found
    return {path: _options(command)}


def _options(command: click.Command) -> set[str]:
    return {
        opt
        for param in command.params
        if isinstance(param, click.Option)
        for opt in (*param.opts, *param.secondary_opts)
        if opt.startswith("--") and opt != "--help"
    }


def test_readme_and_cli_md_show_one_synopsis() -> None:
    assert synopsis(README) == synopsis(CLI_MD)


def test_the_synopsis_lists_every_command_with_exactly_its_options() -> None:
    actual = commands(cli)
    actual[()].discard("--version")  # in the table of global options
    assert documented_commands() == actual


ERROR_ROW = re.compile(r"^\| `(\w+)` \| .* \| (\d) \| (?:(\d{3}) `(\w+)`|none: .*) \|$", re.M)
SAMPLES: dict[str, BaseException] = {
    "ValueError": ValueError("invalid instance id 'a b'"),
    "InvalidPayloadError": errors.InvalidPayloadError("instance params is not JSON"),
    "WorkflowNotFoundError": errors.WorkflowNotFoundError("nope", ["greet"]),
    "InstanceNotFoundError": errors.InstanceNotFoundError("greet", "nope"),
    "ScheduleNotFoundError": errors.ScheduleNotFoundError("nope"),
    "ScheduleExistsError": errors.ScheduleExistsError("nightly", "code"),
    "ScheduleReadOnlyError": errors.ScheduleReadOnlyError("nightly"),
    "InstanceAlreadyExistsError": errors.InstanceAlreadyExistsError("greet", "done"),
    "IllegalStateError": errors.IllegalStateError("greet", "done", "complete", "pause"),
    "DefinitionError": errors.DefinitionError("run() must be an async function"),
    "ConfigError": errors.ConfigError("cannot import module 'broken'"),
    "StoreError": errors.StoreError("the database failed"),
}


def test_the_errors_table_names_every_error_once() -> None:
    assert [m.group(1) for m in ERROR_ROW.finditer(CLI_MD)] == list(SAMPLES)


@pytest.mark.parametrize("row", ERROR_ROW.findall(CLI_MD), ids=lambda row: row[0])
def test_each_error_gets_the_documented_exit_code_and_status(row: tuple[str, ...]) -> None:
    name, exit_code, status, code = row
    error = SAMPLES[name]
    with pytest.raises(click.ClickException) as cli_error, cli_errors():
        raise error
    assert cli_error.value.exit_code == int(exit_code)
    assert str(error) in cli_error.value.format_message()
    if not status:
        return  # raised only where the server starts, never by a request
    with pytest.raises(ApiError) as api_error, client_errors():
        raise error
    assert (api_error.value.status, api_error.value.code) == (int(status), code)


def test_the_http_status_table_lists_every_error_code() -> None:
    rows = re.findall(r"^\| (\d{3}) \| `(\w+)` \|", HTTP_MD, re.M)
    assert sorted((int(status), code) for status, code in rows) == sorted(
        (status, code) for status, codes in ERROR_CODES.items() for code in codes
    )
