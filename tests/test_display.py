"""What a notebook shows: short reprs and compact HTML tables with units, numbers from the objects."""

from __future__ import annotations

import pandas as pd
import pytest

import prfaas_plan as pp


@pytest.fixture(scope="module")
def case_study():
    return pp.plan(pp.load_scenario("paper-case-study"))


def test_model_spec_repr_is_one_short_line_with_its_cache_bytes():
    m = pp.load_model("mimo-v2-flash")
    text = repr(m)
    assert "\n" not in text and len(text) < 200
    assert f"{m.kv_bytes_per_token():,} B/token" in text and f"{m.fixed_state_bytes():,} B/request" in text
    page = m._repr_html_()
    assert "<th>unit</th>" in page and f"{m.kv_bytes_per_token():,}" in page
    # the layer mix adds up to the layer count
    assert f"{m.layers.count} (" in page and sum(m.layer_counts().values()) == m.layers.count


def test_instance_repr_names_gpus_memory_and_price():
    inst = pp.instance("h200", gpus=8)
    assert repr(inst) == (f"Instance(8xh200: {8 * inst.gpu.bf16_dense_tflops / 1e3:,.1f} PFLOP/s bf16, "
                          f"{8 * inst.gpu.memory_gib:,.0f} GiB, ${8 * inst.gpu.price_usd_per_gpu_hour:,.2f}/h)")
    assert "GiB" in inst._repr_html_() and "$/hour" in inst._repr_html_()


def test_plan_result_repr_is_short_and_html_is_a_table_of_the_plans(case_study):
    res = case_study
    text = repr(res)
    assert len(text) < 400 and "\n" not in text
    assert f"{res.lambda_max_rps:.3f} req/s" in text and f"{res.ratio('homogeneous-pd'):.2f}x" in text
    page = res._repr_html_()
    assert len(page) < 5000
    header, rows = _table(page)
    assert [r[0] for r in rows] == list(res.plans)
    assert "Λ_max (req/s)" in header and "t (tokens)" in header
    cell = {r[0]: dict(zip(header, r)) for r in rows}
    assert cell["prfaas-pd"]["Λ_max (req/s)"] == f"{res.lambda_max_rps:.4g}"
    # naive heterogeneous offloads everything: its t is 0, not the shortest bucket's length
    assert res.baselines["naive-heterogeneous"].routing_kind == "all"
    assert cell["naive-heterogeneous"]["t (tokens)"] == "0"


def _table(page: str) -> tuple[list[str], list[list[str]]]:
    """Header cells and body rows of the one table in ``page`` (stdlib parser, unescaped text)."""
    from html.parser import HTMLParser

    class P(HTMLParser):
        def __init__(self):
            super().__init__()
            self.header, self.rows, self.cell = [], [], None

        def handle_starttag(self, tag, attrs):
            if tag == "tr":
                self.rows.append([])
            if tag in ("td", "th"):
                self.cell = ""

        def handle_data(self, data):
            if self.cell is not None:
                self.cell += data

        def handle_endtag(self, tag):
            if tag in ("td", "th"):
                self.rows[-1].append(self.cell.strip())
                self.cell = None

    p = P()
    p.feed(page)
    return p.rows[0], p.rows[1:]


def test_plan_frame_keeps_counts_integer(case_study):
    df = case_study.to_frame()
    for col in ("n_prfaas", "n_pd_p", "n_pd_d"):
        assert pd.api.types.is_integer_dtype(df[col]), col


def test_sim_result_repr_and_summary_frame_keep_counts_integer(case_study):
    sim = pp.simulate(case_study.scenario, case_study, duration_s=120, seed=1)
    s = sim.summary()
    text = repr(sim)
    assert len(text) < 200 and f"{s['requests']:,} requests" in text and f"{s['ttft_p90_s']:.3f} s" in text
    frame = sim.summary_frame().set_index("metric")["value"]
    assert type(frame["requests"]) is int and frame["requests"] == len(sim.requests)
    assert type(frame["remote_queue_max"]) is int and frame["ttft_p90_s"] == s["ttft_p90_s"]
    assert "<th>unit</th>" in sim._repr_html_() and "Gbps" in sim._repr_html_()
