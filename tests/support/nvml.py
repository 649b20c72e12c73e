"""Whether real NVML works here, asked of pynvml itself: a GPU test may skip on this answer,
never on what the code under test says (a backend that wrongly gives up must fail, not skip)."""

from __future__ import annotations


def nvml_works() -> bool:
    try:
        import pynvml
    except ImportError:
        return False
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:  # no library, no driver, no device
        return False
    pynvml.nvmlShutdown()
    return True
