"""Explanations of DSAN decisions (Shapley values over the feature names)."""
