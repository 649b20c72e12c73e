"""The scheduling pass: priority order, gangs all or nothing, preemption, bind and start-up;
then the over-provisioning placeholders, if any (:mod:`overprovision`)."""

from __future__ import annotations

from collections.abc import Generator

import numpy as np
import numpy.typing as npt

from dsan.core.filtering import feasible
from dsan.core.snapshot import PodSpec
from dsan.sim.scenario import preemption
from dsan.sim.scenario.state import PENDING, READY, RUNNING, STARTING, Decision, EngineState
from dsan.sim.scenario.workload import BATCH, BE, KIND_NAMES, TRAIN


class SchedulingMixin(EngineState):
    def _schedule(self) -> Generator[Decision, int, None]:
        """One pass over the pending groups (pods of one shape and priority): priority order,
        FIFO within a group. When a group's head fails even after preemption, the rest would
        too, so the pass moves on; groups are revisited only when capacity was freed or they
        gained pods."""
        for q in self.groups.values():  # drop units that finished or got placed meanwhile
            while q and self.pod_state[self._unit_pods(q[0])[0]] != PENDING:
                q.popleft()
        ranks = {k: self._rank(self._unit_pods(q[0])[0]) for k, q in self.groups.items()
                 if q and (self.dirty or k in self.group_new)}
        order = sorted(ranks, key=lambda k: (-ranks[k],
                                             self.pod_submit[self._unit_pods(self.groups[k][0])[0]]))
        self.dirty = False
        self.group_new.clear()
        # An aged unit (ranked above its priority) that still does not fit reserves the GPUs:
        # GPU pods ranked below it wait for this pass rather than take what frees up.
        reserved = -np.inf
        for key in order:
            q = self.groups[key]
            if key[3] > 0 and ranks[key] < reserved:
                continue
            while q:
                unit = q[0]
                if self.pod_state[self._unit_pods(unit)[0]] != PENDING:
                    q.popleft()
                    continue
                ok = yield from self._place(self._unit_pods(unit))
                if not ok and self._preempt(self._unit_pods(unit)):
                    ok = yield from self._place(self._unit_pods(unit))
                if not ok:
                    if ranks[key] > key[0] and key[3] > 0:
                        reserved = max(reserved, ranks[key])
                    break
                q.popleft()
        if self.ph.size:
            self._place_placeholders()

    def _rank(self, p: int) -> float:
        """The controller's order for pending pod ``p``; never outside its priority class."""
        prio = float(self.pod_prio[p])
        r = self.controller.rank(self.wl.pods[p], self.now - float(self.pod_submit[p]))
        if not prio <= r < prio + 1:
            raise ValueError(f"controller {self.controller.name!r} ranked a pod of priority "
                             f"{prio:g} at {r}: adjustments stay within [priority, priority + 1)")
        return r

    def _place(self, pods: list[int]) -> Generator[Decision, int, bool]:
        """Place all of ``pods`` or none (gang): roll back partial placements."""
        placed: list[int] = []
        for p in pods:
            spec = self.wl.pods[p]
            nodes = self.controller.allowed(spec, self.snap,
                                            np.flatnonzero(feasible(spec, self.snap)))
            if self.cfg.scale_up.ready_nodes_first and nodes.size:
                nodes = self._ready_first(nodes)
            if self.ph.size and not (nodes.size and self._node_ready(int(nodes[0]))):
                nodes = self._make_room(spec, nodes)
            if nodes.size == 0:
                for q in placed:
                    self._free(self.wl.pods[q], int(self.pod_node[q]), self.pod_gpus[q])
                    self.pod_node[q] = -1
                    self.pod_gpus[q] = ()
                return False
            node = int((yield Decision(spec, int(self.pod_job[p]), nodes, self.snap, self.now)))
            if node not in nodes:
                raise ValueError(f"policy chose node {node}, not a feasible node for {spec.name}")
            gpus = self.select_gpus(spec, self.snap, node)
            self._alloc(spec, node, gpus)
            self.pod_node[p] = node
            self.pod_gpus[p] = gpus
            placed.append(p)
        for p in placed:
            self._bind(p)
        return True

    def _ready_first(self, nodes: np.ndarray) -> np.ndarray:
        """Cluster-autoscaler semantics (``scale_up.ready_nodes_first``): the Ready nodes
        among ``nodes`` if any, else the booting ones, else ``nodes`` (all off)."""
        on = self.on[nodes]
        ready = on & (self.boot_done[nodes] <= self.now)
        if ready.any():
            return nodes[ready]
        return nodes[on] if on.any() else nodes

    def _node_ready(self, node: int) -> bool:
        return bool(self.on[node]) and bool(self.boot_done[node] <= self.now)

    def _make_room(self, spec: PodSpec, nodes: np.ndarray) -> np.ndarray:
        """No Ready node fits ``spec``: evict placeholders on one if that makes it fit (then
        it is the only node offered), else keep ``nodes`` (booting or off ones)."""
        node, k = self.ph.room(spec, self.snap, self.on & (self.boot_done <= self.now))
        if node < 0:
            return nodes
        for _ in self.ph.evict(node, k):
            self._free(self.ph.spec, node, ())
        assert self.snap.pod_count is not None
        if self.snap.pod_count[node] == 0:  # the pod may yet fail (a gang rolled back)
            self.empty_since[node] = self.now
        return np.array([node], dtype=np.int64)

    def _place_placeholders(self) -> None:
        """The pending placeholders, by the default scheduler's rule (:mod:`overprovision`)."""
        for i in self.ph.pending():
            node = self.ph.target(self.snap, self.on, self.boot_done, self.now)
            if node < 0:
                return
            self._alloc(self.ph.spec, node, ())
            booted = not self.on[node]
            if booted:
                self.on[node] = True
                self.boot_done[node] = self.now + self.cfg.startup.node_boot_s
            self.empty_since[node] = np.inf
            self.ph.bind(i, node, booted)

    def _bind(self, p: int) -> None:
        node, spec, st = int(self.pod_node[p]), self.wl.pods[p], self.cfg.startup
        self.pod_gslot[p] = self.pod_gpus[p][0] if len(self.pod_gpus[p]) == 1 else -1
        self.pod_state[p] = STARTING
        self.pod_bound_at[p] = self.now
        if np.isnan(self.pod_bind[p]):
            self.pod_bind[p] = self.now
        if not self.on[node]:
            self.on[node] = True
            self.boot_done[node] = self.now + st.node_boot_s
        self.empty_since[node] = np.inf
        t = max(self.now, self.boot_done[node])
        img = spec.image
        if img >= 0:
            ready = self.image_ready.get((node, img))
            if ready is None:
                ready = t + st.image_mib[img] / st.pull_mib_per_s
                self.image_ready[(node, img)] = ready
                imgs = self.snap.images
                assert imgs is not None
                imgs[node] = imgs[node] | {img}
            t = max(t, ready)
        self._push(t + st.container_start_s, READY, p, int(self.pod_epoch[p]))

    def _preempt(self, pods: list[int]) -> bool:
        bound = np.flatnonzero((self.pod_node >= 0) & self.pod_reclaim)
        prio = self.pod_prio[pods[0]]
        if bound.size == 0 or not np.any(self.pod_prio[bound] < prio):
            return False
        b = preemption.Bound(node=self.pod_node[bound], cpu=self.pod_cpu[bound],
                             mem=self.pod_mem[bound], gpu_milli=self.pod_gmilli[bound],
                             gslot=self.pod_gslot[bound], prio=self.pod_prio[bound],
                             start=self.pod_bound_at[bound],
                             reclaimable=np.ones(bound.size, dtype=bool),
                             task=self.pod_kind[bound], lost_s=self._lost_s(bound),
                             elastic=self.pod_elastic[bound])
        victims = preemption.plan([self.wl.pods[p] for p in pods], self.snap, b, self.reclaimer,
                                  self._quota)
        if not victims:
            return False
        by_burst = self.wl.jobs[self.pod_job[pods[0]]].burst
        for v in bound[victims]:
            self._evict(int(v), by_burst)
        return True

    def _quota(self, spec: PodSpec) -> npt.NDArray[np.bool_]:
        """The nodes the controller lets ``spec`` use now, whether or not it fits there."""
        n = len(self.snap)
        ok = np.zeros(n, dtype=bool)
        ok[self.controller.allowed(spec, self.snap, np.arange(n, dtype=np.int64))] = True
        return ok

    def _lost_s(self, pods: np.ndarray) -> np.ndarray:
        """Per pod, the seconds of work its eviction would cost (per GPU or core it holds): a
        notebook's progress so far, an executor's in-flight tasks, and for an elastic
        training worker the restart of the workers that remain."""
        job = self.pod_job[pods]
        kind = self.pod_kind[pods]
        running = self.pod_state[pods] == RUNNING
        active = self.job_active[job]
        out = np.zeros(pods.size)
        be = (kind == BE) & active
        out[be] = self.job_work0[job[be]] - self.job_left[job[be]]
        out[(kind == BATCH) & running & active] = self.cfg.batch.evict_loss_s
        tr = (kind == TRAIN) & running & active
        if tr.any():
            run_tr = (self.pod_state == RUNNING) & (self.pod_kind == TRAIN)
            workers = np.bincount(self.pod_job[run_tr], minlength=self.job_kind.size)
            out[tr] = self.cfg.training.elastic.restart_s * (workers[job[tr]] - 1)
        return out

    def _evict(self, p: int, by_burst: bool = False) -> None:
        """Reclaim pod ``p`` (back to the queue) and book what that cost its job: a
        best-effort pod restarts from scratch; a Spark executor loses its in-flight tasks
        (``batch.evict_loss_s``); an elastic training job shrinks and restarts from its
        checkpoint (``training.elastic.restart_s``)."""
        job = self.wl.jobs[self.pod_job[p]]
        lost = float(self._lost_s(np.array([p]))[0])  # before the release changes what runs
        was_running = self.pod_state[p] == RUNNING
        self._release(p)
        measured = self.now >= self.t0
        if measured:
            self.acc.preemptions += 1
        lost_gpu = lost_core = stall = 0.0
        if job.kind == BE:  # a reclaimed notebook restarts from scratch
            lost_gpu = lost * self.pod_gmilli[p] / 1000
            self.job_active[job.id] = False
            self.job_left[job.id] = job.stage_work[0]
        elif job.kind == BATCH:
            self.job_left[job.id] += lost
            lost_core = lost * self.pod_cpu[p] / 1000.0
        elif job.kind == TRAIN and was_running and self.job_active[job.id]:
            self._resize(job.id, grow=False)
            stall = lost
        if self.v3 and measured:
            for key in ("all", "burst") if by_burst else ("all",):
                self.reclaim[key].add(KIND_NAMES[job.kind], job.id, lost_gpu, lost_core, stall)
        self._submit([p], False)
