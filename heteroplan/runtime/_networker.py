"""Process body of :func:`heteroplan.runtime.netbench.measure_network` (imports only torch: fast to spawn)."""

from __future__ import annotations

import json
import statistics
import time
from datetime import timedelta
from pathlib import Path


def ping_pong(
    rank: int, world_size: int, port: int, backend: str, sizes: tuple[int, ...], warmup: int, repeats: int,
    out_path: str, timeout_s: float,
) -> None:  # pragma: no cover - runs in spawned processes
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group(
        backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world_size,
        timeout=timedelta(seconds=timeout_s),
    )
    device = torch.device("cuda", rank) if backend == "nccl" else torch.device("cpu")
    sync = (lambda: torch.cuda.synchronize(device)) if backend == "nccl" else (lambda: None)
    one_way: dict[int, list[float]] = {s: [] for s in sizes}
    for peer in range(1, world_size):
        for size in sizes:
            buf = torch.zeros(max(size // 4, 1), dtype=torch.float32, device=device)
            times = []
            for r in range(warmup + repeats):
                if rank == 0:
                    sync()
                    t0 = time.perf_counter()
                    dist.send(buf, peer)
                    dist.recv(buf, peer)
                    sync()
                    if r >= warmup:
                        times.append((time.perf_counter() - t0) / 2)
                elif rank == peer:
                    dist.recv(buf, 0)
                    dist.send(buf, 0)
                    sync()
            if rank == 0:
                one_way[size].append(statistics.median(times))
    dist.barrier()
    if rank == 0:
        Path(out_path).write_text(json.dumps({str(s): t for s, t in one_way.items()}))
    dist.destroy_process_group()
