"""A written cost model of symmflow on H hosts of G GPUs (issue 38, item 4): predicts, does not
measure. Explained, with its sources and what would validate it, in docs/multihost_model.md.

    python3 tools/multihost_model.py                          # markdown tables
    python3 tools/multihost_model.py --hosts 2,4 --json       # the same figures as JSON

(a) The all-reduce of S bytes over H x G GPUs:
    - symmflow's hierarchical plan: reduce-scatter inside the host (symmetric memory over NVLink),
      all-reduce of the 1/G shard across the hosts through NCCL (one rank per host, each GPU on
      its own NIC), all-gather inside the host; once as three calls one after the other
      ("serial"), once as the bound of a perfect chunked pipeline of the three ("pipelined");
    - NCCL alone over all H x G GPUs (its ring or tree, whichever its cost model makes faster).
(b) A TP x DP training step of a Llama-8B-shaped model: TP = G inside a host, DP = H across hosts.

Dependency-free; Python 3.11. Every input is a named constant below, with its source; every
formula has a comment. Times are in seconds inside, printed in µs or ms.
"""
from __future__ import annotations

import argparse
import json
import math

KiB = 1024
MiB = 1024 * KiB
GiB = 1024 * MiB
GB = 1e9  # bandwidths are in GB/s (10^9 bytes per second), as NCCL and nccl-tests print them
US = 1e-6

# ---------------------------------------------------------------------------------------------
# Inputs: measured inside one host (this project, docs/benchmarks.md, section "The all-reduce on
# four GPUs and on two (nvidia-h200-x4, 2026-11-26)": bf16 sum, CUDA graph replay, median µs per
# call of the slowest rank, H200s with every pair NV18, NVLink multicast off).
# ---------------------------------------------------------------------------------------------

# symmflow's two-shot (reduce-scatter then all-gather over symmetric memory), forced, µs.
SF_TWO_SHOT_US = {2: {1 * MiB: 14.90, 256 * MiB: 745.06},
                  4: {1 * MiB: 27.50, 256 * MiB: 1168.34}}
# NCCL 2.28 called from C++ in the same runs, µs.
NCCL_INTRA_US = {2: {1 * MiB: 14.04, 256 * MiB: 886.59},
                 4: {1 * MiB: 18.13, 256 * MiB: 1181.37}}
# NCCL's effective NVLink bus bandwidth on 8 H100s with the ring (NVLink SHARP off): "450GB/s is
# the line rate. With the protocol overhead (~20%) NCCL can get an effective NVLink bandwidth of
# 370GB/s" (S. Jeaugey, NVIDIA/nccl-tests issue 212). Used as the ceiling of NCCL's 8-GPU figure
# and as the NVLink bandwidth of NCCL's flat multi-host ring. H200 has the same NVLink 4 as H100.
NCCL_NVLINK_BUSBW_GBS = 370.0

# ---------------------------------------------------------------------------------------------
# Inputs: the network. One NIC per GPU (8 x ConnectX-7 per host), rail-optimized fabric (GPU i of
# every host on the same leaf switch), no SHARP / in-network reduction, no NVLink SHARP.
# ---------------------------------------------------------------------------------------------

# Fraction of a NIC's line rate NCCL reaches: "24GB/s is the peak performance per 200G NIC (12
# GB/s for 100G NICs)" (S. Jeaugey, NVIDIA/nccl-tests issue 119) = 0.96 of 25 GB/s; NVIDIA
# measures 192 GB/s all-reduce bus bandwidth on DGX A100 with 8 x 200 Gb/s (NVIDIA/nccl issue 812),
# the same 0.96. At 400 Gb/s: 48 GB/s per GPU, 384 GB/s per host of 8.
NIC_EFFICIENCY = 0.96

# NCCL's own cost model, src/graph/tuning.cc (2.19-2.2x; later versions differ in detail):
# latencies in µs per algorithm and protocol: baseLat, and hwLat per step over NVLink and the net.
NCCL_BASE_LAT_US = {"ring": {"LL": 6.6, "LL128": 14.0, "Simple": 8.4},
                    "tree": {"LL": 6.8, "LL128": 14.0, "Simple": 8.4}}
