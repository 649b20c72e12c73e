"""The cluster simulator: a tested library (scheduling cycle, openb/FGD protocol, scenarios)."""
