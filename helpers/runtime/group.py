"""The engines join one process group: rank order, rendezvous, one retry when slow.

Called by helpers.runtime.cluster (`start_cluster`); the engine side is
helpers.runtime.engine (open_store, join_group, leave_group).
"""
from __future__ import annotations

from dataclasses import dataclass

import ipyparallel as ipp

from helpers.runtime import engine, launchers

START_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class RankInfo:
    rank: int
    engine_id: int
    device: str
    host: str
    pid: int
    gpu: str | None = None
    joined_ns: int = 0       # when it began to join this group, on its host's clock


def _rank_order(client: ipp.Client, plan: launchers.LaunchPlan,
                n_ranks: int) -> list[tuple[int, int, int]]:
    """(engine id, rank, local rank) for each rank, in rank order.

    Local launcher: rank = position in the sorted engine ids. MPI and Slurm: the
    rank each engine's environment gives (OMPI_COMM_WORLD_RANK, SLURM_PROCID, ...).
    """
    engine_ids = sorted(client.ids)[:n_ranks]
    if plan.launcher == "local":
        return [(eid, rank, rank) for rank, eid in enumerate(engine_ids)]
    found = client[engine_ids].apply_async(
        launchers.rank_from_environment).get(timeout=START_TIMEOUT_S)
    if any(f is None for f in found):
        raise RuntimeError(f"launcher {plan.launcher!r}: an engine has no MPI/Slurm rank")
    order = sorted(zip(engine_ids, found), key=lambda pair: pair[1][0])
    return [(eid, rank, local) for eid, (rank, local, _size) in order]


def join_process_group(client: ipp.Client, backend: str, timeout_s: float, debug: str,
                        plan: launchers.LaunchPlan, n_ranks: int) -> list[RankInfo]:
    """Every engine joins; with a short timeout on a busy machine, one retry.

    The timeout bounds the ranks' meeting at init as well as every collective: a few
    seconds (good for debugging) can be too short for a loaded machine to connect.
    """
    order = _rank_order(client, plan, n_ranks)
    attempts = 2 if timeout_s < 30 else 1
    for attempt in range(1, attempts + 1):
        try:
            return _join_once(client, order, backend, timeout_s, debug, plan)
        except ipp.error.RemoteError as err:  # e.g. DistStoreError: wait timeout
            if attempt == attempts:
                raise RuntimeError(
                    f"the ranks did not all join the {backend} process group within the "
                    f"{timeout_s:g} s timeout ({err.ename}: {err.evalue}); on a busy machine "
                    "use a longer timeout (timeout_s=... or TUTORIAL_TIMEOUT)") from None
            ids = [eid for eid, _, _ in order]
            client[ids].apply_async(engine.leave_group).get(timeout=START_TIMEOUT_S)
    raise AssertionError("unreachable")


def _join_once(client: ipp.Client, order: list[tuple[int, int, int]], backend: str,
               timeout_s: float, debug: str, plan: launchers.LaunchPlan) -> list[RankInfo]:
    world_size = len(order)
    master = order[0][0]
    host = plan.rendezvous_host
    if plan.launcher == "slurm":  # rank 0's node is the rendezvous
        host = client[master].apply_sync(launchers.interface_address, plan.interface)
    port = client[master].apply_async(engine.open_store, host).get(timeout=START_TIMEOUT_S)
    pending = [
        client[eid].apply_async(engine.join_group, rank, world_size, backend, port,
                                timeout_s, local_rank, host, plan.interface, debug)
        for eid, rank, local_rank in order
    ]
    ranks, first_error = [], None
    for (eid, _rank, _local), result in zip(order, pending):
        try:
            info = result.get(timeout=START_TIMEOUT_S)
        except ipp.error.TimeoutError:
            raise TimeoutError(
                f"engine {eid} did not join the {backend} process group within "
                f"{START_TIMEOUT_S:g} s") from None
        except ipp.error.RemoteError as err:
            first_error = first_error or err   # wait for the others before raising
            continue
        ranks.append(RankInfo(rank=info["rank"], engine_id=eid, device=info["device"],
                              host=info["host"], pid=info["pid"], gpu=info["gpu"],
                              joined_ns=info["joined_ns"]))
    if first_error is not None:
        raise first_error
    return ranks
