"""DSAN's features: the 128 columns per (pod, node) and the placement what-ifs they are made of.
One implementation for the simulator, training and the sidecar; needs numpy only."""

from dsan.features.featurizer import (
    AGE_COLUMNS,
    CPU_SCALE,
    FEATURE_NAMES,
    FEATURES,
    GPU_SCALE,
    MEM_SCALE,
    N_FEATURES,
    N_NODE_FEATURES,
    NODE_FEATURES,
    RELATIVE_COLUMNS,
    TOP_SHAPES,
    PlacementCache,
    TargetWorkload,
    age_columns,
    default_workload,
    extremes,
    featurize,
    featurize_batch,
    fgd_select_gpus,
    fragmentation,
    node_block,
    placement,
    pod_rows,
    relative_columns,
    schema_hash,
    telemetry_of,
)

__all__ = [
    "AGE_COLUMNS", "CPU_SCALE", "FEATURES", "FEATURE_NAMES", "GPU_SCALE", "MEM_SCALE",
    "NODE_FEATURES", "N_FEATURES", "N_NODE_FEATURES", "RELATIVE_COLUMNS", "TOP_SHAPES",
    "PlacementCache", "TargetWorkload", "age_columns", "default_workload", "extremes",
    "featurize", "featurize_batch", "fgd_select_gpus", "fragmentation", "node_block",
    "placement", "pod_rows", "relative_columns", "schema_hash", "telemetry_of",
]