NCCL_NVLINK_LAT_US = {"ring": {"LL": 0.6, "LL128": 1.9, "Simple": 3.4},
                      "tree": {"LL": 0.6, "LL128": 1.25, "Simple": 4.0}}
NCCL_NET_LAT_US = {"ring": {"LL": 2.7, "LL128": 4.0, "Simple": 14.0},
                   "tree": {"LL": 5.0, "LL128": 8.5, "Simple": 14.0}}
# Bandwidth factor of each protocol against Simple, same file: ring LL x 1/4 across nodes,
# ring LL128 x 0.92 (x 0.7 with one GPU per node), tree LL x 1/3.8, tree LL128 x 120/128;
# every tree x 0.92.
NCCL_RING_PROTO_BW = {"LL": 1 / 4, "LL128": 0.92, "Simple": 1.0}
NCCL_RING_LL128_ONE_PER_NODE = 0.7
NCCL_TREE_PROTO_BW = {"LL": 1 / 3.8, "LL128": 120 / 128, "Simple": 1.0}
NCCL_TREE_BW = 0.92

# ---------------------------------------------------------------------------------------------
# Inputs: the training step (b).
# ---------------------------------------------------------------------------------------------

# Llama 3 8B's configuration (meta-llama/Meta-Llama-3-8B config.json): hidden 4096, FFN 14336,
# 32 layers, 32 heads, 8 KV heads, vocabulary 128256, untied embeddings, bf16.
HIDDEN, FFN, LAYERS, HEADS, KV_HEADS, VOCAB = 4096, 14336, 32, 32, 8, 128256
BYTES_BF16 = 2
# Effective bf16 throughput per GPU during training: an assumption, 40% of the H200's 989 TFLOP/s
# dense bf16 peak (NVIDIA's H200 datasheet); not measured by this project.
EFFECTIVE_TFLOPS = 400.0
# Sequence length and micro-batches (of one sequence) per host per step: our choice, giving
# 32768 tokens per TP group per step and a global batch of H x 32768 tokens.
SEQ_LEN = 4096
MICRO_BATCHES = 8
# Share of a micro-batch's compute in its backward pass (2 of the 6 FLOPs per parameter and token
# are the forward): the window a gradient all-reduce can hide behind, last micro-batch only.
BACKWARD_SHARE = 2 / 3
# Gradient bucket (PyTorch DDP's default bucket_cap_mb = 25).
BUCKET_BYTES = 25 * MiB
# AdamW with fp32 master weights and moments: per parameter read grad 2 + master 4 + m 4 + v 4,
# write master 4 + m 4 + v 4 + bf16 weight 2 = 28 bytes, at the ~4.3 TB/s one H200 streamed
# weights at (/work/shared/GPU_NOTES.md, 2026-11-25).
OPTIMIZER_BYTES_PER_PARAM = 28
HBM_GBS = 4300.0


# ---------------------------------------------------------------------------------------------
# Inside one host: alpha-beta fits of the measured figures, extrapolated to G GPUs.
# ---------------------------------------------------------------------------------------------

def fit(points: dict[int, float], n: int) -> tuple[float, float]:
    """(alpha seconds, bus bandwidth bytes/s) of t = alpha + 2(n-1)/n * S / B through two points."""
    (s1, t1), (s2, t2) = sorted(points.items())
    k = 2 * (n - 1) / n  # bytes each GPU sends per byte of the all-reduce (ring or two-shot)
    bus = k * (s2 - s1) / ((t2 - t1) * US)  # the slope between the two sizes is k / B
    alpha = t1 * US - k * s1 / bus  # what is left at the small size is the fixed cost
    return alpha, bus


def intra_params(measured: dict[int, dict[int, float]], g: int, cap_gbs: float | None) -> tuple[float, float]:
    """alpha and bus bandwidth at g GPUs: fitted at 2 and 4, extrapolated per doubling of the GPUs
    (alpha grows by the same amount per doubling, the bandwidth by the same ratio), capped."""
    a2, b2 = fit(measured[2], 2)
    a4, b4 = fit(measured[4], 4)
    d = math.log2(g / 4)  # doublings beyond 4 GPUs (1 at 8)
    alpha = a4 + d * (a4 - a2)  # linear in log2(GPUs): a(8) = a(4) + (a(4) - a(2))
    bus = b4 * (b4 / b2) ** d  # geometric in log2(GPUs): B(8) = B(4)^2 / B(2)
    if cap_gbs is not None:
        bus = min(bus, cap_gbs * GB)
    return alpha, bus


