"""The fedlam ClientApp (Flower Message API): ``fedlam.flower.client_app:app``.

Answers the ServerApp's ``query`` messages with :func:`fedlam.flower.site.handle`: a ``hello``
(the site's client index and N) or a round's upload. The site's data come from its
``--node-config`` (:mod:`fedlam.flower.config`); its client state lives in ``context.state``.
"""

from __future__ import annotations

from flwr.app import Context, Message
from flwr.clientapp import ClientApp

from .site import handle

__all__ = ["app"]

app = ClientApp()


@app.query()
def query(msg: Message, context: Context) -> Message:
    """One message from the ServerApp; the reply carries only what the protocol sends."""
    content = handle(msg.content, dict(context.node_config), dict(context.run_config), context.state)
    return Message(content, reply_to=msg)
