"""Small random-initialised Hugging Face `transformers` models, made tensor-parallel the ways users
do it, for symmflow's torch.compile backend (issue 24).

Every model is built from its config object (no hub download) with a fixed seed, so every rank
builds the same full weights; `parallelize` then shards it in place:
- "dtensor":  torch.distributed.tensor.parallel.parallelize_module with ColwiseParallel /
              RowwiseParallel per decoder layer, as torchtitan's parallelize functions do;
- "tp_plan":  transformers' own plan (`model._tp_plan`, "colwise" / "rowwise" styles) applied with
              transformers.distributed.tensor_parallel.apply_tensor_parallelism;
- "sp":       DTensor's sequence parallelism: SequenceParallel on the norms, the attention and MLP
              inputs gathered (all-gather) and their outputs reduce-scattered along the sequence.

Models: llama, qwen2, qwen3, mistral (sliding window), gpt2 (fused QKV split, LayerNorm, GELU),
mixtral and qwen3_moe (routing with top-k). `make_model(name, dtype)` returns the full model;
`make_input_ids(name, batch, seq)` the inputs. Used by tests/python/torch/hf_worker.py and by the
GPU scripts of tools/device/.
"""
from __future__ import annotations

import copy

import torch
import torch.distributed as dist

VOCAB = 128
MODELS = ("llama", "qwen2", "qwen3", "mistral", "gpt2", "mixtral", "qwen3_moe")
STYLES = ("dtensor", "tp_plan", "sp")


# "small": the test models; "4096": the dense models at the decoder shapes of issue 27 (hidden
# 4096, 32 query and 8 KV heads of 128, FFN 11008, two layers; the vocabulary stays VOCAB so the
# decoder stack is what is timed), for tools/device/sweep.py and breakdown.py.
SIZES = {
    "small": dict(hidden_size=64, intermediate_size=128, num_attention_heads=4,
                  num_key_value_heads=4, head_dim=16),
    "4096": dict(hidden_size=4096, intermediate_size=11008, num_attention_heads=32,
                 num_key_value_heads=8, head_dim=128),
    # Llama-3-8B's layer (FFN 14336) for tools/device/sweep.py; "cpu512" the CPU sweep's shapes
    # at hidden 512 (8/4 heads of 64: four KV heads split over 2 and 4 processes).
    "8b": dict(hidden_size=4096, intermediate_size=14336, num_attention_heads=32,
               num_key_value_heads=8, head_dim=128),
    "cpu512": dict(hidden_size=512, intermediate_size=1792, num_attention_heads=8,
                   num_key_value_heads=4, head_dim=64),
}


def _config(name: str, size: str = "small", max_positions: int = 64):

    import transformers as tf

    dims = dict(SIZES[size])
    head_dim = dims.pop("head_dim")
    common = dict(vocab_size=VOCAB, num_hidden_layers=2, max_position_embeddings=max_positions,
                  tie_word_embeddings=False, **dims)
    if name == "llama":
        return tf.LlamaConfig(**common)
    if name == "qwen2":
        return tf.Qwen2Config(**common)
    if name == "qwen3":
        return tf.Qwen3Config(head_dim=head_dim, **common)
    if name == "mistral":
        return tf.MistralConfig(sliding_window=4, **common)
    if name == "mixtral":
        return tf.MixtralConfig(num_local_experts=4, num_experts_per_tok=2, **common)
    if name == "qwen3_moe":
        return tf.Qwen3MoeConfig(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32,
                                 head_dim=head_dim, decoder_sparse_step=1, **common)
    if name == "gpt2":
        return tf.GPT2Config(vocab_size=VOCAB, n_embd=64, n_layer=2, n_head=4, n_positions=64,
                             resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    raise ValueError(f"unknown model '{name}' (one of {', '.join(MODELS)})")


def make_model(name: str, dtype: torch.dtype = torch.float32, size: str = "small",
               device: str | None = None, max_positions: int = 64):
    """The full model, random weights from seed 0, in eval mode, attention in PyTorch's SDPA;
    `size` one of SIZES; built on `device` (the CPU by default); `max_positions` the longest
    sequence (prompt and cache) it is run at."""
    import transformers as tf

    if size != "small" and name in ("gpt2", "mixtral", "qwen3_moe"):
        raise ValueError(f"size '{size}' is for the dense rotary models, not {name}")
    config = _config(name, size, max_positions)
    config._attn_implementation = "sdpa"
    torch.manual_seed(0)
    with torch.device(device or "cpu"):
        model = tf.AutoModelForCausalLM.from_config(config, torch_dtype=torch.float32)
    with torch.no_grad():  # non-trivial norm weights, so a wrong norm cannot hide
        for n, p in model.named_parameters():
            if "norm" in n or "ln_" in n:
                p.add_(0.1 * torch.randn_like(p))
    return model.to(dtype).eval()


def make_input_ids(batch: int = 2, seq: int = 8, seed: int = 1234) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, VOCAB, (batch, seq), generator=g)


