"""Moved: the host contract is :mod:`managedloop.hosts` (import it from there).

This private alias keeps imports of ``managedloop.providers.base`` working while branches
written before the move are merged; nothing in ``src/`` or ``tests/`` imports it.
"""

from managedloop import hosts as _hosts
from managedloop.hosts import *  # noqa: F403

__all__ = list(_hosts.__all__)
