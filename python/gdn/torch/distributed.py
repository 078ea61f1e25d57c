"""Context parallel: one packed token stream split over the ranks of a ``torch.distributed`` group,
each rank holding a contiguous slice of it, with the result of one process (no approximation).

    import gdn.torch.distributed as gcp
    o, final = gcp.chunk_gated_delta_rule(q, k, v, g, beta, cu_seqlens=cu_seqlens, group=group)

Each rank passes its own slice ``[1, T_rank, ...]`` of q, k, v, g and beta and the same global
``cu_seqlens`` (offsets into the concatenation of every rank's slice, in rank order); slices may
differ in length, and a sequence may cross any number of rank boundaries.

Why it is exact. The state's update over a token range is affine in the state it starts from:
the range takes S to ``M S + E``, where ``M`` (K x K, per value head) is the product of the
tokens' transitions ``decay_t (I - beta_t k_t k_t^T)`` and ``E`` is the range's state started
from zero. The outputs are affine in it too: ``o_t = o_t|zero + P_t S`` with ``P_t`` the
scaled ``q_t^T`` times the transitions up to t. The library gives each piece as a plain forward
(SPEC section 2): values 0 from the identity end in ``M`` with outputs ``P``; the values from
zero end in ``E``. A rank whose first tokens continue a sequence begun on an earlier rank
computes that sequence's ``M`` (and ``E`` where it passes through the whole slice; the
sequences that begin on the rank end in their own final states), without outputs; the ranks
all-gather their ``(M, E)``, and each combines the summaries of the ranks before it, in rank
order, into the true state S its slice starts from, then runs its continuing tokens plainly
from S.

The backward is one plain backward call per rank from that true S, once the gradient of the state
its slice ends in is known. That gradient is the gradient of the next rank's starting state,
``dS = P^T dO + M^T dS_next`` over the next rank's continuing tokens (``dS_next`` where the
sequence goes on past it): each rank computes its ``P^T dO`` (P made again, one forward's work,
rather than kept: HV K values a token), plus ``M^T`` of its own final-state gradient where the
sequence ends on it, the ranks all-gather those, and each combines the ranks after it. No rank
waits for another's compute: a forward makes two all-gathers (the slices' layout, then the
summaries), a backward one.

Cost per rank, against one process's share of the work: where a sequence continues in, the
forward adds one pass over those tokens without outputs (M; E too where the sequence passes
through) and the backward one forward with outputs (P) and the product ``P^T dO``; memory is
the share's, plus P in the backward before the gradients are allocated. Communication per
forward (per rank, sent and gathered from every rank): ``HV * K * (K + V)`` state-sized values,
and ``HV * K * V`` per backward, in float32 (float64 in a float64 call), whatever the sequence
length: at the Qwen3.5-27B shape (HV 48, K = V = 128) 6.3 MB forward and 3.1 MB backward per
rank and layer, so a ring all-gather receives (ranks - 1) times that. Ranks whose slices no
sequence crosses skip it.

Final states and the initial states' gradients are global ``[N, HV, K, V]`` tensors on every
rank: row n is filled on the rank that holds sequence n's last token (its first token, for the
initial state's gradient), zero elsewhere, so their sum over ranks is one process's. A
zero-length sequence belongs to the rank whose slice holds its offset (the last rank with tokens,
for an offset at the very end).

What every rank must agree on (the offsets, whether an initial state is given and a final state
wanted, q/k/v's dtype and head sizes, the scale, the l2 normalisation, the precision) rides on
the layout's all-gather with each rank's slice length, and so does whether a rank refused its own
arguments: a mismatch or a refusal is an error on every rank, not a hang.
"""

import struct

import bisect
from typing import List, NamedTuple

import torch
import torch.distributed as dist

from .. import _core, _errors, _gdn
from .._fla_args import check_state, prepare, readable, readable_state, state_v_first_alias
from . import _HEAD_MAP_GROUPED, _backward_op, _context_for, _empty, _gdn_view, _normalized

__all__ = ["chunk_gated_delta_rule"]


