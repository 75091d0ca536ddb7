"""Part 3 (notebooks 20–22): a transformer block split four ways, by hand.

`block` is the toy every notebook of the part shares (one pre-norm block in float64, and
its single-process reference); each notebook's own helpers sit beside it.
The taught code (every `dist.<collective>` call) stays in the notebooks' `%%px` cells.
"""
