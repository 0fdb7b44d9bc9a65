"""Growable slot buffers: several `[B, H, capacity, ...]` tensors that share one slot axis (dim 2).

Why not `torch.cat` per step (what `DynamicCache` does): that copies the whole cache every token. Here appends write
into spare capacity (grown geometrically), evictions fill each hole with a surviving tail slot (O(evicted), no full
copy), and `fit` reallocates only when the kept count drops far below the capacity, so freed bytes really go back.
"""

from __future__ import annotations

import torch

_GROWTH = 1.5
_MIN_CAPACITY = 16


class SlotStore:
    """Named tensors with a common slot axis; slots `[0, n)` are live."""

    def __init__(self) -> None:
        self.bufs: dict[str, torch.Tensor] = {}
        self.n = 0
        self._views: dict[str, torch.Tensor] = {}  # live views for the current (buffers, n): a decode step asks
        self._views_n = -1  # for the same few views several times per layer, and slicing is a dispatcher op

    def __getstate__(self) -> dict:  # copies (e.g. `ConfKVSession.fork`) rebuild their views from their own buffers
        return {**self.__dict__, "_views": {}, "_views_n": -1}

    @property
    def capacity(self) -> int:
        return next(iter(self.bufs.values())).shape[2] if self.bufs else 0

    def view(self, name: str) -> torch.Tensor:
        if self._views_n != self.n:
            self._views.clear()
            self._views_n = self.n
        v = self._views.get(name)
        if v is None:
            v = self._views[name] = self.bufs[name][:, :, : self.n]
        return v

    def _reserve(self, needed: int, limit: int | None) -> None:
        cap = self.capacity
        if needed <= cap:
            return
        new_cap = max(needed, int(cap * _GROWTH), _MIN_CAPACITY)
        if limit is not None:
            new_cap = max(needed, min(new_cap, limit))
        self._realloc(new_cap)

    def _realloc(self, new_cap: int) -> None:
        for name, buf in self.bufs.items():
            fresh = buf.new_empty((*buf.shape[:2], new_cap, *buf.shape[3:]))
            fresh[:, :, : self.n] = buf[:, :, : self.n]
            self.bufs[name] = fresh
        self._views.clear()

    def append(self, limit: int | None = None, **tensors: torch.Tensor | float) -> None:
        """Append `[B, H, L, ...]` tensors (all names, same L); `limit` caps geometric growth (e.g. the budget).
        Once the buffers exist, a name may get a Python number instead: L new slots filled with it (L from the
        tensors given)."""
        length = next(t for t in tensors.values() if isinstance(t, torch.Tensor)).shape[2]
        if not self.bufs:
            for name, t in tensors.items():
                cap = max(length, min(_MIN_CAPACITY, limit or _MIN_CAPACITY))
                self.bufs[name] = t.new_empty((*t.shape[:2], cap, *t.shape[3:]))
        self._reserve(self.n + length, limit)
        for name, t in tensors.items():
            self.bufs[name][:, :, self.n : self.n + length] = t
        self.n += length

    def gather(self, idx: torch.Tensor) -> dict[str, torch.Tensor]:
        """Copies of the slots `idx [B, H, k]` (per head) of every buffer."""
        out = {}
        for name, buf in self.bufs.items():
            live = buf[:, :, : self.n]
            index = idx.view(*idx.shape, *([1] * (buf.dim() - 3))).expand(*idx.shape, *buf.shape[3:])
            out[name] = live.gather(2, index)
        return out

    def remove(self, idx: torch.Tensor) -> None:
        """Drop slots `idx [B, H, k]` (k distinct slots per head) by moving surviving tail slots into the holes."""
        k = idx.shape[-1]
        if k == 0:
            return
        n = self.n
        keep_n = n - k
        if k == 1 and keep_n > 0:  # decode steady state: the last slot fills the hole (a no-op if it is the victim)
            for buf in self.bufs.values():
                live = buf[:, :, :n]
                index = idx.view(*idx.shape, *([1] * (buf.dim() - 3))).expand(*idx.shape, *buf.shape[3:])
                live.scatter_(2, index, live[:, :, n - 1 : n].clone())
            self.n = keep_n
            return
        slots = torch.arange(n, device=idx.device).expand(*idx.shape[:2], n)
        evict = torch.zeros(*idx.shape[:2], n, dtype=torch.bool, device=idx.device)
        evict.scatter_(2, idx, True)
        big = n  # sorts after every real slot
        # Holes below keep_n and survivors at or above keep_n have equal counts per head; pair them in order.
        holes = torch.where(evict & (slots < keep_n), slots, big).sort(dim=-1).values[..., :k]
        fills = torch.where(~evict & (slots >= keep_n), slots, big).sort(dim=-1).values[..., :k]
        pad = holes == big  # the same entries are padding in both lists
        dst = torch.where(pad, n - 1, holes)
        src = torch.where(pad, n - 1, fills)
        if keep_n > 0:
            moved = self.gather(src)
            for name, buf in self.bufs.items():
                index = dst.view(*dst.shape, *([1] * (buf.dim() - 3))).expand(*dst.shape, *buf.shape[3:])
                buf[:, :, :n].scatter_(2, index, moved[name])
        self.n = keep_n

    def pop_front(self, m: int) -> dict[str, torch.Tensor]:
        """Remove and return the first `m` slots, keeping the order of the rest (ordered stores only)."""
        front = {name: buf[:, :, :m].clone() for name, buf in self.bufs.items()}
        rest = self.n - m
        for buf in self.bufs.values():
            if rest > 0:
                buf[:, :, :rest] = buf[:, :, m : self.n].clone()
        self.n = rest
        return front

    def fit(self, target: int) -> None:
        """Shrink the allocation to `max(n, target)` slots when it is at least 25% larger: frees real memory."""
        want = max(self.n, target)
        if self.bufs and self.capacity > want * 1.25 and self.capacity - want >= _MIN_CAPACITY:
            self._realloc(want)

    def slot_bytes(self, names: tuple[str, ...]) -> int:
        """Bytes one slot takes in the named buffers (all batch rows and heads)."""
        total = 0
        for name in names:
            buf = self.bufs.get(name)
            if buf is not None:
                total += buf[:, :, :1].numel() * buf.element_size()
        return total

    def alloc_bytes(self) -> int:
        return sum(buf.numel() * buf.element_size() for buf in self.bufs.values())
