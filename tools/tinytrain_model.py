#!/usr/bin/env python3
"""The tinytrain model family in PyTorch, shared by the reference generator and examples.

TinyTransformer = nn.Embedding (+ learned positional nn.Embedding) -> PyTorch's own
nn.TransformerEncoder (batch_first, relu|gelu|swiglu, post- or pre-norm, optional causal mask)
-> nn.Linear head. Its state_dict names are the engine's parameter names (docs:
docs/architecture.md), so a state_dict round-trips through safetensors unchanged.
LlamaModel = the Llama block (pre-norm, RMSNorm, RoPE, SwiGLU, no biases, grouped-query
attention), written out in plain PyTorch with Hugging Face LlamaForCausalLM's state_dict
names; build_model picks it for exactly the configs the engine names that way (llama_block).

Also: SEED_CONFIG (the seed workload's architecture), validate_config(), build_model(config)
and pre_activation_modules(model). Run with Debian's /usr/bin/python3 (PyTorch 1.13).
"""
import torch
import torch.nn as nn

# The seed workload: nn.TransformerEncoderLayer(d_model=128, nhead=4, batch_first=True)
# with every other argument at PyTorch's default (dim_feedforward 2048, dropout 0.1, relu,
# post-norm, eps 1e-5). References override dropout to 0.
SEED_CONFIG = {
    "vocab_size": 512,
    "d_model": 128,
    "n_head": 4,
    "n_layer": 2,
    "d_ff": 2048,
    "activation": "relu",
    "norm_first": False,
    "causal": False,
    "pos_embedding": "none",
    "max_seq_len": 64,
    "layer_norm_eps": 1e-5,
    "dropout": 0.1,
}

CONFIG_KEYS = tuple(SEED_CONFIG.keys())

# The Llama-style block's options, beside the keys above: absent means the original family's
# value (the engine writes them only when they differ, engine/config.cpp).
# n_kv_head 0 means n_head (a key/value head per query head).
# head_bias: lm_head's bias where bias is on (GPT-2's head has none).
BLOCK_DEFAULTS = {"norm": "layernorm", "bias": True, "head_bias": True, "tie_embeddings": False,
                  "rope_theta": 10000.0, "n_kv_head": 0}


def kv_heads(cfg):
    """The key/value heads of a config: n_kv_head, or n_head when it is 0 or absent."""
    return cfg.get("n_kv_head", 0) or cfg["n_head"]


def block_options(cfg):
    """{key: value} of the block options that differ from BLOCK_DEFAULTS, for a config's JSON
    (as the engine writes them: rope_theta only with rope, n_kv_head only below n_head)."""
    out = {k: cfg[k] for k in BLOCK_DEFAULTS if k in cfg and cfg[k] != BLOCK_DEFAULTS[k]}
    if cfg.get("pos_embedding") != "rope":
        out.pop("rope_theta", None)
    if "n_kv_head" in out and out["n_kv_head"] == cfg["n_head"]:
        del out["n_kv_head"]
    if not cfg.get("bias", True):
        out.pop("head_bias", None)
    return out


def llama_block(cfg):
    """Whether the config is the Llama block, whose parameters take Hugging Face's names
    (engine/config.h's ModelConfig::llama_block)."""
    return (cfg["norm_first"] and cfg.get("norm") == "rmsnorm" and cfg["pos_embedding"] == "rope"
            and cfg["activation"] == "swiglu" and cfg.get("bias") is False)


