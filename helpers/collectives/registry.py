"""The registry of collectives: every other module reads what it knows about one from here.

Per collective: its tensor arguments in torch's order and the role each plays on a
rank (tensor_arguments builds them), the one it writes, the parameter naming its root,
whether it reduces, the argument pair our drawings show, the upstream diagram (URL and
credit) and, for the eight nccl-tests measures, its busbw factor.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping, TypeVar

COLLECTIVES = (
    "scatter", "gather", "broadcast", "reduce", "all_reduce", "all_gather",
    "all_gather_single", "reduce_scatter", "reduce_scatter_single",
    "all_to_all", "all_to_all_single", "send_recv",
)
# The eight collectives nccl-tests measures, in its order (helpers.bench, notebook 11).
BENCHMARKED = ("scatter", "gather", "broadcast", "reduce", "all_reduce", "all_gather",
               "reduce_scatter", "all_to_all")
REDUCE_OPS = ("SUM", "PRODUCT", "MIN", "MAX", "AVG", "BAND", "BOR", "BXOR")

# Tensor arguments of each collective, in torch's order, with the role each plays on a
# rank: "input" one piece, "inputs" one piece per rank, "input_flat" those pieces end to
# end; "output"/"outputs"/"output_flat" the same shapes, to be written. "X@root" is
# passed by the root only (None elsewhere); "X@root:Y" is X on the root, Y elsewhere.
# send_recv: the src's "tensor" is sent, the dst's is the receive buffer, every other
# rank passes nothing. tensor_arguments (below) builds a rank's arguments from these.
ROLES: dict[str, dict[str, str]] = {
    "scatter": {"tensor": "output", "scatter_list": "inputs@root"},
    "gather": {"tensor": "input", "gather_list": "outputs@root"},
    "broadcast": {"tensor": "input@root:output"},
    "reduce": {"tensor": "input"},
    "all_reduce": {"tensor": "input"},
    "all_gather": {"tensor_list": "outputs", "tensor": "input"},
    "all_gather_single": {"output_tensor": "output_flat", "input_tensor": "input"},
    "reduce_scatter": {"output": "output", "input_list": "inputs"},
    "reduce_scatter_single": {"output": "output", "input": "input_flat"},
    "all_to_all": {"output_tensor_list": "outputs", "input_tensor_list": "inputs"},
    "all_to_all_single": {"output": "output_flat", "input": "input_flat"},
    "send_recv": {"tensor": "input"},
}
ARGS = {c: tuple(roles) for c, roles in ROLES.items()}
# The argument a collective writes (in place for broadcast, reduce, all_reduce).
OUTPUT = {c: ("gather_list" if c == "gather" else "tensor_list" if c == "all_gather"
              else "output_tensor_list" if c == "all_to_all" else args[0])
          for c, args in ARGS.items()}
LIST_ARGS = {arg for roles in ROLES.values() for arg, role in roles.items()
             if role.split("@")[0] in ("inputs", "outputs")}
SPLIT_ARGS = ("output_split_sizes", "input_split_sizes")   # all_to_all_single: ints
ROOT = {"scatter": "src", "broadcast": "src", "gather": "dst", "reduce": "dst"}
REDUCING = {"reduce", "all_reduce", "reduce_scatter", "reduce_scatter_single"}
# The argument whose content the API leaves undefined after the call on non-root ranks.
UNDEFINED_OFF_ROOT = {"reduce": "tensor"}
# (input argument, output argument) our drawings show, for the collectives drawn.
IO_ARGS = {
    "scatter": ("scatter_list", "tensor"), "gather": ("tensor", "gather_list"),
    "broadcast": ("tensor", "tensor"), "reduce": ("tensor", "tensor"),
    "all_reduce": ("tensor", "tensor"), "all_gather": ("tensor", "tensor_list"),
    "reduce_scatter": ("input_list", "output"),
    "all_to_all": ("input_tensor_list", "output_tensor_list"),
    "send_recv": ("tensor", "tensor"),
}


# --------------------------------------------------------------------------- call arguments
Tensor = TypeVar("Tensor")


def root_of(collective: str, params: Mapping[str, Any] | None = None) -> int | None:
    """The rank named by the collective's root parameter (default 0); None if it has none."""
    return (params or {}).get(ROOT[collective], 0) if collective in ROOT else None


def send_recv_ranks(world_size: int, params: Mapping[str, Any] | None = None
                    ) -> tuple[int, int]:
    """(src, dst) of a send/recv pair: params' or 0 → 1 (1 → 0 when src is 1)."""
    params = params or {}
    src = params.get("src", 0)
    dst = params.get("dst", 1 if src != 1 else 0)
    if not (0 <= src < world_size and 0 <= dst < world_size) or src == dst:
        raise ValueError(f"send_recv needs two different ranks in 0..{world_size - 1}: "
                         f"src={src}, dst={dst}")
    return src, dst


