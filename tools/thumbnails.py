"""The index cards' pictures (tools.build): each page's own figure, letterboxed to the card.

A page's picture is the first PNG output of its code cell tagged `thumbnail`
(tools.slide_marks writes the tag, from each entry's `thumbnail` in notebooks/series.toml; the choice is
reviewed in the notebook's diff). Every picture is WIDTH_PX × HEIGHT_PX (16:10), the figure
scaled to fit and centred on white: never stretched, never cropped. A page without a tagged
cell, or whose tagged cell has no PNG, has no picture: `card_picture` raises CardError
naming the notebook.
"""
from __future__ import annotations

import base64
import io

import nbformat

WIDTH_PX, HEIGHT_PX, DPI = 640, 400, 100
TAG = "thumbnail"


class CardError(ValueError):
    """A page whose card has no picture of its own."""


def tagged_png(nb: nbformat.NotebookNode, stem: str) -> bytes:
    """The first PNG output of `nb`'s cell tagged `thumbnail` (exactly one such cell)."""
    tagged = [c for c in nb.cells if TAG in c.metadata.get("tags", [])]
    if len(tagged) != 1:
        raise CardError(f"{stem}: {len(tagged)} cells tagged {TAG!r}, not one: tag the cell "
                        "whose figure is the page's picture (its `thumbnail` in "
                        "notebooks/series.toml, then python -m tools.slide_marks --write)")
    for out in tagged[0].get("outputs", []):
        if "image/png" in out.get("data", {}):
            return base64.b64decode(out["data"]["image/png"])
    raise CardError(f"{stem}: its cell tagged {TAG!r} ({tagged[0].get('id')}) has no PNG "
                    "output: was the notebook executed?")


def png(fig) -> bytes:
    """The figure as a PNG of exactly its size (no tight bbox: it would resize)."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI, metadata={"Software": None}, facecolor="white")
    return buf.getvalue()


def letterbox(image_png: bytes) -> bytes:
    """Any PNG scaled to fit the card, centred on white: never stretched, never cropped."""
    import matplotlib.image as mpimg
    from matplotlib.figure import Figure

    image = mpimg.imread(io.BytesIO(image_png), format="png")
    height, width = image.shape[:2]
    scale = min(WIDTH_PX / width, HEIGHT_PX / height)
    w, h = width * scale / WIDTH_PX, height * scale / HEIGHT_PX
    fig = Figure(figsize=(WIDTH_PX / DPI, HEIGHT_PX / DPI), dpi=DPI, facecolor="white")
    ax = fig.add_axes([(1 - w) / 2, (1 - h) / 2, w, h])
    ax.imshow(image, interpolation="antialiased", aspect="auto")
    ax.set_axis_off()
    return png(fig)


def card_picture(nb: nbformat.NotebookNode, stem: str) -> bytes:
    """The card's picture of the executed notebook `nb`: its tagged figure, letterboxed."""
    return letterbox(tagged_png(nb, stem))
