"""The feature schema: 128 named columns, the manifest hash, the generated docs table."""

from __future__ import annotations

from pathlib import Path

import pytest

from dsan import features
from dsan.features import schema as featureschema
from dsan.features.schema import (
    FEATURE_NAMES,
    FEATURES,
    N_FEATURES,
    NODE_FEATURES,
    markdown,
    schema_hash,
)


def test_schema_has_128_unique_named_features_in_four_tiers() -> None:
    assert len(FEATURES) == N_FEATURES == 128
    assert len(set(FEATURE_NAMES)) == 128
    assert {f.tier for f in FEATURES} == {"base", "monitoring", "business", "derived"}
    assert all(f.unit and f.norm for f in FEATURES)
    assert tuple(range(len(NODE_FEATURES))) == NODE_FEATURES  # node block comes first
    assert len(schema_hash()) == 16


def test_schema_hash_changes_with_any_column_change(monkeypatch: pytest.MonkeyPatch) -> None:
    before = schema_hash()
    first = FEATURES[0]
    renamed = featureschema.FeatureSpec("renamed", first.tier, first.unit, first.norm)
    monkeypatch.setattr(featureschema, "FEATURES", (renamed, *FEATURES[1:]))
    assert schema_hash() != before


def test_features_reexports_the_one_schema() -> None:
    assert features.FEATURES is featureschema.FEATURES
    assert features.schema_hash is featureschema.schema_hash


def test_docs_features_md_is_generated_from_the_schema() -> None:
    doc = Path(__file__).resolve().parents[3] / "docs" / "features.md"
    assert doc.read_text() == markdown(), (
        "regenerate: python -m dsan.features.schema > docs/features.md"
    )
