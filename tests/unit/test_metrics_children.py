"""metrics.child: the labelled child of a metric, looked up once per set of values."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter

from ferryman.observability import metrics


def test_child_is_the_metrics_own_labelled_child_whatever_order_the_labels_come_in() -> None:
    counter = Counter("t_children_total", "test", ["model", "direction"], registry=None)

    first = metrics.child(counter, model="a", direction="input")
    first.inc()
    metrics.child(counter, direction="input", model="a").inc(2)
    metrics.child(counter, model="input", direction="a").inc(5)  # other values, other child

    assert first is counter.labels(model="a", direction="input")
    assert counter.labels(model="a", direction="input")._value.get() == 3
    assert counter.labels(model="input", direction="a")._value.get() == 5


def test_a_child_counts_in_the_registry_it_is_exported_from() -> None:
    registry = CollectorRegistry()
    counter = Counter("t_exported_total", "test", ["outcome"], registry=registry)

    metrics.child(counter, outcome="succeeded").inc()
    metrics.child(counter, outcome="succeeded").inc()

    assert registry.get_sample_value("t_exported_total", {"outcome": "succeeded"}) == 2
