"""The baseline: what torchrun does for one gloo all_reduce (run by notebook_vs_torchrun.py)."""
import os

import torch
import torch.distributed as dist

os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
dist.init_process_group("gloo")
t = torch.tensor([dist.get_rank() + 1.0])
dist.all_reduce(t)
assert t.item() == dist.get_world_size() * (dist.get_world_size() + 1) / 2
dist.destroy_process_group()
