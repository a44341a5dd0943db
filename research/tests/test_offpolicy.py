"""research/offpolicy.py: what one run of each source records, and that records are never overwritten unasked."""

import json
import math

import pytest
import torch

from nano_respo.rollout import RolloutBatch
from research.cli import parse_config

from research import offpolicy


def config(tmp_path, *argv):
    return parse_config(offpolicy.OffPolicyConfig, ["--models", "tiny-qwen3", "--seeds", "0", "--iterations", "2",
                                                    "--prompts-per-iteration", "4", "--sft-steps", "20",
                                                    "--out", str(tmp_path), "--setting", "test", *argv])


@pytest.fixture(scope="module")
def records(model_cache, tmp_path_factory):
    out = tmp_path_factory.mktemp("offpolicy")
    offpolicy.main(["--models", "tiny-qwen3", "--seeds", "0", "--iterations", "2", "--prompts-per-iteration", "4",
                    "--sft-steps", "20", "--out", str(out), "--setting", "test", "--arms", "respo_wtilt"])
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


def synthetic_batch(seed, pi_old_shift=None):
    """A mini-batch as the loss sees it: mu, optionally pi_old, advantages of both signs, ragged masks."""
    gen = torch.Generator().manual_seed(seed)
    mu = -torch.rand(16, 12, generator=gen) * 2  # [B, T]
    mask = torch.arange(12)[None] < torch.randint(3, 13, (16, 1), generator=gen)
    adv = torch.tensor([1.0, -1.0] * 8)
    pi_old = None if pi_old_shift is None else mu + pi_old_shift * torch.randn(16, 12, generator=gen)
    return RolloutBatch(torch.zeros(16, 1), torch.ones(16, 1), mask, mu, torch.zeros(16), adv, pi_old)


def test_what_the_arms_give_follows_their_definitions():
    """Reuse alone (no pi_old: pi_old = mu): every correction is GRPO itself. Staleness at R = 1 (pi = pi_old):
    TRL's sequence-masked IS gives each fallen positive rho = w, as the sequence clip does;
    the off-policy mask never touches a positive."""
    reuse = offpolicy.StepReader(max_new_tokens=12)
    batch = synthetic_batch(0)
    reuse.read(batch, batch.old_logp + 0.3 * torch.randn(16, 12, generator=torch.Generator().manual_seed(1)))
    for arm in ("grpo_trl_seq_mask", "grpo_verl_token_trunc"):
        assert torch.equal(reuse.phi[arm][0], reuse.phi["grpo"][0])
    stale = offpolicy.StepReader(max_new_tokens=12)
    batch = synthetic_batch(2, pi_old_shift=0.2)
    stale.read(batch, batch.pi_old_logp)
    log_w = stale.rows["log_w"][0]
    positive = stale.rows["adv"][0] > 0
    fallen = positive & (log_w < 0)  # below 1: what the sequence clip passes as w (it zeroes w > 1.2)
    assert (log_w[positive] < math.log(0.8)).any()  # some positives are starved here
    assert torch.allclose(stale.phi["grpo_trl_seq_mask"][0][fallen], stale.phi["seq_clip"][0][fallen], rtol=1e-5)
    assert torch.allclose(stale.phi["grpo_trl_seq_mask"][0][fallen], log_w[fallen].exp(), rtol=1e-5)
    assert torch.equal(stale.phi["grpo_opsm"][0][positive], stale.phi["grpo"][0][positive])
    summary = stale.summary()
    assert summary["arms"]["respo_wtilt"]["phi_low_w_pos"] > 1 > 0.8 > summary["arms"]["seq_clip"]["phi_low_w_pos"]


def test_existing_records_are_kept_unless_overwrite(records, capsys):
    out, by_source = records
    path = out / "test" / "tiny-qwen3" / "mismatch" / "respo_wtilt-seed0.json"
    path.write_text(json.dumps({**by_source["mismatch"], "marker": 1}))
    offpolicy.run_grid(config(out, "--arms", "respo_wtilt", "--sources", "mismatch"))
    assert "1 of 1 records exist (kept); running 0" in capsys.readouterr().out
    assert json.loads(path.read_text())["marker"] == 1
    offpolicy.run_grid(config(out, "--arms", "respo_wtilt", "--sources", "mismatch", "--overwrite"))
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


def test_the_reading_applies_each_arms_coefficient_as_the_loss_does():
    """applied_coefficients writes out policy_loss's branches: its phi gives the loss's gradient for every arm."""
    from dataclasses import replace

    from nano_respo.kernel import aggregate, policy_loss

    g = torch.Generator().manual_seed(0)
    mask = torch.rand(12, 7, generator=g) < 0.8
    mu = -torch.rand(12, 7, generator=g) * 2
    pi_old = mu + 0.4 * torch.randn(12, 7, generator=g)
    adv = torch.randn(12, generator=g)
    for arm, loss in offpolicy.ARMS.items():
        loss = replace(loss, norm_len=loss.norm_len or 7)
        logp = (pi_old + 0.3 * torch.randn(12, 7, generator=g)).requires_grad_()
        (got,) = torch.autograd.grad(policy_loss(logp, mu, adv, mask, loss, pi_old_logp=pi_old)[0], logp)
        phi = offpolicy.applied_coefficients(logp.detach(), mu, adv, mask, loss, pi_old)
        reference = aggregate(-(phi * adv[:, None]) * logp, mask, loss.agg, loss.norm_len)
        (expected,) = torch.autograd.grad(reference, logp)
        assert expected.abs().sum() > 0, arm
        torch.testing.assert_close(got, expected, msg=arm)