class Model:
    def __init__(self, g: int, nic_gbps: float, nic_eff: float, sf_busbw: float | None,
                 sf_alpha_us: float | None):
        self.g = g
        self.nic = nic_gbps / 8 * GB * nic_eff  # bytes/s one GPU's NIC carries each way: Gb/s / 8 x efficiency
        self.nvl = NCCL_NVLINK_BUSBW_GBS * GB  # NCCL's per-GPU NVLink throughput each way
        a, b = intra_params(SF_TWO_SHOT_US, g, None)
        self.sf_alpha = a if sf_alpha_us is None else sf_alpha_us * US
        self.sf_bus = b if sf_busbw is None else sf_busbw * GB
        self.nccl_alpha, self.nccl_bus = intra_params(NCCL_INTRA_US, g, NCCL_NVLINK_BUSBW_GBS)

    # -- symmflow inside a host (measured kernels, fitted and extrapolated) --

    def sf_all_reduce(self, s: float) -> float:
        """two-shot all-reduce of s bytes over the host's G GPUs: alpha + 2(G-1)/G * s / B."""
        return self.sf_alpha + 2 * (self.g - 1) / self.g * s / self.sf_bus

    def sf_half(self, s: float) -> tuple[float, float]:
        """(fixed, bandwidth) seconds of the reduce-scatter (or the all-gather) of s bytes alone:
        half the two-shot, alpha/2 + (G-1)/G * s / B."""
        return self.sf_alpha / 2, (self.g - 1) / self.g * s / self.sf_bus

    def nccl_intra_all_reduce(self, s: float) -> float:
        """NCCL's all-reduce inside one host (measured, fitted, capped at 370 GB/s)."""
        return self.nccl_alpha + 2 * (self.g - 1) / self.g * s / self.nccl_bus

    # -- NCCL across hosts: its own cost model (tuning.cc) with this fabric's bandwidths --

    def nccl(self, s: float, hosts: int, per_host: int) -> tuple[float, str, float, float]:
        """NCCL all-reduce of s bytes over hosts x per_host ranks: the fastest algorithm and
        protocol, as NCCL's tuner picks. Returns (seconds, name, latency seconds, bandwidth seconds)."""
        n = hosts * per_host
        best = None
        for proto in ("LL", "LL128", "Simple"):
            # Ring. Latency: baseLat + (nsteps - nInter) * NVLink step + nInter * net step, with
            # nsteps = 2(n-1) steps, nInter = 2(hosts-1) of them crossing the network.
            nsteps, ninter = 2 * (n - 1), 2 * (hosts - 1)
            lat = (NCCL_BASE_LAT_US["ring"][proto] + (nsteps - ninter) * NCCL_NVLINK_LAT_US["ring"][proto]
                   + ninter * NCCL_NET_LAT_US["ring"][proto]) * US
            # Ring bandwidth: every GPU sends 2(n-1)/n * s; (G-1)/G of it over NVLink, 1/G over its
            # NIC (a rail-aligned ring leaves each host once per channel, one channel per NIC), so
            # the bus bandwidth is min(G/(G-1) * NVLink, G * NIC); one GPU per host: the NIC alone.
            if per_host == 1:
                bus = self.nic
            else:
                bus = min(per_host / (per_host - 1) * self.nvl, per_host * self.nic)
            f = NCCL_RING_PROTO_BW[proto]
            if proto == "LL128" and per_host == 1:
                f = NCCL_RING_LL128_ONE_PER_NODE
            bw = 2 * (n - 1) / n * s / (bus * f)  # ring all-reduce: 2(n-1)/n * S / B_bus
            cand = (lat + bw, f"ring {proto}", lat, bw)
            if best is None or cand[0] < best[0]:
                best = cand
            # Tree (chain inside the host, double binary tree across hosts). Latency: baseLat +
            # 2 * ((G-1) * NVLink step + log2(hosts) * net step): up the tree and back down.
            lat = (NCCL_BASE_LAT_US["tree"][proto] + 2 * ((per_host - 1) * NCCL_NVLINK_LAT_US["tree"][proto]
                   + math.log2(hosts) * NCCL_NET_LAT_US["tree"][proto])) * US
            # Tree bandwidth: each GPU of the chain sends s up (reduce) and s down (broadcast),
            # 2s over NVLink; a host sends s over its G NICs on 2 hosts, 2s on more (it is inner
            # in one of the two trees). NCCL writes it as algbw = 0.5 * busbw, busbw x 0.92.
            net = per_host * self.nic * (1.0 if hosts == 2 else 0.5)
            algbw = min(self.nvl / 2, net) if per_host > 1 else net
            algbw *= NCCL_TREE_BW * NCCL_TREE_PROTO_BW[proto]
            bw = s / algbw
            cand = (lat + bw, f"tree {proto}", lat, bw)
            if cand[0] < best[0]:
                best = cand
        return best

    # -- (a): the all-reduce over hosts x G GPUs --

    def hierarchical(self, s: float, hosts: int) -> dict:
        rs_fix, rs_bw = self.sf_half(s)  # reduce-scatter inside the host: each GPU keeps s/G summed
        ag_fix, ag_bw = self.sf_half(s)  # all-gather inside the host of the s/G shards
        inter, name, inter_lat, inter_bw = self.nccl(s / self.g, hosts, 1)  # shard across hosts, one rank a host
        serial = rs_fix + rs_bw + inter + ag_fix + ag_bw  # three calls, one after the other
        # Perfect chunked pipeline: every fixed cost once, then the busiest resource: NVLink carries
        # the reduce-scatter and the all-gather (sharing it), the NIC the shard's all-reduce.
        pipelined = rs_fix + ag_fix + inter_lat + max(rs_bw + ag_bw, inter_bw)
        return {"serial_s": serial, "pipelined_s": pipelined, "inter_s": inter, "inter_algo": name}

    def flat(self, s: float, hosts: int) -> dict:
        t, name, _, _ = self.nccl(s, hosts, self.g)
        n = hosts * self.g
        # bus bandwidth as nccl-tests prints it: 2(n-1)/n * S / t, to compare with published figures
        return {"nccl_s": t, "nccl_algo": name, "nccl_busbw_GBs": 2 * (n - 1) / n * s / t / GB}


