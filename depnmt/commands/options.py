"""Value ranges of the numeric CLI options, shared by the commands (click rejects a value out
of range with a usage error naming the option, exit status 2)."""

from __future__ import annotations

import click

POSITIVE = click.IntRange(min=1)
COUNT = click.IntRange(min=0)                       # 0 usually means "off" or "no limit"
AMOUNT = click.FloatRange(min=0)
RATE = click.FloatRange(min=0, min_open=True)       # a learning rate
DROPOUT = click.FloatRange(0, 1, max_open=True)     # dropout, label smoothing: 1 leaves nothing
SEED = click.IntRange(0, 2**32 - 1)                 # what every random generator accepts