class _Slice(NamedTuple):
    """How one rank's slice [t0, t1) of the packed stream cuts the global sequences."""
    t0: int
    t1: int
    first: int            # the first global sequence with tokens (or an owned empty one) on the rank
    offsets: List[int]    # the rank's own cu_seqlens: sequences first .. first + len - 2, cut to the slice
    continues_in: bool    # its first tokens continue a sequence begun on an earlier rank
    continues_out: bool   # its last sequence goes on past the slice

    @property
    def size(self):
        return self.t1 - self.t0

    @property
    def sequences(self):
        return len(self.offsets) - 1

    @property
    def passes_through(self):
        """One sequence crosses the whole slice: the rank's summary is a transition, not a fresh state."""
        return self.continues_in and self.continues_out and self.sequences == 1

    @property
    def head_end(self):
        """Where the continuing sequence's tokens end in the slice (0 when none continues in)."""
        return self.offsets[1] if self.continues_in else 0


def _slices(offsets, sizes):
    """Every rank's _Slice, from the global offsets and the ranks' slice lengths."""
    starts = [0]
    for n in sizes:
        starts.append(starts[-1] + n)
    last_nonempty = max((r for r, n in enumerate(sizes) if n > 0), default=0)
    slices = []
    for r, size in enumerate(sizes):
        t0, t1 = starts[r], starts[r + 1]
        owned = []
        # Only the sequences around the slice can touch it (empty ones sit at repeated offsets).
        for n in range(max(bisect.bisect_left(offsets, t0) - 1, 0), min(bisect.bisect_right(offsets, t1),
                                                                         len(offsets) - 1)):
            begin, end = offsets[n], offsets[n + 1]
            if begin < end:
                mine = size > 0 and begin < t1 and end > t0
            else:  # an empty sequence: the rank whose slice holds its offset, or the last one that has tokens
                mine = t0 <= begin < t1 or (begin == starts[-1] and r == last_nonempty)
            if mine:
                owned.append(n)
        if not owned:
            slices.append(_Slice(t0, t1, 0, [0], False, False))
            continue
        first, last = owned[0], owned[-1]
        local = [max(offsets[n], t0) - t0 for n in owned] + [min(offsets[last + 1], t1) - t0]
        slices.append(_Slice(t0, t1, first, local, size > 0 and offsets[first] < t0,
                             size > 0 and offsets[last + 1] > t1))
    return slices


def _all_gather(x, group, world):
    """x of every rank, stacked in rank order (gloo and NCCL both take the list form)."""
    parts = [torch.empty_like(x) for _ in range(world)]
    dist.all_gather(parts, x.contiguous(), group=group)
    return torch.stack(parts)


_DTYPE_CODES = {torch.float32: 1, torch.float64: 2, torch.bfloat16: 3, torch.float16: 4}
_SIGNATURE_LENGTH = 9  # what _signature gives


def _signature(v, K, initial_state, want_final, scale, l2norm, precision):
    """The call's arguments every rank must pass alike, as integers (besides the offsets)."""
    scale_bits = struct.unpack("<q", struct.pack("<d", float(scale)))[0] if scale is not None else 0
    return (int(initial_state is not None), int(want_final), _DTYPE_CODES.get(v.dtype, 0), v.shape[2], K, v.shape[3],
            int(l2norm), int(precision), scale_bits if scale is not None else -1)


def _layout_row(T, offsets, signature):
    """A rank's row of the layout's all-gather: valid, its slice length, the offsets' presence,
    count and checksum, and the signature. A rank that refused its arguments sends valid = 0."""
    if offsets is None and signature is None:
        return [0] * (5 + _SIGNATURE_LENGTH)
    given = offsets is not None
    checksum = sum((i + 1) * c for i, c in enumerate(offsets)) % (1 << 61) if given else 0
    return [1, T, int(given), len(offsets) if given else 0, checksum, *signature]


def _refuse_together(group, device):
    """This rank refused its arguments: it still takes part in the layout's all-gather, so that the
    others raise too instead of waiting for it (the caller then raises its own error)."""
    world = dist.get_world_size(group)
    _all_gather(torch.tensor(_layout_row(0, None, None), dtype=torch.int64, device=device), group, world)


