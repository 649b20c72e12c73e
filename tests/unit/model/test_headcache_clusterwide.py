"""The serving head cache and the cluster-wide columns (shape1_room_gpu_bound; since session
13 cpu_bound_cpu_per_gpu): when a cluster bit flips through a change on a node outside the
candidates, the pod's cached rows must not be reused (dsan.model.headcache keys its classes
by the bits)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

from dsan.clusterwide import cluster_cpu_bound, cluster_gpu_bound
from dsan.features import FEATURE_NAMES, default_workload
from dsan.filtering import feasible_nodes
from dsan.model.net import DSANNet
from dsan.model.serving import ServingModel
from dsan.snapshot import ClusterSnapshot, PodSpec
from tests.unit.model.test_serving_headcache import PODS, _check, _random_residual, _snap

ROOM = FEATURE_NAMES.index("shape1_room_gpu_bound")
WHOLE = next(p for p in PODS if p.name == "whole")


def test_a_flip_of_the_cluster_bit_elsewhere_recomputes_a_whole_gpu_pods_rows() -> None:
    model = _random_residual(8)
    with torch.no_grad():  # make the column decide: a large weight for GPU pods
        model.head.gpu_skip.weight[0, ROOM] = 5.0
    snap = _snap(40, seed=31)
    sm = ServingModel(model, default_workload())
    nodes = feasible_nodes(WHOLE, snap)[:-1].astype(np.int64)
    other = int(np.setdiff1d(np.arange(len(snap)), nodes)[-1])  # not a candidate
    # every other node's CPU use set so that the cluster's free CPU share sits half of
    # that node's capacity share above the free GPU share: the node idle, the cluster is
    # GPU-bound; the node full, it is not
    cap = snap.cpu_cap.astype(np.float64)
    total, mine = float(cap.sum()), float(cap[other])
    gpu_share = snap.gpu_free.sum() / (1000.0 * snap.gpu_count.sum())
    cpu_share = gpu_share + 0.5 * mine / total
    snap.cpu_used[:] = cap * (total * (1 - cpu_share) / (total - mine))
    assert _flips(sm, model, WHOLE, snap, nodes, other, mine, cluster_gpu_bound) == [
        True, False, True]


def _flips(sm: ServingModel, model: DSANNet, pod: PodSpec, snap: ClusterSnapshot,
           nodes: np.ndarray, other: int, mine: float,
           bit: Callable[[ClusterSnapshot], bool]) -> list[bool]:
    """Node ``other`` idle, full, idle again: the cluster bit each time, the served logits
    checked against a fresh forward each time."""
    bits = []
    for used in (0.0, mine, 0.0):
        snap.cpu_used[other] = used
        bits.append(bit(snap))
        _check(sm, model, pod, snap, nodes)
    return bits


CPU_BOUND = FEATURE_NAMES.index("cpu_bound_cpu_per_gpu")
CPU = next(p for p in PODS if p.name == "cpu")


def test_a_flip_of_the_cpu_bound_bit_elsewhere_recomputes_a_cpu_pods_rows() -> None:
    """The same for cpu_bound_cpu_per_gpu (session 13): the GPU nodes' CPU-bound bit flips
    through the CPU use of a GPU node outside the candidates; a CPU-only pod's cached rows
    must follow it."""
    model = _random_residual(8)
    with torch.no_grad():  # make the column decide: a large weight for CPU-only pods
        model.head.skip.weight[0, CPU_BOUND] = -5.0
    snap = _snap(40, seed=32)
    sm = ServingModel(model, default_workload())
    nodes = feasible_nodes(CPU, snap)[:-1].astype(np.int64)
    gpu_nodes = np.flatnonzero(snap.gpu_count > 0)
    other = int(np.setdiff1d(gpu_nodes, nodes)[-1]) if np.setdiff1d(gpu_nodes, nodes).size \
        else int(gpu_nodes[-1])
    nodes = nodes[nodes != other]
    # the GPU nodes' CPU use set so that their used CPU share sits half of that node's
    # capacity share below 1.1x the used GPU share: the node idle, not CPU-bound; full, bound
    on = snap.gpu_count > 0
    cap = np.where(on, snap.cpu_cap, 0.0).astype(np.float64)
    total, mine = float(cap.sum()), float(cap[other])
    gpu_used = 1 - snap.gpu_free.sum() / (1000.0 * snap.gpu_count.sum())
    share = 1.1 * gpu_used - 0.5 * mine / total
    snap.cpu_used[:] = np.where(on, cap * (total * share / (total - mine)), 0.0)
    assert _flips(sm, model, CPU, snap, nodes, other, mine, cluster_cpu_bound) == [
        False, True, False]
