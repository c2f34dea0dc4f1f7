"""fedlam.experiments._common.JsonResult: the mixin refuses classes that are not dataclasses."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from fedlam.experiments._common import JsonResult


def test_to_dict_of_a_dataclass() -> None:
    @dataclasses.dataclass
    class R(JsonResult):
        a: np.ndarray
        b: float

    assert R(np.arange(3), float("nan")).to_dict() == {"a": [0, 1, 2], "b": None}


def test_to_dict_refuses_a_plain_class() -> None:
    class NotADataclass(JsonResult):
        pass

    with pytest.raises(TypeError, match="NotADataclass is not one"):
        NotADataclass().to_dict()
