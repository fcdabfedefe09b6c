"""TensorBoard scalars read back from an event folder (tensorboard's own reader: no
TensorFlow), for the tests of the summary writers."""

from __future__ import annotations

import os
from typing import Dict, List, Tuple


def read_scalars(folder: str) -> Dict[str, List[Tuple[int, float]]]:
    """Every scalar of the event files in ``folder``: tag -> [(step, value)], in file order.

    Args:
        folder: an event folder (``<output_dir>/train`` or ``/eval``).

    Returns:
        The scalars by tag.
    """
    from tensorboard.backend.event_processing import event_file_loader

    scalars: Dict[str, List[Tuple[int, float]]] = {}
    for name in sorted(os.listdir(folder)):
        if not name.startswith("events.out.tfevents"):
            continue
        for event in event_file_loader.LegacyEventFileLoader(os.path.join(folder, name)).Load():
            for value in event.summary.value:
                scalars.setdefault(value.tag, []).append((event.step, value.simple_value))
    return scalars
