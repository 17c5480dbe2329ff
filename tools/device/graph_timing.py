"""Timing shared by the PyTorch comparison scripts. time_graph: fn captured `calls` times as one
CUDA graph, replayed `replays` times after `warmup` replays, each replay started together on every
rank; a sample is one replay's time / calls on the slowest rank; returns the median sample in µs.
The C++ benches time symmflow the same way (bench/cuda/bench_util.hpp). call_median_us: whole
calls as a user makes them (compiled functions, eager models)."""
import statistics
import time

import torch
import torch.distributed as dist


def join_gpu_world():
    """Joins torchrun's world over NCCL (NVLink multicast off, as the lent machines need) with
    this rank on GPU rank % GPUs; returns (rank, world, device)."""
    import os

    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device("cuda", rank % torch.cuda.device_count())
    torch.cuda.set_device(device)
    return rank, world, device


def time_graph(fn, calls=1, replays=30, warmup=3):
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        fn()  # lazy initialisation outside the capture
    torch.cuda.current_stream().wait_stream(stream)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(calls):
            fn()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    samples = []
    for r in range(-warmup, replays):
        dist.barrier()
        torch.cuda.synchronize()
        start.record()
        graph.replay()
        end.record()
        torch.cuda.synchronize()
        if r >= 0:
            samples.append(start.elapsed_time(end) * 1000.0 / calls)
    t = torch.tensor(samples, device="cuda")
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return statistics.median(t.tolist())


def call_median_us(fn, iters, warmup=3, synchronised=True):
    """Median µs of `iters` calls of fn after `warmup` ones. synchronised: a call's time runs until
    the GPU has finished it; else until fn returns (its host time), the GPU synchronised after the
    timing."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        start = time.perf_counter()
        fn()
        if synchronised:
            torch.cuda.synchronize()
        times.append((time.perf_counter() - start) * 1e6)
        torch.cuda.synchronize()
    return statistics.median(times)