def make_attention_mask(ids: torch.Tensor) -> torch.Tensor:
    """The mask a tokenizer gives a left-padded batch: the last sequence starts with two pads."""
    mask = torch.ones_like(ids)
    mask[-1, :2] = 0
    return mask


def _layers(model):
    inner = getattr(model, "model", None) or getattr(model, "transformer")
    return inner.layers if hasattr(inner, "layers") else inner.h


def _dtensor_plan(name: str, sequence_parallel: bool) -> dict:
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import (ColwiseParallel, PrepareModuleInput,
                                                   RowwiseParallel, SequenceParallel)

    if name == "gpt2":  # fused QKV: c_attn is a Conv1D ([in, out] weight); plain Linear styles
        raise ValueError("gpt2 has Conv1D layers: use its transformers tp_plan")
    sp = sequence_parallel
    # Under sequence parallelism the residual stream stays a DTensor sharded by sequence, so the
    # model's mask and rotary tables see the full sequence length.
    row_out = Shard(1) if sp else Replicate()
    plan = {
        "self_attn.q_proj": ColwiseParallel(),
        "self_attn.k_proj": ColwiseParallel(),
        "self_attn.v_proj": ColwiseParallel(),
        "self_attn.o_proj": RowwiseParallel(output_layouts=row_out, use_local_output=not sp),
    }
    if name not in ("mixtral", "qwen3_moe"):
        plan.update({
            "mlp.gate_proj": ColwiseParallel(),
            "mlp.up_proj": ColwiseParallel(),
            "mlp.down_proj": RowwiseParallel(output_layouts=row_out, use_local_output=not sp),
        })
    if sp:
        plan.update({
            "input_layernorm": SequenceParallel(),
            "post_attention_layernorm": SequenceParallel(),
            "self_attn": PrepareModuleInput(
                input_kwarg_layouts={"hidden_states": Shard(1)},
                desired_input_kwarg_layouts={"hidden_states": Replicate()},
                use_local_output=True),
            "mlp": PrepareModuleInput(input_layouts=(Shard(1),),
                                      desired_input_layouts=(Replicate(),),
                                      use_local_output=True),
        })
    return plan


def parallelize(model, name: str, style: str, group=None, mesh=None):
    """Shards `model` in place over `group` (the world by default), or over the 1-D DeviceMesh
    `mesh` (a dimension of a larger mesh: `mesh["tp"]`), and returns it."""
    from torch.distributed.device_mesh import DeviceMesh

    if mesh is None:
        world = dist.get_world_size(group)
        ranks = dist.get_process_group_ranks(group) if group is not None else list(range(world))
        mesh = DeviceMesh(next(model.parameters()).device.type, ranks)
    elif group is not None:
        raise ValueError("parallelize: pass a group or a mesh, not both")
    else:
        group = mesh.get_group()  # GPT-2's hand-made plan takes the group
    if style == "tp_plan":
        from transformers.distributed.tensor_parallel import apply_tensor_parallelism

        # The decoder layers' entries (the embedding and lm_head stay whole, as in the DTensor
        # plans), expanded per layer, for the modules and parameters this config has.
        known = set(dict(model.named_modules())) | set(dict(model.named_parameters()))
        plan = {}
        for key, value in model._tp_plan.items():
            if ".layers.*." not in key:
                continue
            for i in range(len(_layers(model))):
                if key.replace("*", str(i)) in known:
                    plan[key.replace("*", str(i))] = value
        if not plan:
            raise ValueError(f"{name} has no transformers tp_plan for its decoder layers")
        # from_pretrained shards each parameter under a module entry while loading: here the
        # weights exist already, so each module's own parameters are named in the plan too.
        modules = dict(model.named_modules())
        for key, value in list(plan.items()):
            if key in modules:
                for param, _ in modules[key].named_parameters(recurse=False):
                    plan.setdefault(f"{key}.{param}", value)
        with torch.no_grad():
            return apply_tensor_parallelism(model, mesh, plan)
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import SequenceParallel, parallelize_module

    if name == "gpt2":
        if style != "dtensor":
            raise ValueError(f"gpt2 is made tensor-parallel by hand (style 'dtensor'), not {style}")
        return _parallelize_gpt2(model, group)
    sp = style == "sp"
    for layer in _layers(model):
        parallelize_module(layer, mesh, _dtensor_plan(name, sp))
    if sp:  # torchtitan's plan: the residual stream is sharded by sequence between the layers
        from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel

        parallelize_module(model, mesh, {
            "model.embed_tokens": RowwiseParallel(input_layouts=Replicate(),
                                                  output_layouts=Shard(1),
                                                  use_local_output=False),
            "model.norm": SequenceParallel(),
            "lm_head": ColwiseParallel(input_layouts=Shard(1), output_layouts=Replicate()),
        })
    return model


