"""DSAN's features: the 128 columns per (pod, node) and the placement what-ifs they are made of.
One implementation for the simulator, training and the sidecar; needs numpy only."""

from dsan.features.featurizer import (
    RELATIVE_COLUMNS,
    age_columns,
    cpu_bound_factor,
    default_workload,
    extremes,
    featurize,
    featurize_batch,
    node_block,
    pod_rows,
    relative_columns,
    room_factor,
    telemetry_of,
)
from dsan.features.frag import FragTracker, fgd_select_gpus, fgd_select_gpus_many, node_frag
from dsan.features.schema import (
    AGE_COLUMNS,
    CPU_SCALE,
    FEATURE_NAMES,
    FEATURES,
    GPU_SCALE,
    MEM_SCALE,
    N_FEATURES,
    N_NODE_FEATURES,
    NODE_FEATURES,
    TOP_SHAPES,
    schema_hash,
)
from dsan.features.target import TargetWorkload
from dsan.features.whatif import Placement, PlacementCache, placement

__all__ = [
    "AGE_COLUMNS", "CPU_SCALE", "FEATURES", "FEATURE_NAMES", "GPU_SCALE", "MEM_SCALE",
    "NODE_FEATURES", "N_FEATURES", "N_NODE_FEATURES", "RELATIVE_COLUMNS", "TOP_SHAPES",
    "FragTracker", "Placement", "PlacementCache", "TargetWorkload", "age_columns",
    "cpu_bound_factor", "default_workload", "extremes", "featurize", "featurize_batch",
    "fgd_select_gpus", "fgd_select_gpus_many", "node_block",
    "node_frag", "placement", "pod_rows", "relative_columns", "room_factor", "schema_hash",
    "telemetry_of",
]
