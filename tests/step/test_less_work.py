"""Doing less work for the same numbers: the sampler's own savings and the opt-in training forwards.

rollout.decode prefills each distinct prompt once and lets a row that emitted EOS leave the decode batch; it must
give the greedy completions and log mu of a plain decode that does neither (reference_decode below), and log mu
must be the training forward's log pi of the sampled tokens (w = 1 on a fresh batch). Its sampled distribution is
checked against exact enumeration in tests/step/test_trainer_parts.py.

The opt-in routes of the training forward, the packed forward (scale.packed: pack / packed_policy_logprobs,
--packed-forward), the shared-prompt forward (scale.shared_prompts: pack_shared / shared_prompt_policy_logprobs,
--shared-prompts) and chunked log-probs (scale.logprobs, --logprob-chunk-mb), must give the padded forward's
(rollout.policy_logprobs) log-probs, entropies, MoE load-balancing loss and gradients.
"""

import os

import pytest
import torch
import torch.nn.functional as F

os.environ.setdefault("HF_HUB_OFFLINE", "1")
torch.set_num_threads(1)

from nano_respo.models import load_model  # noqa: E402
from nano_respo.rollout import RolloutBatch, decode, policy_logprobs, real_positions  # noqa: E402
from nano_respo.scale.logprobs import chunked_policy_logprobs  # noqa: E402
from nano_respo.scale.packed import pack, packed_policy_logprobs  # noqa: E402
from nano_respo.scale.shared_prompts import pack_shared, shared_prompt_policy_logprobs  # noqa: E402
from test_trainer_parts import ScriptedModel, tiny_vocabulary_model  # noqa: E402

pytestmark = pytest.mark.usefixtures("model_cache")

# route: (padded, packed), as train.routes_of pairs them.
ROUTES = {"plain": (policy_logprobs, packed_policy_logprobs),
          "chunked": tuple(lambda *a, packed=packed, **k: chunked_policy_logprobs(*a, chunk_mb=1e-3, packed=packed, **k)
                           for packed in (False, True))}


def ragged_batch(vocab: int, prompt_lengths: list[int], completion_lengths: list[int], seed: int = 0):
    """Random tokens, left-padded prompts and right-padded completions of the given lengths (pad id 0)."""
    n, prompt, completion = len(prompt_lengths), max(prompt_lengths), max(completion_lengths)
    ids = torch.randint(3, vocab, (n, prompt + completion), generator=torch.Generator().manual_seed(seed))
    in_prompt = torch.arange(prompt) >= prompt - torch.tensor(prompt_lengths)[:, None]  # [B, P]
    completion_mask = torch.arange(completion) < torch.tensor(completion_lengths)[:, None]  # [B, C]
    attention_mask = torch.cat([in_prompt, completion_mask], 1).long()
    return RolloutBatch(torch.where(attention_mask.bool(), ids, 0), attention_mask, completion_mask,
                        torch.zeros(completion_mask.shape), torch.zeros(n), torch.zeros(n))


def assert_same_numbers(net, batch, routes, temperature):
    """Both routes' log-probs, entropies, MoE load-balancing loss and gradients agree within float32 noise; the
    second route gives 0 outside the completion mask."""
    mask = batch.completion_mask
    mix = torch.randn(mask.shape) * mask  # [B, C] any loss through the log-probs
    results = []
    for logprobs in routes:
        logp, entropy, aux_loss = logprobs(net, batch, temperature, with_entropy=True)
        grads = torch.autograd.grad((logp * mix).sum() + (aux_loss if aux_loss is not None else 0),
                                    list(net.parameters()), allow_unused=True)
        results.append((logp, entropy, aux_loss, grads))
    (logp, entropy, aux_loss, grads), (logp_other, entropy_other, aux_other, grads_other) = results
    torch.testing.assert_close(logp_other[mask], logp[mask], rtol=0, atol=1e-5)
    torch.testing.assert_close(entropy_other[mask], entropy[mask], rtol=0, atol=1e-5)
    assert (logp_other[~mask] == 0).all() and (entropy_other[~mask] == 0).all()
    if hasattr(net.config, "output_router_logits"):  # the padded forward's masked average over real tokens
        torch.testing.assert_close(aux_other, aux_loss, rtol=1e-5, atol=1e-6)
    else:
        assert aux_loss is None and aux_other is None
    for (name, _), a, b in zip(net.named_parameters(), grads_other, grads):
        assert (a is None) == (b is None), name
        if a is not None:
            torch.testing.assert_close(a, b, rtol=1e-4, atol=2e-5, msg=name)


