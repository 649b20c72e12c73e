"""The seed scenario: mixed AI training / Spark-like batch / web over 24 h (docs/scenarios.md).
``engine`` drives it one placement at a time; ``runner`` runs one policy, ``env`` serves RL."""
