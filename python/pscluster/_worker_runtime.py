"""The Python side of the Python worker's FunctionRunner
(python/worker_bindings.cc): runs one scheduled function.

run(name, args, context) unpickles (fn, args, kwargs) with cloudpickle,
binds `context` (the closure's FunctionContext) as this thread's current
one, calls fn and returns (pickled result, None), or (None, (exception class
name, message, traceback)) when it raised: the closure's FunctionError.
"""

import traceback

import cloudpickle

from pscluster import _context


def run(name, args, context):
    previous = _context.bind(context)
    try:
        fn, fn_args, fn_kwargs = cloudpickle.loads(args)
        result = fn(*fn_args, **fn_kwargs)
        return cloudpickle.dumps(result), None
    except BaseException as e:  # noqa: B036 -- every failure is the function's
        # The traceback from the function's frame on (this frame left out).
        tb = e.__traceback__.tb_next or e.__traceback__
        text = "".join(traceback.format_exception(type(e), e, tb))
        return None, (type(e).__name__, str(e), text)
    finally:
        _context.unbind(previous)
