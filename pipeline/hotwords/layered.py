"""A call's bias laid over its tenant's, so that a call list costs memory in proportion to itself.

A call decodes with its tenant's list merged with its own (same phrase: the call's boost wins,
see :func:`~pipeline.hotwords.model.merge_entries`). A trie of that merged list would copy the
tenant's whole trie into every call that has a list (about 3 MB per call over a 1,000-phrase
tenant) and would have to be rebuilt for every call on each edit of the tenant's list.
:class:`LayeredBias` returns, at every step, exactly what the
:class:`~pipeline.hotwords.trie.TrieBias` of the merged list would return, from three parts:

- ``base``: the tenant's bias, shared by the tenant and all its calls;
- ``top``: the bias of the call's own boosted entries;
- ``lowered``: the token sequences of the tenant's phrases that the call lists with a lower
  boost (0.0 mutes), each with its tenant boost: they are taken out of ``base``.

A node of the merged trie is a token path from the root, here a pair (base node, top node) with
-1 where a layer has no such path. Its boost is the larger of the two layers' boosts, which is
why a phrase the call lists with a *higher* boost needs no masking: the top layer outweighs it.
A masked base node's boost is recomputed from what is left through it, and a node that nothing
is left through is gone. Only pairs where both layers meet, or where the mask changed a child,
have bonuses of their own (precomputed here); every other pair reuses its layer's precomputed
bonuses, so a step costs a few dictionary lookups more than a plain trie's.

Memory: the top layer, the bonuses of those pairs (at most one per node of the call's phrases)
and one dictionary of first-token bonuses, as many entries as the two lists have first tokens
(shallow: its values are the base's own objects). Nothing in proportion to the tenant's trie.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from pipeline.hotwords.trie import BiasWeights, TokenTrie, TrieBias, step_bonus

__all__ = ["LayeredBias", "layered_bias"]

_ROOT = 0
_ABSENT = -1

Pair = tuple[int, int]
"""A node of the merged trie: (base node, top node), ``-1`` where that layer has no path."""

Lowered = Sequence[tuple[Sequence[int], float]]
"""Token sequences to take out of the base layer, each with the boost it was inserted with."""


class LayeredBias:
    """The bias of a merged list, as a tenant's bias with a call's laid over it (see the module).

    Immutable once built; stateless between calls and safe to share between threads, like
    :class:`~pipeline.hotwords.trie.TrieBias`.
    """

    __slots__ = (
        "_base",
        "_base_children",
        "_gone",
        "_max_depth",
        "_overlay",
        "_root",
        "_starts",
        "_top",
        "_top_children",
    )

    def __init__(
        self,
        base: TrieBias,
        top: TrieBias | None,
        lowered: Lowered,
        weights: BiasWeights,
        prior: Callable[[int], float],
    ) -> None:
        """``weights`` and ``prior`` must be the ones both layers were built with."""
        self._base = base
        self._top = top if top is not None else TrieBias(TokenTrie(()), weights, prior)
        self._root: Pair = (_ROOT, _ROOT if top is not None else _ABSENT)
        self._max_depth = max(base.trie.max_depth, self._top.trie.max_depth)
        self._base_children = base.trie.child_maps
        self._top_children = self._top.trie.child_maps
        boosts, ends = _mask(base.trie, lowered)
        self._gone = frozenset(node for node, boost in boosts.items() if boost is None)
        self._overlay: dict[Pair, Mapping[int, float]] = {}
        self._starts: Mapping[int, float] = {}
        self._build(boosts, ends, weights, prior)

    @property
    def base(self) -> TrieBias:
        return self._base

    @property
    def top(self) -> TrieBias:
        return self._top

    @property
    def starts(self) -> Mapping[int, float]:
        """The bonuses while no phrase is in progress: first token → bonus."""
        return self._starts

    def __call__(self, text_tokens: Sequence[int]) -> Mapping[int, float]:
        count = len(text_tokens)
        in_progress: list[Mapping[int, float]] = []
        child, root = self._child, self._root
        for start in range(max(0, count - self._max_depth), count):
            node = child(root, text_tokens[start])
            position = start + 1
            while node is not None and position < count:
                node = child(node, text_tokens[position])
                position += 1
            if node is not None:
                in_progress.append(self._bonuses(node))
        return step_bonus(in_progress, text_tokens, self._starts, self._base.trie.sentence_ends)

    def _child(self, node: Pair, token: int) -> Pair | None:
        base_node, top_node = node
        base_next = self._base_children[base_node].get(token) if base_node != _ABSENT else None
        if base_next is not None and base_next in self._gone:
            base_next = None
        top_next = self._top_children[top_node].get(token) if top_node != _ABSENT else None
        if base_next is None:
            return None if top_next is None else (_ABSENT, top_next)
        return (base_next, _ABSENT if top_next is None else top_next)

    def _bonuses(self, node: Pair) -> Mapping[int, float]:
        own = self._overlay.get(node)
        if own is not None:
            return own
        base_node, top_node = node
        if top_node == _ABSENT:
            return self._base.continuations(base_node)
        return self._top.continuations(top_node)

    def _build(
        self,
        boosts: Mapping[int, float | None],
        ends: Mapping[int, float | None],
        weights: BiasWeights,
        prior: Callable[[int], float],
    ) -> None:
        """Bonuses of the root (the start bonuses) and of every pair that cannot reuse a
        layer's: walked from the root through such pairs only."""
        base, top = self._base.trie, self._top.trie

        def base_boost(node: int | None) -> float | None:
            if node is None:
                return None
            return boosts[node] if node in boosts else base.boost(node)

        def base_end(node: int | None) -> float | None:
            if node is None:
                return None
            return ends[node] if node in ends else base.end_boost(node)

        starts = dict(self._base.starts)
        pending = [self._root]
        while pending:
            node = pending.pop()
            base_node, top_node = node
            at_root = node == self._root
            bonuses: dict[int, float] = (
                {} if at_root or base_node == _ABSENT else dict(self._base.continuations(base_node))
            )
            # Only these children can differ from the base's own: the top's, and masked ones.
            tokens = set(top.children(top_node)) if top_node != _ABSENT else set()
            if base_node != _ABSENT:
                tokens.update(t for t, c in base.children(base_node).items() if c in boosts)
            target = starts if at_root else bonuses
            for token in tokens:
                base_next = base.child(base_node, token) if base_node != _ABSENT else None
                left = base_boost(base_next)
                if left is None:
                    base_next = None
                top_next = top.child(top_node, token) if top_node != _ABSENT else None
                added = None if top_next is None else top.boost(top_next)
                if left is None and added is None:
                    target.pop(token, None)
                    continue
                boost = max(b for b in (left, added) if b is not None)
                if at_root:
                    end = max(
                        (
                            e
                            for e in (
                                base_end(base_next),
                                None if top_next is None else top.end_boost(top_next),
                            )
                            if e is not None
                        ),
                        default=0.0,
                    )
                    starts[token] = prior(token) * max(
                        weights.start_bonus * boost, weights.continue_bonus * end
                    )
                else:
                    bonuses[token] = weights.continue_bonus * boost
                if base_next is not None and (top_next is not None or base_next in boosts):
                    pending.append((base_next, _ABSENT if top_next is None else top_next))
            if not at_root:
                self._overlay[node] = bonuses
        self._starts = starts


