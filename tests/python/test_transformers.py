"""attn_implementation="attune" in Hugging Face transformers, on CPU bf16
tensors (attune's kernels on the emulator), against "eager" in tiny models
built from configs with a fixed seed (no weights downloaded): Llama (GQA),
Mistral (sliding window), Gemma 2 (softcap, alternating windows) and
gpt-oss (sinks, alternating windows), batch 2 with left padding.

The rule is FlashAttention's: attune's error against an fp32 eager run of
the same (bf16-rounded) weights is at most twice eager bf16's own error
plus the rounding floor, for the logits at tokens in use and for one
training step's gradients; greedy generation (DynamicCache, and StaticCache
for Llama and Mistral) agrees token for token, or its first difference is a
near tie in the fp32 logits (a gap within the rule's bound). Right padding
and a decoder run bidirectionally follow eager too; the unsupported inputs
raise errors naming the argument, and patterns attune cannot serve are
refused rather than dropped."""
import copy
import logging
import os
import warnings

import pytest
import torch

if os.environ.get("ATTUNE_REQUIRE_TORCH") == "1":  # CI: tools/setup_python.sh installs it
    import transformers
else:
    transformers = pytest.importorskip("transformers", reason="transformers is not installed "
                                       "(tools/setup_python.sh installs it)")

import attune  # noqa: E402
import attune.transformers  # noqa: E402,F401  (registers "attune")
from conftest import assert_accurate, max_error, randn, rounding_floor  # noqa: E402

SEQ, PAD, NEW = 12, 4, 8  # prompt length, left padding of the second row, generated tokens
SMALL = dict(vocab_size=96, hidden_size=64, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, head_dim=32, max_position_embeddings=64, pad_token_id=0,
             initializer_range=0.2)  # scores of a few units: softmax, windows and softcap all matter
ALTERNATING = ["sliding_attention", "full_attention"]


def _configs():
    t = transformers
    return {
        "llama": t.LlamaConfig(**SMALL),
        "mistral": t.MistralConfig(**SMALL, sliding_window=5),
        "gemma2": t.Gemma2Config(**SMALL, sliding_window=5, layer_types=ALTERNATING, query_pre_attn_scalar=24,
                                 attn_logit_softcapping=2.0, final_logit_softcapping=None),
        "gpt_oss": t.GptOssConfig(**SMALL, sliding_window=5, layer_types=ALTERNATING, num_local_experts=2,
                                  num_experts_per_tok=1, rope_parameters={"rope_type": "default",
                                                                          "rope_theta": 10000.0}),
    }


class Models:
    """One model's bf16 weights, in bf16 (attune and eager) and in fp32
    (the yardstick: the same rounded weights, eager attention)."""

    def __init__(self, name):
        torch.manual_seed(0)
        config = _configs()[name]
        model = transformers.AutoModelForCausalLM.from_config(config, attn_implementation="eager")
        if name == "gpt_oss":  # sinks large enough to matter
            for layer in model.model.layers:
                layer.self_attn.sinks.data = torch.linspace(-1.0, 2.0, config.num_attention_heads)
        self.bf16 = model.to(torch.bfloat16).eval()
        self.bf16.generation_config.eos_token_id = None  # all NEW tokens, every time
        self.fp32 = copy.deepcopy(self.bf16).float()
        g = torch.Generator().manual_seed(1)
        self.ids = torch.randint(1, config.vocab_size, (2, SEQ), generator=g)
        self.mask = torch.ones(2, SEQ, dtype=torch.long)
        self.mask[1, :PAD] = 0
        self.ids[1, :PAD] = config.pad_token_id

    def logits(self, implementation, fp32=False, ids=None, mask=None):
        model = self.fp32 if fp32 else self.bf16
        model.set_attn_implementation(implementation)
        with torch.no_grad():
            return model(ids if ids is not None else self.ids,
                         attention_mask=mask if mask is not None else self.mask).logits.float()


_models = {}


def models(name):
    if name not in _models:
        _models[name] = Models(name)
    return _models[name]


NAMES = ["llama", "mistral", "gemma2", "gpt_oss"]


def _bound(got, want, naive):
    """The rule's bound for got against want: twice naive's error plus the floor."""
    return 2 * max_error(naive, want) + rounding_floor(want, got.dtype)