def _layout(T, offsets, signature, group, world, device):
    """The ranks' slices. What every rank must agree on rides on the lengths' all-gather (the
    offsets' count and a checksum, whether they were given, and the call's signature), with
    whether each rank accepted its arguments, so that a mismatch or a refusal is an error on
    every rank, not a hang or a wrong result. offsets None: the ranks' slices are one sequence."""
    mine = torch.tensor(_layout_row(T, offsets, signature), dtype=torch.int64, device=device)
    gathered = _all_gather(mine, group, world).cpu().tolist()
    refused = [r for r, row in enumerate(gathered) if not row[0]]
    if refused:
        raise _errors.InvalidArgumentError(
            f"rank{'s' if len(refused) > 1 else ''} {', '.join(map(str, refused))} of the group refused "
            "their arguments (their own errors say why); every rank raises")
    if any(row[2:] != gathered[0][2:] for row in gathered):
        raise _errors.InvalidArgumentError(
            "the ranks' calls differ: every rank passes the same global cu_seqlens (or none), an initial state and "
            "output_final_state alike, q/k/v of one dtype and head sizes, and the same scale, "
            "use_qk_l2norm_in_kernel and precision")
    sizes = [row[1] for row in gathered]
    if offsets is None:
        offsets = [0, sum(sizes)]
    if offsets[-1] != sum(sizes):
        raise _errors.ShapeError(f"cu_seqlens ends at {offsets[-1]} but the ranks' slices hold {sum(sizes)} tokens "
                                 f"({sizes}): the offsets index the concatenation of every rank's slice")
    return offsets, _slices(offsets, sizes)


def _chain(slices, rank, step):
    """The ranks, from rank + step on in the direction of step (skipping empty slices), that a
    sequence crossing rank's boundary on that side goes through, up to the first one it does not
    pass through: that rank's summary is the chain's fresh end."""
    chain, j = [], rank + step
    while True:
        if slices[j].size > 0:
            chain.append(j)
            if not slices[j].passes_through:
                return chain
        j += step


def _incoming_state(chain, M, E):
    """The state a rank's slice starts from: its chain's summaries combined in rank order (every
    rank that needs one computes the same sums). M[i], E[i]: those of rank chain[i]."""
    S = E[-1]
    for i in reversed(range(len(chain) - 1)):
        S = torch.matmul(M[i], S) + E[i]
    return S


def _outgoing_gradient(chain, M, G):
    """The gradient of the state a rank's slice ends in: its chain's shares combined from the far end."""
    dS = G[-1]
    for i in reversed(range(len(chain) - 1)):
        dS = G[i] + torch.matmul(M[i].transpose(-1, -2), dS)
    return dS


def _call(q, k, v, gate, beta, s0, offsets, out, final, scale, precision):
    """One library forward over gdn-layout q, k, v, gate, beta (unit dimensions given), writing
    where it is told: out (None: no outputs, the products that make them are skipped) and the
    final states (None: not wanted); s0 and final [N, HV, K, V] (None s0: zero)."""
    _gdn.forward(_context_for(v)._native, q, k, v, gate, beta, _gdn_view(s0, False), out, _gdn_view(final, False),
                 scale, _HEAD_MAP_GROUPED, False, offsets, None, precision)


def _zero_values(L, HV, K, like):
    """Values of zero [1, L, HV, K] in like's dtype, without L * HV * K of them in memory: one
    buffer of L + HV + K zeros that every token and head reads from its own offset (the library
    reads inputs through any positive strides; only outputs may not overlap)."""
    return torch.zeros(L + HV + K, dtype=like.dtype, device=like.device).as_strided((1, L, HV, K), (0, 1, 1, 1))


def _identity_states(HV, K, dtype, device):
    """[1, HV, K, K]: the identity per value head, as a state (strides the library reads)."""
    return torch.eye(K, dtype=dtype, device=device).expand(1, HV, K, K).contiguous()


def _from_identity(q, k, gate, beta, out, final, state_dtype, scale, precision):
    """Values 0 from the identity over the tokens given (one sequence): the outputs are P [1, L,
    HV, K], written into out, and the final state M [1, HV, K, K] into final (None: not wanted)."""
    L, HV, K = q.shape[1], gate.shape[2], q.shape[3]
    _call(q, k, _zero_values(L, HV, K, q), gate, beta, _identity_states(HV, K, state_dtype, q.device), None, out, final,
          scale, precision)


