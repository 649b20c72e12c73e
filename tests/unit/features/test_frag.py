"""FGD's GPU choice (dsan.features.frag): the batched call picks fgd_select_gpus's slots,
on the candidates of real training episodes. That fgd_select_gpus is FGD's own choice is
tests/unit/features/test_featurizer.py's and the FGD policy tests'."""

from __future__ import annotations

from dsan.features import fgd_select_gpus, fgd_select_gpus_many
from dsan.train.openb import EnvConfig, make_episode


def test_batched_fgd_gpu_choice_is_fgd_select_gpus_on_every_candidate() -> None:
    sharing = 0
    for seed in (1, 2):
        ep = make_episode(EnvConfig(n_nodes=24), seed)
        while (d := ep.decision()) is not None:
            pod, cand = d.pod, d.cand
            want = [fgd_select_gpus(pod, ep.snap, int(n), ep.target, ep.frag.access) for n in cand]
            got = fgd_select_gpus_many(
                [pod] * len(cand),
                [ep.snap] * len(cand),
                cand.tolist(),
                ep.target,
                [ep.frag.access] * len(cand),
            )
            assert got == want
            sharing += pod.is_sharing and len({g for g in want}) > 1
            ep.step(int(cand[len(cand) // 2]))
    assert sharing > 20  # many decisions where the slot depends on the node
