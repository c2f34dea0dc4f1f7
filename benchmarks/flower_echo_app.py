"""A minimal Flower app: Flower's own floor, measured beside fedlam by ``bench_flower.py``.

The ServerApp sends one QUERY message per SuperNode and round and waits for every reply
(polling every 50 ms, as fedlam's ServerApp does); the ClientApp answers at once, with an empty
reply or, with run config ``payload`` > 0, a float32 array of that many entries (an upload of
the same size as fedlam's). It imports Flower and numpy only -- never fedlam -- so its rounds
cost what Flower costs: the SuperNode's poll, one ClientApp process start per message, and
the transfer. The ServerApp writes ``{"seconds": [...]}`` (one entry per round) to
``out-dir/echo-<tag>.json``.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from flwr.app import Array, ArrayRecord, ConfigRecord, Context, Message, MessageType, RecordDict
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid, ServerApp

client = ClientApp()
server = ServerApp()


@client.query()
def reply(msg: Message, context: Context) -> Message:
    """Answer at once (with ``payload`` float32 zeros when asked)."""
    n = int(context.run_config["payload"])
    content = RecordDict({"echo": ConfigRecord({"t": int(msg.content["echo"]["t"])})})
    if n > 0:
        import numpy as np

        content["upload"] = ArrayRecord({"triu": Array(np.zeros(n, dtype=np.float32))})
    return Message(content, reply_to=msg)


@server.main()
def main(grid: Grid, context: Context) -> None:
    """``rounds`` rounds of one message per site; the time of each round from push to last reply."""
    rc = context.run_config
    T, L = int(rc["rounds"]), int(rc["num-clients"])
    t_end = time.monotonic() + 120.0
    while len(list(grid.get_node_ids())) < L:
        if time.monotonic() > t_end:
            raise RuntimeError(f"only {len(list(grid.get_node_ids()))} of {L} SuperNodes connected")
        time.sleep(0.2)
    nodes = sorted(grid.get_node_ids())[:L]
    seconds = []
    for t in range(T):
        t0 = time.monotonic()
        msgs = [Message(RecordDict({"echo": ConfigRecord({"t": t})}), dst_node_id=int(n),
                        message_type=MessageType.QUERY, group_id=str(t)) for n in nodes]
        pending = {m for m in grid.push_messages(msgs) if m}
        while pending:
            for rep in grid.pull_messages(list(pending)):
                if rep.has_error():
                    raise RuntimeError(f"echo round {t}: {rep.error.reason}")
                pending.discard(rep.metadata.reply_to_message_id)
            if pending:
                time.sleep(0.05)
        seconds.append(time.monotonic() - t0)
    Path(str(rc["out-dir"]), f"echo-{rc['tag']}.json").write_text(json.dumps({"seconds": seconds}))
