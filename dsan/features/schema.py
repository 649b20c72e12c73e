"""The DSAN feature schema: the 128 columns' names, tiers, units and normalisations, and the
hash a model manifest carries (a model trained on another schema is refused at load).
``python -m dsan.features.schema > docs/features.md`` regenerates the docs table.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from dsan.api.types import TASK_TYPES
from dsan.core.snapshot import MAX_GPUS, TELEMETRY_CHANNELS

#: Normalisation constants: openb's largest node (128 cores, 1 TiB); fixed so the simulator
#: and the sidecar scale identically whatever cluster they see.
CPU_SCALE = 128_000.0
MEM_SCALE = 1_048_576.0
GPU_SCALE = float(MAX_GPUS * 1000)
#: GPU-model one-hot slots; model indices >= MODEL_SLOTS - 1 share the last slot.
MODEL_SLOTS = 8
#: Telemetry samples the temporal stream sees (10 s apart) when the snapshot has none.
DEFAULT_T = 6
#: Target-workload shapes whose remaining host capacity is a feature.
TOP_SHAPES = 8


@dataclass(frozen=True, slots=True)
class FeatureSpec:
    name: str
    tier: str
    unit: str
    norm: str


def _specs() -> tuple[FeatureSpec, ...]:
    s: list[FeatureSpec] = []

    def add(tier: str, name: str, unit: str, norm: str) -> None:
        s.append(FeatureSpec(name, tier, unit, norm))

    b = "base"
    add(b, "node_cpu_cap", "millicores", "/128000")
    add(b, "node_mem_cap", "MiB", "/1048576")
    add(b, "node_gpu_count", "GPUs", "/8")
    add(b, "node_has_gpu", "bool", "0/1")
    for k in range(MODEL_SLOTS):
        add(b, f"node_gpu_model_{k}", "bool", "one-hot of model index (last slot = other)")
    add(b, "node_nvlink_known", "bool", "0/1")
    add(b, "node_rack_known", "bool", "0/1")
    add(b, "node_zone_known", "bool", "0/1")
    add(b, "node_nvlink_domain_size", "nodes", "/8")
    add(b, "node_rack_size", "nodes", "/32")
    add(b, "node_zone_size", "nodes", "/1024")
    add(b, "node_hourly_cost", "relative price", "/(1+price)")
    add(b, "node_taint_count", "taints", "/8")
    add(b, "node_cpu_per_gpu", "millicores", "/128000")
    add(b, "node_mem_per_gpu", "MiB", "/1048576")
    add(b, "node_image_count", "images", "/64")
    add(b, "node_name_rank", "rank", "position of the node's name in sorted order / n")
    m = "monitoring"
    for ch in TELEMETRY_CHANNELS:
        for stat in ("last", "mean", "max", "min", "std", "slope"):
            add(m, f"tel_{ch}_{stat}", "fraction", "raw in [0,1]; slope = (last-first)")
    add(m, "tel_age", "seconds", "log1p(age)/log1p(3600), clipped to 1")
    add(m, "tel_present", "bool", "0/1")
    u = "business"
    for t in TASK_TYPES:
        add(u, f"pod_task_{t}", "bool", "one-hot")
    add(u, "pod_priority", "priority", "tanh(p/1000)")
    add(u, "pod_priority_high", "bool", "priority > 0")
    add(u, "pod_gang_size", "pods", "/8 (dependencies)")
    add(u, "pod_in_gang", "bool", "gang_size > 1")
    add(u, "pod_cpu", "millicores", "/128000")
    add(u, "pod_mem", "MiB", "/1048576")
    add(u, "pod_num_gpu", "GPUs", "/8")
    add(u, "pod_gpu_milli", "GPU milli", "/1000")
    add(u, "pod_gpu_total", "GPU milli", "/8000")
    add(u, "pod_is_sharing", "bool", "0 < gpu_milli < 1000")
    add(u, "pod_is_cpu_only", "bool", "num_gpu == 0")
    # in the place of a column that was constant, so the others keep their positions
    bound = "node_cpu_per_gpu (/128000) if the pod is CPU-only and the GPU nodes' used CPU"
    bound += " share is at least 0.1 and above 1.1x their used GPU share, else 0"
    add("derived", "cpu_bound_cpu_per_gpu", "millicores", bound)
    add(u, "pod_allowed_models", "models", "/8")
    add(u, "pod_image_local", "bool", "node already has the image")
    add(u, "node_pod_count", "pods", "/64")
    add(u, "pod_cpu_of_node", "fraction", "pod cpu / node cpu cap")
    add(u, "pod_mem_of_node", "fraction", "pod mem / node mem cap")
    add(u, "pod_gpu_of_node", "fraction", "pod GPU milli / node GPU milli (0 if none)")
    add(u, "pod_cpu_per_gpu", "millicores", "/128000 (cpu / max(1, GPUs asked))")
    add(u, "pod_mem_log", "MiB", "log1p(mem)/log1p(1048576)")
    d = "derived"
    for r in ("cpu", "mem", "gpu"):
        add(d, f"{r}_free_before", "fraction", "free / capacity (0 if no capacity)")
        add(d, f"{r}_free_after", "fraction", "free after placing / capacity")
    add(d, "least_allocated", "score", "mean free fraction after (k8s LeastAllocated / 1)")
    add(d, "balanced_allocation", "score", "1 - std of used fractions after (k8s)")
    add(d, "tetris_alignment", "score", "<pod request, node free> each / scale")
    add(d, "dotprod", "score", "FGD DotProd: <request, used-after> / capacities")
    add(d, "bestfit_cpu_left", "fraction", "cpu free after / 128000")
    add(d, "bestfit_gpu_left", "fraction", "GPU milli free after / 8000")
    add(d, "bestfit_score", "score", "1 - (0.5 cpu_left + 0.5 gpu_left)")
    add(d, "frag_before", "GPU milli", "node fragmentation / 8000")
    add(d, "frag_after", "GPU milli", "fragmentation after FGD GPU choice / 8000")
    add(d, "frag_delta", "GPU milli", "(after - before) / 1000")
    add(d, "fgd_score", "score", "sigmoid((before - after) / 1000)")
    add(d, "fgd_score_int", "score", "floor(100 sigmoid((before - after) / 1000)) / 100, FGD's own")
    add(d, "full_gpus_before", "GPUs", "/8")
    add(d, "full_gpus_after", "GPUs", "/8")
    add(d, "partial_gpus_before", "GPUs", "GPUs with 0 < free < 1000, /8")
    add(d, "chosen_gpu_free_before", "GPU milli", "/1000 (min over chosen GPUs)")
    add(d, "chosen_gpu_free_after", "GPU milli", "/1000")
    add(d, "gpu_max_free", "GPU milli", "/1000")
    add(d, "gpu_min_free", "GPU milli", "/1000 (present GPUs)")
    add(d, "gpus_fitting", "GPUs", "GPUs with free >= pod gpu_milli, /8")
    add(d, "gpus_fitting_spare", "GPUs", "(fitting - num_gpu) / 8")
    add(d, "shares_partial_gpu", "bool", "sharing pod lands on an already-used GPU")
    add(d, "node_idle", "bool", "no CPU and no GPU in use")
    add(d, "node_gpu_partly_used", "bool", "some but not all GPU share in use")
    # in the place of a column that was constant, so the others keep their positions
    room = "shape1_hostable_after if the pod asks 2+ whole GPUs and free GPU share < free CPU"
    add(d, "shape1_room_gpu_bound", "pods", room + " share over the cluster, else 0")
    add(d, "rel_frag_delta", "rank", "min-max over candidates, 1 = lowest delta")
    add(d, "rel_bestfit", "rank", "min-max over candidates, 1 = best")
    add(d, "rel_least_allocated", "rank", "min-max over candidates")
    add(d, "rel_dotprod", "rank", "min-max over candidates")
    add(d, "is_best_fgd", "bool", "ties with the FGD winner (on fgd_score_int)")
    add(d, "is_best_bestfit", "bool", "ties with the BestFit winner")
    add(d, "frag_ratio_before", "fraction", "frag_before / idle GPU milli (0 if none idle)")
    add(d, "placement_cost", "relative price", "price x largest share of the node taken / 4")
    add(d, "rel_placement_cost", "rank", "min-max over candidates, 1 = cheapest")
    for k in range(TOP_SHAPES):
        add(d, f"shape{k}_hostable_after", "pods", "copies of target shape k that fit after, /8")
    return tuple(s)


FEATURES: tuple[FeatureSpec, ...] = _specs()
FEATURE_NAMES: tuple[str, ...] = tuple(f.name for f in FEATURES)
N_FEATURES = 128
#: Columns that do not depend on the pod or the allocation state: the node-embedding input.
NODE_FEATURES = tuple(i for i, f in enumerate(FEATURES) if f.tier in ("base", "monitoring"))
N_NODE_FEATURES = len(NODE_FEATURES)
#: Positions of ``tel_age`` and ``tel_present`` in the node block (see :func:`age_columns`).
AGE_COLUMNS = [FEATURE_NAMES.index("tel_age"), FEATURE_NAMES.index("tel_present")]
assert len(FEATURES) == N_FEATURES, len(FEATURES)


def schema_hash() -> str:
    """Hash of names, order and normalisations: a model trained on another schema is refused."""
    text = "\n".join(f"{f.name}|{f.tier}|{f.unit}|{f.norm}" for f in FEATURES)
    text += f"\nT={DEFAULT_T}|C={len(TELEMETRY_CHANNELS)}"
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def markdown() -> str:
    """docs/features.md: the feature table (regenerate with ``python -m dsan.features.schema``)."""
    lines = [
        "# DSAN features",
        "",
        "GENERATED by `python -m dsan.features.schema > docs/features.md` from"
        " `dsan/features/schema.py`;"
        " do not edit.",
        "",
        f"128 float32 columns per (pod, candidate node); schema hash `{schema_hash()}`"
        " (written into every model manifest; loading refuses a mismatch)."
        f" Columns 0-{N_NODE_FEATURES - 1} (base + monitoring) do not depend on the pod or on"
        " allocations: they feed the node embeddings (LSTM + GNN), cached until telemetry"
        " changes. The temporal stream also gets the raw telemetry, shape"
        f" (n, T={DEFAULT_T}, C={len(TELEMETRY_CHANNELS)}), channels"
        f" {', '.join(TELEMETRY_CHANNELS)}. Fragmentation follows FGD (`dsan.features.frag`)"
        " against the target workload; `rel_*` and `is_best_*` are relative to the candidate"
        " set; `shape1_room_gpu_bound` and `cpu_bound_cpu_per_gpu` are the two columns that read"
        " the whole cluster (`room_factor`, `cpu_bound_factor` in `dsan.features.featurizer`).",
        "",
        "| # | name | tier | unit | normalisation |",
        "|---|---|---|---|---|",
    ]
    lines += [
        f"| {i} | `{f.name}` | {f.tier} | {f.unit} | {f.norm} |" for i, f in enumerate(FEATURES)
    ]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(markdown(), end="")
