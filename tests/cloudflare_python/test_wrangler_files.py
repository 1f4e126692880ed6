"""Reading wrangler files and Cloudflare's values: JSONC and TOML, every refusal naming the file
and the key, durations in Cloudflare's units, step configs Cloudflare would refuse, and the
names of the ``workers`` module stepline does not provide."""

from __future__ import annotations

import json
import math
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest

from stepline import ConfigError, DefinitionError, NonRetryableError, StepFailedError
from stepline.cloudflare import load_wrangler, read_wrangler
from stepline.cloudflare import workers as provided
from stepline.cloudflare._values import epoch_seconds, failure_of, seconds, step_config

MAIN = """
from workers import WorkflowEntrypoint, Response


class Flow(WorkflowEntrypoint):
    async def run(self, event, step):
        return 1


class NotAWorkflow:
    pass
"""


def project(tmp_path: Path, text: str, name: str = "wrangler.jsonc") -> Path:
    (tmp_path / "src").mkdir(exist_ok=True)
    (tmp_path / "src" / "main_module.py").write_text(MAIN, encoding="utf-8")
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_jsonc_with_comments_and_trailing_commas(tmp_path: Path) -> None:
    path = project(
        tmp_path,
        """{
      // the Worker
      "main": "src/main_module.py", /* Python */
      "workflows": [{"name": "flow", "binding": "FLOW", "class_name": "Flow",},],
      "kv_namespaces": [{"binding": "KV", "id": "x"}],
      "vars": {"URL": "http://example.invalid//x"},
    }""",
    )
    config = read_wrangler(path)
    assert [(w.name, w.binding, w.class_name) for w in config.workflows] == [
        ("flow", "FLOW", "Flow")
    ]
    assert config.vars == {"URL": "http://example.invalid//x"}  # not a comment inside a string
    assert config.ignored == ("kv_namespaces",)


def test_toml(tmp_path: Path) -> None:
    path = project(
        tmp_path,
        'main = "src/main_module.py"\ncompatibility_flags = ["python_workers"]\n\n'
        '[[workflows]]\nname = "flow"\nbinding = "FLOW"\nclass_name = "Flow"\n',
        "wrangler.toml",
    )
    loaded = load_wrangler(path, database="sqlite:///x.db")
    assert list(loaded.workflows) == ["flow"]
    assert loaded.config.workflows[0].class_name == "main_module:Flow"
    assert loaded.ignored_warning() is None


MAIN_PY = "src/main_module.py"


def jsonc(**settings: object) -> str:
    return json.dumps(settings)


def flows(*entries: dict[str, str]) -> str:
    return jsonc(main=MAIN_PY, workflows=list(entries))


FLOW = {"name": "a", "binding": "F", "class_name": "Flow"}


@pytest.mark.parametrize(
    ("name", "text", "words"),
    [
        ("wrangler.jsonc", '{"main": "src/main_module.py", "workflows": [}', ["not valid JSONC"]),
        ("wrangler.toml", "main = ", ["not valid TOML"]),
        ("wrangler.jsonc", jsonc(workflows=[]), ["key 'main' is missing"]),
        ("wrangler.jsonc", jsonc(main="src/nope.py"), ["key 'main'", "nope.py", "does not exist"]),
        ("wrangler.jsonc", jsonc(main="src/index.ts"), ["key 'main'", "Python file"]),
        ("wrangler.jsonc", jsonc(main=MAIN_PY), ["key 'workflows' is missing"]),
        (
            "wrangler.jsonc",
            flows({"name": "a", "binding": "F"}),
            ["workflows[0].class_name' is missing"],
        ),
        ("wrangler.jsonc", flows({**FLOW, "name": "bad name"}), ["workflows[0].name", "bad name"]),
        (
            "wrangler.jsonc",
            flows(FLOW, {**FLOW, "name": "b"}),
            ["workflows[1].binding", "'F' is already used by workflows[0]"],
        ),
        (
            "wrangler.jsonc",
            flows({**FLOW, "binding": "F-1"}),
            ["workflows[0].binding", "not a valid binding name"],
        ),
        ("wrangler.jsonc", flows({**FLOW, "class": "Flow"}), ["unknown key 'workflows[0].class'"]),
        (
            "wrangler.jsonc",
            flows({**FLOW, "class_name": "Missing"}),
            ["workflows[0].class_name", "no attribute 'Missing'"],
        ),
        (
            "wrangler.jsonc",
            flows({**FLOW, "class_name": "NotAWorkflow"}),
            ["workflows[0].class_name", "not a WorkflowEntrypoint subclass"],
        ),
        ("wrangler.yaml", "main: x", ["wrangler.jsonc, wrangler.json or wrangler.toml"]),
    ],
)
def test_a_bad_wrangler_file_is_an_error_naming_it(
    tmp_path: Path, name: str, text: str, words: list[str]
) -> None:
    path = project(tmp_path, text, name)
    with pytest.raises(ConfigError) as caught:
        load_wrangler(path, database="sqlite:///x.db")
    message = str(caught.value)
    assert str(path) in message
    for word in words:
        assert word in message, message


