"""API tokens: [http] tokens in stepline.toml and $STEPLINE_TOKENS (bad config named, never
the secret), the digest, minting and ``stepline tokens new``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from stepline import ConfigError
from stepline.access import ROLES, Token, TokenSet, allows, digest, mint, parse_environment
from stepline.cli import cli
from stepline.project import load_project

HEX = "a" * 64
NO_ENV: dict[str, str] = {}


def test_roles_are_ordered() -> None:
    assert ROLES == ("read", "operate", "admin")
    assert allows("admin", "read") and allows("operate", "operate")
    assert not allows("read", "operate") and not allows("operate", "admin")


def test_http_tokens_in_stepline_toml(tmp_path: Path) -> None:
    (tmp_path / "stepline.toml").write_text(
        f'[http]\ntokens = [{{name = "ci", role = "read", sha256 = "{HEX}"}},'
        f' {{name = "ops", role = "admin", sha256 = "{"b" * 64}"}}]\n'
    )
    tokens = load_project(tmp_path, environ=NO_ENV).http.tokens
    assert tokens == (Token("ci", "read", HEX), Token("ops", "admin", "b" * 64))
    (tmp_path / "stepline.toml").write_text("")
    assert load_project(tmp_path, environ=NO_ENV).http.tokens == ()


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("http = 1\n", r"key 'http' must be a table"),
        ("[http]\ntoken = 'x'\n", r"unknown key 'http\.token'"),
        ("[http]\ntokens = 'x'\n", r"key 'http\.tokens' must be an array of tables"),
        ("[http]\ntokens = [1]\n", r"tokens'\[0\] must be a table"),
        (
            f"[http]\ntokens = [{{name = 'ci', role = 'reader', sha256 = '{HEX}'}}]\n",
            r"tokens'\[0\]: invalid role 'reader' of token 'ci'",
        ),
        (
            "[http]\ntokens = [{name = 'ci', role = 'read', sha256 = 'abc'}]\n",
            r"tokens'\[0\]: invalid sha256 of token 'ci'",
        ),
        (
            f"[http]\ntokens = [{{name = 'a b', role = 'read', sha256 = '{HEX}'}}]\n",
            r"invalid token name 'a b'",
        ),
        ("[http]\ntokens = [{name = 'ci', role = 'read'}]\n", r"missing key 'sha256'"),
        (
            "[http]\ntokens = [{name = 'ci', role = 'read', token = 'stl_secret'}]\n",
            r"unknown key 'token'.*never the token",
        ),
        (
            f"[http]\ntokens = [{{name = 'ci', role = 'read', sha256 = '{HEX}'}},"
            f" {{name = 'ci', role = 'admin', sha256 = '{'b' * 64}'}}]\n",
            r"two API tokens are named 'ci'",
        ),
    ],
)
def test_bad_token_config_names_the_file_and_key(tmp_path: Path, text: str, message: str) -> None:
    config = tmp_path / "stepline.toml"
    config.write_text(text)
    with pytest.raises(ConfigError, match=message) as info:
        load_project(tmp_path, environ=NO_ENV)
    assert str(config) in str(info.value)
    assert "stl_secret" not in str(info.value)


def test_environment_tokens() -> None:
    assert parse_environment(f" ci:read:{HEX} , ops:admin:{'c' * 64},") == [
        Token("ci", "read", HEX),
        Token("ops", "admin", "c" * 64),
    ]
    with pytest.raises(ConfigError, match=r"STEPLINE_TOKENS: item 2 is not 'name:role:sha256'"):
        parse_environment(f"ci:read:{HEX},stl_pasted_secret")
    try:
        parse_environment("stl_pasted_secret")
    except ConfigError as exc:
        assert "stl_pasted_secret" not in str(exc)
    with pytest.raises(ConfigError, match=r"item 1: invalid role 'root'"):
        parse_environment(f"ci:root:{HEX}")


def test_gather_adds_the_single_token_as_admin() -> None:
    tokens = TokenSet.gather([Token("ci", "read", HEX)], f"ops:operate:{'d' * 64}", "legacy")
    assert [(t.name, t.role) for t in tokens.tokens] == [
        ("ci", "read"), ("ops", "operate"), ("token", "admin"),
    ]  # fmt: skip
    found = tokens.identify(b"legacy")
    assert found is not None and found.role == "admin"


def test_mint_makes_distinct_random_tokens() -> None:
    (a, a_hash), (b, _) = mint(), mint()
    assert a != b and a.startswith("stl_") and len(a) > 40
    assert a_hash == digest(a) and len(a_hash) == 64


def test_tokens_new_prints_the_token_once_and_its_config() -> None:
    result = CliRunner().invoke(cli, ["tokens", "new", "--role", "read", "--name", "ci"])
    assert result.exit_code == 0, result.output
    token = result.output.split("token:")[1].split()[0]
    assert f'name = "ci", role = "read", sha256 = "{digest(token)}"' in result.output
    assert f"STEPLINE_TOKENS=ci:read:{digest(token)}" in result.output
    as_json = CliRunner().invoke(cli, ["tokens", "new", "--role", "admin", "--json"])
    data = json.loads(as_json.output)
    assert data["sha256"] == digest(data["token"]) and data["name"] == "admin"
    bad = CliRunner().invoke(cli, ["tokens", "new", "--role", "root"])
    assert bad.exit_code == 2 and "'root'" in bad.output
    bad = CliRunner().invoke(cli, ["tokens", "new", "--role", "read", "--name", "a b"])
    assert bad.exit_code == 2 and "'a b'" in bad.output
