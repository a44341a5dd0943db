"""experiments/offpolicy.py: what one run of each source records, and that records are never overwritten unasked."""

import importlib.util
import json
import sys
from pathlib import Path

import pytest

from nano_respo.run.cli import parse_config

SPEC = importlib.util.spec_from_file_location("experiments_offpolicy",
                                              Path(__file__).parents[1] / "experiments" / "offpolicy.py")
offpolicy = sys.modules["experiments_offpolicy"] = importlib.util.module_from_spec(SPEC)  # dataclasses look it up
SPEC.loader.exec_module(offpolicy)


def config(tmp_path, *argv):
    return parse_config(offpolicy.OffPolicyConfig, ["--models", "tiny-qwen3", "--seeds", "0", "--iterations", "2",
                                                    "--prompts-per-iteration", "4", "--sft-steps", "20",
                                                    "--out", str(tmp_path), "--setting", "test", *argv])


@pytest.fixture(scope="module")
def records(model_cache, tmp_path_factory):
    out = tmp_path_factory.mktemp("offpolicy")
    offpolicy.main(["--models", "tiny-qwen3", "--seeds", "0", "--iterations", "2", "--prompts-per-iteration", "4",
                    "--sft-steps", "20", "--out", str(out), "--setting", "test", "--arms", "respo"])
    return out, {r["source"]: r for r in offpolicy.load_records(out)}


def test_each_source_moves_only_its_own_factor_of_w(records):
    """w = (pi / pi_old)(pi_old / mu): R = 1 leaves pi = pi_old at its step; an fp32 sampler at lag 0 is pi_old."""
    _, by_source = records
    assert set(by_source) == set(offpolicy.SOURCES)
    for source in ("mismatch", "staleness"):
        reading = by_source[source]["reading"]
        assert max(map(abs, reading["log_trust_quantiles"])) < 1e-5  # 0 up to the batch layout's rounding
        assert reading["log_w_quantiles"] == pytest.approx(reading["log_rho_quantiles"], abs=1e-5)
    assert by_source["reuse"]["reading"]["log_rho_quantiles"] == [0.0] * len(offpolicy.QUANTILES)
    assert max(map(abs, by_source["mismatch"]["reading"]["log_rho_quantiles"])) > 0  # bf16 is not fp32
    assert max(map(abs, by_source["reuse"]["reading"]["log_trust_quantiles"])) > 0  # the steps moved pi
    assert by_source["mismatch"]["sampler_kl"] and not by_source["reuse"]["sampler_kl"]
    for record in by_source.values():
        reading = record["reading"]
        assert sum(reading["log_w_hist"]) == reading["responses"] > 0
        assert set(reading["arms"]) == set(offpolicy.ARMS) and len(record["reward_curve"]) == 2


def test_what_the_arms_give_follows_their_definitions(records):
    """On the same responses: the decoupled corrections equal GRPO where pi_old = mu (reuse alone); the
    off-policy mask never touches positives."""
    _, by_source = records
    arms = by_source["reuse"]["reading"]["arms"]
    for key in ("phi_mean_pos", "phi_mean_neg"):
        assert arms["grpo_trl_seq_mask"][key] == pytest.approx(arms["grpo"][key])
        assert arms["grpo_verl_token_trunc"][key] == pytest.approx(arms["grpo"][key])
    for record in by_source.values():
        arms = record["reading"]["arms"]
        assert arms["grpo_opsm"]["phi_mean_pos"] == pytest.approx(arms["grpo"]["phi_mean_pos"])


def test_existing_records_are_kept_unless_overwrite(records, capsys):
    out, by_source = records
    path = out / "test" / "tiny-qwen3" / "mismatch" / "respo-seed0.json"
    path.write_text(json.dumps({**by_source["mismatch"], "marker": 1}))
    offpolicy.run_grid(config(out, "--arms", "respo", "--sources", "mismatch"))
    assert "1 of 1 records exist (kept); running 0" in capsys.readouterr().out
    assert json.loads(path.read_text())["marker"] == 1
    offpolicy.run_grid(config(out, "--arms", "respo", "--sources", "mismatch", "--overwrite"))
    assert "marker" not in json.loads(path.read_text())


def test_summarise_prints_every_table_from_the_records(records):
    out, _ = records
    text = offpolicy.summarise(out)
    for heading in ("log w per source", "which factor carries it", "positive with w < 0.8", "reward after"):
        assert heading in text
    assert text.count("| tiny-qwen3 | staleness | test |") >= 5


def test_unknown_sources_and_arms_are_refused(tmp_path):
    for flag, value in (("--sources", "drift"), ("--arms", "ppo"), ("--compare-in", "lag")):
        with pytest.raises(SystemExit):
            config(tmp_path, flag, value)
