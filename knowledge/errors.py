"""The knowledge store's errors. Each message is one sentence a person can act on."""
from __future__ import annotations

REBUILD = "kernelwright kb rebuild"


class KBError(Exception):
    """The store cannot answer: missing, corrupt, built differently, or given bad input."""


class EmbedError(KBError):
    """The selected embedding cannot run (unknown name, missing package, key or endpoint)."""


class UnverifiedKernelError(ValueError):
    """A kernel was offered for write-back without a correct verdict from the evaluator."""
