"""What pods hold on their nodes: bound pods and *assumed* ones (scored best, not yet seen
bound), charged to the node table's allocation columns.

An assumption expires after ``assume_ttl_s`` and gives way to the real charge when the pod
shows up bound, wherever it landed. The TTL is one constant, so the assumptions in insertion
order (re-assuming moves a pod to the end) are in expiry order: expiring looks at the oldest
only. GPU slots are taken by best fit, as the FGD simulator does. A pod on a node the table
does not hold yet is charged when the node appears. Nothing here locks: the cache serialises
calls.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from dsan.api.types import LATENCY_SENSITIVE_INDICES
from dsan.core.snapshot import PodSpec
from sidecar.nodetable import Columns, NodeTable
from sidecar.victims import PodRecord


@dataclass(slots=True)
class Charge:
    """One pod's requests on one node, and the GPU slots they took."""

    node: str
    spec: PodSpec
    gpus: tuple[int, ...] = ()
    #: When an assumption expires (the clock's time); unused for a bound pod.
    deadline: float = 0.0
    #: A bound pod as the informer last showed it, as a preemption victim.
    record: PodRecord | None = None


#: Ways an assumption ends: its pod was seen bound (anywhere), deleted, or updated while still
#: pending, its TTL ran out, or it was the oldest past ``assume_max``.
ENDINGS = ("bound", "deleted", "informer_event", "expired", "evicted")


class Allocations:
    """Bound pods (by key) and assumed pods, each charged to its node's row while it is in
    the table."""

    def __init__(self, table: NodeTable, ttl: float, maxsize: int,
                 clock: Callable[[], float], ended: dict[str, int]) -> None:
        self._table = table
        self._ttl, self._maxsize, self._clock = ttl, maxsize, clock
        #: Rows written since the caller last cleared it; a set, so informer charges between
        #: two assumptions (the only clearer) stay bounded by the node count.
        self.touched: set[int] = set()
        #: How assumptions ended, by :data:`ENDINGS`.
        self._ended = ended
        #: Bound pods by key (the UID, else namespace/name).
        self.bound: dict[str, Charge] = {}
        #: namespace/name -> key of each bound pod: an assumption under the name comes too
        #: late once its pod is bound under the UID.
        self.bound_names: dict[str, str] = {}
        #: Assumed pods by key, oldest (first to expire) first.
        self._assumed: dict[str, Charge] = {}
        #: Node name -> keys of the pods (bound or assumed) charged to it.
        self._node_pods: dict[str, set[str]] = {}

    @property
    def assumed_count(self) -> int:
        return len(self._assumed)

    def assumed_keys(self) -> list[str]:
        """The keys of the assumed pods, oldest first."""
        return list(self._assumed)

    def _charge(self, i: int, c: Charge) -> None:
        self.touched.add(i)
        spec = c.spec
        c.gpus = charge_row(self._table.charge_columns, i, spec.cpu_milli, spec.mem_mib,
                            spec.num_gpu, spec.gpu_milli,
                            spec.task_type in LATENCY_SENSITIVE_INDICES)

    def _uncharge(self, c: Charge) -> None:
        t = self._table
        i = t.index.get(c.node)
        if i is None:
            return
        self.touched.add(i)
        spec = c.spec
        uncharge_row(t.charge_columns, i, spec.cpu_milli, spec.mem_mib, spec.gpu_milli, c.gpus,
                     spec.task_type in LATENCY_SENSITIVE_INDICES)

    def _attach(self, key: str, c: Charge) -> None:
        pods = self._node_pods.get(c.node)
        if pods is None:  # not setdefault: that builds a set on every call
            pods = self._node_pods[c.node] = set()
        pods.add(key)
        i = self._table.index.get(c.node)
        if i is not None:
            self._charge(i, c)

    def _detach(self, key: str, c: Charge) -> None:
        self._uncharge(c)
        pods = self._node_pods.get(c.node)
        if pods is not None:
            pods.discard(key)
            if not pods:
                del self._node_pods[c.node]

    def recharge(self, i: int, name: str) -> None:
        """Charge every pod held for node ``name`` to row ``i`` (just reset by the table)."""
        for key in self._node_pods.get(name, ()):
            charge = self.bound.get(key) or self._assumed.get(key)
            if charge is not None:
                self._charge(i, charge)

    def bind(self, key: str, node: str, spec: PodSpec, record: PodRecord) -> None:
        """Pod ``key`` is bound to ``node``: its assumption (if any) gives way."""
        self.drop_assumed(key, "bound")
        # A gRPC client that sent no UID was assumed under namespace/name.
        self.drop_assumed(spec.name, "bound")
        old = self.bound.get(key)
        if old is not None:
            self._detach(key, old)
        charge = Charge(node=node, spec=spec, record=record)
        self.bound[key] = charge
        self.bound_names[spec.name] = key
        self._attach(key, charge)

    def unbind(self, key: str) -> bool:
        """Pod ``key`` finished or is gone; False if it was not bound."""
        old = self.bound.pop(key, None)
        if old is None:
            return False
        if self.bound_names.get(old.spec.name) == key:
            del self.bound_names[old.spec.name]
        self._detach(key, old)
        return True

    def find(self, keys: Iterable[str], name: str, nodes: Iterable[str]) -> Charge | None:
        """The charge of a pod (bound first, then assumed) under one of ``keys``, else the
        one charged to one of ``nodes`` whose requests are named ``name``."""
        for key in keys:
            c = self.bound.get(key) or self._assumed.get(key)
            if c is not None:
                return c
        for node in nodes:
            for key in self._node_pods.get(node, ()):
                c = self.bound.get(key) or self._assumed.get(key)
                if c is not None and c.spec.name == name:
                    return c
        return None

    def assume(self, key: str, spec: PodSpec, node: str) -> None:
        """Charge ``spec`` to ``node`` as pod ``key``, replacing its previous assumption and
        uncharging the oldest past the size limit."""
        self.drop_assumed(key, None)  # renewed, not ended
        self.expire()
        assumed = self._assumed
        charge = assumed[key] = Charge(node=node, spec=spec, deadline=self._clock() + self._ttl)
        while len(assumed) > self._maxsize:
            old = next(iter(assumed))
            self._detach(old, assumed.pop(old))
            self._ended["evicted"] += 1
        self._attach(key, charge)

    def drop_assumed(self, key: str, ending: str | None) -> bool:
        """Uncharge pod ``key``'s assumption, if any, counted under ``ending`` (one of
        :data:`ENDINGS`; None: not counted). True if there was one."""
        old = self._assumed.pop(key, None)
        if old is None:
            return False
        self._detach(key, old)
        if ending is not None:
            self._ended[ending] += 1
        return True

    def expire(self) -> int:
        """Uncharge the assumptions whose TTL ran out; how many."""
        assumed = self._assumed
        if not assumed:
            return 0
        now = self._clock()
        expired = []
        for key, charge in assumed.items():
            if charge.deadline > now:
                break
            expired.append(key)
        for key in expired:
            self._detach(key, assumed.pop(key))
        self._ended["expired"] += len(expired)
        return len(expired)


