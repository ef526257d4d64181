"""sf.cond and sf.while_loop: dynamic control flow built from Python callables.

    r = sf.cond(x < 0, lambda: -x, lambda: x)
    i, s = sf.while_loop(lambda i, s: i < 10, lambda i, s: (i + 1, s + i), [0, 0])

The callables run once, while the graph is built, inside the branch or the
loop body (values from outside may be used freely). An exception they raise
propagates unchanged; the graph stays usable.
"""

from . import _core
from . import errors
from . import graph as _graph

__all__ = ["cond", "while_loop", "case"]


def _outputs(result, what):
    single = not isinstance(result, (list, tuple))
    items = [result] if single else list(result)
    outs = []
    for r in items:
        t = _graph.convert_to_tensor(r)
        outs.append(t)
    return outs, single


def cond(pred, true_fn, false_fn, name="cond"):
    """pred ? true_fn() : false_fn(): both built, only the taken one runs; returns like the branches."""
    if not callable(true_fn) or not callable(false_fn):
        raise TypeError("cond's true_fn and false_fn must be callables")
    pred = _graph.convert_to_tensor(pred)
    g = pred.graph
    shape = {}

    def branch(fn, key):
        def run():
            with g.as_default():
                outs, single = _outputs(fn(), key)
            shape[key] = single
            return [_graph._ref_in(t, g, f"cond's {key} branch output") for t in outs]
        return run

    with g.as_default():
        refs = _core.cond(g._g, pred._ref(), branch(true_fn, "true"), branch(false_fn, "false"), name)
    outs = [_graph.Tensor(g, *r) for r in refs]
    return outs[0] if shape.get("true") and len(outs) == 1 else outs


def while_loop(cond, body, loop_vars, name="while", parallel_iterations=10, maximum_iterations=None):
    """while cond(*vars): vars = body(*vars); returns the final loop variables (a list, or one Tensor)."""
    if not callable(cond) or not callable(body):
        raise TypeError("while_loop's cond and body must be callables")
    single = not isinstance(loop_vars, (list, tuple))
    init = [_graph.convert_to_tensor(v) for v in ([loop_vars] if single else loop_vars)]
    if not init:
        raise errors.InvalidArgumentError("while_loop needs at least one loop variable")
    g = init[0].graph

    def wrap(refs):
        return [_graph.Tensor(g, *r) for r in refs]

    def c(refs):
        with g.as_default():
            p = cond(*wrap(refs))
        return _graph._ref_in(p, g, "while_loop's condition")

    def b(refs):
        with g.as_default():
            r = body(*wrap(refs))
            outs, _ = _outputs(r, "body")
        return [_graph._ref_in(t, g, "while_loop's body output") for t in outs]

    with g.as_default():
        refs = _core.while_loop(g._g, c, b, [_graph._ref_in(t, g, "while_loop's loop variable") for t in init], name,
                                int(parallel_iterations),
                                -1 if maximum_iterations is None else int(maximum_iterations))
    out = wrap(refs)
    return out[0] if single else out


def _after(deps, fn):
    """fn() with every output an Identity that runs after deps (Operations)."""
    with _graph.control_dependencies(deps):
        result = fn()
        if isinstance(result, (list, tuple)):
            return type(result)(_graph.identity(r) for r in result)
        return _graph.identity(result)


def _assert_at_most_n_true(predicates, n, msg):
    # TF 1.x's control_flow_ops._assert_at_most_n_true, with its message.
    from . import debugging, tf_api
    preds = tf_api.stack(predicates, name="preds_c")
    num_true = tf_api.reduce_sum(tf_api.cast(preds, "int32"), name="num_true_conds")
    names = ", ".join(getattr(p, "name", "?") for p in predicates)
    return debugging.Assert(tf_api.less_equal(num_true, n),
                            [f"{msg}: more than {n} conditions ({names}) evaluated as True:", preds],
                            summarize=len(predicates))


def case(pred_fn_pairs, default=None, exclusive=False, strict=False, name="case"):
    """TF 1.x's tf.case: the result of the fn of the first pair (in order; a dict's pairs in its order)
    whose predicate is true, else default(); built as nested conds, so only the chosen fn runs.

    As TF 1.x: without default, the last pair's fn is the default and an Assert fails the step when no
    predicate holds ("Input error: None of conditions evaluated as True"); with exclusive=True an Assert
    fails it when more than one holds. strict is accepted and has no effect (shardflow's cond does not
    unpack one-element lists).
    """
    from . import debugging, tf_api
    if isinstance(pred_fn_pairs, dict):
        pairs = list(pred_fn_pairs.items())
    else:
        pairs = list(pred_fn_pairs)
    for p in pairs:
        if not isinstance(p, tuple) or len(p) != 2 or not callable(p[1]):
            raise TypeError("pred_fn_pairs must be (predicate, callable) pairs")
    if default is not None and not callable(default):
        raise TypeError("default must be callable")
    pairs = [(_graph.convert_to_tensor(p), f) for p, f in pairs]
    for p, _ in pairs:
        if p.dtype != "bool":
            raise TypeError(f"tf.case's predicates must be bool tensors, got {p.dtype.name} ({p.name})")
    all_preds = [p for p, _ in pairs]
    with _graph.name_scope(name):
        if default is None:
            if not pairs:
                raise ValueError("tf.case needs at least one (predicate, fn) pair or a default")
            (last_pred, last_fn), pairs = pairs[-1], pairs[:-1]
            others = [p for p, _ in pairs]

            def default():
                deps = [debugging.Assert(last_pred, ["Input error: None of conditions evaluated as True:",
                                                     tf_api.stack(all_preds, name="preds_c")],
                                         summarize=len(all_preds))]
                if others:
                    deps.append(_assert_at_most_n_true(
                        others, 0, "Implementation error: selected default action #%d was called, but some of "
                        "other predicates are True: " % len(others)))
                return _after(deps, last_fn)

        fn = default
        for pred, f in reversed(pairs):
            fn = (lambda p, f, rest: lambda: cond(p, f, rest, name="cond"))(pred, f, fn)
        if exclusive and len(all_preds) > 1:
            return _after([_assert_at_most_n_true(all_preds, 1, "Input error: exclusive=True")], fn)
        return fn()
