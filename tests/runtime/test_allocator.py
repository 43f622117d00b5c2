"""glibc malloc tuning: applied once, on glibc only, and off with AGENTFLY_MALLOC_TUNING=0."""

import platform
import sys

import pytest

from agentfly_cli.runtime import malloc as allocator

on_glibc = sys.platform.startswith("linux") and platform.libc_ver()[0] == "glibc"


@pytest.fixture
def fresh(monkeypatch):
    monkeypatch.setattr(allocator, "_applied", None)


@pytest.mark.skipif(not on_glibc, reason="mallopt is glibc's")
def test_tuning_applies_on_glibc(fresh, monkeypatch):
    monkeypatch.delenv("AGENTFLY_MALLOC_TUNING", raising=False)
    assert allocator.keep_freed_memory() is True
    assert allocator._applied is True


@pytest.mark.parametrize("value", ["0", "false", "No"])
def test_tuning_can_be_turned_off(fresh, monkeypatch, value):
    monkeypatch.setenv("AGENTFLY_MALLOC_TUNING", value)
    assert allocator.keep_freed_memory() is False


def test_tuning_is_decided_once(fresh, monkeypatch):
    monkeypatch.setenv("AGENTFLY_MALLOC_TUNING", "0")
    assert allocator.keep_freed_memory() is False
    monkeypatch.delenv("AGENTFLY_MALLOC_TUNING")
    assert allocator.keep_freed_memory() is False  # the first answer stands for the process