def tensor_arguments(collective: str, rank: int, world_size: int,
                     piece: Callable[[int], Tensor], zeros: Callable[[int], Tensor],
                     concat: Callable[[list[Tensor]], Tensor],
                     params: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """This rank's tensor arguments for `collective`, built from ROLES, in torch's order.

    `piece(j)`: this rank's input piece j (a single input is piece 0); `zeros(k)`: a
    zero buffer of k pieces; `concat(pieces)`: pieces end to end. Roots come from
    `params` (default 0); an argument a rank does not pass is None.
    """
    if collective not in ROLES:
        raise ValueError(f"unknown collective {collective!r}; known: {', '.join(COLLECTIVES)}")
    if collective == "send_recv":
        src, dst = send_recv_ranks(world_size, params)
        return {"tensor": piece(0) if rank == src else zeros(1) if rank == dst else None}
    build = {"input": lambda: piece(0),
             "inputs": lambda: [piece(j) for j in range(world_size)],
             "input_flat": lambda: concat([piece(j) for j in range(world_size)]),
             "output": lambda: zeros(1),
             "outputs": lambda: [zeros(1) for _ in range(world_size)],
             "output_flat": lambda: zeros(world_size),
             "none": lambda: None}
    on_root = rank == root_of(collective, params)
    arguments = {}
    for arg, role in ROLES[collective].items():
        role, at_root, elsewhere = role.partition("@root")
        if at_root and not on_root:
            role = elsewhere.removeprefix(":") or "none"
        arguments[arg] = build[role]()
    return arguments


def call_keywords(collective: str, root: int = 0, op: Any = None) -> dict[str, Any]:
    """The keywords besides the tensors: the root parameter (src/dst), and op if it reduces."""
    if collective not in ARGS or collective == "send_recv":
        raise ValueError(f"no single torch.distributed call for {collective!r}")
    keywords: dict[str, Any] = {ROOT[collective]: root} if collective in ROOT else {}
    if collective in REDUCING and op is not None:
        keywords["op"] = op
    return keywords


# --------------------------------------------------------------------------- diagrams
PYTORCH_BASE = "https://docs.pytorch.org/tutorials/_images"
NCCL_BASE = "https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/_images"
PYTORCH_CREDIT = ("PyTorch tutorial 'Writing Distributed Applications with PyTorch' (Séb Arnold), "
                  "https://pytorch.org/tutorials/intermediate/dist_tuto.html")
NCCL_CREDIT = "NVIDIA NCCL User Guide, Collective Operations"
PYTORCH_LICENCE = "BSD-3-Clause (pytorch/tutorials)"
NCCL_LICENCE = "Apache-2.0 (NVIDIA/nccl)"


@dataclass(frozen=True)
class Upstream:
    """Where a collective's upstream diagram lives, and whose it is."""
    base_url: str
    filename: str
    credit: str
    licence: str

    @property
    def url(self) -> str:
        return f"{self.base_url}/{self.filename}"


def _pytorch(name: str) -> Upstream:
    return Upstream(PYTORCH_BASE, f"{name}.png", PYTORCH_CREDIT, PYTORCH_LICENCE)


def _nccl(name: str) -> Upstream:
    return Upstream(NCCL_BASE, f"{name}.png", NCCL_CREDIT, NCCL_LICENCE)


# Collectives drawn like another one (same data movement, flat buffers).
ALIASES = {"all_gather_single": "all_gather", "reduce_scatter_single": "reduce_scatter",
           "all_to_all_single": "all_to_all"}
UPSTREAM: dict[str, Upstream] = {
    **{name: _pytorch(name) for name in
       ("scatter", "gather", "broadcast", "reduce", "all_reduce", "all_gather", "send_recv")},
    "reduce_scatter": _nccl("reducescatter"),
    "all_to_all": _nccl("alltoall"),
}
UPSTREAM.update({alias: UPSTREAM[target] for alias, target in ALIASES.items()})


# --------------------------------------------------------------------------- names
def op_name(op: Any) -> str:
    """ReduceOp.SUM, "SUM" or "ReduceOp.SUM" → "SUM" (as given: not checked)."""
    return getattr(op, "name", None) or str(op).rsplit(".", 1)[-1]


def positive_int(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return value


def check_benchmarked(collective: str) -> str:
    """`collective` if nccl-tests measures it (BENCHMARKED), else ValueError listing them."""
    if collective not in BENCHMARKED:
        raise ValueError(f"unknown collective {collective!r}; valid: {', '.join(BENCHMARKED)}")
    return collective


def bus_factor(collective: str, n: int) -> float:
    """busbw / algbw for `collective` on n ranks (nccl-tests' table)."""
    check_benchmarked(collective)
    n = positive_int("world_size", n)
    if collective == "all_reduce":
        return 2 * (n - 1) / n
    if collective in ("broadcast", "reduce"):
        return 1.0
    return (n - 1) / n


def split_sizes(sizes: Any, name: str, length: int, world_size: int,
                uneven: str, wrong: str) -> list[int]:
    """all_to_all_single's `name` split sizes, or the even split when `sizes` is None.

    `uneven` and `wrong` are the messages (formatted with sizes) for a length that
    does not split evenly and for sizes that are not world_size counts adding up to it.
    """
    if sizes is None:
        if length % world_size:
            raise ValueError(uneven)
        return [length // world_size] * world_size
    sizes = [int(s) for s in sizes]
    if len(sizes) != world_size or sum(sizes) != length or min(sizes) < 0:
        raise ValueError(wrong.format(sizes=sizes))
    return sizes