@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize("temperature", [1.0, 0.7])
@pytest.mark.parametrize("model_name", ["tiny-qwen3", "tiny-qwen3-moe"])
def test_packed_forward_equals_the_padded_one_with_gradients(model_name, temperature, route):
    torch.manual_seed(0)
    net, _ = load_model(model_name)
    batch = ragged_batch(net.config.vocab_size, [3, 9, 5, 2, 7, 4], [2, 1, 4, 11, 2, 1])  # 5 ... 13 tokens
    packing = pack(batch)
    # Rows as long as the longest sequence, one of them holding two (else the block-diagonal mask goes untested).
    assert packing.input_ids.shape == (5, 13)
    assert packing.real.sum() == batch.attention_mask.sum()
    assert_same_numbers(net, batch, ROUTES[route], temperature)


def test_packed_forward_refuses_a_transformers_that_reads_logits_to_keep_as_positions(monkeypatch):
    """Before 5.22 a [R, L] boolean logits_to_keep indexes positions (an IndexError deep in the model): refused in
    one line that names the version and the flag."""
    import transformers.modeling_utils

    net, _ = load_model("tiny-qwen3")
    batch = ragged_batch(net.config.vocab_size, [3, 5], [2, 4])
    monkeypatch.delattr(transformers.modeling_utils, "slice_logits_to_keep")
    with pytest.raises(RuntimeError, match=r"--packed-forward needs transformers >= 5\.22"):
        packed_policy_logprobs(net, batch, 1.0)


def grouped_batch(vocab, prompt_lengths, completion_lengths, seed=0):
    """Groups of one prompt each (its completions' lengths listed), rows shuffled: a rollout batch's layout."""
    batch = ragged_batch(vocab, [p for p, cs in zip(prompt_lengths, completion_lengths) for _ in cs],
                         [c for cs in completion_lengths for c in cs], seed)
    width = batch.input_ids.shape[1] - batch.completion_mask.shape[1]
    first = torch.tensor([i for i, cs in enumerate(completion_lengths) for _ in cs])  # [B] each row's group
    leaders = torch.tensor([0] + list(torch.tensor(list(map(len, completion_lengths))).cumsum(0)[:-1]))
    batch.input_ids[:, :width] = batch.input_ids[leaders[first], :width]  # every row of a group: one prompt
    order = torch.randperm(len(first), generator=torch.Generator().manual_seed(seed))
    return batch.select(order)


@pytest.mark.parametrize("attention", ["sdpa", "eager"])  # a boolean mask for one, an additive one for the other
@pytest.mark.parametrize("temperature", [1.0, 0.7])
@pytest.mark.parametrize("model_name", ["tiny-qwen3", "tiny-qwen3-moe"])
def test_shared_prompt_forward_equals_the_padded_one_with_gradients(model_name, temperature, attention):
    """Each distinct prompt computed once, its completions attending to it: the padded forward's numbers."""
    torch.manual_seed(0)
    net, _ = load_model(model_name)
    net.set_attn_implementation(attention)
    batch = grouped_batch(net.config.vocab_size, [3, 9, 5], [[2, 1, 4], [11, 2], [1, 5, 3, 2]])
    packing = pack_shared(batch)
    assert packing.input_ids.shape == (3, 22)  # a row per prompt: 9 + 13 tokens the longest
    assert packing.counts.sum() == batch.attention_mask.sum()  # each token weighted as often as the batch holds it
    assert_same_numbers(net, batch, (policy_logprobs, shared_prompt_policy_logprobs), temperature)


