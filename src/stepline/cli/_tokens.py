"""``stepline tokens new``: mint an API token and print what the server's configuration holds
(its SHA-256, never the token)."""

from __future__ import annotations

import click

from ..access import ENV_TOKENS, ROLES, Token, mint
from ._common import json_option, print_json


@click.group("tokens")
def tokens() -> None:
    """Mint API tokens for `stepline serve` (roles: read < operate < admin)."""


@tokens.command("new")
@click.option("--role", type=click.Choice(ROLES), required=True, help="What the token may do.")
@click.option("--name", default=None, metavar="NAME", help="Its name (default: the role).")
@json_option
def new(role: str, name: str | None, as_json: bool) -> None:
    """Print a new random token and the line to configure it with.

    Give the token to its user; put only its sha256 in stepline.toml ([http] tokens) or in
    $STEPLINE_TOKENS. The token is shown once and stored nowhere.
    """
    secret, sha256 = mint()
    try:
        token = Token(name or role, role, sha256)  # type: ignore[arg-type]
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--name") from None
    if as_json:
        print_json({"token": secret, **token.to_json(), "sha256": sha256})
        return
    click.echo(f"token:  {secret}")
    click.echo(f"sha256: {sha256}")
    click.echo("")
    click.echo("stepline.toml:")
    click.echo("  [http]")
    click.echo(f'  tokens = [{{name = "{token.name}", role = "{role}", sha256 = "{sha256}"}}]')
    click.echo(f"or the environment: {ENV_TOKENS}={token.name}:{role}:{sha256}")