class _ContextParallel(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, gate, beta, initial_state, offsets, scale, want_final, l2norm, precision, group):
        rank, world = dist.get_rank(group), dist.get_world_size(group)
        signature = _signature(v, q.shape[3], initial_state, want_final, scale, l2norm, precision)
        offsets, slices = _layout(q.shape[1], offsets, signature, group, world, q.device)
        me = slices[rank]
        HV, K, V = v.shape[2], q.shape[3], v.shape[3]
        state_dtype = torch.float64 if v.dtype == torch.float64 else torch.float32
        head = me.head_end  # tokens [0, head): the continuing sequence's, if one continues in
        # q and k normalised once, in their own dtype, as one process normalises them.
        q_used, k_used = (_normalized(q), _normalized(k)) if l2norm else (q, k)
        out = _empty(v.shape, v)  # every call below writes its tokens' rows of it

        # The sequences that begin on this rank: one plain call, before the all-gather (the last
        # one's final state is this rank's summary when it goes on past the slice).
        first_rest = me.first + (1 if me.continues_in else 0)
        rest = me.sequences - (1 if me.continues_in else 0)
        final_rest = None
        if rest > 0 and me.size == 0:  # only empty sequences: each ends in the state it begins with
            final_rest = initial_state[first_rest:first_rest + rest] if initial_state is not None else \
                torch.zeros(rest, HV, K, V, dtype=state_dtype, device=q.device)
        elif rest > 0:
            rest_offsets = torch.tensor([t - head for t in me.offsets[me.sequences - rest:]], dtype=torch.int64)
            s0 = None if initial_state is None else readable_state(initial_state[first_rest:first_rest + rest])
            final_rest = _empty((rest, HV, K, V), v, state_dtype)
            _call(q_used[:, head:], k_used[:, head:], v[:, head:], gate[:, head:], beta[:, head:], s0, rest_offsets,
                  out[:, head:], final_rest, scale, precision)
        # The continuing one's summary: its transition M (values 0 from the identity) and, where
        # it passes through, its state from zero E; no outputs (SPEC section 2's summary, its
        # value columns computed apart).
        head_rows = [x[:, :head] for x in (q_used, k_used, v, gate, beta)]
        M_head = None
        summary = torch.zeros(HV, K, K + V, dtype=state_dtype, device=q.device)  # [M | E], what this rank sends
        if me.continues_in:
            M_head = torch.empty(1, HV, K, K, dtype=state_dtype, device=q.device)
            _from_identity(*head_rows[:2], *head_rows[3:], None, M_head, state_dtype, scale, precision)
            M_head = M_head[0]
            if me.passes_through:
                E_head = torch.empty(1, HV, K, V, dtype=state_dtype, device=q.device)
                _call(*head_rows, None, None, None, E_head, scale, precision)
                summary[..., :K], summary[..., K:] = M_head, E_head[0]
        if me.continues_out and not me.passes_through:
            summary[..., K:] = final_rest[-1]
        if any(s.continues_in for s in slices):  # the same answer on every rank: all take part or none
            gathered = _all_gather(summary, group, world)

        finals = torch.zeros(len(offsets) - 1, HV, K, V, dtype=state_dtype, device=q.device) if want_final else None
        S = None
        if me.continues_in:
            # The continuing tokens from the true state they start in: a plain call.
            chain = _chain(slices, rank, -1)
            S = _incoming_state(chain, gathered[chain, ..., :K], gathered[chain, ..., K:])
            ends_here = want_final and not me.passes_through
            final_head = torch.empty(1, HV, K, V, dtype=state_dtype, device=q.device) if ends_here else None
            _call(*head_rows, S[None], None, out[:, :head], final_head, scale, precision)
            if ends_here:
                finals[me.first] = final_head[0]
        if rest > 0 and want_final:
            ending = rest - (1 if me.continues_out else 0)
            finals[first_rest:first_rest + ending] = final_rest[:ending]

        # For the backward: the transitions of the ranks after this one that its last sequence passes through.
        M_after = None
        if me.continues_out:
            after = _chain(slices, rank, +1)
            M_after = gathered[after[:-1], ..., :K]
        ctx.save_for_backward(q, k, v, gate, beta, initial_state, S, M_head, M_after)
        ctx.plan = (slices, rank, world, group, scale, l2norm, precision, state_dtype)
        return out, (finals if want_final else out.new_empty(0))

    @staticmethod
    def backward(ctx, d_out, d_finals):
        q, k, v, gate, beta, initial_state, S, M_head, M_after = ctx.saved_tensors
        slices, rank, world, group, scale, l2norm, precision, state_dtype = ctx.plan
        me = slices[rank]
        HV, K, V = v.shape[2], q.shape[3], v.shape[3]
        d_finals = d_finals if d_finals is not None and d_finals.numel() > 0 else None

        # This rank's share of the gradient of the state its slice starts from. P is made again
        # here (one forward's work) rather than kept from the forward (HV K values a token), and
        # freed before the backward call allocates the gradients.
        G = torch.zeros(HV, K, V, dtype=state_dtype, device=q.device)
        if me.continues_in:
            if d_out is not None:
                head = me.head_end
                q_head, k_head = (_normalized(q[:, :head]), _normalized(k[:, :head])) if l2norm else \
                    (q[:, :head], k[:, :head])
                # In the state's dtype: an output takes q's, so half q, k (and beta) are widened.
                q_head, k_head, beta_head = (x.to(state_dtype) for x in (q_head, k_head, beta[:, :head]))
                P = _empty((1, head, HV, K), q_head, state_dtype)
                _from_identity(q_head, k_head, gate[:, :head], beta_head, P, None, state_dtype, scale, precision)
                del q_head, k_head, beta_head
                G += torch.einsum("bthk,bthv->hkv", P, d_out[:, :head].to(state_dtype))
                del P
            if not me.passes_through and d_finals is not None:
                G += torch.matmul(M_head.transpose(-1, -2), d_finals[me.first].to(state_dtype))
        if any(s.continues_in for s in slices):
            G_all = _all_gather(G, group, world)

        count = me.sequences
        if me.size == 0:  # no tokens; empty sequences, if any, end in the state they begin with
            d_initial = None if initial_state is None else torch.zeros_like(initial_state)
            if d_initial is not None and d_finals is not None:
                d_initial[me.first:me.first + count] = d_finals[me.first:me.first + count]
            return (*(torch.zeros_like(t) for t in (q, k, v, gate, beta)), d_initial, None, None, None, None, None, None)
        # One plain backward over the slice, from the true starting state, with the true gradient at its end.
        s0 = None
        if initial_state is not None or me.continues_in:
            s0 = initial_state[me.first:me.first + count].clone() if initial_state is not None else \
                torch.zeros(count, HV, K, V, dtype=state_dtype, device=q.device)
            if me.continues_in:
                s0[0] = S
        d_state = None
        if d_finals is not None or me.continues_out:
            d_state = d_finals[me.first:me.first + count].to(state_dtype, copy=True) if d_finals is not None else \
                torch.zeros(count, HV, K, V, dtype=state_dtype, device=q.device)
            if me.continues_out:
                after = _chain(slices, rank, +1)
                d_state[-1] = _outgoing_gradient(after, M_after, G_all[after])
        dq, dk, dv, dgate, dbeta, ds0 = _backward_op(
            q, k, v, gate, beta, s0, torch.tensor(me.offsets, dtype=torch.int64),
            readable(d_out) if d_out is not None else None, d_state, scale, l2norm, False, precision)
        d_initial = None
        if initial_state is not None:
            d_initial = torch.zeros_like(initial_state)
            own = 1 if me.continues_in else 0
            d_initial[me.first + own:me.first + count] = ds0[own:]
        return dq, dk, dv, dgate, dbeta, d_initial, None, None, None, None, None, None


