"""The page's reading column: the widest a figure may be and still be shown unscaled.

Nothing is imported here, so a helper that engines import (helpers.training.pipeline,
helpers.collectives.ring) can size its figures without loading matplotlib.
"""
# The width of the reading column at a 1280 × 900 window: the displayed width of a 2000 px
# wide figure on a page built by `python -m tools.build` (sphinx-book-theme, book/_static/
# series.css), in headless Chromium (tests/tools/test_figure_column.py measures it again).
COLUMN_PX = 792             # measured 791.95 px: the article's 56rem less its padding
COLUMN_IN = COLUMN_PX / 100  # at dpi 100, the series' figures' dpi


def finish(fig, axes, title: str):
    """The series' last touches on a figure of panels: 9 pt ticks, the title, a tight
    layout; closed so a notebook shows it once, where the cell returns it."""
    import matplotlib.pyplot as plt

    for ax in axes:
        ax.tick_params(labelsize=9)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    plt.close(fig)
    return fig