def charge_row(cols: Columns, i: int, cpu_milli: float, mem_mib: float, num_gpu: int,
              gpu_milli: int, ls: bool = False) -> tuple[int, ...]:
    """Add one pod's requests (``ls``: a latency-sensitive pod) to row ``i``; returns the GPU
    slots taken, ascending: by best fit as :func:`dsan.core.filtering.best_fit_gpus`, or the
    freest (never below 0) when too few fit (a stale view, an over-sharing device plugin)."""
    cpu_used, mem_used, pod_count, ls_pods, gpu_count, gpu_free = cols
    # Python scalars (.item()): numpy's arithmetic without a numpy scalar per operation.
    cpu_used[i] = cpu_used.item(i) + cpu_milli
    mem_used[i] = mem_used.item(i) + mem_mib
    pod_count[i] = pod_count.item(i) + 1
    if ls:
        ls_pods[i] = ls_pods.item(i) + 1
    if num_gpu == 0 or gpu_milli == 0:
        return ()
    # At most 8 GPUs: Python on a list beats a dozen numpy calls.
    free: list[int] = gpu_free[i, :gpu_count.item(i)].tolist()
    fits = sorted([(f, g) for g, f in enumerate(free) if f >= gpu_milli])  # (free, slot)
    if len(fits) < num_gpu:
        fits = sorted([(-f, g) for g, f in enumerate(free)])
    gpus = tuple(sorted([g for _, g in fits[:num_gpu]]))
    for g in gpus:
        gpu_free[i, g] = max(0, free[g] - gpu_milli)
    return gpus


def uncharge_row(cols: Columns, i: int, cpu_milli: float, mem_mib: float, gpu_milli: int,
                gpus: Sequence[int], ls: bool = False) -> None:
    """Take one pod's requests back off row ``i``, never below 0 and no GPU above 1000;
    slots past the row's GPU count (the node shrank since) are left alone."""
    cpu_used, mem_used, pod_count, ls_pods, gpu_count, gpu_free = cols
    cpu_used[i] = max(0.0, cpu_used.item(i) - cpu_milli)
    mem_used[i] = max(0.0, mem_used.item(i) - mem_mib)
    pod_count[i] = max(0, pod_count.item(i) - 1)
    if ls:
        ls_pods[i] = max(0, ls_pods.item(i) - 1)
    if gpus:
        count = gpu_count.item(i)
        for g in gpus:
            if g < count:
                gpu_free[i, g] = min(1000, gpu_free.item(i, g) + gpu_milli)