# ---------------------------------------------------------------------------------------------
# (b) the TP x DP training step
# ---------------------------------------------------------------------------------------------

def llama_params() -> int:
    head_dim = HIDDEN // HEADS
    attn = HIDDEN * HIDDEN * 2 + HIDDEN * KV_HEADS * head_dim * 2  # q and o: d x d; k and v: d x (kv heads x head dim)
    mlp = 3 * HIDDEN * FFN  # gate, up, down
    norms = 2 * HIDDEN  # two RMSNorm weights a layer
    return LAYERS * (attn + mlp + norms) + 2 * VOCAB * HIDDEN + HIDDEN  # + embedding, LM head, final norm


def step(m: Model, hosts: int, seq: int, micro: int, tflops: float) -> dict:
    g = m.g
    params = llama_params()
    tokens = seq * micro  # tokens per TP group (host) per step
    # Training FLOPs per token: 6 * params (forward 2, backward 4) + 12 * layers * hidden * seq
    # for attention's scores and values (PaLM, Chowdhery et al. 2022, appendix B).
    flops_token = 6 * params + 12 * LAYERS * HIDDEN * seq
    compute = flops_token * tokens / g / (tflops * 1e12)  # the TP group's FLOPs spread over its G GPUs
    # TP: Megatron-style, an all-reduce of the activations (seq x hidden bf16) after the attention
    # and MLP blocks forward, and of their input gradients backward: 4 per layer per micro-batch.
    msg = seq * HIDDEN * BYTES_BF16
    n_tp = 4 * LAYERS * micro
    tp_sf = n_tp * m.sf_all_reduce(msg)
    tp_nccl = n_tp * m.nccl_intra_all_reduce(msg)
    # DP: every GPU's gradients (params / G in bf16; the TP-replicated norms are neglected) are
    # all-reduced over the H GPUs of its rail, one NCCL communicator per rail, in 25 MiB buckets.
    # symmflow's plan hands this cross-host all-reduce to NCCL, so it is the same in both columns.
    grad = params / g * BYTES_BF16
    nb = math.ceil(grad / BUCKET_BYTES)
    bucket_t = m.nccl(grad / nb, hosts, 1)[0]
    dp = nb * bucket_t
    # Overlap: buckets are ready only in the last micro-batch's backward (gradient accumulation),
    # so at most that backward hides them; the last bucket never hides.
    window = BACKWARD_SHARE * compute / micro
    dp_exposed = max(bucket_t, dp - window)
    opt = params / g * OPTIMIZER_BYTES_PER_PARAM / (HBM_GBS * GB)  # AdamW streams its state once
    base = compute + opt
    return {
        "hosts": hosts, "params": params, "tokens_per_host": tokens, "compute_s": compute,
        "optimizer_s": opt, "tp_msg_bytes": msg, "tp_calls": n_tp, "tp_sf_s": tp_sf, "tp_nccl_s": tp_nccl,
        "grad_bytes_per_gpu": grad, "dp_buckets": nb, "dp_s": dp, "dp_exposed_s": dp_exposed,
        "step_serial_sf_s": base + tp_sf + dp, "step_serial_nccl_s": base + tp_nccl + dp,
        "step_overlap_sf_s": base + tp_sf + dp_exposed, "step_overlap_nccl_s": base + tp_nccl + dp_exposed,
        # Ceiling, not a plan that exists: every TP all-reduce hidden behind the GEMMs by the
        # collective matmuls (docs/cuda.md, "Sequence parallelism"), DP overlapped as above.
        "step_ceiling_sf_s": base + dp_exposed,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hosts", default="2,4,8,16", help="host counts, comma-separated")
    ap.add_argument("--gpus-per-host", type=int, default=8)
    ap.add_argument("--nic-gbps", type=float, default=400.0, help="NIC line rate per GPU, Gb/s")
    ap.add_argument("--nic-efficiency", type=float, default=NIC_EFFICIENCY)
    ap.add_argument("--sf-intra-busbw", type=float, help="override symmflow's extrapolated intra-host GB/s")
    ap.add_argument("--sf-intra-alpha-us", type=float, help="override symmflow's extrapolated two-shot fixed µs")
    ap.add_argument("--tflops", type=float, default=EFFECTIVE_TFLOPS, help="effective bf16 TFLOP/s per GPU")
    ap.add_argument("--seq-len", type=int, default=SEQ_LEN)
    ap.add_argument("--micro-batches", type=int, default=MICRO_BATCHES, help="sequences per host per step")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    hosts = [int(h) for h in a.hosts.split(",")]
    if a.gpus_per_host < 2 or a.gpus_per_host & (a.gpus_per_host - 1):
        ap.error("--gpus-per-host must be a power of two, at least 2 (the fits extrapolate per doubling)")
    if any(h < 2 for h in hosts):
        ap.error("--hosts: every count must be at least 2")
    m = Model(a.gpus_per_host, a.nic_gbps, a.nic_efficiency, a.sf_intra_busbw, a.sf_intra_alpha_us)
    sizes = [1 * MiB, 16 * MiB, 256 * MiB, 1 * GiB]
    ar = []
    for h in hosts:
        for s in sizes:
            row = {"hosts": h, "gpus": h * m.g, "bytes": s, **m.hierarchical(s, h), **m.flat(s, h)}
            row["ratio_serial"] = row["nccl_s"] / row["serial_s"]  # above 1: symmflow's plan faster
            row["ratio_pipelined"] = row["nccl_s"] / row["pipelined_s"]
            ar.append(row)
    steps = [step(m, h, a.seq_len, a.micro_batches, a.tflops) for h in hosts]
    inputs = {
        "gpus_per_host": m.g, "nic_gbps": a.nic_gbps, "nic_effective_GBs": m.nic / GB,
        "nccl_nvlink_busbw_GBs": m.nvl / GB,
        "sf_intra_alpha_us": m.sf_alpha / US, "sf_intra_busbw_GBs": m.sf_bus / GB,
        "nccl_intra_alpha_us": m.nccl_alpha / US, "nccl_intra_busbw_GBs": m.nccl_bus / GB,
        "tflops": a.tflops, "seq_len": a.seq_len, "micro_batches": a.micro_batches,
    }
    if a.json:
        print(json.dumps({"inputs": inputs, "all_reduce": ar, "step": steps}, indent=1))
        return

    def size(b: int) -> str:
        return f"{b // GiB} GiB" if b >= GiB else f"{b // MiB} MiB"

    print(f"Inputs: {m.g} GPUs a host; NIC {a.nic_gbps:g} Gb/s a GPU, {m.nic / GB:.1f} GB/s effective "
          f"({m.g * m.nic / GB:.0f} GB/s a host); symmflow inside a host at {m.g} GPUs: "
          f"alpha {m.sf_alpha / US:.1f} µs, {m.sf_bus / GB:.1f} GB/s bus; NCCL inside a host: "
          f"alpha {m.nccl_alpha / US:.1f} µs, {m.nccl_bus / GB:.1f} GB/s; NCCL NVLink ring {m.nvl / GB:.0f} GB/s.\n")
    print("(a) All-reduce of S bytes (bf16 sum) over H hosts x G GPUs, µs; ratio = NCCL / symmflow "
          "(above 1: symmflow's plan faster)\n")
    print("| H | GPUs | S | hier. serial | hier. pipelined | shard across hosts (NCCL) | NCCL flat | "
          "NCCL flat busbw GB/s | ratio serial | ratio pipelined |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in ar:
        print(f"| {r['hosts']} | {r['gpus']} | {size(r['bytes'])} | {r['serial_s'] / US:.0f} | "
              f"{r['pipelined_s'] / US:.0f} | {r['inter_s'] / US:.0f} ({r['inter_algo']}) | "
              f"{r['nccl_s'] / US:.0f} ({r['nccl_algo']}) | {r['nccl_busbw_GBs']:.0f} | {r['ratio_serial']:.2f} | {r['ratio_pipelined']:.2f} |")
    s0 = steps[0]
    print(f"\n(b) TP={m.g} x DP=H step, Llama-8B shape ({s0['params'] / 1e9:.2f} B parameters), "
          f"{s0['tokens_per_host']} tokens a host a step ({a.micro_batches} x {a.seq_len}), "
          f"{a.tflops:g} TFLOP/s a GPU; {s0['tp_calls']} TP all-reduces of {s0['tp_msg_bytes'] / MiB:.0f} MiB, "
          f"{s0['grad_bytes_per_gpu'] / 1e9:.2f} GB of gradients a GPU in {s0['dp_buckets']} buckets; ms\n")
    print("| H | compute + optimizer | TP comm sf | TP comm NCCL | DP all-reduce | DP exposed (overlap) | "
          "step, no overlap: sf / NCCL | step, DP overlapped: sf / NCCL | NCCL / sf | ceiling sf (TP hidden) |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in steps:
        ms = 1e3
        print(f"| {r['hosts']} | {(r['compute_s'] + r['optimizer_s']) * ms:.0f} | {r['tp_sf_s'] * ms:.0f} | "
              f"{r['tp_nccl_s'] * ms:.0f} | {r['dp_s'] * ms:.1f} | {r['dp_exposed_s'] * ms:.1f} | "
              f"{r['step_serial_sf_s'] * ms:.0f} / {r['step_serial_nccl_s'] * ms:.0f} | "
              f"{r['step_overlap_sf_s'] * ms:.0f} / {r['step_overlap_nccl_s'] * ms:.0f} | "
              f"{r['step_overlap_nccl_s'] / r['step_overlap_sf_s']:.2f} | {r['step_ceiling_sf_s'] * ms:.0f} |")


if __name__ == "__main__":
    main()
