"""tf.compat.v1: TF 1.x's API, which shardflow's top level is.

`import shardflow.compat.v1 as tf` and `tf.compat.v1.placeholder` both give the
shardflow package itself: there is no separate v2 behaviour to turn off, so
disable_v2_behavior() and disable_eager_execution() do nothing (shardflow
always builds graphs and runs them in sessions).
"""

import sys

_package = sys.modules[__name__.rpartition(".")[0]]
v1 = _package
# `import shardflow.compat.v1` finds the module here.
sys.modules[__name__ + ".v1"] = _package


def disable_v2_behavior():
    """Nothing to do: shardflow is TF 1.x's graph-and-session model."""


def disable_eager_execution():
    """Nothing to do: shardflow has no eager mode."""
