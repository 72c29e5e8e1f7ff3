"""Who this replica is, as daprd reads it: ``POD_NAME`` and ``NAMESPACE`` (``default`` only
when unset; set but empty stays empty), the host name where the pod has no name."""

from __future__ import annotations

import socket

import pytest

from priority_pubsub.core.pod import Pod


def test_the_downward_apis_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("POD_NAME", "worker-7d9f-abcde")
    monkeypatch.setenv("NAMESPACE", "shop")
    pod = Pod.current()
    assert pod == Pod("worker-7d9f-abcde", "shop")
    assert pod.replica == "worker-7d9f-abcde"


def test_unset_the_namespace_is_default_and_the_replica_the_host(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("POD_NAME", raising=False)
    monkeypatch.delenv("NAMESPACE", raising=False)
    pod = Pod.current()
    assert pod == Pod("", "default")
    assert pod.replica == socket.gethostname()


def test_a_namespace_set_but_empty_stays_empty(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NAMESPACE", "")
    assert Pod.current().namespace == ""
