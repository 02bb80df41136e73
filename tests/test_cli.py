"""The command line as a user meets it: readable tables, one-line errors with exit code 2."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest


def run(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "prfaas_plan.cli", *args], capture_output=True, text=True, cwd=cwd)


def test_kv_table_for_the_flagship_pair():
    r = run("kv", "mimo-v2-flash", "minimax-m2.5", "--context", "32K")
    assert r.returncode == 0, r.stderr
    assert "mimo-v2-flash" in r.stdout and "minimax-m2.5" in r.stdout
    assert "253,952" in r.stdout and "23,040" in r.stdout  # bytes per token from the public configs


def test_kv_json_is_machine_readable():
    r = run("kv", "deepseek-v3", "--context", "32k", "--format", "json")
    rows = json.loads(r.stdout)
    assert rows[0]["kv_bytes_per_token"] == 61 * (512 + 64) * 2
    assert rows[0]["request_bytes"] == 61 * (512 + 64) * 2 * 32768


@pytest.mark.parametrize("args, needle", [
    (("kv", "minimax-m2.6"), "did you mean 'minimax-m2.5'"),
    (("kv", "minimax-m2.5", "--context", "-5"), "--context"),
    (("kv", "minimax-m2.5", "--context", "1M"), "exceeds"),
    (("bandwidth", "minimax-m2.5", "--gpus", "0"), "--gpus"),
    (("bandwidth", "minimax-m2.5", "--hardware", "h2000"), "unknown hardware"),
    (("plan", "no-such-scenario"), "unknown scenario"),
    (("kv", "minimax-m2.5", "--engine", "foo"), "--engine"),  # click's usage errors, one line too
    (("plan", "paper-case-study", "--mode", "fast"), "--mode"),
    (("kv", "minimax-m2.5", "--bogus"), "--bogus"),
])
def test_bad_input_is_one_line_exit_2(args, needle):
    r = run(*args)
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0], r.stderr
    assert "Traceback" not in r.stderr


def test_malformed_model_yaml(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("id: x\nname: [unclosed\n")
    r = run("kv", str(bad))
    assert r.returncode == 2 and "malformed YAML" in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_unsupported_hf_family(tmp_path):
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({"model_type": "gpt2", "n_layer": 12}))
    r = run("kv", str(cfg))
    assert r.returncode == 2 and "gpt2" in r.stderr and "llama" in r.stderr


def test_plan_writes_json_and_never_a_partial_file(tmp_path):
    out = tmp_path / "plan.json"
    r = run("plan", "paper-case-study", "--mode", "paper", "--out", str(out))
    assert r.returncode == 0, r.stderr
    doc = json.loads(out.read_text())
    assert doc["plans"][0]["plan"] == "prfaas-pd" and doc["plans"][0]["lambda_max_rps"] > 0
    bad = run("plan", "paper-case-study", "--out", str(tmp_path / "missing" / "plan.json"))
    assert bad.returncode == 2 and not (tmp_path / "missing").exists()
    assert [p.name for p in tmp_path.iterdir()] == ["plan.json"]


def test_impossible_scenario_exits_nonzero(tmp_path):
    sc = Path(__file__).resolve().parents[1] / "prfaas_plan" / "data" / "scenarios" / "paper-case-study.yaml"
    text = sc.read_text().replace("gbps: 100", "gbps: 0.1").replace("ttft_quantile: 0.9", "ttft_quantile: 0.9\n  ttft_s: 0.5")
    path = tmp_path / "impossible.yaml"
    path.write_text(text)
    r = run("plan", str(path))
    assert r.returncode == 2 and "slo.ttft_s" in r.stderr


def test_yaml_is_read_by_the_c_parser_with_the_pure_parsers_values_and_errors(tmp_path):
    # every shipped YAML file parses to the same values (types included) as PyYAML's pure-Python
    # safe loader; a document the C parser rejects reports the pure parser's message and line
    import yaml

    from prfaas_plan.data import _parse_yaml, read_yaml
    from prfaas_plan.errors import PlanError

    def same(a, b) -> bool:
        if type(a) is not type(b):
            return False
        if isinstance(a, dict):
            return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
        if isinstance(a, list):
            return len(a) == len(b) and all(map(same, a, b))
        return a == b or (a != a and b != b)  # NaN

    files = sorted((Path(__file__).resolve().parents[1] / "prfaas_plan" / "data").rglob("*.yaml"))
    assert len(files) > 30 and yaml.__with_libyaml__
    for f in files:
        text = f.read_text(encoding="utf-8")
        assert same(_parse_yaml(text), yaml.safe_load(text)), f
    bad = tmp_path / "bad.yaml"
    bad.write_text("id: x\nfields:\n  a: 1\n   b: 2\n")
    with pytest.raises(yaml.YAMLError) as pure:
        yaml.safe_load(bad.read_text())
    with pytest.raises(PlanError) as ours:
        read_yaml(bad)
    assert pure.value.problem in str(ours.value) and f"line {pure.value.problem_mark.line + 1}" in str(ours.value)


def test_profile_leaves_out_a_gpu_that_cannot_hold_the_weights():
    """GLM-5-FP8 at TP 8 needs 88.7 GiB of weights per GPU: 8xH20 (96 GB, 77.2 GiB after vLLM's
    share and reserve) is left out with its reason on stderr, 8xH200 answers; alone, H20 is an error."""
    r = run("profile", "glm-5", "--context", "8K", "-f", "json")
    assert r.returncode == 0, r.stderr
    assert [row["instance"] for row in json.loads(r.stdout)] == ["8xh200"]
    assert r.stderr.strip().splitlines() == [
        "left out: memory: glm-5's weights (88.7 GiB per GPU) do not fit 8xh20 (77.2 GiB per GPU after the "
        "engine's reserve); use more GPUs per instance"]
    r = run("profile", "glm-5", "--hardware", "h20")
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "do not fit 8xh20" in r.stderr


TRACE = Path(__file__).parent / "fixtures" / "traces" / "mooncake_conversation_rows4183-4212.jsonl"


@pytest.mark.parametrize("args, message", [
    (("--link-drop", "100:20@0-10", "--link-trace", "{tmp}/link.csv"), "--link-drop/--link-trace: give one of them, not both"),
    (("--duration", "-5"), "--duration: give a positive number of seconds"),
    (("--load", "0"), "--load: 0.0 is not a positive, finite number of times Lambda_max"),
    (("--trace", str(TRACE), "--load", "0.5"), "--load: a trace brings its own arrivals; scale them with --rate-scale"),
    (("--prefix-cache-blocks", "4"), "--prefix-cache-blocks: only with --trace, and at least 0"),
    (("--trace", str(TRACE), "--prefix-cache-blocks", "-1"), "--prefix-cache-blocks: only with --trace, and at least 0"),
    (("--out", "{tmp}/file"), "--out: {tmp}/file is a file; give a folder (it is created if missing)"),
    (("--link-drop", "100:20@700-800"), "--link-drop: the window 700-800 s starts after the 600 s of simulated arrivals; "
                                        "give --duration above 800 or an earlier window"),
])
def test_simulate_refuses_bad_flags_before_it_plans(args, message, tmp_path, capsys, monkeypatch):
    """Each of these is refused by its flag in one line, exit 2, before the seconds of planning."""
    import prfaas_plan.planner
    from prfaas_plan.cli import main

    (tmp_path / "file").write_text("x")
    monkeypatch.setattr(prfaas_plan.planner, "plan", lambda *a, **k: pytest.fail("planned before refusing the flags"))
    with pytest.raises(SystemExit) as exc:
        main(["simulate", "paper-case-study", *(a.replace("{tmp}", str(tmp_path)) for a in args)])
    assert exc.value.code == 2
    assert capsys.readouterr().err.strip().splitlines() == ["prfaas-plan: error: " + message.replace("{tmp}", str(tmp_path))]


def test_simulate_table_names_the_scenario_the_run_and_the_plan_above_the_figures():
    import prfaas_plan as pp

    r = run("simulate", "paper-case-study", "--duration", "60", "--seed", "3")
    assert r.returncode == 0, r.stderr
    assert "wrote" not in r.stderr  # no --out, no files
    sc = pp.load_scenario("paper-case-study")
    res = pp.plan(sc)
    head, run_line, *table = r.stdout.splitlines()
    assert head == sc.spec.name and run_line.startswith("fixed policy, 60 s of arrivals, seed 3; plan: ")
    assert run_line.endswith(f"PrfaaS {res.instances['prfaas']} + PD-P {res.instances['pd_p']} + PD-D "
                             f"{res.instances['pd_d']}, Lambda_max = {res.lambda_max_rps:.3f} req/s")
    assert "Simulation summary" in table[0] and any("ttft_p90_s" in line for line in table)


def test_size_names_each_infeasible_candidate_and_why_on_stderr():
    """Under a 4 s P90 TTFT SLO at 1.5 req/s the H20-only candidates cannot serve (H20 prefill of the
    longest prompts alone takes longer): each is named on stderr with the sizing's own reason."""
    from dataclasses import replace

    import prfaas_plan as pp
    from prfaas_plan.sizing import SizingSLO, size

    sc = pp.load_scenario("paper-case-study")
    res = size(sc, 1.5, replace(SizingSLO.of_scenario(sc), ttft_s=4.0, ttft_quantile=0.9))
    infeasible = [f"{c.label}: infeasible: {c.reason}" for c in res.candidates if not c.feasible]
    assert infeasible and res.winner.feasible
    r = run("size", "paper-case-study", "--target-rps", "1.5", "--ttft-p90-s", "4")
    assert r.returncode == 0, r.stderr
    assert r.stderr.strip().splitlines() == infeasible
    assert r.stdout.startswith(f"Cheapest for 1.5 req/s: {res.winner.label}, ${res.winner.usd_per_hour:,.2f}/hour")


def test_simulate_replays_the_trace_it_is_given_and_plans_for_it():
    """``--trace``: every request of the trace (30 rows) is simulated, on a plan made for it."""
    rows = TRACE.read_text().splitlines()
    r = run("simulate", "paper-case-study", "--trace", str(TRACE), "--format", "json")
    assert r.returncode == 0, r.stderr
    summary = json.loads(r.stdout)[0]
    assert summary["requests"] == len(rows) == 30 and summary["unfinished"] == 0


@pytest.mark.parametrize("args, message", [
    (("--executor", "ray"), "--executor: 'ray' is not an executor; use serial or dask"),
    (("--executor", "dask"), "--executor: only with --pareto N"),
])
def test_size_refuses_an_executor_it_cannot_use(args, message):
    r = run("size", "paper-case-study", "--target-rps", "1", *args)
    assert r.returncode == 2 and r.stderr.strip().splitlines() == [f"prfaas-plan: error: {message}"]
