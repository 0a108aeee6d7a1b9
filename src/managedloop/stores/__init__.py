"""Stores: where provisioned handles, tags and stored-by-reference state outlive a process.

``Store`` is the protocol (see ``managedloop.stores._base`` for the invariants every
backend keeps); ``MemoryStore`` is the in-process default.
"""

from managedloop.stores._base import Store
from managedloop.stores._memory import MemoryStore

__all__ = ["MemoryStore", "Store"]
