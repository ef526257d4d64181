"""sf.gradients: the backward graph of the C++ autodiff (sf::Gradients)."""

from . import _core
from . import errors
from . import graph as _graph

__all__ = ["gradients"]


def gradients(ys, xs, grad_ys=None, allow_unconnected=False):
    """d(sum of ys)/d(x) for each x as Tensors; None for an x ys do not depend on when allow_unconnected.

    Raises InvalidArgumentError naming an unconnected x otherwise.
    """
    single = not isinstance(xs, (list, tuple))
    ys = [_graph.convert_to_tensor(y) for y in (ys if isinstance(ys, (list, tuple)) else [ys])]
    xs = [_graph.convert_to_tensor(x) for x in ([xs] if single else xs)]
    if not ys:
        raise errors.InvalidArgumentError("gradients needs at least one y")
    g = ys[0].graph
    for t in ys + xs:
        if t.graph is not g:
            raise errors.InvalidArgumentError(f"{t.name!r} belongs to another graph than {ys[0].name!r}")
    gy = []
    if grad_ys is not None:
        with g.as_default():
            gy = [_graph.convert_to_tensor(v, dtype=y.dtype) for v, y in zip(grad_ys, ys)]
    with g.as_default():
        refs = _core.gradients(g._g, [y._ref() for y in ys], [x._ref() for x in xs],
                               [_graph._ref_in(t, g, "grad_ys entry") for t in gy],
                               bool(allow_unconnected))
    out = [None if r is None else _graph.Tensor(g, *r) for r in refs]
    return out
