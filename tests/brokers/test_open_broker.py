"""Choosing a broker by URL, and URLs shown without their password."""

from __future__ import annotations

import pytest

from stepline import ConfigError
from stepline.triggers.queues import broker as broker_module
from stepline.triggers.queues.broker import broker_scheme, open_broker, redact_url
from stepline.triggers.queues.redis import RedisBroker


def test_an_unknown_scheme_is_refused_naming_the_supported_ones() -> None:
    with pytest.raises(ConfigError, match=r"unsupported broker URL 'kafka://h:9092'.*redis://"):
        open_broker("kafka://h:9092", "orders")
    with pytest.raises(ConfigError, match="unsupported broker URL"):
        broker_scheme("localhost:6379")


def test_the_message_hides_the_password() -> None:
    with pytest.raises(ConfigError) as caught:
        open_broker("kafka://user:hunter2@h:9092", "orders")
    assert "hunter2" not in str(caught.value)


def test_redis_urls_open_a_redis_broker_with_the_defaults() -> None:
    broker = open_broker("rediss://h:6380/1", "orders", claim_idle=5)
    assert isinstance(broker, RedisBroker)
    assert (broker.group, broker.dead_letter_stream, broker.claim_idle) == (
        "stepline",
        "orders.dead",
        5,
    )


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("redis://127.0.0.1:6379/0", "redis://127.0.0.1:6379/0"),
        ("amqp://guest:secret@h:5672/vh", "amqp://guest:***@h:5672/vh"),
        ("redis://:secret@h/0", "redis://:***@h/0"),
        ("nats://u:p@[::1]:4222", "nats://u:***@[::1]:4222"),
    ],
)
def test_redact_url(url: str, shown: str) -> None:
    assert redact_url(url) == shown


def test_a_missing_client_library_says_which_extra_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def missing(name: str) -> None:
        raise ModuleNotFoundError("No module named 'redis'", name="redis")

    monkeypatch.setattr(broker_module.importlib, "import_module", missing)
    with pytest.raises(ConfigError, match=r"pip install 'stepline\[redis\]'") as caught:
        open_broker("redis://:hunter2@h:6379/0", "orders")
    assert "redis is not installed" in str(caught.value)
    assert "hunter2" not in str(caught.value)