def fresh_dtensor_caches() -> None:
    """Empties DTensor's cache of sharding decisions, before each mode a benchmark times.

    Note [DTensor's cache and the order of modes]: DTensor keeps every op's sharding decision in
    a process-wide cache keyed by the op's arguments, scalars included: AdamW's `addcdiv_` takes
    the step's bias-corrected step size, new at every step number. The first mode of a process
    to train N steps pays a miss (about 1.4 ms of host time on a GPU machine, fake tensors and
    propagation) for each weight at each new step number; a mode timed after it finds them all
    cached. Timed in the order eager, symmflow, inductor, that order alone made symmflow's
    training step 1.5 ms slower than inductor's on one H200 (docs/benchmarks.md): each mode now
    starts from an empty cache and pays the same misses a real training run pays."""
    try:
        from torch.distributed.tensor import DTensor
    except ImportError:
        return
    cache = getattr(DTensor._op_dispatcher.sharding_propagator, "propagate_op_sharding", None)
    if hasattr(cache, "cache_clear"):
        cache.cache_clear()


def sharded_copy(model, name: str, style: str, group=None, mesh=None):
    return parallelize(copy.deepcopy(model), name, style, group, mesh)


def _parallelize_gpt2(model, group=None):
    """GPT-2's Conv1D layers ([in, out] weights, a fused QKV) sharded by hand as Megatron does:
    c_attn and c_fc column-parallel (q, k and v each split by heads), attn.c_proj and mlp.c_proj
    row-parallel with an all-reduce (funcol) before their bias."""
    import torch.distributed._functional_collectives as funcol

    rank, world = dist.get_rank(group), dist.get_world_size(group)
    group = group or dist.group.WORLD

    def cols(conv, parts):
        w, b = conv.weight.data, conv.bias.data
        width = w.shape[1] // parts
        keep = torch.cat([torch.arange(p * width + rank * width // world,
                                       p * width + (rank + 1) * width // world)
                          for p in range(parts)])
        conv.weight = torch.nn.Parameter(w[:, keep].contiguous(), requires_grad=False)
        conv.bias = torch.nn.Parameter(b[keep].contiguous(), requires_grad=False)
        conv.nf = len(keep)

    def rows(conv):
        w, b = conv.weight.data, conv.bias.data
        n = w.shape[0] // world
        conv.weight = torch.nn.Parameter(w[rank * n:(rank + 1) * n].contiguous(),
                                         requires_grad=False)
        conv.register_buffer("full_bias", b.clone())
        conv.bias = torch.nn.Parameter(torch.zeros_like(b), requires_grad=False)
        conv.register_forward_hook(
            lambda mod, args, out: funcol.all_reduce(out, "sum", group) + mod.full_bias)

    for block in _layers(model):
        attn = block.attn
        cols(attn.c_attn, 3)
        attn.split_size //= world
        attn.num_heads //= world
        attn.embed_dim //= world
        rows(attn.c_proj)
        cols(block.mlp.c_fc, 1)
        rows(block.mlp.c_proj)
    return model
