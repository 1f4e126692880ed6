"""Metrics scraped from a running worker process (``--metrics-port``) and from ``stepline
serve`` (``GET /metrics``), parsed with prometheus-client's own parser: after a known run
(100 created over HTTP, 3 of them failing) the numbers agree with the store."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from ._project import Project, free_port, wait_until

pytestmark = pytest.mark.slow

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(url: str) -> Samples:
    """Every sample of a scrape, by name and labels (sorted)."""
    response = httpx.get(url, timeout=30)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain")
    samples: Samples = {}
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


@pytest.fixture
def project(tmp_path: Path) -> Iterator[Project]:
    made = Project(tmp_path, "[telemetry]\nmetrics = true\n")
    yield made
    made.kill_all()


def test_a_worker_and_serve_report_a_known_run_as_the_store_has_it(project: Project) -> None:
    metrics_port, http_port = free_port(), free_port()
    worker = project.start("worker", "--metrics-port", str(metrics_port))
    wait_until(lambda: "started for" in worker.log.read_text(), what="the worker")  # type: ignore[attr-defined]
    served = project.start("serve", "--port", str(http_port))
    api = f"http://127.0.0.1:{http_port}"
    wait_until(lambda: _answers(f"{api}/api/workflows"), what="serve")
    items = [{"id": f"b{n:03d}", "params": {"fail": n % 40 == 7}} for n in range(100)]
    assert sum(1 for item in items if item["params"]["fail"]) == 3
    response = httpx.post(f"{api}/api/workflows/batch/instances/batch", json=items, timeout=30)
    assert response.status_code == 201, response.text

    def ended() -> bool:
        counts = httpx.get(f"{api}/api/workflows/batch", timeout=10).json()["counts"]
        return counts["complete"] + counts["errored"] == 100

    wait_until(ended, what="the 100 instances to end")
    counts = httpx.get(f"{api}/api/workflows/batch", timeout=10).json()["counts"]
    assert (counts["complete"], counts["errored"]) == (97, 3)

    at_worker = scrape(f"http://127.0.0.1:{metrics_port}/metrics")
    at_serve = scrape(f"{api}/metrics")
    # What each process did: serve created, the worker ran.
    assert (
        value(at_serve, "stepline_instances_created_total", workflow="batch", trigger="http") == 100
    )
    assert (
        value(at_worker, "stepline_instances_created_total", workflow="batch", trigger="http") == 0
    )
    finished = "stepline_instances_finished_total"
    assert value(at_worker, finished, workflow="batch", outcome="complete") == counts["complete"]
    assert value(at_worker, finished, workflow="batch", outcome="errored") == counts["errored"]
    attempts = "stepline_step_attempts_total"
    assert value(at_worker, attempts, workflow="batch", step="work", outcome="success") == 100
    assert value(at_worker, attempts, workflow="batch", step="fail", outcome="failed") == 3
    assert (
        value(at_worker, "stepline_step_duration_seconds_count", workflow="batch", step="work")
        == 100
    )
    assert value(at_worker, "stepline_claim_latency_seconds_count", workflow="batch") == 100
    assert value(at_worker, "stepline_activation_duration_seconds_count", workflow="batch") == 100
    assert value(at_worker, "stepline_worker_activations") == 0
    assert value(at_worker, "stepline_worker_concurrency") == 100
    # The fleet's figures, the same from both, read from the store.
    for samples in (at_worker, at_serve):
        assert value(samples, "stepline_store_up") == 1
        assert value(samples, "stepline_workers_live") == 1
        assert value(samples, "stepline_backlog", workflow="batch") == 0
        assert value(samples, "stepline_backlog_oldest_age_seconds", workflow="batch") == 0
        for status in ("queued", "running", "waiting", "paused", "waitingForPause"):
            stored = counts[status]
            assert value(samples, "stepline_instances", workflow="batch", status=status) == stored
    # No label is an instance id.
    for name, labels in (*at_worker, *at_serve):
        assert not any(label_value.startswith("b0") for _, label_value in labels), name
    project.stop(served)
    project.stop(worker)


def test_metrics_are_off_unless_asked(tmp_path: Path) -> None:
    project = Project(tmp_path)
    try:
        http_port = free_port()
        worker = project.start("worker")
        wait_until(lambda: "started for" in worker.log.read_text(), what="the worker")  # type: ignore[attr-defined]
        served = project.start("serve", "--port", str(http_port))
        api = f"http://127.0.0.1:{http_port}"
        wait_until(lambda: _answers(f"{api}/api/workflows"), what="serve")
        response = httpx.get(f"{api}/metrics", timeout=10)
        assert response.status_code == 404
        assert response.json()["error"]["code"] == "metrics_off"
        assert "--metrics-port" in response.json()["error"]["message"]
        project.stop(served)
        project.stop(worker)
    finally:
        project.kill_all()


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=2).status_code == 200
    except httpx.HTTPError:
        return False
