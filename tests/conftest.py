"""Fixtures shared by the test modules."""

import socket

import pytest


@pytest.fixture
def no_network(monkeypatch):
    """Every connection attempt fails at once, as on an offline machine (DNS failure)."""

    def refuse(*args, **kwargs):
        raise socket.gaierror(-2, "Name or service not known (no network in tests)")

    monkeypatch.setattr(socket, "create_connection", refuse)
