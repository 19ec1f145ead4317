"""Stateful operators by positive evidence: the kinds the operator zoo verified move, any other is refused by name."""

from pathlib import Path

from dagster_reconf.core.reconfig.operators import OPERATOR_KINDS, operator_kind, operator_problems, operator_table
from dagster_reconf.core.store.checkpoint import OperatorMetadata

README = Path(__file__).resolve().parents[3] / "README.md"


def test_every_kind_the_zoo_covers_moves_by_every_strategy():
    operators = [OperatorMetadata(str(i), kind.spark_names[0]) for i, kind in enumerate(OPERATOR_KINDS)]
    for strategy in ("native", "replay", "precopy"):
        assert operator_problems(operators, strategy) == []
    assert operator_kind("transformWithStateInPandasExec").label.startswith("transformWithStateInPandas")


def test_an_operator_nobody_verified_is_refused_with_its_id_and_name():
    (problem,) = operator_problems([OperatorMetadata("1", "flatMapGroupsWithState")], "native")
    assert problem.startswith("stateful operator 1 (flatMapGroupsWithState) is not one whose state migration")
    assert "starting a new stream" in problem


def test_the_readme_table_is_the_generated_one():
    assert operator_table() in README.read_text(), "regenerate the README's table from operator_table()"