def validate_config(cfg):
    """Return None if cfg describes a model of the family, else a one-line reason."""
    missing = [k for k in CONFIG_KEYS if k not in cfg]
    if missing:
        return "config is missing " + ", ".join(missing)
    for k in ("vocab_size", "d_model", "n_head", "n_layer", "d_ff", "max_seq_len"):
        if not isinstance(cfg[k], int) or isinstance(cfg[k], bool) or cfg[k] < 1:
            return f"{k} must be a positive integer, got {cfg[k]!r}"
    if cfg["d_model"] % cfg["n_head"] != 0:
        return f"d_model {cfg['d_model']} is not divisible by n_head {cfg['n_head']}"
    if cfg["activation"] not in ("relu", "gelu", "swiglu"):
        return f"activation must be relu, gelu or swiglu, got {cfg['activation']!r}"
    n_kv = cfg.get("n_kv_head", 0)
    if not isinstance(n_kv, int) or isinstance(n_kv, bool) or n_kv < 0 or (n_kv and cfg["n_head"] % n_kv):
        return f"n_kv_head must divide n_head {cfg['n_head']}, got {n_kv!r}"
    if cfg["pos_embedding"] not in ("none", "learned", "rope"):
        return f"pos_embedding must be none, learned or rope, got {cfg['pos_embedding']!r}"
    if cfg["pos_embedding"] == "rope" and (cfg["d_model"] // cfg["n_head"]) % 2 != 0:
        return "pos_embedding rope needs an even head size d_model / n_head"
    for k in ("norm_first", "causal"):
        if not isinstance(cfg[k], bool):
            return f"{k} must be a boolean, got {cfg[k]!r}"
    if not (cfg["layer_norm_eps"] > 0):
        return f"layer_norm_eps must be > 0, got {cfg['layer_norm_eps']!r}"
    if not (0.0 <= cfg["dropout"] < 1.0):
        return f"dropout must be in [0, 1), got {cfg['dropout']!r}"
    if cfg.get("norm", "layernorm") not in ("layernorm", "rmsnorm"):
        return f"norm must be layernorm or rmsnorm, got {cfg['norm']!r}"
    for k in ("bias", "head_bias", "tie_embeddings"):
        if not isinstance(cfg.get(k, BLOCK_DEFAULTS[k]), bool):
            return f"{k} must be a boolean, got {cfg[k]!r}"
    return None


def causal_mask(seq, dtype, device=None):
    """(T,T) additive mask: 0 on and below the diagonal, -inf above (future positions).

    Same as nn.Transformer.generate_square_subsequent_mask. It must be a float mask of the
    activations' dtype: MultiheadAttention adds it with baddbmm, which needs equal dtypes.
    """
    return torch.triu(torch.full((seq, seq), float("-inf"), dtype=dtype, device=device),
                      diagonal=1)


class RMSNorm(nn.Module):
    """Llama's RMSNorm: x / sqrt(mean(x^2) + eps) * weight, in fp32, no mean, no bias."""

    def __init__(self, d_model, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d_model))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class LayerNormNoBias(nn.Module):
    """nn.LayerNorm without its bias (PyTorch 1.13's has no bias=False)."""

    def __init__(self, d_model, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d_model))

    def forward(self, x):
        return nn.functional.layer_norm(x, (x.shape[-1],), self.weight, None, self.eps)