def test_a_shared_row_read_causally_would_differ():
    """The equality above can fail: the same row with every token seeing all before it (a completion seeing the
    group's earlier completions) gives other log-probs."""
    torch.manual_seed(0)
    net, _ = load_model("tiny-qwen3")
    packing = pack_shared(grouped_batch(net.config.vocab_size, [3, 9, 5], [[2, 1, 4], [11, 2], [1, 5, 3, 2]]))
    causal = torch.ones(packing.attention.shape[-2:], dtype=torch.bool).tril().expand_as(packing.attention)
    with torch.no_grad():
        logits = [net(input_ids=packing.input_ids, position_ids=packing.position_ids,
                      attention_mask=torch.zeros(seen.shape).masked_fill(~seen, torch.finfo(torch.float32).min)).logits
                  for seen in (packing.attention, causal)]
    assert (logits[0] - logits[1])[packing.predicting].abs().max() > 1e-2


def test_the_shared_prompt_forward_is_a_route_of_its_own():
    from nano_respo.routes import RouteConfig
    for other in ({"packed_forward": True}, {"logprob_chunk_mb": 16}, {"fsdp": True}):
        with pytest.raises(ValueError, match="shared_prompts: a route of its own"):
            RouteConfig(shared_prompts=True, **other)


def test_packing_without_restarting_positions_would_differ():
    """The equality above can fail: the same packed rows read as one long sequence give other log-probs."""
    torch.manual_seed(0)
    net, _ = load_model("tiny-qwen3")
    batch = ragged_batch(net.config.vocab_size, [3, 9, 5, 2, 7, 4], [2, 1, 4, 11, 2, 1])
    packing = pack(batch)
    positions = torch.arange(packing.input_ids.shape[1]).expand_as(packing.input_ids)  # one sequence per row
    with torch.no_grad():
        joined = net(input_ids=packing.input_ids, position_ids=positions).logits
        separate = net(input_ids=packing.input_ids, position_ids=packing.position_ids).logits
    assert (joined - separate)[packing.predicting].abs().max() > 1e-2


@torch.no_grad()
def reference_decode(model, input_ids, attention_mask, max_new_tokens, temperature, greedy, eos_ids, pad_id):
    """The plain form decode is held to: every row prefilled with its own prompt, every row decoded to the end
    (padding after its EOS), none dropped; no KV cache, one full forward over the whole sequence per token.
    (tokens, log mu, in_response [n, c], ended [n]), log mu 0 outside the response, as decode returns them."""
    eos = torch.tensor(eos_ids)
    finished = torch.zeros(len(input_ids), dtype=torch.bool)  # [n]
    tokens, logps, in_response = [], [], []
    for _ in range(max_new_tokens):
        logits = model(input_ids=input_ids, attention_mask=attention_mask,
                       position_ids=real_positions(attention_mask)).logits[:, -1]  # [n, V]
        logp = torch.log_softmax(logits.float() / temperature, -1)
        token = logp.argmax(-1) if greedy else torch.multinomial(logp.exp(), 1).squeeze(-1)  # [n]
        token = torch.where(finished, pad_id, token)
        tokens.append(token)
        in_response.append(~finished)  # up to and including the first EOS
        logps.append(torch.where(finished, 0.0, logp.gather(-1, token[:, None]).squeeze(-1)))
        finished = finished | torch.isin(token, eos)
        if finished.all():
            break
        input_ids = torch.cat([input_ids, token[:, None]], 1)
        attention_mask = F.pad(attention_mask, (0, 1), value=1)
    return torch.stack(tokens, 1), torch.stack(logps, 1), torch.stack(in_response, 1), finished


