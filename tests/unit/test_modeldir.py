"""config.json checks: the fields modeldir requires are those of the dataclasses built from them."""

from __future__ import annotations

from dataclasses import fields

from depnmt.decoding.search import SearchConfig
from depnmt.model.transformer import ModelConfig
from depnmt.storage.modeldir import MODEL_FIELDS, SEARCH_FIELDS


def test_checked_fields_are_the_dataclass_fields():
    assert set(MODEL_FIELDS) == {f.name for f in fields(ModelConfig)}
    assert set(SEARCH_FIELDS) == {f.name for f in fields(SearchConfig)}