def rope_cos_sin(seq, head_dim, theta, dtype, device=None):
    """cos, sin (T, HS/2) of RoPE's angles pos * theta^(-2i/HS), computed in float64 and rounded
    to dtype once (kernels/common/rope.h does the same)."""
    inv = theta ** (-2.0 * torch.arange(head_dim // 2, dtype=torch.float64) / head_dim)
    angle = torch.arange(seq, dtype=torch.float64)[:, None] * inv[None, :]
    return torch.cos(angle).to(dtype=dtype, device=device), torch.sin(angle).to(dtype=dtype, device=device)


def apply_rope(x, cos, sin):
    """x (B, NH, T, HS) with each head's pairs (i, i + HS/2) turned (Hugging Face's rotate-half)."""
    half = x.shape[-1] // 2
    a, b = x[..., :half], x[..., half:]
    return torch.cat([a * cos - b * sin, b * cos + a * sin], dim=-1)


def attend(q, k, v, attn_mask, dropout, training):
    """q (B, NH, T, HS), k and v (B, KVH, T, HS) -> (B, T, NH*HS): each group of NH/KVH query
    heads shares one key/value head (Hugging Face's repeat_kv); scores = q k^T / sqrt(HS) + the
    float mask, softmax, dropout on the weights, times v."""
    B, NH, T, HS = q.shape
    group = NH // k.shape[1]
    k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    scores = q @ k.transpose(-1, -2) / HS ** 0.5
    if attn_mask is not None:
        scores = scores + attn_mask
    weights = nn.functional.dropout(scores.softmax(dim=-1), dropout, training)
    return (weights @ v).transpose(1, 2).reshape(B, T, NH * HS)


class SelfAttention(nn.Module):
    """nn.MultiheadAttention's parameters (in_proj_weight, in_proj_bias, out_proj) and call, for
    what it cannot do: q and k turned by RoPE (theta not None) and grouped key/value heads
    (in_proj_weight (C + 2 KVH HS, C): the q rows, then k's, then v's)."""

    def __init__(self, d_model, n_head, n_kv_head, dropout, bias, theta):
        super().__init__()
        self.n_head, self.n_kv_head, self.dropout, self.theta = n_head, n_kv_head, dropout, theta
        width = d_model + 2 * n_kv_head * (d_model // n_head)
        self.in_proj_weight = nn.Parameter(torch.empty(width, d_model))
        self.in_proj_bias = nn.Parameter(torch.zeros(width)) if bias else None
        self.out_proj = nn.Linear(d_model, d_model, bias=bias)
        nn.init.xavier_uniform_(self.in_proj_weight)  # as nn.MultiheadAttention
        if bias:
            nn.init.zeros_(self.out_proj.bias)

    def forward(self, query, key, value, attn_mask=None, key_padding_mask=None, need_weights=False, **_):
        B, T, C = query.shape
        HS = C // self.n_head
        KV = self.n_kv_head * HS
        q, k, v = nn.functional.linear(query, self.in_proj_weight, self.in_proj_bias).split([C, KV, KV], dim=-1)
        q = q.reshape(B, T, self.n_head, HS).transpose(1, 2)
        k, v = (t.reshape(B, T, self.n_kv_head, HS).transpose(1, 2) for t in (k, v))
        if self.theta is not None:
            cos, sin = rope_cos_sin(T, HS, self.theta, query.dtype, query.device)
            q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        out = attend(q, k, v, attn_mask, self.dropout, self.training)
        return self.out_proj(out), None


def swiglu(x):
    """x (..., 2F) as [gate | up] -> silu(gate) * up (..., F)."""
    gate, up = x.chunk(2, dim=-1)
    return nn.functional.silu(gate) * up


def make_norm(d_model, eps, norm, bias):
    if norm == "rmsnorm":
        return RMSNorm(d_model, eps)
    return nn.LayerNorm(d_model, eps=eps) if bias else LayerNormNoBias(d_model, eps)


class TinyTransformer(nn.Module):
    """Embedding (+ positions) -> nn.TransformerEncoder -> Linear head; (B,T) int64 -> (B,T,V)."""

    def __init__(self, vocab_size, d_model, n_head, n_layer, d_ff, activation="relu",
                 norm_first=False, causal=False, pos_embedding="none", max_seq_len=64,
                 layer_norm_eps=1e-5, dropout=0.1, norm="layernorm", bias=True, head_bias=True, tie_embeddings=False,
                 rope_theta=10000.0, n_kv_head=0):
        super().__init__()
        self.causal = causal
        self.max_seq_len = max_seq_len
        # Attribute order fixes the state_dict order (and with it the RNG draws of the
        # initialisation): embed, pos_embed, encoder.layers.*, encoder.norm, lm_head.
        self.embed = nn.Embedding(vocab_size, d_model)
        self.pos_embed = nn.Embedding(max_seq_len, d_model) if pos_embedding == "learned" else None
        n_kv_head = n_kv_head or n_head
        layer = nn.TransformerEncoderLayer(
            d_model, n_head, dim_feedforward=d_ff, dropout=dropout,
            activation=swiglu if activation == "swiglu" else activation,  # "gelu" is F.gelu, the exact erf form
            layer_norm_eps=layer_norm_eps, batch_first=True, norm_first=norm_first)
        # --norm rmsnorm, --bias false: the layer's modules swapped in place (their names, and so
        # the state_dict's, stay the layer's; the layer runs them in training mode as any module)
        if norm != "layernorm" or not bias:
            layer.norm1 = make_norm(d_model, layer_norm_eps, norm, bias)
            layer.norm2 = make_norm(d_model, layer_norm_eps, norm, bias)
        if not bias:
            layer.self_attn = nn.MultiheadAttention(d_model, n_head, dropout=dropout, bias=False, batch_first=True)
            layer.linear1 = nn.Linear(d_model, d_ff, bias=False)
            layer.linear2 = nn.Linear(d_ff, d_model, bias=False)
        if activation == "swiglu":  # linear1 makes gate and up, [gate | up]
            layer.linear1 = nn.Linear(d_model, 2 * d_ff, bias=bias)
        if pos_embedding == "rope" or n_kv_head != n_head:
            theta = rope_theta if pos_embedding == "rope" else None
            layer.self_attn = SelfAttention(d_model, n_head, n_kv_head, dropout, bias, theta)
        if norm != "layernorm" or not bias or pos_embedding == "rope" or n_kv_head != n_head or activation == "swiglu":
            # PyTorch's inference fast path would run its own fused kernel instead of the swapped
            # modules: this flag is one of its conditions, and nothing else reads it
            layer.activation_relu_or_gelu = False
        # Pre-norm leaves the residual stream un-normalised, hence the final norm.
        final_norm = make_norm(d_model, layer_norm_eps, norm, bias) if norm_first else None
        # enable_nested_tensor only matters for the inference fast path with a padding
        # mask; we never use it, so turn it off to keep the one code path we mirror.
        # Note: TransformerEncoder deep-copies `layer`, so every layer starts identical.
        self.encoder = nn.TransformerEncoder(layer, n_layer, norm=final_norm,
                                             enable_nested_tensor=False)
        self.lm_head = nn.Linear(d_model, vocab_size, bias=bias and head_bias)
        if tie_embeddings:  # one Parameter in both places: named_parameters() lists it once, as embed.weight
            self.lm_head.weight = self.embed.weight

    def forward(self, x):
        # x (B,T) int64 -> logits (B,T,V)
        seq = x.shape[1]
        if seq > self.max_seq_len:
            raise ValueError(f"sequence length {seq} exceeds max_seq_len {self.max_seq_len}")
        h = self.embed(x)
        if self.pos_embed is not None:
            h = h + self.pos_embed(torch.arange(seq, device=x.device))
        mask = causal_mask(seq, h.dtype, h.device) if self.causal else None
        h = self.encoder(h, mask=mask)
        return self.lm_head(h)


class LlamaAttention(nn.Module):
    """Hugging Face LlamaAttention's parameters (q_proj, k_proj, v_proj, o_proj, no biases) and
    math: q and k turned by RoPE (rotate-half), grouped key/value heads."""

    def __init__(self, d_model, n_head, n_kv_head, dropout, theta):
        super().__init__()
        self.n_head, self.n_kv_head, self.dropout, self.theta = n_head, n_kv_head, dropout, theta
        HS = d_model // n_head
        self.q_proj = nn.Linear(d_model, d_model, bias=False)
        self.k_proj = nn.Linear(d_model, n_kv_head * HS, bias=False)
        self.v_proj = nn.Linear(d_model, n_kv_head * HS, bias=False)
        self.o_proj = nn.Linear(d_model, d_model, bias=False)

    def forward(self, x, mask):
        B, T, C = x.shape
        HS = C // self.n_head
        q = self.q_proj(x).reshape(B, T, self.n_head, HS).transpose(1, 2)
        k = self.k_proj(x).reshape(B, T, self.n_kv_head, HS).transpose(1, 2)
        v = self.v_proj(x).reshape(B, T, self.n_kv_head, HS).transpose(1, 2)
        cos, sin = rope_cos_sin(T, HS, self.theta, x.dtype, x.device)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        return self.o_proj(attend(q, k, v, mask, self.dropout, self.training))


class LlamaMLP(nn.Module):
    """Hugging Face LlamaMLP: down_proj(silu(gate_proj(x)) * up_proj(x)), no biases; the
    engine's FFN dropout on the hidden layer (0 in references, as Llama has none)."""

    def __init__(self, d_model, d_ff, dropout):
        super().__init__()
        self.gate_proj = nn.Linear(d_model, d_ff, bias=False)
        self.up_proj = nn.Linear(d_model, d_ff, bias=False)
        self.down_proj = nn.Linear(d_ff, d_model, bias=False)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        return self.down_proj(self.dropout(nn.functional.silu(self.gate_proj(x)) * self.up_proj(x)))


class LlamaLayer(nn.Module):
    """Hugging Face LlamaDecoderLayer: x + attn(input_layernorm(x)), then + mlp(post_attention_
    layernorm(.)), with the engine's dropouts on each branch before its residual add."""

    def __init__(self, d_model, n_head, n_kv_head, d_ff, eps, dropout, theta):
        super().__init__()
        self.self_attn = LlamaAttention(d_model, n_head, n_kv_head, dropout, theta)
        self.mlp = LlamaMLP(d_model, d_ff, dropout)
        self.input_layernorm = RMSNorm(d_model, eps)
        self.post_attention_layernorm = RMSNorm(d_model, eps)
        self.dropout1, self.dropout2 = nn.Dropout(dropout), nn.Dropout(dropout)

    def forward(self, x, mask):
        x = x + self.dropout1(self.self_attn(self.input_layernorm(x), mask))
        return x + self.dropout2(self.mlp(self.post_attention_layernorm(x)))


class LlamaBody(nn.Module):
    """LlamaForCausalLM's `model`: embed_tokens, layers, norm."""

    def __init__(self, cfg):
        super().__init__()
        C = cfg["d_model"]
        self.embed_tokens = nn.Embedding(cfg["vocab_size"], C)
        self.layers = nn.ModuleList(
            LlamaLayer(C, cfg["n_head"], kv_heads(cfg), cfg["d_ff"], cfg["layer_norm_eps"], cfg["dropout"],
                       cfg.get("rope_theta", BLOCK_DEFAULTS["rope_theta"]))
            for _ in range(cfg["n_layer"]))
        self.norm = RMSNorm(C, cfg["layer_norm_eps"])


class LlamaModel(nn.Module):
    """The Llama block end to end, (B,T) int64 -> logits (B,T,V), causal or not as the config
    says; state_dict names as LlamaForCausalLM's (model.*, lm_head.weight; a tied head is
    model.embed_tokens.weight, listed once)."""

    def __init__(self, cfg):
        super().__init__()
        self.causal = cfg["causal"]
        self.max_seq_len = cfg["max_seq_len"]
        self.model = LlamaBody(cfg)
        self.lm_head = nn.Linear(cfg["d_model"], cfg["vocab_size"], bias=False)
        if cfg.get("tie_embeddings", False):
            self.lm_head.weight = self.model.embed_tokens.weight

    def forward(self, x):
        seq = x.shape[1]
        if seq > self.max_seq_len:
            raise ValueError(f"sequence length {seq} exceeds max_seq_len {self.max_seq_len}")
        h = self.model.embed_tokens(x)
        mask = causal_mask(seq, h.dtype, h.device) if self.causal else None
        for layer in self.model.layers:
            h = layer(h, mask)
        return self.lm_head(self.model.norm(h))


def build_model(cfg):
    """The model of a config dict with the keys of SEED_CONFIG (validated): LlamaModel for the
    Llama block, else TinyTransformer."""
    err = validate_config(cfg)
    if err:
        raise ValueError(err)
    options = {**BLOCK_DEFAULTS, **{k: cfg[k] for k in BLOCK_DEFAULTS if k in cfg}}
    if llama_block({**options, **cfg}):
        return LlamaModel({**options, **cfg})
    return TinyTransformer(**{k: cfg[k] for k in CONFIG_KEYS}, **options)


def parameters_by_name(model):
    """The model's parameters by the engine's names, each once, in state_dict order (a tied
    head's weight is embed.weight: named_parameters() lists the shared Parameter once)."""
    return [(name, p) for name, p in model.named_parameters()]


def load_parameters(model, tensors):
    """Copies {name: tensor} into the model's parameters; the names must be exactly
    parameters_by_name's (RuntimeError naming the first difference otherwise)."""
    names = [name for name, _ in parameters_by_name(model)]
    if sorted(names) != sorted(tensors.keys()):
        missing = [n for n in names if n not in tensors]
        extra = [n for n in tensors if n not in names]
        raise RuntimeError(f"missing {missing[:3]} unexpected {extra[:3]}")
    with torch.no_grad():
        for name, p in parameters_by_name(model):
            if tuple(p.shape) != tuple(tensors[name].shape):
                raise RuntimeError(f"{name}: shape {tuple(tensors[name].shape)}, the model's {tuple(p.shape)}")
            p.copy_(tensors[name])


def pre_activation_modules(model):
    """Each layer's linear1 (the Llama block's gate_proj), in layer order: its output is the
    feed-forward pre-activation, the input of the relu|gelu|silu (hook it to watch ReLU's kink)."""
    if isinstance(model, LlamaModel):
        return [layer.mlp.gate_proj for layer in model.model.layers]
    return [layer.linear1 for layer in model.encoder.layers]
