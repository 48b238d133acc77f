"""``BatchedBokehModel``: jupyter_bokeh's widget, sending a batch of Bokeh changes as ONE patch.

jupyter_bokeh's ``BokehModel`` sends every Bokeh document event as its own PATCH-DOC: three
comm messages (header, metadata, content) plus two per binary array (buffer header, bytes),
and the page decodes and applies each patch separately (one layout and redraw each). A
dashboard range change is ~15 events with ~25 arrays: ~95 comm messages, most of the time
between the kernel finishing and the views being redrawn. Inside :meth:`batch` the events are
collected and sent at the end as one PATCH-DOC whose arrays travel base64-inlined in its
content, i.e. three comm messages that the page applies in one go.

Why this works with jupyter_bokeh's front end (4.x ``BokehView._consume_patch``): it feeds each
comm message to BokehJS' protocol ``Receiver`` (header, metadata, content, then pairs of
buffer header and bytes) and, once a message is complete, calls
``document.apply_json_patch(content, buffers)``, which applies every event of
``content.events`` in order. Inlined arrays (``{"type": "bytes", "data": <base64>}``) are
decoded by BokehJS' deserializer like buffer references, so no buffer pair is needed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from bokeh.core.serialization import Serializer
from bokeh.protocol.messages.patch_doc import patch_doc
from jupyter_bokeh import BokehModel

if TYPE_CHECKING:
    from bokeh.document.events import DocumentPatchedEvent


def patch_message(events: list[DocumentPatchedEvent]) -> patch_doc:
    """One PATCH-DOC for ``events`` (all of one document), binary arrays inlined as base64.

    The same steps as ``patch_doc.create`` but with a non-deferred serializer.
    """
    [doc] = {event.document for event in events}
    serializer = Serializer(references=doc.models.synced_references, deferred=False)
    content: Any = {"events": serializer.encode(events)}
    doc.models.flush_synced(lambda model: not serializer.has_ref(model))
    return patch_doc(patch_doc.create_header(), {}, content)


class BatchedBokehModel(BokehModel):
    """A ``BokehModel`` that can send many document changes as one PATCH-DOC (see module)."""

    def __init__(self, model: Any, **kwargs: Any) -> None:
        self._batch: list[DocumentPatchedEvent] | None = None
        self.patches_sent = 0  # PATCH-DOC messages sent (for tests and benchmarks)
        super().__init__(model, **kwargs)

    @contextmanager
    def batch(self, before_send: Callable[[], None] | None = None) -> Iterator[None]:
        """Collect the document's changes made inside the block; send them as one patch at
        its end (nested blocks join the outer one).

        ``before_send`` runs once the block ended without error, after the patch is built and
        just before it goes out: widget updates made there (the dashboard's status line) reach
        the page ahead of the patch, so the page shows them with the views' redraw instead
        of in a frame of their own after it.
        """
        if self._batch is not None:
            yield
            if before_send is not None:
                before_send()
            return
        self._batch = []
        ok = False
        try:
            yield
            ok = True
        finally:
            events, self._batch = self._batch, None
            msg = patch_message(events) if events else None
            try:
                if ok and before_send is not None:
                    before_send()
            finally:
                if msg is not None:
                    self._send_message(msg)

    def _document_patched(self, event: DocumentPatchedEvent) -> None:
        if event.setter is self:  # came from the page: it has it already
            return
        if self._batch is not None:
            self._batch.append(event)
        else:
            self._send_patch([event])

    def _send_patch(self, events: list[DocumentPatchedEvent]) -> None:
        self._send_message(patch_message(events))

    def _send_message(self, msg: patch_doc) -> None:
        self.send({"msg": "patch", "payload": msg.header_json})
        self.send({"msg": "patch", "payload": msg.metadata_json})
        self.send({"msg": "patch", "payload": msg.content_json})
        self.patches_sent += 1