def _check_logits(m, name):
    """The logits at tokens in use against eager's with the rule; returns
    the rule's bound (what a near tie in generation may be)."""
    in_use = m.mask.bool()
    want = m.logits("eager", fp32=True)[in_use]
    eager, got = m.logits("eager")[in_use], m.logits(attune.transformers.NAME)[in_use]
    assert_accurate(got.to(torch.bfloat16), want, eager.to(torch.bfloat16), f"{name}: logits")
    return _bound(got.to(torch.bfloat16), want, eager.to(torch.bfloat16))


@pytest.mark.parametrize("name", NAMES)
def test_logits_and_greedy_generation_agree_with_eager(name):
    m = models(name)
    _check_greedy_generation(m, name, _check_logits(m, name))


@pytest.mark.parametrize("name", ["llama", "mistral"])
def test_greedy_generation_with_a_static_cache(name):
    """StaticCache: full layers hold slots past the last query (the mask
    ends at it), sliding layers roll (their mask covers the window's
    columns, and generate() hands the model masks it made already)."""
    m = models(name)
    _check_greedy_generation(m, name, _check_logits(m, name), new=5, cache_implementation="static")


def _check_greedy_generation(m, name, bound, new=NEW, **generate):
    tokens = {}
    for implementation in ("eager", "attune"):
        m.bf16.set_attn_implementation(implementation)
        tokens[implementation] = m.bf16.generate(m.ids, attention_mask=m.mask, max_new_tokens=new,
                                                 do_sample=False, **generate)[:, SEQ:]
    same = tokens["eager"] == tokens["attune"]
    for row in range(2):
        if same[row].all():
            continue
        # The first difference must be a near tie: the fp32 logits of the two
        # picks differ by less than the rule's bound.
        step = int((~same[row]).nonzero()[0])
        prefix = torch.cat([m.ids[row], tokens["eager"][row, :step]])[None]
        mask = torch.cat([m.mask[row], torch.ones(step, dtype=torch.long)])[None]
        last = m.logits("eager", fp32=True, ids=prefix, mask=mask)[0, -1]
        a, e = int(tokens["attune"][row, step]), int(tokens["eager"][row, step])
        gap = abs(float(last[a] - last[e]))
        assert gap <= bound, f"{name}: row {row} differs at step {step} ({a} vs {e}) with an fp32 gap {gap:.3g}"


def _gradients(model, implementation, ids, mask):
    model.set_attn_implementation(implementation)
    model.train()
    model.zero_grad()
    # No loss on a token predicted from a padding position (whose output
    # eager computes from no key at all, and attune leaves zero).
    predicted_from_padding = torch.nn.functional.pad(mask[:, :-1], (1, 0), value=1) == 0
    labels = ids.masked_fill((mask == 0) | predicted_from_padding, -100)
    model(ids, attention_mask=mask, labels=labels).loss.backward()
    model.eval()
    return {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("name", NAMES)
def test_one_training_step_gradients_agree_with_eager(name):
    m = models(name)
    want = _gradients(m.fp32, "eager", m.ids, m.mask)
    eager = _gradients(m.bf16, "eager", m.ids, m.mask)
    got = _gradients(m.bf16, attune.transformers.NAME, m.ids, m.mask)
    assert set(got) == set(want), f"{name}: parameters without a gradient: {sorted(set(want) - set(got))}"
    for param in want:
        assert_accurate(got[param], want[param], eager[param], f"{name}: d{param}")
    if name == "gpt_oss":
        assert all("sinks" in p and got[p].abs().max() > 0 for p in got if "sinks" in p)


def test_a_model_built_for_attune_says_nothing_and_serves_generate():
    """The acceptance script: from_config with attn_implementation="attune",
    a padded batch and generate(), and no warning that the implementation
    was replaced."""
    heard = []

    class Collect(logging.Handler):
        def emit(self, record):
            heard.append(record.getMessage())

    handler = Collect(level=logging.WARNING)
    logger = logging.getLogger("transformers")
    logger.addHandler(handler)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            torch.manual_seed(0)
            model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**SMALL, attn_implementation="attune"))
            model = model.to(torch.bfloat16).eval()
            assert model.config._attn_implementation == "attune"
            m = models("llama")
            model.load_state_dict(m.bf16.state_dict())
            model.generation_config.eos_token_id = None
            out = model.generate(m.ids[:, :6], attention_mask=m.mask[:, :6], max_new_tokens=2, do_sample=False)
    finally:
        logger.removeHandler(handler)
    assert out.shape == (2, 8)
    said = heard + [str(w.message) for w in caught]
    assert not [s for s in said if "attune" in s or "attn_implementation" in s or "fall" in s.lower()], said