def test_the_workers_module_refuses_what_it_does_not_provide() -> None:
    assert provided.WorkflowEntrypoint.__name__ == "WorkflowEntrypoint"
    assert provided.workflows.NonRetryableError is NonRetryableError
    response = provided.Response
    with pytest.raises(NotImplementedError, match=r"workers\.Response is not provided"):
        response("hello")
    with pytest.raises(NotImplementedError, match=r"workers\.fetch is not provided"):
        provided.fetch("https://example.invalid")
    with pytest.raises(AttributeError):
        provided.NoSuchName  # noqa: B018
    assert sys.modules.get("workers") in (None, provided)  # installed only for wrangler projects


@pytest.mark.parametrize(
    ("value", "expected"),
    [(1500, 1.5), (0, 0.0), ("10 seconds", 10.0), ("1 minute", 60.0), ("2 hours", 7200.0),
     ("1 day", 86400.0), ("1 week", 604800.0), ("1 month", 30 * 86400.0),
     ("1 year", 365.25 * 86400.0)],
)  # fmt: skip
def test_durations_in_cloudflare_units(value: object, expected: float) -> None:
    assert seconds(value, what="duration") == pytest.approx(expected)


@pytest.mark.parametrize("value", ["10 fortnights", "ten seconds", -1, math.nan, True, None])
def test_a_bad_duration_is_refused_quoting_it(value: object) -> None:
    with pytest.raises(ValueError, match="invalid duration"):
        seconds(value, what="duration")


def test_sleep_until_takes_epoch_milliseconds_or_a_datetime() -> None:
    assert epoch_seconds(1_800_000_000_000, what="t") == 1_800_000_000.0
    naive = datetime(2027, 1, 1, 9, 0)
    assert epoch_seconds(naive, what="t") == naive.replace(tzinfo=UTC)
    with pytest.raises(ValueError, match="milliseconds since the epoch"):
        epoch_seconds("2027-01-01", what="t")


def test_a_cloudflare_step_config_is_mapped() -> None:
    config = step_config(
        {"retries": {"limit": 2, "delay": 1500, "backoff": "linear"}, "timeout": "1 minute"}, "s"
    )
    assert config is not None
    assert (config.retries.limit, config.retries.delay, config.retries.backoff) == (
        2,
        1.5,
        "linear",
    )
    assert config.timeout == 60.0
    assert config.retries.non_retryable == ()  # Cloudflare retries every error but its own
    unlimited = step_config({"retries": {"limit": math.inf, "delay": "1 second"}}, "s")
    assert unlimited is not None and unlimited.retries.limit >= 2**62


@pytest.mark.parametrize(
    ("config", "words"),
    [
        ({"sensitive": "output"}, ["'sensitive' is not supported"]),
        ({"retry": {}}, ["unknown config key 'retry'"]),
        ({"retries": {"limit": 1, "delay": 1, "jitter": 1}}, ["retries.jitter"]),
        ({"retries": {"limit": -1, "delay": 1}}, ["retries.limit", "-1"]),
        ({"retries": {"limit": 1, "delay": 1, "backoff": "random"}}, ["retries.backoff", "random"]),
        ({"retries": {"limit": 1, "delay": lambda ctx: 1}}, ["delay function is not supported"]),
        ({"timeout": "soon"}, ["timeout", "soon"]),
        ({"timeout": 0}, ["timeout", "positive"]),
        ("fast", ["config must be a dict"]),
    ],
)
def test_a_config_cloudflare_or_stepline_would_refuse(config: object, words: list[str]) -> None:
    with pytest.raises(DefinitionError) as caught:
        step_config(config, "charge")
    message = str(caught.value)
    assert message.startswith("step 'charge': ")
    for word in words:
        assert word in message, message


def test_a_failed_step_raises_what_the_sdk_rebuilds() -> None:
    rebuilt = failure_of(StepFailedError("s-1", "TypeError", "bad type"))
    assert type(rebuilt) is TypeError and str(rebuilt) == "TypeError: bad type"
    fatal = failure_of(StepFailedError("s-1", "NonRetryableError", "stop"))
    assert isinstance(fatal, NonRetryableError)
    other = StepFailedError("s-1", "ConnectionError", "down")
    assert failure_of(other) is other