def chunk_gated_delta_rule(q, k, v, g, beta, scale=None, initial_state=None, output_final_state=False,
                           use_qk_l2norm_in_kernel=False, use_beta_sigmoid_in_kernel=False, allow_neg_eigval=False,
                           cu_seqlens=None, *, cu_seqlens_cpu=None, group=None, precision="exact", **kwargs):
    """:func:`gdn.torch.chunk_gated_delta_rule` over a sequence split between ranks (see the module).

    q, k ``[1, T_rank, H, K]``, v ``[1, T_rank, HV, V]``, g and beta ``[1, T_rank, HV]`` (g may be
    ``[1, T_rank, HV, K]``): this rank's slice. ``cu_seqlens``: the global offsets, the same on
    every rank (None: the ranks' slices are one sequence; ``cu_seqlens_cpu``, the same on the host,
    spares a device synchronisation). ``initial_state``: ``[N, HV, K, V]``,
    global; each rank reads the rows of the sequences that begin on it. ``group``: the process
    group (default: the world). Other arguments as :func:`gdn.torch.chunk_gated_delta_rule`;
    states are ``[.., K, V]`` (no ``state_v_first``). Every rank of the group must call it, in the
    same order as its other collectives, and run its backward when one rank does (the backward's
    all-gather waits for every rank). Ranks whose calls differ in ``cu_seqlens``, in passing an
    initial state, in ``output_final_state``, in q/k/v's dtype or head sizes, in ``scale``,
    ``use_qk_l2norm_in_kernel`` or ``precision`` get ``gdn.InvalidArgumentError``, all of them;
    so do the other ranks when one refuses its arguments (which raises its own error).
    Saved for the backward besides the inputs: the state the slice starts from and the transitions
    of the continuing sequence and of the ranks the slice's last sequence passes through (K x K
    per value head each).

    Returns ``(o, final_state)``: o ``[1, T_rank, HV, V]``, this rank's slice of the output;
    final_state ``[N, HV, K, V]`` with the rows of the sequences that end on this rank (zeros
    elsewhere), None unless ``output_final_state``. Gradients flow to every input; that of
    ``initial_state`` has the rows of the sequences that begin on this rank.
    """
    if not dist.is_available() or not dist.is_initialized():
        raise _errors.InvalidArgumentError("gdn.torch.distributed needs an initialised torch.distributed process group")
    group = group if group is not None else dist.group.WORLD
    if dist.get_rank(group) < 0:
        raise _errors.InvalidArgumentError("this process is not a rank of `group`: only its ranks call with it")
    try:
        if "head_first" in kwargs:
            raise _errors.InvalidArgumentError("head_first has been removed (as in FLA): inputs are [B, T, H, ...]")
        if kwargs.pop("cp_context", None) is not None:
            raise _errors.UnsupportedError("cp_context is FLA's context parallel: this function is gdn's, pass group=")
        if state_v_first_alias(kwargs.pop("state_v_first", False), kwargs):
            raise _errors.UnsupportedError("state_v_first: context parallel takes states as [N, HV, K, V]")
        kwargs.pop("chunk_indices", None)  # FLA's blocking, as gdn.torch ignores it
        precision = _core.precision_value(precision)
        p = prepare(q, k, v, g, beta, scale, use_beta_sigmoid_in_kernel, allow_neg_eigval, cu_seqlens, cu_seqlens_cpu,
                    kwargs)
        if p.q.shape[0] != 1:
            raise _errors.ShapeError(f"q has batch {p.q.shape[0]}: context parallel splits one packed stream, so B must "
                                     "be 1 (pack sequences with cu_seqlens)")
        offsets = [int(x) for x in p.cu_seqlens.tolist()] if p.cu_seqlens is not None else None
        if offsets is not None and (offsets[0] != 0 or any(b < a for a, b in zip(offsets, offsets[1:]))):
            raise _errors.InvalidArgumentError(f"cu_seqlens must start at 0 and never decrease; got {offsets[:8]}...")
        state = None
        if initial_state is not None:
            sequences = len(offsets) - 1 if offsets is not None else 1
            check_state(initial_state, q, v, sequences, False)
            state = readable_state(initial_state.to(p.state_dtype))
    except Exception:  # whatever this rank cannot take: the others must not wait for it
        _refuse_together(group, q.device if isinstance(q, torch.Tensor) else torch.device("cpu"))
        raise
    o, final = _ContextParallel.apply(p.q, p.k, p.v, p.gate, p.beta, state, offsets, p.scale,
                                      bool(output_final_state), bool(use_qk_l2norm_in_kernel), precision, group)
    return o.to(p.out_dtype), (final if output_final_state else None)
