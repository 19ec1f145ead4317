"""Inline plots: under the UI's bound on in-place markdown, a well-formed SVG whose bars are their values' share."""

import re
import xml.etree.ElementTree as ET
from urllib.parse import unquote

import numpy as np
import pandas as pd

from dagster_reconf.dagster.inline_plots import BAR_PX, INLINE_LIMIT, LABEL_PX, BarRow, inline_bars
from dagster_reconf.dagster.scaling_assets import _capacity_glance

SVG = "{http://www.w3.org/2000/svg}"


def svg_of(markdown: str) -> ET.Element:
    match = re.fullmatch(r"!\[[^\]]*\]\(data:image/svg\+xml,([^\s()]+)\)", markdown)
    assert match, "one markdown image whose destination has no space or parenthesis"
    return ET.fromstring(unquote(match.group(1)))


def bar_lengths(svg: ET.Element) -> list[list[int]]:
    return [[int(h) for h in re.findall(r"h(\d+)v", p.get("d", ""))] for p in svg.iter(f"{SVG}path") if p.get("fill")]


def test_bars_are_their_values_share_of_the_scale_and_labels_are_escaped():
    rows = [BarRow("a < b & c", (0.5, 0.25)), BarRow("x" * 40, (1.5, 0.0))]
    value = inline_bars("two rows", rows, ("#d1495b", "#8d99ae"), scale=1.0, marker=0.5)
    assert value is not None and len(value.value) < INLINE_LIMIT
    svg = svg_of(value.value)
    assert bar_lengths(svg) == [[BAR_PX // 2, BAR_PX], [BAR_PX // 4, 0]]  # per series; 1.5 clipped to the scale
    labels = [t.text for t in svg.iter(f"{SVG}text")]
    assert labels[0] == "a < b & c" and labels[1].endswith("…") and len(labels[1]) == 13
    marker = [p for p in svg.iter(f"{SVG}path") if p.get("stroke")]
    assert marker[0].get("d") == f"M{LABEL_PX + BAR_PX // 2},0V28"


def test_rows_that_would_not_fit_inline_are_left_out_from_the_end():
    rows = [BarRow(f"operator number {i}", (float(i), float(i) / 2)) for i in range(40)]
    value = inline_bars("many", rows, ("#c44e52", "#55a868"), scale=40.0)
    assert value is not None and len(value.value) < INLINE_LIMIT
    shown = [t.text for t in svg_of(value.value).iter(f"{SVG}text")]
    assert 3 <= len(shown) < 40 and shown[0] == "operator num…"
    assert inline_bars("x" * INLINE_LIMIT, rows[:1], ("#000",), scale=1.0) is None  # not even one row fits


def test_the_capacity_glance_puts_the_bottleneck_first_and_survives_an_unbounded_capacity():
    report = pd.DataFrame(
        {
            "operator": ["stage:source", "stage:aggregate", "stage:sink"],
            "capacity_now_events_per_s": [np.inf, 800.0, 5000.0],
            "capacity_planned_events_per_s": [np.inf, 2400.0, 5000.0],
        }
    )
    value = _capacity_glance(report, target=2000.0)
    svg = svg_of(value.value)
    assert [t.text for t in svg.iter(f"{SVG}text")] == ["aggregate", "sink", "source"]
    now, planned = bar_lengths(svg)
    assert now[0] < planned[0] < now[1] and now[2] == BAR_PX  # unbounded: drawn to the edge


def test_an_unknown_capacity_or_target_draws_no_bar_and_never_fails_the_plan():
    """A stage whose capacity is unknown (NaN: no tasks measured) is an empty bar, as a NaN target leaves no line."""
    report = pd.DataFrame(
        {
            "operator": ["stage:source", "stage:aggregate"],
            "capacity_now_events_per_s": [np.nan, 80.0],
            "capacity_planned_events_per_s": [np.nan, 160.0],
        }
    )
    for target in (250.0, float("nan"), 0.0):
        svg = svg_of(_capacity_glance(report, target=target).value)
        assert [t.text for t in svg.iter(f"{SVG}text")] == ["aggregate", "source"]
        now, planned = bar_lengths(svg)
        assert 0 < now[0] < planned[0] and now[1] == planned[1] == 0
        assert bool([p for p in svg.iter(f"{SVG}path") if p.get("stroke")]) is (target == 250.0)
