"""The seed scenario (issue 3): mixed AI training / Spark-like batch / web over 24 h.

``config`` (typed, versioned YAML), ``cluster`` (nodes and topology), ``workload``
(generators), ``contention``, ``preemption``, ``engine`` (discrete events, one decision per
placement; its state, scheduling pass and job progress in ``state``, ``scheduling``,
``progress``), ``metrics`` (Table 1 formulas), ``offered`` (offered load; the arrival rates
are derived from its targets), ``calibrate`` (trace-derived numbers), ``env`` (step-by-step
API for reinforcement learning), ``runner`` (one policy, one seed), ``cli``
(``dsan sim seed-table1|burst``).
"""
