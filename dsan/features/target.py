"""FGD's *target workload*: the task shapes a cluster expects, with their frequencies.

Weng et al. (ATC'23): the most popular shapes (CPU milli, GPU count, per-GPU milli, allowed GPU
models) covering 95 % of the tasks, chosen as the FGD simulator's typical-pods walk does.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from dsan.core.snapshot import BOOL, ClusterSnapshot, PodSpec

#: Share of tasks (by count) the target's shapes must cover.
POPULARITY_THRESHOLD = 0.95

Shape = tuple[int, int, int, tuple[str, ...]]  # (cpu_milli, gpu_milli, num_gpu, models)


@dataclass(frozen=True)
class TargetWorkload:
    """Task shapes with frequencies summing to 1. Arrays are indexed by shape."""

    cpu_milli: npt.NDArray[np.float64]
    gpu_milli: npt.NDArray[np.int32]
    num_gpu: npt.NDArray[np.int32]
    #: Allowed GPU model names per shape; ``()`` = any model.
    models: tuple[tuple[str, ...], ...]
    freq: npt.NDArray[np.float64]
    #: Distinct ``gpu_milli`` values and each shape's index into them (set at construction).
    milli_unique: npt.NDArray[np.int32] = field(init=False, repr=False, compare=False)
    milli_index: npt.NDArray[np.int64] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        k = len(self.models)
        for col in ("cpu_milli", "gpu_milli", "num_gpu", "freq"):
            if getattr(self, col).shape != (k,):
                raise ValueError(f"target workload column {col} must have {k} entries")
        if k == 0:
            raise ValueError("target workload has no shapes")
        if np.any(self.freq < 0) or abs(float(self.freq.sum()) - 1.0) > 1e-6:
            raise ValueError("target workload frequencies must be >= 0 and sum to 1")
        # fragmentation is computed once per distinct GPU share
        uniq, inv = np.unique(self.gpu_milli, return_inverse=True)
        object.__setattr__(self, "milli_unique", uniq.astype(np.int32))
        object.__setattr__(self, "milli_index", inv.astype(np.int64))

    def __len__(self) -> int:
        return len(self.models)

    @classmethod
    def from_shapes(cls, shapes: Sequence[Shape], counts: Sequence[float]) -> TargetWorkload:
        total = float(sum(counts))
        return cls(
            cpu_milli=np.array([s[0] for s in shapes], dtype=np.float64),
            gpu_milli=np.array([s[1] for s in shapes], dtype=np.int32),
            num_gpu=np.array([s[2] for s in shapes], dtype=np.int32),
            models=tuple(tuple(s[3]) for s in shapes),
            freq=np.array(counts, dtype=np.float64) / total,
        )

    @classmethod
    def from_pods(cls, pods: Sequence[PodSpec], gpu_models: Sequence[str] = ()) -> TargetWorkload:
        """Target of a pod list. ``gpu_models`` names the indices in ``PodSpec.gpu_models``."""
        if not pods:
            raise ValueError("cannot build a target workload from an empty pod list")
        shapes: Counter[Shape] = Counter()
        for p in pods:
            try:
                models = tuple(sorted(gpu_models[i] for i in p.gpu_models))
            except IndexError:
                raise ValueError(f"{p.name}: GPU model index out of range") from None
            shapes[(int(p.cpu_milli), int(p.gpu_milli), int(p.num_gpu), models)] += 1
        return cls.from_counts(shapes)

    @classmethod
    def from_counts(cls, shapes: Counter[Shape]) -> TargetWorkload:
        total = sum(shapes.values())
        # Decreasing count; ties by decreasing shape, as sort.Reverse over Go's Less does.
        ordered = sorted(shapes.items(), key=lambda kv: (kv[1], *kv[0][:3], "|".join(kv[0][3])),
                         reverse=True)
        chosen: list[tuple[Shape, int]] = []
        cum = 0
        for shape, n in ordered:
            if cum >= POPULARITY_THRESHOLD * total:
                break
            chosen.append((shape, n))
            cum += n
        return cls.from_shapes([s for s, _ in chosen], [n for _, n in chosen])

    @classmethod
    def default(cls) -> TargetWorkload:
        """The target of openb ``default`` (embedded table)."""
        from dsan.features.target_openb_default import COUNTS, SHAPES

        return cls.from_shapes(SHAPES, COUNTS)

    def access(self, snap: ClusterSnapshot) -> BOOL:
        """(K, n) mask: shape k may run on node i's GPU model (always true without a constraint)."""
        names = np.array([*snap.gpu_models, ""], dtype=object)
        node_names = names[snap.gpu_model]  # -1 -> "" (CPU-only node)
        out = np.ones((len(self), len(snap)), dtype=bool)
        for k, models in enumerate(self.models):
            if models:
                out[k] = np.isin(node_names, np.array(models, dtype=object))
        return out
