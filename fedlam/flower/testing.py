"""A fake Flower ``Grid`` that runs the sites in this process (unit tests of the ServerApp logic).

:class:`FakeGrid` implements the three Grid methods :func:`fedlam.flower.coordinator.serve`
uses; each pushed message is answered by :func:`fedlam.flower.site.handle` with the node's own
``node_config`` and ``state``, exactly as a SuperNode's ClientApp would answer it, but without
processes or sockets. Nodes can be made to fail (error reply), to go silent (no reply, as a
killed SuperNode), or to join late.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

__all__ = ["FakeGrid", "FakeNode", "run_in_process"]


@dataclass
class FakeNode:
    """One simulated SuperNode."""

    node_id: int
    node_config: Mapping[str, Any]
    join_call: int = 0          # visible from this get_node_ids() call on (late joiner)
    silent_from_round: int | None = None  # stops answering round messages from this round on
    fail_on_round: int | None = None      # answers this round with an error
    state: Any = None
    handled: list = field(default_factory=list)


class FakeGrid:
    """In-process stand-in for Flower's Grid (``get_node_ids``, ``push_messages``, ``pull_messages``)."""

    def __init__(self, nodes: Sequence[FakeNode], run_config: Mapping[str, Any]) -> None:
        from flwr.app import RecordDict
        from flwr.supercore.task_identity import TaskIdentity

        # Message() needs the run and node ids the Flower runtime sets in a real ServerApp process
        for attr, value in (("run_id", 1), ("node_id", 0), ("task_id", 1)):
            try:
                getattr(TaskIdentity, attr)
            except RuntimeError:
                setattr(TaskIdentity, attr, value)
        self.nodes = {n.node_id: n for n in nodes}
        for n in nodes:
            n.state = RecordDict()
        self.run_config = dict(run_config)
        self._ids = itertools.count(1)
        self._replies: dict[str, Any] = {}
        self.calls = 0

    def get_node_ids(self) -> list[int]:
        self.calls += 1
        return [n.node_id for n in self.nodes.values() if n.join_call < self.calls]

    def push_messages(self, messages: Any) -> list[str]:
        from fedlam.flower.site import handle

        ids = []
        for msg in messages:
            mid = f"m{next(self._ids)}"
            ids.append(mid)
            node = self.nodes[msg.metadata.dst_node_id]
            cfg = msg.content["fedlam"]
            t = int(cfg["t"]) if str(cfg["op"]) == "round" else None
            node.handled.append(t)
            if t is not None and node.silent_from_round is not None and t >= node.silent_from_round:
                continue  # no reply ever (a dead node)
            meta = SimpleNamespace(reply_to_message_id=mid, src_node_id=node.node_id)
            if t is not None and node.fail_on_round == t:
                self._replies[mid] = SimpleNamespace(metadata=meta, content=None, has_error=lambda: True,
                                                     error=SimpleNamespace(reason="simulated failure"))
                continue
            content = handle(msg.content, node.node_config, self.run_config, node.state)
            self._replies[mid] = SimpleNamespace(metadata=meta, content=content, has_error=lambda: False,
                                                 error=None)
        return ids

    def pull_messages(self, message_ids: Any) -> list:
        return [self._replies.pop(m) for m in list(message_ids) if m in self._replies]


def run_in_process(run_config: Mapping[str, Any], node_configs: Sequence[Mapping[str, Any]],
                   node_options: Mapping[int, Mapping[str, Any]] | None = None,
                   log: Any = None) -> dict:
    """The fedlam ServerApp and ClientApps in this process, over a :class:`FakeGrid`.

    The same messages, encodings, sampling and timeouts as a Flower deployment
    (:func:`fedlam.flower.coordinator.serve`), without processes: for experiments on the
    deployment's logic (chapter 13) and tests. ``node_options[i]`` sets :class:`FakeNode`
    failure options of site ``i``. Returns the history dict.
    """
    from fedlam.flower.coordinator import serve

    opts = dict(node_options or {})
    nodes = [FakeNode(10_000 + 17 * i, cfg, **dict(opts.get(i, {}))) for i, cfg in enumerate(node_configs)]
    return serve(FakeGrid(nodes, run_config), run_config, log=log or (lambda _msg: None))
