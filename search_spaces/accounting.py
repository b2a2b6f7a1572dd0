"""The accounting of any config: its family's spec says how. The arithmetic itself (the
counting convention, `Accounting`, the per-block closed forms) lives below the families in
`shapesweep.families.counts`, so family modules never import this layer."""

from __future__ import annotations

from shapesweep.families.base import of
from shapesweep.families.counts import Accounting


def account(config, seq_len: int = 128) -> Accounting:
    """Exact accounting of one typed config (any family: its spec says how)."""
    return of(config).account(config, seq_len)