class _Module(torch.nn.Module):
    is_causal = True


def _qkv(batch=1, seq=5, heads=2, dim=16):
    q = torch.zeros(batch, heads, seq, dim, dtype=torch.bfloat16)
    return q, q.clone(), q.clone()


def test_unsupported_inputs_raise_naming_the_argument():
    f = attune.transformers.attention
    q, k, v = _qkv()
    dense = torch.zeros(1, 1, 5, 5)
    with pytest.raises(NotImplementedError, match="attention_mask.*4-D"):
        f(_Module(), q, k, v, dense)
    with pytest.raises(NotImplementedError, match="output_attentions"):
        f(_Module(), q, k, v, None, output_attentions=True)
    with pytest.raises(NotImplementedError, match="position_bias"):
        f(_Module(), q, k, v, None, position_bias=torch.zeros(1, 2, 5, 5))


def test_dropout_in_training_passes_through():
    f = attune.transformers.attention
    q, k, v = (randn(1, 2, 12, 16, seed=s) for s in (40, 41, 42))  # [B, H, S, D]
    plain, _ = f(_Module(), q, k, v, None)
    torch.manual_seed(4)
    dropped, _ = f(_Module(), q, k, v, None, dropout=0.3)
    assert not torch.equal(plain, dropped), "dropout changes the output"
    torch.manual_seed(4)
    assert torch.equal(f(_Module(), q, k, v, None, dropout=0.3)[0], dropped), "torch.manual_seed repeats it"
    assert torch.equal(f(_Module(), q, k, v, None, dropout=0.0)[0], plain), "eval (dropout 0): no dropout"


def test_masks_attune_cannot_serve_are_refused_not_dropped():
    masks = attune.transformers.mask
    mu = transformers.masking_utils
    image_tokens = mu.or_masks(mu.causal_mask_function, lambda b, h, q, kv: kv < 2)
    with pytest.raises(NotImplementedError, match="or_mask_function"):
        masks(1, 5, 5, mask_function=image_tokens)
    with pytest.raises(NotImplementedError, match="chunked"):
        masks(1, 9, 9, mask_function=mu.chunked_causal_mask_function(4, torch.zeros(1, dtype=torch.long)))
    with pytest.raises(NotImplementedError, match="mask function"):
        masks(1, 5, 5, mask_function=mu.and_masks(mu.causal_mask_function, lambda b, h, q, kv: kv != 3))
    # What it serves: the pattern travels with the padding mask.
    padding = torch.tensor([[0, 1, 1, 1, 1]], dtype=torch.bool)
    sliding = masks(1, 5, 5, mask_function=mu.sliding_window_causal_mask_function(3), attention_mask=padding)
    assert sliding.attune_pattern == attune.transformers.Pattern(True, (2, 0)) and sliding.attune_padded
    both = masks(1, 5, 5, mask_function=mu.sliding_window_bidirectional_mask_function(2))
    assert both.attune_pattern == attune.transformers.Pattern(False, (2, 2)) and not both.attune_padded


def test_right_padding_and_a_bidirectional_mask_follow_eager():
    """Right padding (a prefill) and a decoder run bidirectionally
    (config.is_causal = False: eager follows the mask, and so does attune,
    whatever the module's is_causal says)."""
    m = models("llama")
    ids, mask = m.ids.clone(), torch.ones_like(m.mask)
    mask[0, -3:] = 0
    in_use = mask.bool()
    for causal in (True, False):
        for model in (m.bf16, m.fp32):
            model.config.is_causal = causal
        try:
            want = m.logits("eager", fp32=True, ids=ids, mask=mask)[in_use]
            eager = m.logits("eager", ids=ids, mask=mask)[in_use]
            got = m.logits(attune.transformers.NAME, ids=ids, mask=mask)[in_use]
        finally:
            for model in (m.bf16, m.fp32):
                model.config.is_causal = True
        assert_accurate(got.to(torch.bfloat16), want, eager.to(torch.bfloat16), f"causal={causal}")