def layered_bias(
    base: TrieBias | None,
    top: TrieBias | None,
    lowered: Lowered,
    weights: BiasWeights,
    prior: Callable[[int], float],
) -> TrieBias | LayeredBias | None:
    """The bias of ``base``'s list merged with ``top``'s, ``lowered`` taken out of ``base``:
    one layer as it is when the other adds nothing, None when nothing is left to boost."""
    if base is None:
        return top
    if top is None and not lowered:
        return base
    layered = LayeredBias(base, top, lowered, weights, prior)
    return layered if layered.starts else None


def _mask(
    trie: TokenTrie, lowered: Lowered
) -> tuple[dict[int, float | None], dict[int, float | None]]:
    """What taking ``lowered`` out of ``trie`` leaves: for each node on their paths the largest
    boost still through it (None: nothing is), and for each node where one of them ended the
    largest boost still ending there (None: none does)."""
    depth: dict[int, int] = {}
    removed: dict[int, list[float]] = {}
    for tokens, boost in lowered:
        path = _path(trie, tokens)
        if not path:
            continue  # not in the trie (its tenant boost was 0.0): nothing to take out
        for level, node in enumerate(path, start=1):
            depth[node] = level
        removed.setdefault(path[-1], []).append(boost)
    ends: dict[int, float | None] = {}
    for node, gone in removed.items():
        left = list(trie.end_boosts(node))
        for boost in gone:
            if boost in left:
                left.remove(boost)
        ends[node] = max(left) if left else None
    boosts: dict[int, float | None] = {}
    for node in sorted(depth, key=depth.__getitem__, reverse=True):  # children first
        end = ends[node] if node in ends else trie.end_boost(node)
        through = [] if end is None else [end]
        for child in trie.children(node).values():
            value = boosts[child] if child in boosts else trie.boost(child)
            if value is not None:
                through.append(value)
        boosts[node] = max(through) if through else None
    return boosts, ends


def _path(trie: TokenTrie, tokens: Sequence[int]) -> list[int]:
    """The nodes ``tokens`` lead through from the root, or [] when they leave the trie."""
    path: list[int] = []
    node = _ROOT
    for token in tokens:
        child = trie.child(node, token)
        if child is None:
            return []
        path.append(child)
        node = child
    return path