def groups_of_prompts(repeats: int):
    """Left-padded prompts of several lengths, each repeated as a group is ([6 x repeats, P], its mask)."""
    prompts = [[2, 3, 4], [5, 2], [4, 4, 3, 2, 5], [3], [5, 5, 4], [2, 2, 2, 3]]
    width = max(map(len, prompts))
    input_ids = torch.tensor([[0] * (width - len(p)) + p for p in prompts]).repeat_interleave(repeats, 0)
    return input_ids, (input_ids != 0).long()


@pytest.mark.parametrize("family", ["dense", "moe"])
def test_decode_gives_the_plain_decodes_greedy_completions_and_log_mu(family):
    """Shared prefill and dropped rows change no row's tokens or log mu (greedy: no random draws to differ)."""
    model = tiny_vocabulary_model(family, sharpness=3.0)
    input_ids, attention_mask = groups_of_prompts(3)  # [18, P]
    outputs = [decoder(model, input_ids, attention_mask, 8, 0.8, greedy=True, eos_ids=[1], pad_id=0)
               for decoder in (reference_decode, decode)]
    (tokens, logps, in_response, ended), (tokens_ours, logps_ours, in_response_ours, ended_ours) = outputs
    lengths = in_response.sum(-1)
    assert ended.any() and not ended.all() and len(set(lengths.tolist())) > 2  # rows leave at different steps
    assert torch.equal(tokens_ours, tokens) and torch.equal(in_response_ours, in_response)
    assert torch.equal(ended_ours, ended)
    torch.testing.assert_close(logps_ours, logps, rtol=0, atol=1e-5)
    assert (logps_ours[~in_response_ours] == 0).all()


@pytest.mark.parametrize("family", ["dense", "moe"])
def test_decodes_log_mu_is_the_training_forwards_log_pi_of_the_sampled_tokens(family):
    """w = 1 on a fresh batch: each sampled row's recorded log mu is what policy_logprobs computes for it, though
    the sampler computed it on a shared prefill and a batch that shrank as rows ended."""
    model = tiny_vocabulary_model(family, sharpness=3.0)
    input_ids, attention_mask = groups_of_prompts(4)  # [24, P]
    torch.manual_seed(0)
    tokens, logps, in_response, ended = decode(model, input_ids, attention_mask, 8, 0.7, greedy=False, eos_ids=[1],
                                               pad_id=0)
    assert ended.any() and len(set(in_response.sum(-1).tolist())) > 2
    batch = RolloutBatch(torch.cat([input_ids, tokens], 1), torch.cat([attention_mask, in_response.long()], 1),
                         in_response, logps, torch.zeros(len(tokens)), torch.zeros(len(tokens)))
    with torch.no_grad():
        logp, _, _ = policy_logprobs(model, batch, 0.7)
    torch.testing.assert_close(logp[in_response], logps[in_response], rtol=0, atol=1e-5)
    with torch.no_grad():  # the test can fail: the training forward at another temperature disagrees
        other, _, _ = policy_logprobs(model, batch, 1.0)
    assert (other - logps)[in_response].abs().max() > 1e-2


def test_decode_prefills_each_distinct_prompt_once_and_drops_finished_rows():
    """The work decode saves, counted: the prefill sees 2 distinct prompts of 5 rows, and once the first prompt's
    3 rows have emitted EOS the forwards carry the other 2 alone."""
    sizes = []
    model = ScriptedModel([[5, 2], [5, 5, 5, 5, 5]], calls=sizes)  # row i of the script: prompt [i, i]'s tokens
    prompt = torch.tensor([[0, 0]] * 3 + [[1, 1]] * 2)
    tokens, _, in_response, ended = decode(model, prompt, torch.ones_like(prompt), 5, 1.0, greedy=True, eos_ids=[2],
                                           pad_id=0)
    assert sizes == [2, 5, 2, 2, 2]
    assert tokens.tolist() == [[5, 2, 0, 0, 0]] * 3 + [[5, 5, 5, 5, 5]] * 2
    assert in_response.sum(-1).tolist() == [2, 2, 2, 5, 5] and ended.tolist() == [True] * 3 + [False] * 2
